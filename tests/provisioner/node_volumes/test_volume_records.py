from __future__ import annotations

import pytest

from provisioner.node_volumes.volume_records import (
    RecordConflictError,
    SetupDecision,
    TeardownDecision,
    VolumeRecord,
    setup_decision,
    teardown_decision,
)

SET_UP = VolumeRecord("set-up", "/data/a")
REMOVED = VolumeRecord("removed", "/data/a")


def test_a_record_reads_back_and_anything_else_is_none() -> None:
    assert VolumeRecord.from_json(SET_UP.to_json()) == SET_UP
    for text in ("", "[]", '{"state": "made", "path": "/x"}', '{"state": "set-up"}'):
        assert VolumeRecord.from_json(text) is None


def test_a_record_keeps_the_size_applied_and_an_earlier_version_s_reads_without_one() -> None:
    sized = VolumeRecord("set-up", "/data/a", 3 << 20)
    assert VolumeRecord.from_json(sized.to_json()) == sized
    assert VolumeRecord.from_json('{"path": "/data/a", "state": "set-up"}') == SET_UP
    assert SET_UP.to_json() == '{"path": "/data/a", "state": "set-up"}'
    for size in ('"3"', "true", "1.5"):
        text = f'{{"path": "/data/a", "state": "set-up", "size_bytes": {size}}}'
        assert VolumeRecord.from_json(text) is None


def test_a_setup_runs_once() -> None:
    assert setup_decision(None, "/data/a", directory_present=False) is SetupDecision.RUN
    assert setup_decision(SET_UP, "/data/a", directory_present=True) is SetupDecision.DONE


@pytest.mark.parametrize(
    ("record", "path", "present", "says"),
    [
        (SET_UP, "/data/a", False, "is gone"),
        (SET_UP, "/data/b", True, "now names /data/b"),
        (REMOVED, "/data/a", False, "removed the volume's directory"),
    ],
)
def test_a_setup_the_record_forbids_is_an_error_never_a_re_creation(
    record: VolumeRecord, path: str, present: bool, says: str
) -> None:
    with pytest.raises(RecordConflictError, match=says):
        setup_decision(record, path, directory_present=present)


def test_a_second_sighting_of_a_permit_after_removal_only_marks() -> None:
    assert teardown_decision(None, "/data/a") is TeardownDecision.RUN
    assert teardown_decision(SET_UP, "/data/a") is TeardownDecision.RUN
    assert teardown_decision(REMOVED, "/data/a") is TeardownDecision.MARK_ONLY
    with pytest.raises(RecordConflictError):
        teardown_decision(REMOVED, "/data/b")
