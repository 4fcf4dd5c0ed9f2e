"""What the controller decides for a VolumeSnapshotContent of our driver: admission against the
source PV and its base path's budget, refusals in one sentence, imports by handle, and the
steps of a content's deletion (the sidecar's, with the gate in the middle)."""

from __future__ import annotations

import dataclasses
import json

import msgspec
import pytest

from provisioner.configuration.class_rules import read_class_rules
from provisioner.configuration.config import DEFAULT_NODE, parse_config_json
from provisioner.csi.driver_name import DEFAULT_DRIVER_NAME
from provisioner.objects.node_handoff import NODE_LABEL, node_label_value
from provisioner.objects.records import NodeRecord, StorageClassRecord, VolumeRecord
from provisioner.objects.snapshot_handoff import (
    BEING_CREATED_ANNOTATION,
    BEING_DELETED_ANNOTATION,
    SNAPSHOT_REMOVAL_PERMIT_ANNOTATION,
    SNAPSHOT_REMOVED_ANNOTATION,
    SNAPSHOT_SETUP_ANNOTATION,
    SnapshotSetup,
    snapshot_handle,
    snapshot_id,
)
from provisioner.provisioning.annotations import NODE_ANNOTATION, PROVISIONED_BY
from provisioner.provisioning.paths import LIVE, PROVISIONING, PathEntry, check_volume_path
from provisioner.provisioning.snapshot_decisions import (
    CONTENT_FINALIZER,
    AdmitSnapshot,
    AskRemovalPermit,
    ContentFacts,
    LetGoOfContent,
    NoSnapshotAction,
    RefuseSnapshot,
    content_facts,
    content_node,
    decide_content,
    snapshot_book_key,
    snapshot_entry,
)

ME = "local-path-storage.io/local-path"
DRIVER = DEFAULT_DRIVER_NAME
CONFIG = parse_config_json(
    json.dumps(
        {"nodePathMap": [{"node": DEFAULT_NODE, "paths": [{"path": "/opt/x", "capacity": "10Gi"}]}]}
    )
)
RULES = read_class_rules(
    "csi", StorageClassRecord("csi", ME, parameters={"volumeType": "csi"}), CONFIG
)
SOURCE = VolumeRecord(
    "pvc-1",
    annotations={PROVISIONED_BY: ME, NODE_ANNOTATION: "n1"},
    phase="Bound",
    storage_class_name="csi",
    path="/opt/x/pvc-1_ns_data",
    volume_type="csi",
    csi_driver=DRIVER,
    affinity=(("kubernetes.io/hostname", ("n1",)),),
    capacity="2Gi",
)
CONTENT = ContentFacts(
    name="snapcontent-1",
    uid="uid-c1",
    driver=DRIVER,
    deletion_policy="Delete",
    volume_handle="pvc-1",
    snapshot_handle=None,
    finalizers=(CONTENT_FINALIZER,),
)
GIB = 1024**3


def decide(
    content: ContentFacts = CONTENT,
    source: VolumeRecord | None = SOURCE,
    book: list[PathEntry] | None = None,
) -> object:
    return decide_content(
        content,
        source,
        RULES,
        book or [],
        driver=DRIVER,
        provisioner_name=ME,
        nodes=_Nodes(["n1", "n2"]),
        import_base_paths=lambda node: {"n2": ["/opt/x"]}.get(node, ["/opt/a", "/opt/b"]),
    )


def test_a_snapshot_of_our_bound_csi_volume_is_admitted_on_its_node_in_its_base_path() -> None:
    admitted = decide()
    assert isinstance(admitted, AdmitSnapshot)
    found = snapshot_id("snapcontent-1")
    assert admitted.node_key == "n1"
    assert admitted.setup == SnapshotSetup(
        snapshot_id=found,
        source_volume="pvc-1",
        source_path="/opt/x/pvc-1_ns_data",
        base_path="/opt/x",
        path=f"/opt/x/.local-path-storage-snapshots/{found}",
        size_bytes=2 * GIB,
        volume_mode="Filesystem",
    )
    # It reads back as the node will read it.
    assert SnapshotSetup.from_json(admitted.setup.to_json()) == admitted.setup
    assert admitted.entry == PathEntry(
        snapshot_book_key("snapcontent-1"), "n1", admitted.setup.path, PROVISIONING, 2 * GIB
    )


def test_no_room_names_the_base_path_its_budget_and_what_the_snapshot_needs() -> None:
    # 9Gi of the 10Gi are taken: 1Gi is left, the snapshot needs the source's 2Gi.
    taken = [PathEntry("pvc-2", "n1", "/opt/x/pvc-2", LIVE, 9 * GIB)]
    refused = decide(book=taken)
    assert refused == RefuseSnapshot(
        "no room: base path /opt/x on node n1 has 1Gi of its 10Gi budget left, the snapshot"
        " needs 2Gi",
        lasting=False,
    )


