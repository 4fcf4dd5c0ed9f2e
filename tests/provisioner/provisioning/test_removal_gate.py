"""The removal gate's rules, every kind against every fact it rests on; and that a permit comes
from nowhere else."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from provisioner.provisioning.removal_gate import (
    OwnerCheck,
    RemovalKind,
    RemovalPermit,
    RemovalProof,
    RemovalRefused,
    SnapshotProof,
    decide_removal,
)

BASE = "/data"
NESTED = "/data/team/db"
NAMED = "/data/pvc-1_team_db"
VOLUME_KINDS = [
    kind
    for kind in RemovalKind
    if kind not in (RemovalKind.ORPHAN_REMOVAL, RemovalKind.SNAPSHOT_DELETE)
]
SNAPSHOT = "0123456789abcdef0123456789abcdef"
HOLDING_SNAPSHOT = SnapshotProof(
    content_being_deleted=True,
    deletion_policy="Delete",
    snapshot_id=SNAPSHOT,
    setup_snapshot_id=SNAPSHOT,
)


def proof(kind: RemovalKind, path: str = NESTED, **facts: object) -> RemovalProof:
    """A proof that holds for its kind; `facts` change one fact."""
    holding = RemovalProof(
        kind=kind,
        volume_name="pvc-1",
        path=path,
        base_path=BASE,
        sharing=(),
        holds_lease=True,
        reuses_existing_data=False,
        claim_volume_seen=False,
        clone_verdict_before_save=True,
        snapshot=HOLDING_SNAPSHOT,
    )
    return dataclasses.replace(holding, **facts)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", list(RemovalKind))
def test_a_proof_that_holds_gets_a_permit_for_that_volume_and_path(kind: RemovalKind) -> None:
    permit = decide_removal(proof(kind))
    assert isinstance(permit, RemovalPermit)
    assert permit.kind is kind
    assert permit.path == NESTED


@pytest.mark.parametrize("kind", list(RemovalKind))
def test_no_removal_without_the_lease(kind: RemovalKind) -> None:
    refused = decide_removal(proof(kind, holds_lease=False))
    assert isinstance(refused, RemovalRefused)
    assert "leader lease" in refused.reason


@pytest.mark.parametrize("kind", list(RemovalKind))
def test_no_removal_of_a_path_another_volume_or_claim_shares(kind: RemovalKind) -> None:
    refused = decide_removal(proof(kind, sharing=("pvc-2 (provisioning)",)))
    assert isinstance(refused, RemovalRefused)
    assert "pvc-2 (provisioning)" in refused.reason


@pytest.mark.parametrize(
    ("kind", "path", "removed"),
    [
        # What an attempt made is never data `prepare` found: a reusing class's directory
        # stays, unless its name holds the volume's (no one else's can be there).
        *((kind, NESTED, False) for kind in VOLUME_KINDS if kind is not RemovalKind.TEARDOWN),
        *((kind, NAMED, True) for kind in VOLUME_KINDS if kind is not RemovalKind.TEARDOWN),
        # A volume's teardown removes what the volume was handed: its reclaim policy says so.
        (RemovalKind.TEARDOWN, NESTED, True),
    ],
)
def test_reused_data_is_never_given_back_or_cleaned_up(
    kind: RemovalKind, path: str, removed: bool
) -> None:
    decision = decide_removal(proof(kind, path, reuses_existing_data=True))
    assert isinstance(decision, RemovalPermit) is removed, decision


@pytest.mark.parametrize("kind", [RemovalKind.GIVE_BACK, RemovalKind.CLONE_GIVE_BACK])
@pytest.mark.parametrize(
    ("seen", "reason"),
    [(True, "a PV of this claim's exists"), (None, "no fresh read showed")],
    ids=["pv-exists", "not-read"],
)
def test_a_give_back_needs_a_fresh_read_showing_no_pv_of_the_claim(
    kind: RemovalKind, seen: bool | None, reason: str
) -> None:
    refused = decide_removal(proof(kind, claim_volume_seen=seen))
    assert isinstance(refused, RemovalRefused)
    assert reason in refused.reason


@pytest.mark.parametrize("kind", [RemovalKind.TEARDOWN, RemovalKind.FAILED_SETUP_CLEAN_UP])
def test_only_give_backs_ask_for_the_claim_s_pv(kind: RemovalKind) -> None:
    assert isinstance(decide_removal(proof(kind, claim_volume_seen=None)), RemovalPermit)


@pytest.mark.parametrize("verdict", [False, None])
def test_a_clone_is_given_back_only_on_the_verdict_taken_before_its_first_save(
    verdict: bool | None,
) -> None:
    refused = decide_removal(proof(RemovalKind.CLONE_GIVE_BACK, clone_verdict_before_save=verdict))
    assert isinstance(refused, RemovalRefused)
    assert "before its first save" in refused.reason
    plain = decide_removal(proof(RemovalKind.GIVE_BACK, clone_verdict_before_save=verdict))
    assert isinstance(plain, RemovalPermit)


@pytest.mark.parametrize(
    ("kind", "path", "check"),
    [
        (RemovalKind.TEARDOWN, NESTED, OwnerCheck("pvc-1", made_only=False, absent_ok=True)),
        (RemovalKind.TEARDOWN, NAMED, OwnerCheck("pvc-1", made_only=False, absent_ok=True)),
        *(
            (kind, NESTED, OwnerCheck("pvc-1", made_only=True, absent_ok=False))
            for kind in VOLUME_KINDS
            if kind is not RemovalKind.TEARDOWN
        ),
        *(
            (kind, NAMED, OwnerCheck("pvc-1", made_only=True, absent_ok=True))
            for kind in VOLUME_KINDS
            if kind is not RemovalKind.TEARDOWN
        ),
        (RemovalKind.ORPHAN_REMOVAL, NESTED, None),
        # A snapshot is always made with its marker: none is no snapshot of ours.
        (
            RemovalKind.SNAPSHOT_DELETE,
            NESTED,
            OwnerCheck(f"snapshot:{SNAPSHOT}", made_only=False, absent_ok=False),
        ),
    ],
)
def test_the_node_side_check_the_permit_carries(
    kind: RemovalKind, path: str, check: OwnerCheck | None
) -> None:
    permit = decide_removal(proof(kind, path))
    assert isinstance(permit, RemovalPermit)
    assert permit.check == check


def test_every_combination_of_facts_is_decided_by_the_rules_alone() -> None:
    """Exhaustive: a permit exactly when no rule refuses."""
    for kind, lease, sharing, reuse, seen, verdict, path in itertools.product(
        RemovalKind,
        (True, False),
        ((), ("pvc-2",)),
        (True, False),
        (True, False, None),
        (True, False, None),
        (NESTED, NAMED),
    ):
        decision = decide_removal(
            proof(
                kind,
                path,
                holds_lease=lease,
                sharing=sharing,
                reuses_existing_data=reuse,
                claim_volume_seen=seen,
                clone_verdict_before_save=verdict,
            )
        )
        clean_up = kind in (
            RemovalKind.GIVE_BACK,
            RemovalKind.CLONE_GIVE_BACK,
            RemovalKind.FAILED_SETUP_CLEAN_UP,
        )
        give_back = kind in (RemovalKind.GIVE_BACK, RemovalKind.CLONE_GIVE_BACK)
        allowed = (
            lease
            and not sharing
            and not (clean_up and reuse and path != NAMED)
            and not (give_back and seen is not False)
            and not (kind is RemovalKind.CLONE_GIVE_BACK and verdict is not True)
        )
        assert isinstance(decision, RemovalPermit) is allowed, (kind, decision)


def test_a_permit_comes_only_from_the_gate() -> None:
    with pytest.raises(TypeError, match=r"only from removal_gate\.decide_removal"):
        RemovalPermit(RemovalKind.TEARDOWN, "pvc-1", NESTED, None)
    permit = decide_removal(proof(RemovalKind.TEARDOWN))
    assert isinstance(permit, RemovalPermit)
    with pytest.raises(TypeError):
        dataclasses.replace(permit, path="/data/other")


@pytest.mark.parametrize(
    ("facts", "reason"),
    [
        (None, "nothing was read of its VolumeSnapshotContent"),
        (
            dataclasses.replace(HOLDING_SNAPSHOT, content_being_deleted=False),
            "is not being deleted",
        ),
        (dataclasses.replace(HOLDING_SNAPSHOT, deletion_policy="Retain"), "is Retain, not Delete"),
        (dataclasses.replace(HOLDING_SNAPSHOT, deletion_policy=""), "is , not Delete"),
        (
            dataclasses.replace(HOLDING_SNAPSHOT, snapshot_id="f" * 32),
            f"names snapshot {'f' * 32}, its setup {SNAPSHOT}",
        ),
        (dataclasses.replace(HOLDING_SNAPSHOT, snapshot_id=""), "names snapshot none"),
    ],
    ids=["unread", "not-deleted", "retain", "no-policy", "other-id", "no-id"],
)
def test_a_snapshot_goes_only_for_a_deleted_delete_content_naming_its_setup_s_snapshot(
    facts: SnapshotProof | None, reason: str
) -> None:
    refused = decide_removal(proof(RemovalKind.SNAPSHOT_DELETE, snapshot=facts))
    assert isinstance(refused, RemovalRefused)
    assert reason in refused.reason
