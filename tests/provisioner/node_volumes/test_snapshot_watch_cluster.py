"""The node plugin's snapshot watch against the real local control plane, with the snapshot CRDs
applied (no common snapshot controller: the contents are made by hand, as our controller would
admit them). A content labelled for a (fake) node gets its snapshot taken on this machine, its
status set and being-created lifted; one whose source is not set up gets status.error; a
forged permit removes nothing; the gate's permit removes the data and marks the content; a
content labelled for another node is never touched."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import LocalCluster
from localcluster.snapshot_controller import apply_crds, crd_documents, locate_snapshot_tools
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
)
from provisioner.csi.driver_name import DEFAULT_DRIVER_NAME
from provisioner.csi.generated import csi_pb2
from provisioner.kube.client import KubeClients, create_clients
from provisioner.node_volumes.snapshot_service import SnapshotService
from provisioner.node_volumes.snapshot_watch import CONTENTS_PATH, NodeSnapshots
from provisioner.node_volumes.volume_records import VolumeRecord
from provisioner.node_volumes.volume_state import VolumeState
from provisioner.objects.node_handoff import NODE_LABEL, node_label_value
from provisioner.objects.snapshot_handoff import (
    BEING_CREATED_ANNOTATION,
    SNAPSHOT_REMOVAL_PERMIT_ANNOTATION,
    SNAPSHOT_REMOVED_ANNOTATION,
    SNAPSHOT_SETUP_ANNOTATION,
    SnapshotRemoval,
    SnapshotSetup,
    snapshot_handle,
    snapshot_id,
    snapshot_path,
)
from tests.provisioner.csi.plugin_process import NODE_NAME, call, plugin_process
from tests.provisioner.e2e.support import eventually

pytestmark = pytest.mark.cluster
DRIVER = "local-path.test.local-path-storage.io"
MERGE_PATCH = "application/merge-patch+json"


@pytest.fixture(scope="module")
def clients(cluster: LocalCluster) -> Iterator[KubeClients]:
    apply_crds(cluster.admin_client, crd_documents(locate_snapshot_tools().crds), 60)
    made = create_clients(str(cluster.kubeconfig), environ={})
    yield made
    made.close()


def content(name: str, node: str, setup: SnapshotSetup) -> dict[str, Any]:
    return {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshotContent",
        "metadata": {
            "name": name,
            "labels": {NODE_LABEL: node_label_value(node)},
            "annotations": {
                SNAPSHOT_SETUP_ANNOTATION: setup.to_json(),
                BEING_CREATED_ANNOTATION: "yes",
            },
        },
        "spec": {
            # Retain: nothing but the node and this test acts on it (no common controller).
            "deletionPolicy": "Retain",
            "driver": DRIVER,
            "source": {"volumeHandle": setup.source_volume},
            "volumeSnapshotRef": {"namespace": "default", "name": f"snap-{name}"},
        },
    }


def test_the_watch_takes_reports_and_removes_its_nodes_snapshots(
    clients: KubeClients, tmp_path: Path
) -> None:
    node = f"fake-{uuid.uuid4().hex[:8]}"
    base = tmp_path.resolve() / "base"
    source = base / "ns" / "pv-src"
    source.mkdir(parents=True)
    (source / "data.txt").write_text("snapshot me")
    state = VolumeState(tmp_path / "state")
    state.write("pv-src", VolumeRecord("set-up", str(source)))
    service = SnapshotService(node, [str(base)], state, timeout_seconds=30)
    watch = NodeSnapshots(clients, service, DRIVER, base_delay=0.2, max_delay=1.0)

    def setup_for(name: str, volume: str) -> SnapshotSetup:
        sid = snapshot_id(name)
        return SnapshotSetup(
            sid, volume, str(base / "ns" / volume), str(base), snapshot_path(str(base), sid),
            3 << 20, "Filesystem",
        )  # fmt: skip

    ours, unready, theirs = (f"snapcontent-{uuid.uuid4().hex[:10]}" for _ in range(3))
    setup, unset = setup_for(ours, "pv-src"), setup_for(unready, "pv-missing")
    made: dict[str, dict[str, Any]] = {}
    watch.start()
    try:
        for name, on, spec in ((ours, node, setup), (unready, node, unset), (theirs, "n-x", setup)):
            made[name] = clients.request_json("POST", CONTENTS_PATH, body=content(name, on, spec))

        def read(name: str) -> dict[str, Any]:
            return clients.request_json("GET", f"{CONTENTS_PATH}/{name}")

        def reported() -> dict[str, Any] | None:
            found = read(ours)
            annotations = found["metadata"].get("annotations") or {}
            ready = (found.get("status") or {}).get("readyToUse") is True
            return found if ready and BEING_CREATED_ANNOTATION not in annotations else None

        found = eventually(reported, 30, f"{ours} to be reported ready")
        status = found["status"]
        assert status["snapshotHandle"] == snapshot_handle(node, setup.snapshot_id)
        assert status["restoreSize"] == 3 << 20 and status["creationTime"] > 0
        assert (Path(setup.path) / "data.txt").read_text() == "snapshot me"

        def failed() -> str | None:
            error = (read(unready).get("status") or {}).get("error") or {}
            return error.get("message") or None

        message = eventually(failed, 30, f"{unready} to get status.error")
        assert "not set up" in message and "pv-missing" in message

        def let_go() -> bool | None:
            annotations = read(unready)["metadata"].get("annotations") or {}
            return True if BEING_CREATED_ANNOTATION not in annotations else None

        # As the sidecar after a final error: its VolumeSnapshot can be deleted.
        eventually(let_go, 30, f"{unready}'s being-created lifted after the error")

        # A permit following another content (a re-made one of the same name) removes nothing.
        uid = made[ours]["metadata"]["uid"]
        forged = SnapshotRemoval(ours, "another-uid", setup.snapshot_id, setup.path)
        permit_patch = {"metadata": {"annotations": {SNAPSHOT_REMOVAL_PERMIT_ANNOTATION: ""}}}
        permit_patch["metadata"]["annotations"][SNAPSHOT_REMOVAL_PERMIT_ANNOTATION] = (
            forged.to_json()
        )
        clients.request_json(
            "PATCH", f"{CONTENTS_PATH}/{ours}", body=permit_patch, content_type=MERGE_PATCH
        )
        time.sleep(1.5)
        assert (Path(setup.path) / "data.txt").is_file()
        assert SNAPSHOT_REMOVED_ANNOTATION not in read(ours)["metadata"]["annotations"]

        permit = SnapshotRemoval(ours, uid, setup.snapshot_id, setup.path)
        permit_patch["metadata"]["annotations"][SNAPSHOT_REMOVAL_PERMIT_ANNOTATION] = (
            permit.to_json()
        )
        clients.request_json(
            "PATCH", f"{CONTENTS_PATH}/{ours}", body=permit_patch, content_type=MERGE_PATCH
        )

        def marked() -> bool | None:
            annotations = read(ours)["metadata"]["annotations"]
            return annotations.get(SNAPSHOT_REMOVED_ANNOTATION) == "true" or None

        eventually(marked, 30, f"{ours} to be marked removed")
        assert not Path(setup.path).exists() and (source / "data.txt").is_file()
        theirs_now = read(theirs)
        assert BEING_CREATED_ANNOTATION in theirs_now["metadata"]["annotations"]
        assert not theirs_now.get("status")
    finally:
        watch.stop()
        for name in made:
            clients.request_json("DELETE", f"{CONTENTS_PATH}/{name}")


def test_the_plugin_process_runs_the_snapshot_watch_and_serves_the_controller_calls(
    cluster: LocalCluster, clients: KubeClients, tmp_path: Path
) -> None:
    """The plugin as it runs on a node (--manage-volumes): the watch started beside the volume
    watch takes a content labelled for its node, and its socket answers the Controller's
    snapshot calls (the Identity still advertises no Controller service)."""
    state_dir = tmp_path / "state"
    base = tmp_path.resolve() / "plugin" / "base"
    source = base / "ns" / "pv-src"
    source.mkdir(parents=True)
    (source / "data.txt").write_text("from the plugin")
    VolumeState(state_dir).write("pv-src", VolumeRecord("set-up", str(source)))
    name = f"snapcontent-{uuid.uuid4().hex[:10]}"
    sid = snapshot_id(name)
    setup = SnapshotSetup(
        sid, "pv-src", str(source), str(base), snapshot_path(str(base), sid), 1 << 20, "Filesystem"
    )
    body = content(name, NODE_NAME, setup)
    body["spec"]["driver"] = DEFAULT_DRIVER_NAME
    flags = (
        "--manage-volumes",
        f"--kubeconfig={cluster.kubeconfig}",
        f"--state-dir={state_dir}",
    )
    # The ConfigMap's other files beside config.json, as the DaemonSet mounts them.
    for file_name, text in (
        ("setup", DEFAULT_SETUP_SCRIPT),
        ("teardown", DEFAULT_TEARDOWN_SCRIPT),
        ("helperPod.yaml", DEFAULT_HELPER_POD_YAML),
    ):
        (tmp_path / "plugin" / file_name).write_text(text)
    with plugin_process(tmp_path / "plugin", base, flags=flags) as plugin:
        clients.request_json("POST", CONTENTS_PATH, body=body)
        try:

            def ready() -> str | None:
                found = clients.request_json("GET", f"{CONTENTS_PATH}/{name}")
                return (found.get("status") or {}).get("snapshotHandle") or None

            handle = eventually(ready, 30, f"{name} to be reported ready")
            assert handle == snapshot_handle(NODE_NAME, sid)
            assert (Path(setup.path) / "data.txt").read_text() == "from the plugin"
            capabilities = call(
                plugin.endpoint,
                "Controller/ControllerGetCapabilities",
                csi_pb2.ControllerGetCapabilitiesRequest(),
                csi_pb2.ControllerGetCapabilitiesResponse,
            )
            listed = call(
                plugin.endpoint,
                "Controller/ListSnapshots",
                csi_pb2.ListSnapshotsRequest(snapshot_id=handle),
                csi_pb2.ListSnapshotsResponse,
            )
            rpc = csi_pb2.ControllerServiceCapability.RPC
            assert {c.rpc.type for c in capabilities.capabilities} == {
                rpc.CREATE_DELETE_SNAPSHOT,
                rpc.LIST_SNAPSHOTS,
            }
            assert [e.snapshot.source_volume_id for e in listed.entries] == ["pv-src"]
        finally:
            clients.request_json("DELETE", f"{CONTENTS_PATH}/{name}")
