"""The snapshot opt-in of the local cluster: the CRDs served and the common snapshot controller
watching them, proven by what the controller writes; and the pieces that need no cluster."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster import ClusterOptions, LocalCluster, MissingBinariesError, NodeSpec, wait_for
from localcluster.__main__ import _options, build_parser
from localcluster.raw_api import call_json, manifest
from localcluster.snapshot_controller import (
    CRD_FILES,
    crd_documents,
    is_established,
    locate_snapshot_tools,
    snapshot_controller_args,
)

DRIVER = "made-up.snapshots.example.com"
SNAPSHOT_GROUP, SNAPSHOT_VERSION = "snapshot.storage.k8s.io", "v1"


def test_missing_snapshot_tools_name_their_build_command(tmp_path: Path) -> None:
    with pytest.raises(MissingBinariesError) as raised:
        locate_snapshot_tools(tmp_path)
    message = str(raised.value)
    assert "scripts/build-go-tools.sh snapshot-controller" in message
    assert "\n" not in message
    assert {path.name for path in raised.value.missing} >= set(CRD_FILES)


def test_the_controller_runs_alone_without_group_snapshots(tmp_path: Path) -> None:
    argv = snapshot_controller_args(tmp_path / "snapshot-controller", tmp_path / "kubeconfig")
    assert f"--kubeconfig={tmp_path / 'kubeconfig'}" in argv
    assert {"--leader-election=false", "--worker-threads=4"} <= set(argv)
    assert "--feature-gates=CSIVolumeGroupSnapshot=false" in argv
    assert not any(arg.startswith("--enable-distributed-snapshotting") for arg in argv)


def test_established_needs_the_condition_true() -> None:
    assert not is_established({})
    assert not is_established(
        {"status": {"conditions": [{"type": "Established", "status": "False"}]}}
    )
    assert is_established(
        {
            "status": {
                "conditions": [
                    {"type": "NamesAccepted", "status": "True"},
                    {"type": "Established", "status": "True"},
                ]
            }
        }
    )


def test_clusters_do_not_serve_snapshots_unless_asked() -> None:
    assert ClusterOptions().snapshots is False
    assert _options(build_parser().parse_args(["run"])).snapshots is False
    assert _options(build_parser().parse_args(["start", "--snapshots"])).snapshots is True


def _crd_names() -> set[str]:
    tools = locate_snapshot_tools()
    return {str(document["metadata"]["name"]) for document in crd_documents(tools.crds)}


def _custom(cluster: LocalCluster) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(cluster.admin_client)


def _eventually(probe: Callable[[], dict[str, Any] | None], what: str) -> dict[str, Any]:
    return wait_for(probe, 60, what, interval=0.2)


def _snapshot_source(cluster: LocalCluster, namespace: str, handle: str) -> str:
    """A claim bound to a hand-made CSI PV of the made-up driver; returns the claim's name."""
    pv_name, claim = f"pv-{uuid.uuid4().hex[:8]}", "source"
    core = cluster.core_v1()
    core.create_persistent_volume(
        manifest(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": pv_name},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain",
                    "storageClassName": "",
                    "csi": {"driver": DRIVER, "volumeHandle": handle},
                    "claimRef": {"namespace": namespace, "name": claim},
                },
            }
        )
    )
    core.create_namespaced_persistent_volume_claim(
        namespace,
        manifest(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim},
                "spec": {
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "",
                    "volumeName": pv_name,
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            }
        ),
    )

    def bound() -> dict[str, Any] | None:
        found = call_json(core.read_namespaced_persistent_volume_claim, claim, namespace)
        return found if (found.get("status") or {}).get("phase") == "Bound" else None

    _eventually(bound, f"claim {namespace}/{claim} Bound")
    return claim


