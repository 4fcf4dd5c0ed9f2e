"""Release, failures, hostile input, reload, lost nodes and leader election on the real cluster."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from localcluster.raw_api import call_json, manifest
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    default_config,
    eventually,
    volume_node,
    volume_path,
    wait_gone,
)

pytestmark = pytest.mark.cluster
CONFIGMAP_NAME = "local-path-config"


def bind(
    setup: ProvisionerSetup, claim: str, storage_class: str, **kwargs: object
) -> tuple[str, str, str]:
    """Creates a claim and a consumer, waits until Bound: (pv name, node, path)."""
    setup.create_claim(claim, storage_class, **kwargs)  # type: ignore[arg-type]
    setup.create_consumer(claim, claim)
    volume = setup.wait_bound(claim)
    return volume["metadata"]["name"], volume_node(volume), volume_path(volume)


def release(setup: ProvisionerSetup, claim: str) -> None:
    setup.core.delete_namespaced_pod(claim, setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim(claim, setup.namespace)


def test_delete_removes_directory_and_volume_retain_keeps_both(
    provisioner: ProvisionerSetup,
) -> None:
    deleting = provisioner.create_class("delete")
    retaining = provisioner.create_class("retain", reclaim_policy="Retain")
    gone_pv, gone_node, gone_path = bind(provisioner, "gone", deleting)
    kept_pv, kept_node, kept_path = bind(provisioner, "kept", retaining)
    (provisioner.node_path(kept_node, kept_path) / "data.txt").write_text("keep me")

    release(provisioner, "gone")
    release(provisioner, "kept")
    wait_gone(lambda: provisioner.volume(gone_pv), 60, f"{gone_pv} to be deleted")
    assert not provisioner.node_path(gone_node, gone_path).exists()

    def released() -> str | None:
        volume = provisioner.volume(kept_pv)
        return "yes" if volume is not None and volume["status"]["phase"] == "Released" else None

    eventually(released, 60, f"{kept_pv} to be Released")
    time.sleep(2)  # give a wrong teardown the chance to happen
    volume = provisioner.volume(kept_pv)
    assert volume is not None and volume["status"]["phase"] == "Released"
    assert (provisioner.node_path(kept_node, kept_path) / "data.txt").read_text() == "keep me"
    assert "controller_persistentvolume_delete_total" in provisioner.replicas[0].metrics()


def test_a_volume_deleted_directly_still_gets_its_directory_removed(
    provisioner: ProvisionerSetup,
) -> None:
    storage_class = provisioner.create_class("direct")
    pv, node, path = bind(provisioner, "direct", storage_class)
    provisioner.core.delete_persistent_volume(pv)
    release(provisioner, "direct")
    wait_gone(lambda: provisioner.volume(pv), 60, f"{pv} to go")
    assert not provisioner.node_path(node, path).exists()


def test_a_failing_setup_is_reported_with_its_exit_code_and_retried(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    script = '#!/bin/sh\necho "cannot prepare $VOL_DIR: disk on fire" >&2\nexit 7\n'
    setup = make_setup(ConfigFiles(setup=script))
    setup.start()
    storage_class = setup.create_class("failing")
    setup.create_claim("doomed", storage_class)
    setup.create_consumer("doomed", "doomed")
    event = setup.wait_event("doomed", "ProvisioningFailed", timeout=60)
    assert "exit code 7" in event["message"]
    assert "disk on fire" in event["message"]

    def retried() -> int | None:
        for candidate in setup.events("doomed"):
            count = int(candidate.get("count") or 1)
            if candidate["reason"] == "ProvisioningFailed" and count >= 2:
                return count
        return None

    eventually(retried, 60, "a second failed attempt (a retry)")
    claim = setup.claim("doomed")
    assert claim["status"]["phase"] == "Pending"
    assert setup.volume(f"pvc-{claim['metadata']['uid']}") is None
    helper_pods = call_json(
        setup.core.list_namespaced_pod,
        setup.namespace,
        label_selector="local-path-storage.io/helper-pod=true",
    )
    # Each failed helper is deleted once its outcome is read; at most the current retry runs.
    assert len(helper_pods["items"]) <= 1


ESCAPES = {
    "dotdot-annotation": (
        '{{ .PVC.Namespace }}/{{ .PVC.Name }}/{{ index .PVC.Annotations "sub" }}',
        {"sub": "../../victim-ns/victim"},
    ),
    "outside-namespace": ('{{ index .PVC.Annotations "sub" }}', {"sub": "elsewhere"}),
    "absolute": ("/etc/{{ .PVC.Name }}", {}),
}


@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_path_escape_attempts_are_refused_and_nothing_is_created(
    provisioner: ProvisionerSetup, case: str
) -> None:
    pattern, annotations = ESCAPES[case]
    storage_class = provisioner.create_class(f"escape-{case}", parameters={"pathPattern": pattern})
    provisioner.create_claim("sneaky", storage_class, annotations=annotations)
    provisioner.create_consumer("sneaky", "sneaky")
    event = provisioner.wait_event("sneaky", "ProvisioningFailed")
    assert "path" in event["message"]
    assert provisioner.phase("sneaky") == "Pending"
    for node in provisioner.cluster.nodes:
        base = provisioner.node_path(node, "/opt/local-path-provisioner")
        assert not base.exists() or not any(
            provisioner.namespace in str(path) for path in base.rglob("*")
        )
        assert not provisioner.node_path(node, "/etc/sneaky").exists()
        assert not provisioner.node_path(node, "/opt/victim-ns").exists()


def test_a_forged_volume_pointing_outside_the_base_paths_is_never_deleted(
    provisioner: ProvisionerSetup,
) -> None:
    target = provisioner.node_path("node-1", "/etc/precious")
    target.mkdir(parents=True, exist_ok=True)
    (target / "file").write_text("mine")
    name = f"forged-{provisioner.suffix}"
    provisioner.core.create_persistent_volume(
        manifest(
            {
                "metadata": {
                    "name": name,
                    "annotations": {"pv.kubernetes.io/provisioned-by": provisioner.name},
                },
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Delete",
                    "storageClassName": "nothing",
                    "hostPath": {"path": "/etc/precious"},
                    "claimRef": {"namespace": provisioner.namespace, "name": "ghost", "uid": "0"},
                    "nodeAffinity": {
                        "required": {
                            "nodeSelectorTerms": [
                                {
                                    "matchExpressions": [
                                        {
                                            "key": "kubernetes.io/hostname",
                                            "operator": "In",
                                            "values": ["node-1"],
                                        }
                                    ]
                                }
                            ]
                        }
                    },
                },
            }
        )
    )
    try:
        event = provisioner.wait_event(name, "VolumeFailedDelete")
        assert "/etc/precious" in event["message"]
        assert (target / "file").read_text() == "mine"
        assert provisioner.volume(name) is not None
    finally:
        provisioner.core.delete_persistent_volume(name)


def test_config_hot_reload_valid_and_invalid(make_setup: Callable[..., ProvisionerSetup]) -> None:
    setup = make_setup(ConfigFiles(config=default_config("/opt/before")))
    replica = setup.start()
    storage_class = setup.create_class("reload")
    _, _node, path = bind(setup, "first", storage_class)
    assert path.startswith("/opt/before/")

    setup.update_config(ConfigFiles(config=default_config("/opt/after")))
    eventually(
        lambda: (
            True
            if 'local_path_config_reload_total{result="success"} 1.0' in replica.metrics()
            else None
        ),
        5,  # the promise: a change is in force within 5 s
        "the valid config to be reloaded",
    )
    _, _, path = bind(setup, "second", storage_class)
    assert path.startswith("/opt/after/")

    broken = ConfigFiles(config=default_config("relative/path"))
    setup.update_config(broken)
    event = setup.wait_event(CONFIGMAP_NAME, "InvalidConfig", timeout=15)
    assert "must be an absolute path" in event["message"]
    _, _, path = bind(setup, "third", storage_class)
    assert path.startswith("/opt/after/"), "the last valid config stays in force"
    assert replica.alive()
    assert json.loads((setup.config_dir / "config.json").read_text()) == broken.config


def test_selected_node_deleted_claim_is_rescheduled(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    setup = make_setup()
    cluster = setup.cluster
    doomed = f"doomed-{setup.suffix}"
    cluster.add_node(doomed)
    try:
        setup.start()
        # Hold the claim back until the node is gone, as if the provisioner was busy.
        storage_class = setup.create_class("moving")
        setup.stop_all()
        setup.create_claim("moving", storage_class)
        setup.create_consumer("moving", "moving", {"kubernetes.io/hostname": doomed})

        def selected() -> str | None:
            return setup.annotations("moving").get("volume.kubernetes.io/selected-node")

        assert eventually(selected, 60, "the scheduler to select the node") == doomed
        cluster.delete_node(doomed)
        setup.core.delete_namespaced_pod("moving", setup.namespace, grace_period_seconds=0)
        setup.start()
        wait_gone(selected, 60, "the selected-node annotation to be removed")
        event = setup.wait_event("moving", "ProvisioningFailed")
        assert doomed in event["message"]
        setup.create_consumer("moving-again", "moving")
        volume = setup.wait_bound("moving")
        assert volume_node(volume) != doomed
    finally:
        nodes = call_json(cluster.core_v1().list_node)["items"]
        if doomed in [node["metadata"]["name"] for node in nodes]:
            cluster.delete_node(doomed)


def test_two_replicas_one_leader_and_takeover(make_setup: Callable[..., ProvisionerSetup]) -> None:
    setup = make_setup()
    first = setup.start()
    second = setup.start(wait_ready=False)
    eventually(
        lambda: True if second.probe("/readyz")[1].startswith("standby") else None,
        20,
        "the second replica to report standby",
    )
    assert "leader_election_master_status" in first.metrics()
    storage_class = setup.create_class("ha")
    bind(setup, "before", storage_class)

    first.kill()  # no lease release: the standby must wait for the lease to expire
    killed_at = time.monotonic()
    setup.wait_ready(second, timeout=40)
    takeover = time.monotonic() - killed_at
    assert takeover < 30, f"takeover took {takeover:.1f}s"
    _, node, path = bind(setup, "after", storage_class)
    assert setup.node_path(node, path).is_dir()
    volumes = [
        volume["metadata"]["name"]
        for volume in call_json(setup.core.list_persistent_volume)["items"]
        if volume["spec"].get("claimRef", {}).get("namespace") == setup.namespace
    ]
    assert sorted(volumes) == sorted({*volumes}), "no claim was provisioned twice"
    assert len(volumes) == 2
