"""Budget accounting and path choice under budgets (pure)."""

import json
from typing import Any

from provisioner.configuration.class_rules import read_class_rules
from provisioner.configuration.config import parse_config_json
from provisioner.objects.records import ClaimRecord, NodeRecord, StorageClassRecord, VolumeRecord
from provisioner.provisioning.annotations import BASE_PATH_ANNOTATION, STORAGE_PROVISIONER
from provisioner.provisioning.claims import Provision, Reject, Reschedule, decide_claim_action
from provisioner.provisioning.paths import (
    LIVE,
    UNLIMITED_BYTES,
    PathBook,
    PathEntry,
    PathRoom,
    best_free_bytes,
    committed_bytes,
    paths_with_room,
)
from provisioner.provisioning.volume_facts import record_volume

GI = 1024**3
NAME = "example.com/local"
HOST = "kubernetes.io/hostname"


def config(*paths: object) -> object:
    return parse_config_json(json.dumps({"nodePathMap": [{"node": "n1", "paths": list(paths)}]}))


def claim(size: str = "1Gi", uid: str = "u1", **annotations: str) -> ClaimRecord:
    return ClaimRecord(
        uid=uid,
        namespace="ns",
        name=f"c-{uid}",
        annotations={STORAGE_PROVISIONER: NAME, **annotations},
        storage_class_name="local",
        selected_node="n1",
        access_modes=("ReadWriteOnce",),
        requested_storage=size,
    )


CLASS = StorageClassRecord("local", NAME, binding_mode="WaitForFirstConsumer")
NODES = {"n1": NodeRecord("n1")}


def volume(name: str, path: str, size: str, phase: str = "Bound") -> VolumeRecord:
    return VolumeRecord(
        name=name,
        phase=phase,
        path=path,
        capacity=size,
        affinity=((HOST, ("n1",)),),
    )


def decide(c: ClaimRecord, cfg: Any, book: PathBook, sc: StorageClassRecord = CLASS) -> object:
    rules = read_class_rules(sc.name, sc, cfg)
    return decide_claim_action(c, rules, (), NODES, provisioner_name=NAME, paths=book)


def test_committed_counts_every_state_per_node_and_base() -> None:
    entries = [
        PathEntry("a", "n1", "/d/a", LIVE, 2 * GI),
        PathEntry("b", "n1", "/d/b", "released", GI),
        PathEntry("c", "n1", "/d/c", "provisioning", GI),
        PathEntry("d", "n2", "/d/d", LIVE, 5 * GI),
        PathEntry("e", "n1", "/other/e", LIVE, 7 * GI),
    ]
    assert committed_bytes(entries, "n1", ["/d", "/x"]) == {"/d": 4 * GI, "/x": 0}


def test_room_and_best_free() -> None:
    rooms = [PathRoom("/a", 2 * GI, 2 * GI), PathRoom("/b", 3 * GI, GI), PathRoom("/c", None, 9)]
    assert paths_with_room(rooms, GI) == ["/b", "/c"]
    assert paths_with_room(rooms[:2], 3 * GI) == []
    assert best_free_bytes(rooms[:2]) == 2 * GI
    assert best_free_bytes(rooms) == UNLIMITED_BYTES
    assert best_free_bytes([PathRoom("/a", GI, 3 * GI)]) == 0


def test_only_paths_with_room_are_candidates() -> None:
    cfg = config({"path": "/a", "capacity": "1Gi"}, {"path": "/b", "capacity": "10Gi"})
    book = PathBook()
    record_volume(book, volume("pvc-x", "/a/x", "1Gi"))
    decision = decide(claim(), cfg, book)
    assert isinstance(decision, Provision)
    assert decision.plan.base_path == "/b"


def test_today_rule_among_paths_with_room() -> None:
    cfg = config({"path": "/a", "capacity": "5Gi"}, {"path": "/b", "capacity": "5Gi"})
    book = PathBook()
    record_volume(book, volume("pvc-x", "/a/x", "1Gi"))
    decision = decide(claim(), cfg, book)
    assert isinstance(decision, Provision) and decision.plan.base_path == "/b"


def test_no_room_on_the_node_reschedules_with_sizes() -> None:
    cfg = config({"path": "/a", "capacity": "1Gi"}, "/b")
    book = PathBook()
    cfg_one = config({"path": "/a", "capacity": "1Gi"})
    record_volume(book, volume("pvc-x", "/a/x", "512Mi", phase="Released"))
    decision = decide(claim("1Gi"), cfg_one, book)
    assert decision == Reschedule(
        "node n1 has no base path with room for 1Gi: /a has 512Mi free of 1Gi (512Mi committed)"
    )
    # A path without a budget always has room.
    unlimited = decide(claim("1Gi"), cfg, book)
    assert isinstance(unlimited, Provision) and unlimited.plan.base_path == "/b"


def test_in_flight_reservations_count() -> None:
    cfg = config({"path": "/a", "capacity": "1Gi"})
    book = PathBook()
    book.reserve("pvc-other", "n1", "/a/other", size_bytes=GI)
    assert isinstance(decide(claim(), cfg, book), Reschedule)
    book.cancel_reservation("pvc-other")
    assert isinstance(decide(claim(), cfg, book), Provision)


def test_a_deleted_pv_frees_its_budget() -> None:
    cfg = config({"path": "/a", "capacity": "1Gi"})
    book = PathBook()
    record_volume(book, volume("pvc-x", "/a/x", "1Gi"))
    assert isinstance(decide(claim(), cfg, book), Reschedule)
    book.forget("pvc-x")
    assert isinstance(decide(claim(), cfg, book), Provision)


def test_a_recorded_path_without_room_is_replaced() -> None:
    cfg = config({"path": "/a", "capacity": "1Gi"}, {"path": "/b", "capacity": "1Gi"})
    book = PathBook()
    record_volume(book, volume("pvc-x", "/a/x", "1Gi"))
    decision = decide(claim(**{BASE_PATH_ANNOTATION: "/a"}), cfg, book)
    assert isinstance(decision, Provision)
    assert (decision.plan.base_path, decision.plan.record_base_path) == ("/b", True)


def test_size_range_refuses_outside_and_names_the_range() -> None:
    cfg = config("/a")
    ranged = StorageClassRecord(
        "local",
        NAME,
        binding_mode="WaitForFirstConsumer",
        parameters={"minSize": "1Gi", "maxSize": "5Gi"},
    )
    for size in ("512Mi", "6Gi"):
        assert decide(claim(size), cfg, PathBook(), ranged) == Reject(
            f"requested {size} is outside the size range of StorageClass local"
            " (minSize .. maxSize: 1Gi .. 5Gi): request a size in that range"
        )
    assert isinstance(decide(claim("5Gi"), cfg, PathBook(), ranged), Provision)
    bad = StorageClassRecord("local", NAME, parameters={"maxSize": "five"})
    refused = decide(claim(), cfg, PathBook(), bad)
    assert isinstance(refused, Reject)
    assert refused.reason.startswith("StorageClass local: parameters.maxSize: 'five' is not")
