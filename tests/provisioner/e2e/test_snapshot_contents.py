"""The controller's part in snapshots, against the real common snapshot controller: a
VolumeSnapshot of a CSI claim gets its content admitted (label and setup for the node), a
snapshot over its base path's budget is refused on the VolumeSnapshot's status, a handle that
is not ours is refused, Delete hands the gate's permit to the node and lets go once the node
says the data is gone, and Retain lets go at once. The node plugin's half is played here by
the test, writing what the node would (its own tests are in tests/provisioner/node_volumes)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localcluster import ClusterOptions, LocalCluster
from provisioner.csi.driver_name import driver_name_for
from provisioner.objects.node_handoff import NODE_LABEL
from provisioner.objects.snapshot_handoff import (
    BEING_CREATED_ANNOTATION,
    SNAPSHOT_REMOVAL_PERMIT_ANNOTATION,
    SNAPSHOT_REMOVED_ANNOTATION,
    SNAPSHOT_SETUP_ANNOTATION,
    SnapshotRemoval,
    SnapshotSetup,
    snapshot_handle,
    snapshot_id,
)
from tests.provisioner.e2e.capacity_support import published
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    eventually,
    wait_gone,
)

pytestmark = pytest.mark.cluster

GROUP, VERSION = "snapshot.storage.k8s.io", "v1"
NODE = {"kubernetes.io/hostname": "node-1"}
BASE = "/opt/csi-snapshots"
GIB = 1 << 30
CONFIG = {
    "nodePathMap": [
        {
            "node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
            "paths": [{"path": BASE, "create": True, "capacity": "5Gi"}],
        }
    ]
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A cluster of this module's own with the snapshot API and the common snapshot
    controller (the session's has neither, so other tests pay nothing for them)."""
    options = ClusterOptions(
        parent_dir=tmp_path_factory.mktemp("snapshots"), announce=False, snapshots=True
    )
    with LocalCluster.start(options) as running:
        yield running


class Snapshots:
    """The snapshot objects of one setup, as the API's JSON."""

    def __init__(self, setup: ProvisionerSetup) -> None:
        self.setup = setup
        self.custom = client.CustomObjectsApi(setup.cluster.admin_client)
        self.driver = driver_name_for(setup.name)

    def create_class(self, short_name: str, policy: str) -> str:
        name = f"{short_name}-{self.setup.suffix}"
        self.custom.create_cluster_custom_object(
            GROUP,
            VERSION,
            "volumesnapshotclasses",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "VolumeSnapshotClass",
                "metadata": {"name": name},
                "driver": self.driver,
                "deletionPolicy": policy,
            },
        )
        return name

    def create(self, name: str, source: dict[str, str], snapshot_class: str | None = None) -> None:
        spec: dict[str, Any] = {"source": source}
        if snapshot_class is not None:
            spec["volumeSnapshotClassName"] = snapshot_class
        self.custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            self.setup.namespace,
            "volumesnapshots",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "VolumeSnapshot",
                "metadata": {"name": name},
                "spec": spec,
            },
        )

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            found = self.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.setup.namespace, "volumesnapshots", name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return cast("dict[str, Any]", found)

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            GROUP, VERSION, self.setup.namespace, "volumesnapshots", name
        )

    def content(self, name: str) -> dict[str, Any] | None:
        try:
            found = self.custom.get_cluster_custom_object(
                GROUP, VERSION, "volumesnapshotcontents", name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return cast("dict[str, Any]", found)

    def import_content(self, short_name: str, handle: str) -> str:
        """A pre-provisioned content (Retain), as an admin makes one, for the VolumeSnapshot
        `short_name` of the setup's namespace."""
        name = f"{short_name}-{self.setup.suffix}"
        self.custom.create_cluster_custom_object(
            GROUP,
            VERSION,
            "volumesnapshotcontents",
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "VolumeSnapshotContent",
                "metadata": {"name": name},
                "spec": {
                    "driver": self.driver,
                    "deletionPolicy": "Retain",
                    "source": {"snapshotHandle": handle},
                    "volumeSnapshotRef": {"name": short_name, "namespace": self.setup.namespace},
                },
            },
        )
        return name

    def patch_content(self, name: str, body: dict[str, Any], *, status: bool = False) -> None:
        patch = (
            self.custom.patch_cluster_custom_object_status
            if status
            else self.custom.patch_cluster_custom_object
        )
        patch(GROUP, VERSION, "volumesnapshotcontents", name, body)

    def bound_content(self, snapshot: str) -> str:
        def bound() -> str | None:
            found = self.get(snapshot) or {}
            return (found.get("status") or {}).get("boundVolumeSnapshotContentName")

        return eventually(bound, 30, f"VolumeSnapshot {snapshot} bound to a content")

    def admitted(self, content: str) -> tuple[dict[str, Any], SnapshotSetup]:
        def setup_written() -> tuple[dict[str, Any], SnapshotSetup] | None:
            found = self.content(content) or {}
            text = (found.get("metadata", {}).get("annotations") or {}).get(
                SNAPSHOT_SETUP_ANNOTATION
            )
            return None if text is None else (found, SnapshotSetup.from_json(text))

        return eventually(setup_written, 30, f"content {content} admitted")

    def error(self, snapshot: str) -> str:
        def written() -> str | None:
            found = self.get(snapshot) or {}
            return ((found.get("status") or {}).get("error") or {}).get("message")

        return eventually(written, 30, f"VolumeSnapshot {snapshot}'s status.error")

    def act_as_node(self, content: str, setup: SnapshotSetup, node: str) -> None:
        """What the node plugin writes once it made the snapshot: the status, then being-created
        lifted (two PATCHes, as the sidecar does)."""
        self.patch_content(
            content,
            {
                "status": {
                    "snapshotHandle": snapshot_handle(node, setup.snapshot_id),
                    "readyToUse": True,
                    "creationTime": time.time_ns(),
                    "restoreSize": setup.size_bytes,
                }
            },
            status=True,
        )
        self.patch_content(content, {"metadata": {"annotations": {BEING_CREATED_ANNOTATION: None}}})

    def wait_ready(self, snapshot: str) -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            found = self.get(snapshot) or {}
            return found if (found.get("status") or {}).get("readyToUse") is True else None

        return eventually(ready, 30, f"VolumeSnapshot {snapshot} ready")


