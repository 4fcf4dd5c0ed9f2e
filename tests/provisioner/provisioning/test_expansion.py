"""Volume expansion decisions (pure): granted within the class's rules and the path's budget,
refused with a reason otherwise, and never mistaken for a claim the PV controller is binding."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from provisioner.configuration.class_rules import read_class_rules
from provisioner.configuration.config import DEFAULT_NODE, parse_config_json
from provisioner.objects.node_handoff import NODE_SIZE_ANNOTATION
from provisioner.objects.records import (
    ClaimRecord,
    ClaimReference,
    NodeRecord,
    StorageClassRecord,
    VolumeRecord,
)
from provisioner.provisioning.annotations import (
    NODE_ANNOTATION,
    PROVISIONED_BY,
    STORAGE_PROVISIONER,
)
from provisioner.provisioning.claims import Provision, Reschedule, decide_claim_action
from provisioner.provisioning.expansion import (
    Expand,
    FinishExpansion,
    NoExpansion,
    RefuseExpansion,
    decide_expansion,
)
from provisioner.provisioning.paths import LIVE, PathBook, PathEntry
from provisioner.provisioning.volume_facts import record_volume

ME = "local-path-storage.io/local-path"
GI = 1024**3
CONFIG = parse_config_json(
    json.dumps(
        {"nodePathMap": [{"node": DEFAULT_NODE, "paths": [{"path": "/data", "capacity": "3Gi"}]}]}
    )
)
EXPANDABLE = StorageClassRecord("local", ME, allow_volume_expansion=True)
CLAIM = ClaimRecord(
    uid="uid-1",
    namespace="ns",
    name="data",
    storage_class_name="local",
    requested_storage="1Gi",
    volume_name="pvc-1",
    status_capacity="1Gi",
    allocated_storage="1Gi",
)
VOLUME = VolumeRecord(
    "pvc-1",
    annotations={PROVISIONED_BY: ME, NODE_ANNOTATION: "n1"},
    phase="Bound",
    storage_class_name="local",
    path="/data/pvc-1",
    volume_type="hostPath",
    affinity=(("kubernetes.io/hostname", ("n1",)),),
    claim_ref=ClaimReference("ns", "data", "uid-1"),
    capacity="1Gi",
)


def decide(claim: ClaimRecord, volume: VolumeRecord = VOLUME, **kwargs: Any) -> object:
    book = kwargs.pop("paths", None)
    return decide_expansion(
        claim,
        volume,
        read_class_rules(
            claim.storage_class_name or "", kwargs.pop("storage_class", EXPANDABLE), CONFIG
        ),
        provisioner_name=ME,
        paths=book,
    )


def test_a_larger_request_with_room_is_granted() -> None:
    decision = decide(msgspec.structs.replace(CLAIM, requested_storage="2Gi"))
    assert decision == Expand("pvc-1", "2Gi", 2 * GI, "n1", "/data/pvc-1", base_path="/data")


def test_a_claim_being_bound_is_not_an_interrupted_expansion() -> None:
    # The PV controller sets spec.volumeName first and the status capacity with Bound after.
    binding = msgspec.structs.replace(CLAIM, status_capacity=None)
    assert isinstance(decide(binding), NoExpansion)


def test_a_pv_grown_before_a_crash_gets_the_claim_status_caught_up() -> None:
    grown = msgspec.structs.replace(VOLUME, capacity="2Gi")
    claim = msgspec.structs.replace(CLAIM, requested_storage="2Gi", status_capacity="1Gi")
    assert decide(claim, grown) == FinishExpansion("2Gi")


def test_a_grown_csi_volume_s_claim_is_finished_only_once_its_node_holds_the_size() -> None:
    csi = msgspec.structs.replace(VOLUME, volume_type="csi", csi_driver="d", capacity="2Gi")
    claim = msgspec.structs.replace(CLAIM, requested_storage="2Gi", status_capacity="1Gi")
    waiting = decide(claim, csi)
    assert isinstance(waiting, NoExpansion) and "not applied that size yet" in waiting.reason
    behind = msgspec.structs.replace(
        csi, annotations={**csi.annotations, NODE_SIZE_ANNOTATION: str(GI)}
    )
    assert isinstance(decide(claim, behind), NoExpansion)
    held = msgspec.structs.replace(
        csi, annotations={**csi.annotations, NODE_SIZE_ANNOTATION: str(2 * GI)}
    )
    assert decide(claim, held) == FinishExpansion("2Gi")
    # Its allocatedResources alone lagging (no resize) need no word from the node.
    bound = msgspec.structs.replace(CLAIM, allocated_storage=None)
    same = msgspec.structs.replace(csi, capacity="1Gi")
    assert decide(bound, same) == FinishExpansion("1Gi", resized=False)


def test_the_same_size_is_nothing_to_do() -> None:
    assert isinstance(decide(CLAIM), NoExpansion)


def test_a_claim_grown_or_bound_before_allocated_resources_were_set_gets_them() -> None:
    # An earlier version grew the PV and status.capacity, never status.allocatedResources.
    earlier = msgspec.structs.replace(CLAIM, allocated_storage=None)
    assert decide(earlier) == FinishExpansion("1Gi", resized=False)
    smaller = msgspec.structs.replace(CLAIM, allocated_storage="512Mi")
    assert decide(smaller) == FinishExpansion("1Gi", resized=False)


def test_a_claim_being_deleted_is_neither_grown_nor_caught_up() -> None:
    going = msgspec.structs.replace(CLAIM, allocated_storage=None, being_deleted=True)
    assert isinstance(decide(going), NoExpansion)
    asks = msgspec.structs.replace(CLAIM, requested_storage="2Gi", being_deleted=True)
    assert isinstance(decide(asks), NoExpansion)


def test_a_resize_status_left_set_after_the_volume_grew_is_cleared() -> None:
    # A crash between the PV's growth and the claim's status: the status entry still says so.
    left = msgspec.structs.replace(CLAIM, resize_status="ControllerResizeInProgress")
    assert decide(left) == FinishExpansion("1Gi", resized=False)


def test_the_same_size_written_otherwise_is_nothing_to_do() -> None:
    assert isinstance(
        decide(msgspec.structs.replace(CLAIM, allocated_storage="1024Mi")), NoExpansion
    )


def test_a_class_without_allow_volume_expansion_refuses() -> None:
    fixed = msgspec.structs.replace(EXPANDABLE, allow_volume_expansion=False)
    decision = decide(msgspec.structs.replace(CLAIM, requested_storage="2Gi"), storage_class=fixed)
    assert isinstance(decision, RefuseExpansion)
    assert "does not allowVolumeExpansion" in decision.reason
    assert not decision.waits_for_room


def test_above_max_size_refuses() -> None:
    capped = msgspec.structs.replace(EXPANDABLE, parameters={"maxSize": "1500Mi"})
    decision = decide(msgspec.structs.replace(CLAIM, requested_storage="2Gi"), storage_class=capped)
    assert isinstance(decision, RefuseExpansion)
    assert "maxSize" in decision.reason


def test_a_size_above_int64_refuses_naming_the_claim_and_the_limit() -> None:
    decision = decide(msgspec.structs.replace(CLAIM, requested_storage="999999999999e999987"))
    assert isinstance(decision, RefuseExpansion)
    assert decision.reason.startswith("claim ns/data requests '999999999999e999987' is above")
    assert "9223372036854775807 bytes" in decision.reason


def test_a_path_without_room_refuses_and_names_the_budget() -> None:
    # 1Gi of this volume and 1.5Gi of another on the 3Gi path: 0.5Gi free, 1Gi more asked.
    book = PathBook(
        [
            PathEntry("pvc-1", "n1", "/data/pvc-1", LIVE, size_bytes=GI),
            PathEntry("pvc-2", "n1", "/data/pvc-2", LIVE, size_bytes=GI * 3 // 2),
        ]
    )
    decision = decide(msgspec.structs.replace(CLAIM, requested_storage="2Gi"), paths=book)
    assert isinstance(decision, RefuseExpansion), decision
    assert "pvc-1" in decision.reason
    assert decision.waits_for_room


def test_someone_elses_volume_is_never_expanded() -> None:
    theirs = msgspec.structs.replace(VOLUME, annotations={PROVISIONED_BY: "rancher.io/local-path"})
    assert isinstance(
        decide(msgspec.structs.replace(CLAIM, requested_storage="2Gi"), theirs), NoExpansion
    )
    other_claim = msgspec.structs.replace(VOLUME, claim_ref=ClaimReference("ns", "data", "uid-2"))
    assert isinstance(
        decide(msgspec.structs.replace(CLAIM, requested_storage="2Gi"), other_claim), NoExpansion
    )


# -- a resize in flight and the budget: never over-committed, whatever comes between ----------

WAITING_CLASS = StorageClassRecord(
    "local", ME, binding_mode="WaitForFirstConsumer", allow_volume_expansion=True
)
NODES = {"n1": NodeRecord("n1", labels={"kubernetes.io/hostname": "n1"})}


def provision_2gi(book: PathBook) -> object:
    """Another claim of 2Gi on the volume's node: 3Gi path, 1Gi live, growing to 2Gi."""
    other = ClaimRecord(
        uid="uid-2",
        namespace="ns",
        name="other",
        annotations={STORAGE_PROVISIONER: ME},
        storage_class_name="local",
        selected_node="n1",
        access_modes=("ReadWriteOnce",),
        requested_storage="2Gi",
    )
    return decide_claim_action(
        other,
        read_class_rules(WAITING_CLASS.name, WAITING_CLASS, CONFIG),
        (),
        NODES,
        provisioner_name=ME,
        paths=book,
    )


