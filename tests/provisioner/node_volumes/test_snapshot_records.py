"""The node's snapshot decisions, pure: records read back or refused, when a snapshot is taken,
which imports and setups are refused, what a content asks of the node, when a permit is stale,
and the status bodies the node PATCHes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from provisioner.node_volumes.snapshot_facts import (
    content_facts,
    error_status,
    permit_staleness,
    ready_status,
    snapshot_work,
)
from provisioner.node_volumes.snapshot_records import (
    SnapshotConflictError,
    SnapshotRecord,
    TakeDecision,
    import_refusal,
    setup_refusal,
    take_decision,
)
from provisioner.objects.snapshot_handoff import (
    BEING_CREATED_ANNOTATION,
    BEING_DELETED_ANNOTATION,
    SNAPSHOT_REMOVAL_PERMIT_ANNOTATION,
    SNAPSHOT_REMOVED_ANNOTATION,
    SNAPSHOT_SETUP_ANNOTATION,
    SnapshotSetup,
    snapshot_id,
    snapshot_path,
)

SID = snapshot_id("snapcontent-1")
BASE = "/data"
SETUP = SnapshotSetup(
    SID, "pv-a", "/data/ns/pv-a", BASE, snapshot_path(BASE, SID), 10, "Filesystem"
)
READY = SnapshotRecord(SID, "ready", "copy", BASE, SETUP.path, "pv-a", 10, 5, "uid-1")
DRIVER = "local-path.example.io"


def test_a_record_reads_back_and_anything_else_is_none() -> None:
    assert SnapshotRecord.from_json(READY.to_json()) == READY
    for text in ("", "[]", '{"id": 1}', READY.to_json().replace('"ready"', '"done"')):
        assert SnapshotRecord.from_json(text) is None
    assert (
        SnapshotRecord.from_json(READY.to_json().replace('"size_bytes": 10', '"size_bytes": true'))
        is None
    )


def test_a_snapshot_is_taken_until_ready_and_never_again_once_removed() -> None:
    assert take_decision(None, SETUP) is TakeDecision.TAKE
    assert take_decision(replace(READY, state="creating"), SETUP) is TakeDecision.TAKE
    assert take_decision(replace(READY, state="failed"), SETUP) is TakeDecision.TAKE
    assert take_decision(READY, SETUP) is TakeDecision.DONE
    with pytest.raises(SnapshotConflictError, match="removed"):
        take_decision(replace(READY, state="removed"), SETUP)
    with pytest.raises(SnapshotConflictError, match="/elsewhere"):
        take_decision(replace(READY, path="/elsewhere"), SETUP)


def test_import_only_of_this_nodes_ready_record_in_its_base_paths() -> None:
    imported = replace(SETUP, imported=True, source_volume="", source_path="")
    assert import_refusal(READY, imported, [BASE]) is None
    assert "names no snapshot" in (import_refusal(None, imported, [BASE]) or "")
    assert "creating" in (import_refusal(replace(READY, state="creating"), imported, [BASE]) or "")
    assert import_refusal(READY, imported, ["/other"]) is not None
    assert import_refusal(replace(READY, path="/data/x"), imported, [BASE]) is not None


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"source_path": "/etc/ns/pv-a"}, "not inside a base path"),
        ({"source_path": "/data/ns/../../etc"}, "absolute path without"),
        ({"source_path": "/data/.local-path-storage-snapshots/x"}, "snapshot area"),
        ({"path": "/data/other"}, "not snapshot"),
    ],
)
def test_setups_outside_the_node_are_refused(change: dict[str, str], reason: str) -> None:
    assert setup_refusal(SETUP, [BASE]) is None
    assert reason in (setup_refusal(replace(SETUP, **change), [BASE]) or "")  # type: ignore[arg-type]
    assert setup_refusal(SETUP, ["/other"]) is not None


def content(
    annotations: dict[str, str], status: dict[str, object] | None = None
) -> dict[str, object]:
    return {
        "metadata": {"name": "c", "uid": "u", "annotations": annotations},
        "spec": {"driver": DRIVER},
        "status": status or {},
    }


def test_what_a_content_asks_of_the_node() -> None:
    setup = {SNAPSHOT_SETUP_ANNOTATION: SETUP.to_json()}
    creating = {**setup, BEING_CREATED_ANNOTATION: "yes"}
    reported = {"snapshotHandle": "v1/n/x", "readyToUse": True}
    assert snapshot_work(content_facts(content(creating)), DRIVER) == "take"
    assert snapshot_work(content_facts(content(setup)), DRIVER) == "take"  # not reported yet
    assert snapshot_work(content_facts(content(setup, reported)), DRIVER) == "none"
    assert snapshot_work(content_facts(content(creating)), "other.driver") == "none"
    assert snapshot_work(content_facts(content({})), DRIVER) == "none"
    permitted = {**setup, SNAPSHOT_REMOVAL_PERMIT_ANNOTATION: "{}"}
    assert snapshot_work(content_facts(content(permitted, reported)), DRIVER) == "remove"
    done = {**permitted, SNAPSHOT_REMOVED_ANNOTATION: "true"}
    assert snapshot_work(content_facts(content(done, reported)), DRIVER) == "none"


def test_nothing_is_taken_for_a_content_on_its_way_out() -> None:
    """A snapshot that failed (being-created lifted, not ready) whose VolumeSnapshot is then
    deleted: no take makes data for it any more; a permit still removes what an earlier take
    made."""
    setup = {SNAPSHOT_SETUP_ANNOTATION: SETUP.to_json()}
    deleting = {**setup, BEING_DELETED_ANNOTATION: "yes"}
    assert snapshot_work(content_facts(content(setup)), DRIVER) == "take"
    assert snapshot_work(content_facts(content(deleting)), DRIVER) == "none"
    gone = content(setup)
    gone["metadata"] = {**gone["metadata"], "deletionTimestamp": "2026-11-29T00:00:00Z"}  # type: ignore[dict-item]
    assert snapshot_work(content_facts(gone), DRIVER) == "none"
    permitted = {**deleting, SNAPSHOT_REMOVAL_PERMIT_ANNOTATION: "{}"}
    assert snapshot_work(content_facts(content(permitted)), DRIVER) == "remove"


def test_a_permit_is_stale_once_the_content_changed() -> None:
    seen = content_facts(content({SNAPSHOT_REMOVAL_PERMIT_ANNOTATION: "p"}))
    assert permit_staleness(seen, seen) is None
    assert permit_staleness(seen, None) == "the content is gone"
    assert "replaced" in (permit_staleness(seen, replace(seen, uid="u2")) or "")
    assert "permit changed" in (permit_staleness(seen, replace(seen, permit="q")) or "")
    assert "marked removed" in (permit_staleness(seen, replace(seen, removed=True)) or "")


def test_status_bodies() -> None:
    assert ready_status("v1/n/x", 7, 10) == {
        "status": {
            "snapshotHandle": "v1/n/x",
            "readyToUse": True,
            "creationTime": 7,
            "restoreSize": 10,
            "error": None,
        }
    }
    assert "restoreSize" not in ready_status("v1/n/x", 7, 0)["status"]
    assert error_status("no room", "2026-01-01T00:00:00+00:00")["status"]["error"] == {
        "time": "2026-01-01T00:00:00+00:00",
        "message": "no room",
    }