@pytest.fixture
def snapshots(
    make_setup: Callable[..., ProvisionerSetup],
) -> tuple[ProvisionerSetup, Snapshots, str]:
    """A provisioner with a CSI class whose claim "c" (2Gi of the 5Gi budget) is bound on
    node-1."""
    setup = make_setup(ConfigFiles(config=CONFIG))
    setup.start()
    storage_class = setup.create_class("csi", parameters={"volumeType": "csi"})
    setup.create_claim("c", storage_class, size="2Gi")
    setup.create_consumer("c", "c", NODE)
    volume = setup.wait_bound("c")
    return setup, Snapshots(setup), str(volume["metadata"]["name"])


def test_a_snapshot_is_admitted_over_budget_refused_and_deleted_through_the_gate(
    snapshots: tuple[ProvisionerSetup, Snapshots, str],
) -> None:
    setup, api, volume = snapshots
    delete_class = api.create_class("delete", "Delete")
    api.create("s1", {"persistentVolumeClaimName": "c"}, delete_class)
    content = api.bound_content("s1")
    found, snapshot = api.admitted(content)
    assert found["metadata"]["labels"][NODE_LABEL] == "node-1"
    assert found["metadata"]["annotations"][BEING_CREATED_ANNOTATION] == "yes"
    assert (snapshot.source_volume, snapshot.base_path, snapshot.size_bytes) == (
        volume,
        BASE,
        2 * GIB,
    )
    assert (
        snapshot.source_path
        == setup.volume(volume)["spec"]["csi"]["volumeAttributes"][  # type: ignore[index]
            "local-path-storage.io/path"
        ]
    )
    assert not snapshot.imported
    # The scheduler's picture counts the snapshot: 5Gi less the claim's 2Gi and the snapshot's.
    storage_class = f"csi-{setup.suffix}"

    def node_1_free() -> int | None:
        free = published(setup, storage_class).get("node-1")
        return free if free == GIB else None

    eventually(node_1_free, 30, "node-1's published capacity to count the snapshot")
    api.act_as_node(content, snapshot, "node-1")
    ready = api.wait_ready("s1")
    assert ready["status"]["restoreSize"] in ("2Gi", str(2 * GIB), 2 * GIB)

    # The claim's 2Gi and the first snapshot's 2Gi leave 1Gi of the 5Gi: no room for another.
    api.create("s2", {"persistentVolumeClaimName": "c"}, delete_class)
    message = api.error("s2")
    assert message == (
        f"no room: base path {BASE} on node node-1 has 1Gi of its 5Gi budget left, the"
        " snapshot needs 2Gi"
    )
    refused = api.bound_content("s2")
    setup.wait_event(refused, "SnapshotCreationFailed")
    assert SNAPSHOT_SETUP_ANNOTATION not in (
        (api.content(refused) or {}).get("metadata", {}).get("annotations") or {}
    )

    # A content nothing was made for goes at once.
    api.delete("s2")
    wait_gone(lambda: api.content(refused), 30, f"content {refused} let go")

    # Delete: the permit, then the node's word, then the content goes (and the snapshot).
    api.delete("s1")

    def permit() -> SnapshotRemoval | None:
        annotations = (api.content(content) or {}).get("metadata", {}).get("annotations") or {}
        text = annotations.get(SNAPSHOT_REMOVAL_PERMIT_ANNOTATION)
        return None if text is None else SnapshotRemoval.from_json(text)

    removal = eventually(permit, 30, f"the gate's permit on content {content}")
    assert removal == SnapshotRemoval(
        content_name=content,
        content_uid=found["metadata"]["uid"],
        snapshot_id=snapshot.snapshot_id,
        path=snapshot.path,
    )
    time.sleep(1)
    assert api.content(content) is not None, "the content waits for its node"
    api.patch_content(content, {"metadata": {"annotations": {SNAPSHOT_REMOVED_ANNOTATION: "true"}}})
    wait_gone(lambda: api.content(content), 30, f"content {content} let go")
    wait_gone(lambda: api.get("s1"), 30, "VolumeSnapshot s1 gone")

    # Its budget came back: another snapshot of the same size is admitted.
    api.create("s3", {"persistentVolumeClaimName": "c"}, delete_class)
    api.admitted(api.bound_content("s3"))