@pytest.mark.cluster
def test_the_snapshot_controller_makes_contents_and_reference_grants_are_served(
    tmp_path: Path,
) -> None:
    assert len(_crd_names()) == 4
    options = ClusterOptions(
        nodes=(NodeSpec("snap"),), parent_dir=tmp_path, announce=False, snapshots=True
    )
    with LocalCluster.start(options) as cluster:
        assert cluster.snapshots is not None
        controller = cluster.snapshots.process
        assert controller.pid in cluster.pids()
        cluster.enable_snapshots()  # already served: the same controller, not a second one
        assert cluster.snapshots.process is controller
        extensions = client.ApiextensionsV1Api(cluster.admin_client)
        for name in _crd_names():
            assert is_established(call_json(extensions.read_custom_resource_definition, name))

        namespace = "snaps"
        cluster.create_namespace(namespace)
        custom = _custom(cluster)
        custom.create_cluster_custom_object(
            SNAPSHOT_GROUP,
            SNAPSHOT_VERSION,
            "volumesnapshotclasses",
            {
                "apiVersion": f"{SNAPSHOT_GROUP}/{SNAPSHOT_VERSION}",
                "kind": "VolumeSnapshotClass",
                "metadata": {"name": "made-up"},
                "driver": DRIVER,
                "deletionPolicy": "Retain",
            },
        )
        handle = f"handle-{uuid.uuid4().hex[:8]}"
        claim = _snapshot_source(cluster, namespace, handle)
        snapshot = call_json(
            custom.create_namespaced_custom_object,
            SNAPSHOT_GROUP,
            SNAPSHOT_VERSION,
            namespace,
            "volumesnapshots",
            {
                "apiVersion": f"{SNAPSHOT_GROUP}/{SNAPSHOT_VERSION}",
                "kind": "VolumeSnapshot",
                "metadata": {"name": "snap-1"},
                "spec": {
                    "volumeSnapshotClassName": "made-up",
                    "source": {"persistentVolumeClaimName": claim},
                },
            },
        )
        uid = snapshot["metadata"]["uid"]

        def content() -> dict[str, Any] | None:
            try:
                found = call_json(
                    custom.get_cluster_custom_object,
                    SNAPSHOT_GROUP,
                    SNAPSHOT_VERSION,
                    "volumesnapshotcontents",
                    f"snapcontent-{uid}",
                )
            except ApiException as error:
                if error.status == 404:
                    return None
                raise
            return found

        made = _eventually(content, f"snapcontent-{uid} made by the snapshot controller")
        spec = made["spec"]
        assert spec["source"] == {"volumeHandle": handle}
        assert spec["driver"] == DRIVER
        assert spec["deletionPolicy"] == "Retain"
        assert spec["volumeSnapshotClassName"] == "made-up"
        assert spec["volumeSnapshotRef"]["uid"] == uid
        assert spec["volumeSnapshotRef"]["namespace"] == namespace

        def snapshot_bound() -> dict[str, Any] | None:
            found = call_json(
                custom.get_namespaced_custom_object,
                SNAPSHOT_GROUP,
                SNAPSHOT_VERSION,
                namespace,
                "volumesnapshots",
                "snap-1",
            )
            name = (found.get("status") or {}).get("boundVolumeSnapshotContentName")
            return found if name == f"snapcontent-{uid}" else None

        _eventually(snapshot_bound, "the VolumeSnapshot bound to its content")

        grant = call_json(
            custom.create_namespaced_custom_object,
            "gateway.networking.k8s.io",
            "v1beta1",
            namespace,
            "referencegrants",
            {
                "apiVersion": "gateway.networking.k8s.io/v1beta1",
                "kind": "ReferenceGrant",
                "metadata": {"name": "restores-from-elsewhere"},
                "spec": {
                    "from": [{"group": "", "kind": "PersistentVolumeClaim", "namespace": "other"}],
                    "to": [{"group": SNAPSHOT_GROUP, "kind": "VolumeSnapshot"}],
                },
            },
        )
        assert grant["spec"]["to"] == [{"group": SNAPSHOT_GROUP, "kind": "VolumeSnapshot"}]
        pid = controller.pid
        assert pid is not None and psutil.Process(pid).is_running()
    # Stopped by SIGINT, the one signal it shuts down on cleanly: exit status 0, not a kill.
    assert controller.exit_code() == 0
