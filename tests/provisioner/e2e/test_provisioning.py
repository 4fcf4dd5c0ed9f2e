"""Claims turning into directories and bound volumes on the real local cluster."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from localcluster.raw_api import call_json
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    creatable,
    eventually,
    volume_node,
    volume_path,
)

pytestmark = pytest.mark.cluster


def test_hostpath_volume_on_the_selected_node(provisioner: ProvisionerSetup) -> None:
    storage_class = provisioner.create_class("hostpath")
    provisioner.create_claim("data", storage_class)
    provisioner.create_consumer("app", "data")

    volume = provisioner.wait_bound("data")
    claim = provisioner.claim("data")
    selected = claim["metadata"]["annotations"]["volume.kubernetes.io/selected-node"]
    meta, spec = volume["metadata"], volume["spec"]
    assert meta["name"] == f"pvc-{claim['metadata']['uid']}"
    assert meta["annotations"]["pv.kubernetes.io/provisioned-by"] == provisioner.name
    assert spec["hostPath"]["type"] == "Directory"
    assert spec["capacity"]["storage"] == "1Gi"
    assert spec["persistentVolumeReclaimPolicy"] == "Delete"
    assert spec["claimRef"]["uid"] == claim["metadata"]["uid"]
    assert volume_node(volume) == selected
    expected = f"/opt/local-path-provisioner/{meta['name']}_{provisioner.namespace}_data"
    assert volume_path(volume) == expected
    assert provisioner.node_path(selected, expected).is_dir()
    others = [node for node in provisioner.cluster.nodes if node != selected]
    assert not any(provisioner.node_path(node, expected).exists() for node in others)
    current = provisioner.volume(meta["name"])
    assert current is not None
    assert (
        "external-provisioner.volume.kubernetes.io/finalizer" in current["metadata"]["finalizers"]
    )

    # The consumer lands on the volume's node and runs there.
    def running_on() -> str | None:
        pod = call_json(provisioner.core.read_namespaced_pod, "app", provisioner.namespace)
        return pod["spec"].get("nodeName") if pod["status"].get("phase") == "Running" else None

    assert eventually(running_on, 60, "the consumer to run") == selected
    provisioner.wait_event("data", "ProvisioningSucceeded")
    assert 'controller_persistentvolumeclaim_provision_total{class="' in (
        provisioner.replicas[0].metrics()
    )


def test_local_volume_by_claim_annotation_and_by_class_default(
    provisioner: ProvisionerSetup,
) -> None:
    plain = provisioner.create_class("plain")
    local_default = provisioner.create_class("local", annotations={"defaultVolumeType": "local"})
    provisioner.create_claim("by-annotation", plain, annotations={"volumeType": "local"})
    provisioner.create_claim("by-class", local_default)
    provisioner.create_consumer("a", "by-annotation")
    provisioner.create_consumer("b", "by-class")
    for claim in ("by-annotation", "by-class"):
        volume = provisioner.wait_bound(claim)
        assert "local" in volume["spec"] and "hostPath" not in volume["spec"]
        assert provisioner.node_path(volume_node(volume), volume_path(volume)).is_dir()


def test_read_write_once_pod_gets_a_local_volume_and_no_host_path_one(
    provisioner: ProvisionerSetup,
) -> None:
    """The kubelet holds ReadWriteOncePod to one pod on a `local` volume only (the real-node
    tests show both): a hostPath class's claim of that mode is refused."""
    local = provisioner.create_class("rwop", annotations={"defaultVolumeType": "local"})
    provisioner.create_claim("solo", local, access_modes=["ReadWriteOncePod"])
    provisioner.create_consumer("only", "solo")
    volume = provisioner.wait_bound("solo")
    assert volume["spec"]["accessModes"] == ["ReadWriteOncePod"] and "local" in volume["spec"]
    host_path = provisioner.create_class("rwop-hostpath")
    provisioner.create_claim("rwop-hostpath", host_path, access_modes=["ReadWriteOncePod"])
    provisioner.create_consumer("rwop-hostpath", "rwop-hostpath")
    failed = provisioner.wait_event("rwop-hostpath", "ProvisioningFailed")
    assert "held to one pod only on a volume of volumeType: local" in failed["message"]
    assert provisioner.phase("rwop-hostpath") == "Pending"


def test_pod_pinned_by_node_selector_gets_its_volume_there(provisioner: ProvisionerSetup) -> None:
    storage_class = provisioner.create_class("pinned")
    provisioner.create_claim("pinned", storage_class)
    provisioner.create_consumer("pinned", "pinned", {"kubernetes.io/hostname": "node-3"})
    volume = provisioner.wait_bound("pinned")
    assert volume_node(volume) == "node-3"
    assert provisioner.node_path("node-3", volume_path(volume)).is_dir()


