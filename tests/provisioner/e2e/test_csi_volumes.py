"""A CSI class's claims, the controller's half (the node plugin's half is in
tests/provisioner/node_volumes): the claim is bound to a PV with a csi source at once, no
helper pod made or removed anything, and its release hands the gate's permit to the node
plugin on the PV; the PV goes only once the node has marked its directory removed."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from localcluster.raw_api import call_json
from provisioner.csi.driver_name import driver_name_for
from provisioner.objects.node_handoff import (
    NODE_LABEL,
    NODE_SIZE_ANNOTATION,
    REMOVAL_PERMIT_ANNOTATION,
    SETUP_ANNOTATION,
    VOLUME_PATH_KEY,
    NodeCloneSource,
    NodeRemoval,
    VolumeSetup,
)
from provisioner.provisioning.annotations import DIRECTORY_REMOVED_ANNOTATION
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    default_config,
    eventually,
    wait_gone,
)
from tests.provisioner.e2e.test_clones import create_clone, wait_refusal

pytestmark = pytest.mark.cluster

NODE = {"kubernetes.io/hostname": "node-1"}
BASE = "/opt/csi-volumes"


def helper_runs(setup: ProvisionerSetup) -> float:
    """How many helper pods the provisioner ran, by its own histogram's counts."""
    total = 0.0
    for line in setup.replicas[0].metrics().splitlines():
        if line.startswith("local_path_helper_pod_duration_seconds_count"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_csi_claim_binds_without_a_helper_and_its_release_waits_for_its_node(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    setup = make_setup(ConfigFiles(config=default_config(BASE)))
    setup.start()
    storage_class = setup.create_class("csi", parameters={"volumeType": "csi"})
    setup.create_claim("c", storage_class, size="2Gi")
    setup.create_consumer("c", "c", NODE)
    volume = setup.wait_bound("c")
    claim_uid = setup.claim("c")["metadata"]["uid"]
    name = volume["metadata"]["name"]
    path = volume["spec"]["csi"]["volumeAttributes"][VOLUME_PATH_KEY]
    assert volume["spec"]["csi"]["driver"] == driver_name_for(setup.name)
    assert volume["spec"]["csi"]["volumeHandle"] == name == f"pvc-{claim_uid}"
    assert "hostPath" not in volume["spec"] and "local" not in volume["spec"]
    assert volume["metadata"]["labels"][NODE_LABEL] == "node-1"
    setup_fields = VolumeSetup.from_json(volume["metadata"]["annotations"][SETUP_ANNOTATION])
    assert (setup_fields.base_path, setup_fields.path) == (BASE, path)
    assert setup_fields.size_bytes == 2 << 30
    # The gate's permit for the clean-up should the setup fail on the node: this volume's
    # directory, only if this volume made it.
    assert setup_fields.clean_up is not None
    assert (setup_fields.clean_up.volume_name, setup_fields.clean_up.path) == (name, path)
    assert setup_fields.clean_up.owner == name and setup_fields.clean_up.made_only
    assert not setup.node_path("node-1", path).exists(), "no helper made the directory"
    setup.wait_event("c", "ProvisioningSucceeded")
    reasons = [event["reason"] for event in setup.events("c")]
    assert "Provisioning" not in reasons, "saved at once: nothing to say before it"
    assert helper_runs(setup) == 0

    setup.core.delete_namespaced_pod("c", setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim("c", setup.namespace)
    started = time.monotonic()

    def permit() -> NodeRemoval | None:
        found = setup.volume(name)
        text = ((found or {}).get("metadata", {}).get("annotations") or {}).get(
            REMOVAL_PERMIT_ANNOTATION
        )
        return None if text is None else NodeRemoval.from_json(text)

    removal = eventually(permit, 30, "the gate's permit on the released PV")
    print(f"permit after {time.monotonic() - started:.1f}s")
    assert removal == NodeRemoval(
        volume_name=name,
        path=path,
        owner=name,
        made_only=False,
        absent_ok=True,
        claim_uid=claim_uid,
    )
    # Until its node says the directory is gone, the PV stays (its path with it).
    assert setup.volume(name) is not None
    call_json(
        setup.core.patch_persistent_volume,
        name,
        {"metadata": {"annotations": {DIRECTORY_REMOVED_ANNOTATION: "true"}}},
    )
    wait_gone(lambda: setup.volume(name), 30, f"PV {name} to be deleted once its node marked it")
    assert helper_runs(setup) == 0


def test_a_clone_into_a_csi_class_names_its_source_for_the_node_and_another_class_is_refused(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """A CSI clone's PV is saved at once, as any CSI volume's: its setup names the source's
    volume, directory, base path and claim, for the node plugin to copy from; nothing is
    copied by a helper (tests/provisioner/node_volumes/test_clone_copy.py copies). A clone of
    a source of another class is refused, as for any class."""
    setup = make_setup(ConfigFiles(config=default_config(BASE)))
    setup.start()
    storage_class = setup.create_class("csi", parameters={"volumeType": "csi"})
    other_class = setup.create_class("plain")
    setup.create_claim("source", storage_class)
    setup.create_consumer("source", "source", NODE)
    source = setup.wait_bound("source")
    source_path = source["spec"]["csi"]["volumeAttributes"][VOLUME_PATH_KEY]
    create_clone(setup, "copy", "source", storage_class)
    setup.create_consumer("copy", "copy", NODE)
    clone = setup.wait_bound("copy")
    assert clone["spec"]["csi"]["driver"] == driver_name_for(setup.name)
    assert clone["metadata"]["labels"][NODE_LABEL] == "node-1", "the source's node"
    fields = VolumeSetup.from_json(clone["metadata"]["annotations"][SETUP_ANNOTATION])
    assert fields.clone_source == NodeCloneSource(
        volume_name=source["metadata"]["name"],
        path=source_path,
        base_path=BASE,
        claim_uid=setup.claim("source")["metadata"]["uid"],
    )
    assert fields.path == clone["spec"]["csi"]["volumeAttributes"][VOLUME_PATH_KEY]
    assert fields.path != source_path
    assert helper_runs(setup) == 0, "the node plugin copies, no helper pod"

    setup.create_claim("other-source", other_class)
    setup.create_consumer("other-source", "other-source", NODE)
    setup.wait_bound("other-source")
    create_clone(setup, "mixed", "other-source", storage_class)
    setup.create_consumer("mixed", "mixed", NODE)
    wait_refusal(setup, "mixed", "a clone must be of its source's class")
    assert setup.phase("mixed") == "Pending"
    assert setup.volume(f"pvc-{setup.claim('mixed')['metadata']['uid']}") is None


def test_a_csi_claim_s_expansion_is_finished_once_its_node_says_it_holds_the_size(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """The controller's half of a CSI volume's expansion: the PV grows and the claim says its
    resize is in progress, but it is finished (status.capacity, the event) only once the PV's
    NODE_SIZE_ANNOTATION, which the node plugin writes after applying the size (here by hand,
    test_volume_watch_cluster.py has the node's half), reaches the new size."""
    setup = make_setup(ConfigFiles(config=default_config(BASE)))
    setup.start()
    storage_class = setup.create_class("csi", parameters={"volumeType": "csi"})
    call_json(setup.storage.patch_storage_class, storage_class, {"allowVolumeExpansion": True})
    setup.create_claim("g", storage_class, size="1Gi")
    setup.create_consumer("g", "g", NODE)
    name = setup.wait_bound("g")["metadata"]["name"]
    setup.core.patch_namespaced_persistent_volume_claim(
        "g", setup.namespace, {"spec": {"resources": {"requests": {"storage": "2Gi"}}}}
    )

    def grown() -> bool | None:
        volume = setup.volume(name) or {}
        return volume.get("spec", {}).get("capacity", {}).get("storage") == "2Gi" or None

    eventually(grown, 30, f"PV {name} to grow")
    time.sleep(1)  # what the controller would do next, were it not waiting for the node
    status = setup.claim("g").get("status") or {}
    assert status["capacity"]["storage"] == "1Gi"
    assert status["allocatedResourceStatuses"]["storage"] == "ControllerResizeInProgress"
    call_json(
        setup.core.patch_persistent_volume,
        name,
        {"metadata": {"annotations": {NODE_SIZE_ANNOTATION: str(2 << 30)}}},
    )
    setup.wait_event("g", "VolumeResizeSuccessful")
    status = setup.claim("g").get("status") or {}
    assert status["capacity"]["storage"] == "2Gi"
    assert "storage" not in (status.get("allocatedResourceStatuses") or {})
