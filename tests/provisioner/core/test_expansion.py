"""Volume expansion decisions (pure): granted within the class's rules and the path's budget,
refused with a reason otherwise, and never mistaken for a claim the PV controller is binding."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from provisioner.core.claims import NODE_ANNOTATION, PROVISIONED_BY
from provisioner.core.config import DEFAULT_NODE, parse_config_json
from provisioner.core.expansion import (
    Expand,
    FinishExpansion,
    NoExpansion,
    RefuseExpansion,
    decide_expansion,
)
from provisioner.core.paths import LIVE, PathBook, PathEntry
from provisioner.core.records import ClaimRecord, ClaimReference, StorageClassRecord, VolumeRecord

ME = "local-path-storage.io/local-path"
GI = 1024**3
HOST_N1 = ("kubernetes.io/hostname", "n1")
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
)
VOLUME = VolumeRecord(
    "pvc-1",
    annotations={PROVISIONED_BY: ME, NODE_ANNOTATION: "n1"},
    phase="Bound",
    storage_class_name="local",
    path="/data/pvc-1",
    volume_type="hostPath",
    claim_ref=ClaimReference("ns", "data", "uid-1"),
    capacity="1Gi",
)


def decide(claim: ClaimRecord, volume: VolumeRecord = VOLUME, **kwargs: Any) -> object:
    book = kwargs.pop("paths", None)
    return decide_expansion(
        claim,
        volume,
        kwargs.pop("storage_class", EXPANDABLE),
        CONFIG,
        provisioner_name=ME,
        paths=book,
    )


def test_a_larger_request_with_room_is_granted() -> None:
    decision = decide(dataclasses.replace(CLAIM, requested_storage="2Gi"))
    assert decision == Expand("pvc-1", "2Gi", 2 * GI, "n1", "/data/pvc-1", base_path="/data")


def test_a_claim_being_bound_is_not_an_interrupted_expansion() -> None:
    # The PV controller sets spec.volumeName first and the status capacity with Bound after.
    binding = dataclasses.replace(CLAIM, status_capacity=None)
    assert isinstance(decide(binding), NoExpansion)


def test_a_pv_grown_before_a_crash_gets_the_claim_status_caught_up() -> None:
    grown = dataclasses.replace(VOLUME, capacity="2Gi")
    claim = dataclasses.replace(CLAIM, requested_storage="2Gi", status_capacity="1Gi")
    assert decide(claim, grown) == FinishExpansion("2Gi")


def test_the_same_size_is_nothing_to_do() -> None:
    assert isinstance(decide(CLAIM), NoExpansion)


def test_a_class_without_allow_volume_expansion_refuses() -> None:
    fixed = dataclasses.replace(EXPANDABLE, allow_volume_expansion=False)
    decision = decide(dataclasses.replace(CLAIM, requested_storage="2Gi"), storage_class=fixed)
    assert isinstance(decision, RefuseExpansion)
    assert "does not allowVolumeExpansion" in decision.reason
    assert not decision.waits_for_room


def test_above_max_size_refuses() -> None:
    capped = dataclasses.replace(EXPANDABLE, parameters={"maxSize": "1500Mi"})
    decision = decide(dataclasses.replace(CLAIM, requested_storage="2Gi"), storage_class=capped)
    assert isinstance(decision, RefuseExpansion)
    assert "maxSize" in decision.reason


def test_a_size_above_int64_refuses_naming_the_claim_and_the_limit() -> None:
    decision = decide(dataclasses.replace(CLAIM, requested_storage="999999999999e999987"))
    assert isinstance(decision, RefuseExpansion)
    assert decision.reason.startswith("claim ns/data requests '999999999999e999987' is above")
    assert "9223372036854775807 bytes" in decision.reason


def test_a_path_without_room_refuses_and_names_the_budget() -> None:
    # 1Gi of this volume and 1.5Gi of another on the 3Gi path: 0.5Gi free, 1Gi more asked.
    book = PathBook(
        [
            PathEntry("pvc-1", HOST_N1, "/data/pvc-1", LIVE, size_bytes=GI, node="n1"),
            PathEntry("pvc-2", HOST_N1, "/data/pvc-2", LIVE, size_bytes=GI * 3 // 2, node="n1"),
        ]
    )
    decision = decide(dataclasses.replace(CLAIM, requested_storage="2Gi"), paths=book)
    assert isinstance(decision, RefuseExpansion), decision
    assert "pvc-1" in decision.reason
    assert decision.waits_for_room


def test_someone_elses_volume_is_never_expanded() -> None:
    theirs = dataclasses.replace(VOLUME, annotations={PROVISIONED_BY: "rancher.io/local-path"})
    assert isinstance(
        decide(dataclasses.replace(CLAIM, requested_storage="2Gi"), theirs), NoExpansion
    )
    other_claim = dataclasses.replace(VOLUME, claim_ref=ClaimReference("ns", "data", "uid-2"))
    assert isinstance(
        decide(dataclasses.replace(CLAIM, requested_storage="2Gi"), other_claim), NoExpansion
    )