def test_unsupported_claims_are_refused_with_an_event_and_no_helper(
    provisioner: ProvisionerSetup,
) -> None:
    storage_class = provisioner.create_class("refusals")
    immediate = provisioner.create_class("immediate", binding_mode="Immediate")
    provisioner.create_claim("many", storage_class, access_modes=["ReadWriteMany"])
    provisioner.create_consumer("many", "many")
    provisioner.create_claim("now", immediate)
    many = provisioner.wait_event("many", "ProvisioningFailed")
    assert "access modes ['ReadWriteMany'] not supported" in many["message"]
    now = provisioner.wait_event("now", "ProvisioningFailed")
    assert "Immediate needs a sharedFileSystemPath" in now["message"]
    assert provisioner.phase("many") == "Pending"
    pods = call_json(provisioner.core.list_namespaced_pod, provisioner.namespace)
    assert [pod["metadata"]["name"] for pod in pods["items"]] == ["many"]


def test_custom_node_affinity_key_and_storage_class_configs(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    files = ConfigFiles(
        config={
            "storageClassConfigs": {
                "fast": {
                    "nodePathMap": [
                        {
                            "node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                            "paths": [creatable("/mnt/fast-a"), creatable("/mnt/fast-b")],
                        }
                    ]
                }
            }
        }
    )
    setup = make_setup(files)
    # storageClassConfigs is keyed by class name: ours carry the test suffix.
    files.config["storageClassConfigs"] = {
        f"fast-{setup.suffix}": files.config["storageClassConfigs"]["fast"]
    }
    setup.update_config(files)
    setup.start()
    for node in setup.cluster.nodes:
        setup.core.patch_node(node, {"metadata": {"labels": {"lps.io/host": f"host-{node}"}}})
    storage_class = setup.create_class(
        "fast",
        parameters={
            "nodePath": "/mnt/fast-b",
            "pathPattern": '{{ .PVC.Namespace }}/{{ .PVC.Name }}/{{ index .PVC.Labels "tier" }}',
            "nodeAffinityKey": "lps.io/host",
        },
    )
    setup.create_claim("patterned", storage_class, labels={"tier": "gold"})
    setup.create_consumer("patterned", "patterned")
    volume = setup.wait_bound("patterned")
    terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    expression = terms[0]["matchExpressions"][0]
    assert expression["key"] == "lps.io/host"
    node = expression["values"][0].removeprefix("host-")
    assert volume_path(volume) == f"/mnt/fast-b/{setup.namespace}/patterned/gold"
    assert setup.node_path(node, volume_path(volume)).is_dir()

    # Deleting it maps the label value back to the node and removes the directory there.
    setup.core.delete_namespaced_pod("patterned", setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim("patterned", setup.namespace)
    eventually(
        lambda: True if not setup.node_path(node, volume_path(volume)).exists() else None,
        60,
        "the directory to be removed on the labelled node",
    )


def test_user_group_and_permission_patterns_reach_the_setup_script(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    setup_script = (
        '#!/bin/sh\nset -eu\nmkdir -p "$VOL_DIR"\n'
        'printf "%s %s %s %s %s" "$VOL_USER" "$VOL_GROUP" "$VOL_PERM" "$VOL_MODE" '
        '"$VOL_SIZE_BYTES" > "$VOL_DIR/.env"\n'
    )
    setup = make_setup(ConfigFiles(setup=setup_script))
    setup.start()
    storage_class = setup.create_class(
        "owned",
        parameters={
            "userPattern": '{{ index .PVC.Annotations "uid" }}',
            "groupPattern": "2000",
            "permPattern": "0750",
        },
    )
    setup.create_claim("owned", storage_class, size="2Mi", annotations={"uid": "1001"})
    setup.create_consumer("owned", "owned")
    volume = setup.wait_bound("owned")
    env_file = setup.node_path(volume_node(volume), volume_path(volume)) / ".env"
    assert env_file.read_text() == "1001 2000 0750 Filesystem 2097152"


def test_shared_path_serves_read_write_many_with_immediate_binding(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    setup = make_setup(ConfigFiles(config={"sharedFileSystemPath": "/shared/volumes"}))
    setup.start()
    storage_class = setup.create_class("shared", binding_mode="Immediate")
    setup.create_claim("files", storage_class, access_modes=["ReadWriteMany"])
    volume = setup.wait_bound("files")
    assert "nodeAffinity" not in volume["spec"]
    assert volume["spec"]["accessModes"] == ["ReadWriteMany"]
    path = volume_path(volume)
    assert path.startswith("/shared/volumes/")
    assert any(setup.node_path(node, path).is_dir() for node in setup.cluster.nodes)