def test_the_budget_counts_other_snapshots_and_other_nodes_do_not_count() -> None:
    other_snapshot = PathEntry(snapshot_book_key("snapcontent-0"), "n1", "/opt/x/s", LIVE, 7 * GIB)
    elsewhere = PathEntry("pvc-9", "n2", "/opt/x/pvc-9", LIVE, 9 * GIB)
    assert isinstance(decide(book=[elsewhere]), AdmitSnapshot)
    assert isinstance(decide(book=[other_snapshot, elsewhere]), AdmitSnapshot)
    bigger = dataclasses.replace(other_snapshot, size_bytes=8 * GIB + 1)
    assert isinstance(decide(book=[bigger]), RefuseSnapshot)


def test_a_retry_does_not_count_its_own_reservation() -> None:
    own = PathEntry(snapshot_book_key("snapcontent-1"), "n1", "/opt/x/s", PROVISIONING, 9 * GIB)
    assert isinstance(decide(book=[own]), AdmitSnapshot)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (None, "PV pvc-1 does not exist"),
        (
            msgspec.structs.replace(SOURCE, annotations={PROVISIONED_BY: "someone/else"}),
            "PV pvc-1 is not a volume of this provisioner",
        ),
        (
            msgspec.structs.replace(SOURCE, volume_type="hostPath", csi_driver=None),
            "PV pvc-1 is not a CSI volume",
        ),
        (msgspec.structs.replace(SOURCE, being_deleted=True), "PV pvc-1 is being deleted"),
        (msgspec.structs.replace(SOURCE, phase="Released"), "PV pvc-1 is Released, not Bound"),
        (
            msgspec.structs.replace(SOURCE, path="/elsewhere/pvc-1"),
            "directory /elsewhere/pvc-1 is in no base path its class has on node n1",
        ),
    ],
    ids=["missing", "foreign", "not-csi", "deleting", "released", "outside-base-paths"],
)
def test_a_source_that_is_not_ours_to_snapshot_is_refused_in_one_sentence(
    source: VolumeRecord | None, message: str
) -> None:
    refused = decide(source=source)
    assert isinstance(refused, RefuseSnapshot)
    assert message in refused.message


def test_other_drivers_and_admitted_contents_are_left_alone() -> None:
    assert isinstance(decide(dataclasses.replace(CONTENT, driver="other.csi")), NoSnapshotAction)
    admitted = dataclasses.replace(CONTENT, annotations={SNAPSHOT_SETUP_ANNOTATION: "{}"})
    assert decide(admitted) == NoSnapshotAction("admitted")


def test_a_pre_provisioned_content_is_labelled_for_its_handle_s_node_and_imported() -> None:
    found = snapshot_id("old")
    content = dataclasses.replace(
        CONTENT, volume_handle=None, snapshot_handle=snapshot_handle("n2", found)
    )
    admitted = decide(content, source=None)
    assert isinstance(admitted, AdmitSnapshot)
    assert admitted.node_key == "n2"
    assert admitted.setup.imported
    assert admitted.setup.snapshot_id == found
    # Its place: its id's in the one base path our CSI classes have on that node.
    assert admitted.setup.base_path == "/opt/x"
    assert admitted.setup.path == f"/opt/x/.local-path-storage-snapshots/{found}"
    assert admitted.entry is None
    assert SnapshotSetup.from_json(admitted.setup.to_json()) == admitted.setup


def test_a_handle_s_node_with_several_base_paths_or_none_is_refused_naming_them() -> None:
    handle = snapshot_handle("n1", snapshot_id("old"))
    content = dataclasses.replace(CONTENT, volume_handle=None, snapshot_handle=handle)
    refused = decide(content, source=None)
    assert refused == RefuseSnapshot(
        f"snapshot handle {handle!r} names node n1, which has the base paths /opt/a, /opt/b:"
        " the handle does not say which holds it"
    )
    none = decide_content(
        content, None, None, [], driver=DRIVER, provisioner_name=ME, nodes=_Nodes(["n1"])
    )
    assert isinstance(none, RefuseSnapshot)
    assert "has no base path of a CSI class of this provisioner" in none.message


def test_a_handle_naming_no_node_of_the_cluster_is_refused_until_one_carries_it() -> None:
    handle = snapshot_handle("gone", snapshot_id("old"))
    content = dataclasses.replace(CONTENT, volume_handle=None, snapshot_handle=handle)
    refused = decide(content, source=None)
    assert refused == RefuseSnapshot(
        f"snapshot handle {handle!r} names node gone, which is not a node of this cluster",
        lasting=False,
    )


@pytest.mark.parametrize(
    "handle",
    ["/etc/passwd", "v1/n1/../../etc", "v1/n1/" + "A" * 32, "v2/n1/" + "a" * 32, "x" * 500],
)
def test_a_handle_that_is_not_ours_is_refused(handle: str) -> None:
    content = dataclasses.replace(CONTENT, volume_handle=None, snapshot_handle=handle)
    refused = decide(content, source=None)
    assert isinstance(refused, RefuseSnapshot)
    assert "is not one of this provisioner's" in refused.message
    assert len(refused.message) < 300