def counted(book: PathBook) -> int:
    entry = book.get("pvc-1")
    assert entry is not None
    return entry.counted_bytes


def test_pv_events_during_a_resize_keep_the_new_size_counted() -> None:
    book = PathBook()
    record_volume(book, VOLUME)
    grow = msgspec.structs.replace(CLAIM, requested_storage="2Gi")
    expand = decide(grow, storage_class=WAITING_CLASS, paths=book)
    assert isinstance(expand, Expand)
    assert isinstance(provision_2gi(book), Provision)  # 2Gi of the 3Gi are free until now
    book.start_resize("pvc-1", expand.size_bytes)
    assert isinstance(provision_2gi(book), Reschedule)
    # the 900s resync, a label change: the PV still says 1Gi while the helper and PATCH run
    record_volume(book, VOLUME)
    assert isinstance(provision_2gi(book), Reschedule)
    # the PATCH landed: the PV says 2Gi, the count stays 2Gi
    book.finish_resize("pvc-1", expand.size_bytes)
    record_volume(book, msgspec.structs.replace(VOLUME, capacity="2Gi"))
    assert counted(book) == 2 * GI
    assert book.get("pvc-1") == PathEntry("pvc-1", "n1", "/data/pvc-1", LIVE, 2 * GI)
    assert isinstance(provision_2gi(book), Reschedule)