def test_a_bad_handle_is_refused_and_retain_lets_go_at_once(
    snapshots: tuple[ProvisionerSetup, Snapshots, str],
) -> None:
    _, api, _ = snapshots
    # A pre-provisioned content whose handle is a path: never ours.
    imported = api.import_content("bad", "/etc/passwd")
    api.create("bad", {"volumeSnapshotContentName": imported})
    assert "'/etc/passwd' is not one of this provisioner's" in api.error("bad")
    annotations = (api.content(imported) or {}).get("metadata", {}).get("annotations") or {}
    assert SNAPSHOT_SETUP_ANNOTATION not in annotations

    # One of ours is handed to its node to confirm (its record, not the handle, says where).
    good = api.import_content("good", snapshot_handle("node-2", snapshot_id("old")))
    api.create("good", {"volumeSnapshotContentName": good})
    found, setup_fields = api.admitted(good)
    assert found["metadata"]["labels"][NODE_LABEL] == "node-2"
    assert setup_fields.imported
    assert (setup_fields.base_path, setup_fields.size_bytes) == (BASE, 0)
    assert setup_fields.snapshot_id == snapshot_id("old")
    assert BEING_CREATED_ANNOTATION not in found["metadata"]["annotations"]

    # Retain: the content is let go when it is deleted, with no permit: the data stays.
    retain_class = api.create_class("retain", "Retain")
    api.create("kept", {"persistentVolumeClaimName": "c"}, retain_class)
    content = api.bound_content("kept")
    _, snapshot = api.admitted(content)
    api.act_as_node(content, snapshot, "node-1")
    api.wait_ready("kept")
    api.delete("kept")
    wait_gone(lambda: api.get("kept"), 30, "VolumeSnapshot kept gone")
    assert api.content(content) is not None, "Retain: the content outlives its snapshot"
    api.custom.delete_cluster_custom_object(GROUP, VERSION, "volumesnapshotcontents", content)
    wait_gone(lambda: api.content(content), 30, f"content {content} let go")
    # Cleaning up what the test made by hand.
    for snapshot_name, content_name in (("bad", imported), ("good", good)):
        api.delete(snapshot_name)
        api.custom.delete_cluster_custom_object(
            GROUP, VERSION, "volumesnapshotcontents", content_name
        )