SETUP = SnapshotSetup(
    snapshot_id=snapshot_id("snapcontent-1"),
    source_volume="pvc-1",
    source_path="/opt/x/pvc-1_ns_data",
    base_path="/opt/x",
    path=f"/opt/x/.local-path-storage-snapshots/{snapshot_id('snapcontent-1')}",
    size_bytes=2 * GIB,
    volume_mode="Filesystem",
)
DELETING = dataclasses.replace(
    CONTENT,
    being_deleted=True,
    annotations={BEING_DELETED_ANNOTATION: "yes", SNAPSHOT_SETUP_ANNOTATION: SETUP.to_json()},
)


def with_annotations(content: ContentFacts, **extra: str) -> ContentFacts:
    return dataclasses.replace(content, annotations={**content.annotations, **extra})


def test_a_deleted_delete_snapshot_asks_the_gate_then_waits_for_the_node_then_lets_go() -> None:
    assert decide(DELETING) == AskRemovalPermit(SETUP, SETUP.snapshot_id)
    permitted = with_annotations(DELETING, **{SNAPSHOT_REMOVAL_PERMIT_ANNOTATION: "{}"})
    assert isinstance(decide(permitted), NoSnapshotAction)
    removed = with_annotations(permitted, **{SNAPSHOT_REMOVED_ANNOTATION: "true"})
    assert isinstance(decide(removed), LetGoOfContent)
    gone = dataclasses.replace(removed, finalizers=())
    assert isinstance(decide(gone), NoSnapshotAction)


def test_retain_lets_go_at_once_and_keeps_the_data() -> None:
    kept = decide(dataclasses.replace(DELETING, deletion_policy="Retain"))
    assert isinstance(kept, LetGoOfContent)
    assert "kept" in kept.why


def test_nothing_is_removed_while_the_node_makes_it_or_its_snapshot_is_not_deleted() -> None:
    making = with_annotations(DELETING, **{BEING_CREATED_ANNOTATION: "yes"})
    assert isinstance(decide(making), NoSnapshotAction)
    annotations = {SNAPSHOT_SETUP_ANNOTATION: SETUP.to_json()}
    not_asked = dataclasses.replace(DELETING, annotations=annotations)
    assert isinstance(decide(not_asked), NoSnapshotAction)


def test_a_refused_content_has_no_data_and_is_let_go() -> None:
    refused = dataclasses.replace(DELETING, annotations={BEING_DELETED_ANNOTATION: "yes"})
    assert isinstance(decide(refused), LetGoOfContent)


def test_a_pre_provisioned_content_is_deleted_without_a_snapshot_being_deleted() -> None:
    found = snapshot_id("old")
    imported = SnapshotSetup(
        found, "", "", "", f".local-path-storage-snapshots/{found}", 0, "Filesystem", imported=True
    )
    content = dataclasses.replace(
        CONTENT,
        volume_handle=None,
        snapshot_handle=snapshot_handle("n2", found),
        being_deleted=True,
        annotations={SNAPSHOT_SETUP_ANNOTATION: imported.to_json()},
    )
    assert decide(content) == AskRemovalPermit(imported, found)


def test_content_facts_read_the_json_of_a_content() -> None:
    obj = {
        "metadata": {
            "name": "snapcontent-1",
            "uid": "uid-c1",
            "resourceVersion": "42",
            "labels": {NODE_LABEL: "n1"},
            "annotations": {SNAPSHOT_SETUP_ANNOTATION: SETUP.to_json()},
            "finalizers": [CONTENT_FINALIZER],
            "deletionTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "driver": DRIVER,
            "deletionPolicy": "Delete",
            "source": {"volumeHandle": "pvc-1"},
            "sourceVolumeMode": "Block",
        },
        "status": {"readyToUse": False, "error": {"message": "no room"}},
    }
    facts = content_facts(obj)
    assert facts.being_deleted
    assert facts.source_volume_mode == "Block"
    assert facts.error_message == "no room"
    assert facts.resource_version == "42"
    assert facts.setup() == SETUP
    assert content_node(facts, _Nodes(["n1"])) == "n1"
    assert snapshot_entry(facts, "n1") == PathEntry(
        snapshot_book_key("snapcontent-1"), "n1", SETUP.path, LIVE, 2 * GIB
    )


class _Nodes:
    def __init__(self, names: list[str]) -> None:
        self._names = names

    def items(self) -> list[tuple[str, NodeRecord]]:
        return [(name, NodeRecord(name)) for name in self._names]


def test_a_hashed_node_key_finds_its_node() -> None:
    long_name = "n" * 100
    content = dataclasses.replace(CONTENT, labels={NODE_LABEL: node_label_value(long_name)})
    assert content_node(content, _Nodes(["n1", long_name])) == long_name
    assert content_node(CONTENT, _Nodes(["n1"])) is None


def test_no_volume_path_may_begin_with_the_snapshot_area() -> None:
    with pytest.raises(ValueError, match="the provisioner's own directory"):
        check_volume_path("/opt/x", ".local-path-storage-snapshots/abc", None)
