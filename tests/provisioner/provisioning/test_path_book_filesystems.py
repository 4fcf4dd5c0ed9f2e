"""The path book tells paths apart by the filesystem they are on, never by the affinity label
their PV names: a node-local path by (node name, path), a shared one by its path on every node.
Two classes on one base path, one with a custom nodeAffinityKey, or a directory that a config
reload moved between a sharedFileSystemPath and a node path, must see each other's volumes."""

import json
from typing import Any

import msgspec
import pytest

from provisioner.configuration.class_rules import read_class_rules
from provisioner.configuration.config import DEFAULT_NODE, parse_config_json
from provisioner.objects.records import ClaimRecord, NodeRecord, StorageClassRecord, VolumeRecord
from provisioner.provisioning.annotations import (
    NODE_ANNOTATION,
    PROVISIONED_BY,
    RANCHER_NODE_ANNOTATION,
    STORAGE_PROVISIONER,
    VOLUME_FINALIZER,
)
from provisioner.provisioning.claims import Provision, WaitForPath, decide_claim_action
from provisioner.provisioning.paths import EVERY_NODE, LIVE, PROVISIONING, PathBook, PathEntry
from provisioner.provisioning.volume_decisions import (
    RefuseUnsafePath,
    Teardown,
    decide_volume_action,
)
from provisioner.provisioning.volume_facts import volume_book, volume_disk_node

ME = "local-path-storage.io/local-path"
HOST = "kubernetes.io/hostname"
DISK = "example.com/disk-host"
PATTERN = {"pathPattern": "{{ .PVC.Namespace }}/{{ .PVC.Name }}"}
CONFIG = parse_config_json(
    json.dumps({"nodePathMap": [{"node": DEFAULT_NODE, "paths": ["/data"]}]})
)
NODES = {
    "n1": NodeRecord("n1", {HOST: "n1", DISK: "disk-1"}),
    "n2": NodeRecord("n2", {HOST: "n2", DISK: "disk-2", "zone": "z"}),
    "n3": NodeRecord("n3", {HOST: "n3", "zone": "z"}),
}
BY_HOSTNAME = StorageClassRecord(
    "by-hostname", ME, binding_mode="WaitForFirstConsumer", parameters=PATTERN
)
BY_DISK = StorageClassRecord(
    "by-disk",
    ME,
    binding_mode="WaitForFirstConsumer",
    parameters={**PATTERN, "nodeAffinityKey": DISK},
)


def claim(storage_class: StorageClassRecord, uid: str = "u-new") -> ClaimRecord:
    return ClaimRecord(
        uid=uid,
        namespace="ns",
        name="data",
        annotations={STORAGE_PROVISIONER: ME},
        storage_class_name=storage_class.name,
        selected_node="n1",
        access_modes=("ReadWriteOnce",),
        requested_storage="1Gi",
    )


def volume(name: str, affinity: tuple[str, str] | None, **changes: Any) -> VolumeRecord:
    """A Released volume of ours at /data/ns/data, pinned to `affinity` (None: shared)."""
    annotations = {PROVISIONED_BY: ME}
    if affinity is not None:
        annotations[NODE_ANNOTATION] = "n1"
    base = VolumeRecord(
        name=name,
        annotations=annotations,
        phase="Released",
        reclaim_policy="Delete",
        storage_class_name="by-hostname",
        path="/data/ns/data",
        volume_type="hostPath",
        affinity=() if affinity is None else ((affinity[0], (affinity[1],)),),
        finalizers=(VOLUME_FINALIZER,),
        capacity="1Gi",
    )
    return msgspec.structs.replace(base, **changes)


def decide(c: ClaimRecord, storage_class: StorageClassRecord, book: PathBook) -> Any:
    return decide_claim_action(
        c,
        read_class_rules(storage_class.name, storage_class, CONFIG),
        (),
        NODES,
        provisioner_name=ME,
        paths=book,
    )


def decide_volume(volume: VolumeRecord, book: PathBook) -> object:
    rules = read_class_rules(volume.storage_class_name, None, CONFIG)
    return decide_volume_action(volume, rules, NODES, provisioner_name=ME, paths=book)


@pytest.mark.parametrize(
    ("released", "new_class"),
    [
        ((HOST, "n1"), BY_DISK),
        ((DISK, "disk-1"), BY_HOSTNAME),
    ],
    ids=["hostname-then-custom-key", "custom-key-then-hostname"],
)
def test_a_released_volume_under_another_affinity_key_on_the_same_disk_is_waited_for(
    released: tuple[str, str], new_class: StorageClassRecord
) -> None:
    old = volume("pvc-old", released)
    book = volume_book([old], NODES)
    decision = decide(claim(new_class), new_class, book)
    assert isinstance(decision, WaitForPath), decision
    assert decision.blockers == ("pvc-old",)
    # And the other way round: with the new volume provisioned, the old teardown (redone
    # after its PV DELETE failed) refuses a path the other class's volume now holds.
    book.forget("pvc-old")
    provisioned = decide(claim(new_class), new_class, book)
    assert isinstance(provisioned, Provision)
    plan = provisioned.plan
    assert plan.disk_node == "n1"
    book.reserve(plan.volume_name, plan.disk_node, plan.path, size_bytes=plan.size_bytes)
    refused = decide_volume(old, book)
    assert isinstance(refused, RefuseUnsafePath) and plan.volume_name in refused.reason