def test_a_failed_resize_stays_counted_until_a_retry_carries_it_out() -> None:
    # The quota was raised on the node but the PV PATCH failed: the tenant may write 2Gi, so
    # 2Gi stays counted (not rolled back) until the expansion is carried out after all.
    book = PathBook()
    record_volume(book, VOLUME)
    grow = msgspec.structs.replace(CLAIM, requested_storage="2Gi")
    book.start_resize("pvc-1", 2 * GI)
    record_volume(book, VOLUME)
    assert isinstance(provision_2gi(book), Reschedule)
    # the retry is not refused for room its own failed attempt holds
    again = decide(grow, storage_class=WAITING_CLASS, paths=book)
    assert isinstance(again, Expand), again
    book.start_resize("pvc-1", again.size_bytes)
    book.finish_resize("pvc-1", again.size_bytes)
    assert counted(book) == 2 * GI


def test_a_completed_resize_replaces_a_larger_failed_one() -> None:
    # 3Gi was asked and failed; the claim then asked for 2Gi (recovery from a failed expansion)
    # and that was carried out: the quota is 2Gi now, so 2Gi is what counts.
    book = PathBook()
    record_volume(book, VOLUME)
    book.start_resize("pvc-1", 3 * GI)
    book.start_resize("pvc-1", 2 * GI)
    assert counted(book) == 3 * GI
    book.finish_resize("pvc-1", 2 * GI)
    record_volume(book, msgspec.structs.replace(VOLUME, capacity="2Gi"))
    assert counted(book) == 2 * GI
