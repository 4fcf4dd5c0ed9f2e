"""Restoring a VolumeSnapshot into a claim of a CSI class, the controller's half (the node's copy
is in tests/provisioner/node_volumes/test_snapshot_restore.py): with the snapshot API served
and the common snapshot controller running, a hand-made ready snapshot (its content's status
set by the test as the node plugin sets it) is restored into a claim whose PV names it for the
node; across namespaces only once a ReferenceGrant allows it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from localcluster.raw_api import call_json
from provisioner.csi.driver_name import driver_name_for
from provisioner.objects.node_handoff import SETUP_ANNOTATION, NodeRestoreSource, VolumeSetup
from provisioner.objects.snapshot_handoff import (
    SNAPSHOT_GROUP,
    SNAPSHOT_SETUP_ANNOTATION,
    SnapshotSetup,
    snapshot_handle,
    snapshot_id,
    snapshot_path,
)
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    default_config,
    eventually,
)
from tests.provisioner.e2e.test_clones import create_clone, wait_refusal

pytestmark = pytest.mark.cluster

BASE = "/opt/csi-restores"
VERSION = "v1"


def ready_snapshot(setup: ProvisionerSetup, namespace: str, name: str) -> str:
    """A VolumeSnapshot bound to a pre-provisioned content of our driver on node-1, admitted
    (its setup) and ready (its status) as our controller and node plugin leave one; the
    snapshot controller binds the two and reports it ready. Returns the snapshot's id."""
    custom = client.CustomObjectsApi(setup.cluster.admin_client)
    content_name = f"content-{setup.suffix}-{namespace}-{name}"
    found = snapshot_id(content_name)
    made = SnapshotSetup(
        snapshot_id=found,
        source_volume="pvc-gone",
        source_path=f"{BASE}/pvc-gone",
        base_path=BASE,
        path=snapshot_path(BASE, found),
        size_bytes=1 << 30,
        volume_mode="Filesystem",
    )
    handle = snapshot_handle("node-1", found)
    custom.create_cluster_custom_object(
        SNAPSHOT_GROUP,
        VERSION,
        "volumesnapshotcontents",
        {
            "apiVersion": f"{SNAPSHOT_GROUP}/{VERSION}",
            "kind": "VolumeSnapshotContent",
            "metadata": {
                "name": content_name,
                "annotations": {SNAPSHOT_SETUP_ANNOTATION: made.to_json()},
            },
            "spec": {
                "deletionPolicy": "Retain",
                "driver": driver_name_for(setup.name),
                "source": {"snapshotHandle": handle},
                "sourceVolumeMode": "Filesystem",
                "volumeSnapshotRef": {"namespace": namespace, "name": name},
            },
        },
    )
    custom.patch_cluster_custom_object_status(
        SNAPSHOT_GROUP,
        VERSION,
        "volumesnapshotcontents",
        content_name,
        {
            "status": {
                "snapshotHandle": handle,
                "readyToUse": True,
                "restoreSize": 1 << 30,
                "creationTime": time.time_ns(),
            }
        },
    )
    custom.create_namespaced_custom_object(
        SNAPSHOT_GROUP,
        VERSION,
        namespace,
        "volumesnapshots",
        {
            "apiVersion": f"{SNAPSHOT_GROUP}/{VERSION}",
            "kind": "VolumeSnapshot",
            "metadata": {"name": name},
            "spec": {"source": {"volumeSnapshotContentName": content_name}},
        },
    )

    def ready() -> dict[str, Any] | None:
        snapshot = call_json(
            custom.get_namespaced_custom_object,
            SNAPSHOT_GROUP,
            VERSION,
            namespace,
            "volumesnapshots",
            name,
        )
        status = snapshot.get("status") or {}
        return snapshot if status.get("readyToUse") is True else None

    eventually(ready, 60, f"VolumeSnapshot {namespace}/{name} bound and ready")
    return found


def restore_source(setup: ProvisionerSetup, claim: str) -> NodeRestoreSource | None:
    volume = setup.wait_bound(claim)
    fields = VolumeSetup.from_json(volume["metadata"]["annotations"][SETUP_ANNOTATION])
    assert fields.clone_source is None
    return fields.restore_source


def test_a_restore_names_its_snapshot_for_the_node_and_across_namespaces_needs_a_grant(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    setup = make_setup(ConfigFiles(config=default_config(BASE)))
    setup.cluster.enable_snapshots()
    setup.start()
    storage_class = setup.create_class(
        "restores", binding_mode="Immediate", parameters={"volumeType": "csi"}
    )
    kind = {"kind": "VolumeSnapshot", "api_group": SNAPSHOT_GROUP}

    here = ready_snapshot(setup, setup.namespace, "snap")
    create_clone(setup, "restored", "snap", storage_class, **kind)
    assert restore_source(setup, "restored") == NodeRestoreSource(
        snapshot_id=here,
        snapshot_path=snapshot_path(BASE, here),
        base_path=BASE,
        content_name=f"content-{setup.suffix}-{setup.namespace}-snap",
    )
    volume = setup.wait_bound("restored")
    assert volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][
        0
    ]["values"] == ["node-1"]

    elsewhere = f"snaps-{setup.suffix}"
    setup.cluster.create_namespace(elsewhere)
    there = ready_snapshot(setup, elsewhere, "snap")
    create_clone(setup, "across", "snap", storage_class, namespace=elsewhere, **kind)
    wait_refusal(
        setup,
        "across",
        f"a ReferenceGrant in {elsewhere} must allow PersistentVolumeClaims of {setup.namespace}",
    )
    assert setup.phase("across") == "Pending"
    client.CustomObjectsApi(setup.cluster.admin_client).create_namespaced_custom_object(
        "gateway.networking.k8s.io",
        "v1beta1",
        elsewhere,
        "referencegrants",
        {
            "apiVersion": "gateway.networking.k8s.io/v1beta1",
            "kind": "ReferenceGrant",
            "metadata": {"name": "restores"},
            "spec": {
                "from": [
                    {"group": "", "kind": "PersistentVolumeClaim", "namespace": setup.namespace}
                ],
                "to": [{"group": SNAPSHOT_GROUP, "kind": "VolumeSnapshot", "name": "snap"}],
            },
        },
    )
    # Nothing watched tells the provisioner of the grant: its retry of the refusal does.
    found = restore_source(setup, "across")
    assert found is not None and found.snapshot_id == there
    assert found.content_name == f"content-{setup.suffix}-{elsewhere}-snap"
    setup.core.delete_namespace(elsewhere)