def test_the_same_path_on_another_node_under_another_key_is_no_overlap() -> None:
    on_n2 = volume("pvc-old", (DISK, "disk-2"), annotations={PROVISIONED_BY: ME})
    book = volume_book([on_n2], NODES)
    assert book.get("pvc-old") == PathEntry("pvc-old", "n2", "/data/ns/data", "released", 2**30)
    assert isinstance(decide(claim(BY_HOSTNAME), BY_HOSTNAME, book), Provision)
    teardown = decide_volume(on_n2, book)
    assert isinstance(teardown, Teardown)


def test_a_shared_path_overlaps_the_same_path_on_every_node() -> None:
    # A config reload made the shared directory a node path (or the other way round): a
    # volume on it is the same directory seen from every node.
    shared = volume("pvc-shared", None, storage_class_name="nfs")
    book = volume_book([shared], NODES)
    assert book.get("pvc-shared") is not None
    assert book.get("pvc-shared").node == EVERY_NODE  # type: ignore[union-attr]
    for node in ("n1", "n2", EVERY_NODE):
        assert [e.volume_name for e in book.overlapping("pvc-new", node, "/data/ns/data")] == [
            "pvc-shared"
        ]
        assert [e.volume_name for e in book.overlapping("pvc-new", node, "/data/ns")] == [
            "pvc-shared"
        ]
    assert book.overlapping("pvc-new", "n1", "/data/ns/other") == []
    decision = decide(claim(BY_HOSTNAME), BY_HOSTNAME, book)
    assert isinstance(decision, WaitForPath) and decision.blockers == ("pvc-shared",)


def test_a_node_local_entry_is_seen_by_a_shared_path_and_not_by_another_node() -> None:
    book = PathBook([PathEntry("pvc-n1", "n1", "/data/ns/data", LIVE)])
    assert [e.volume_name for e in book.overlapping("pvc-x", EVERY_NODE, "/data/ns")] == ["pvc-n1"]
    assert [e.volume_name for e in book.overlapping("pvc-x", "n1", "/data/ns/data/in")] == [
        "pvc-n1"
    ]
    assert book.overlapping("pvc-x", "n2", "/data/ns/data") == []


@pytest.mark.parametrize(
    ("annotations", "affinity", "nodes", "expected"),
    [
        ({NODE_ANNOTATION: "n2"}, (DISK, "disk-2"), None, "n2"),
        ({RANCHER_NODE_ANNOTATION: "n2"}, (DISK, "disk-2"), None, "n2"),
        ({}, (HOST, "n3"), None, "n3"),
        # rancher's older PVs name no node: its one node carrying the label holds it
        ({}, (DISK, "disk-2"), NODES, "n2"),
        # ...and when no node, or several, carry it, it might be on any of them
        ({}, (DISK, "disk-9"), NODES, EVERY_NODE),
        ({}, ("zone", "z"), NODES, EVERY_NODE),
        ({}, (DISK, "disk-2"), None, EVERY_NODE),
        # no single-valued affinity: a shared path, even with a node recorded on it
        ({RANCHER_NODE_ANNOTATION: "n2"}, None, NODES, EVERY_NODE),
    ],
)
def test_the_node_whose_disk_holds_a_volume(
    annotations: dict[str, str],
    affinity: tuple[str, str] | None,
    nodes: dict[str, NodeRecord] | None,
    expected: str,
) -> None:
    v = volume("pvc-v", affinity, annotations={PROVISIONED_BY: ME, **annotations})
    assert volume_disk_node(v, nodes) == expected


def test_a_volume_whose_node_cannot_be_told_overlaps_that_path_on_every_node() -> None:
    unknown = volume("pvc-zone", ("zone", "z"), annotations={PROVISIONED_BY: ME})
    book = volume_book([unknown], NODES)
    for node in ("n1", "n2", "n3", EVERY_NODE):
        assert [e.volume_name for e in book.overlapping("pvc-new", node, "/data/ns/data")] == [
            "pvc-zone"
        ]
    # its own helper run is stopped by an entry at that path on any node
    book.start_teardown("pvc-zone")
    book.reserve("pvc-new", "n3", "/data/ns/data/sub")
    problem = book.helper_run_problem("pvc-zone", teardown=True)
    assert problem is not None and "pvc-new" in problem


def test_volumes_are_counted_per_node_to_spread_them() -> None:
    book = PathBook(
        [
            PathEntry("a", "n1", "/data/a", LIVE),
            PathEntry("b", "n1", "/data/b", PROVISIONING),
            PathEntry("c", "n2", "/data/c", LIVE),
            PathEntry("d", EVERY_NODE, "/data/d", LIVE),
            PathEntry("e", "n1", "/other/e", LIVE),
        ]
    )
    assert book.count_inside("n1", "/data") == 2
    assert book.count_inside("n2", "/data") == 1
    assert book.count_inside(EVERY_NODE, "/data") == 1
