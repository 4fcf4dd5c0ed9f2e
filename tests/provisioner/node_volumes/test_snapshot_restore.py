"""A restore made by the node's executor for real: a hand-written snapshot record and snapshot
directory in a temporary base path, GNU cp and the fixed scripts, the locks and records in a
state directory, as the node plugin runs them. Nothing is mocked."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import pytest

from provisioner.node_volumes.clone_copy import is_copied
from provisioner.node_volumes.restore_checks import (
    SnapshotRecordView,
    restore_record_refusal,
    restore_source_refusal,
)
from provisioner.node_volumes.snapshot_restore import (
    SNAPSHOT_RECORDS,
    read_snapshot_record,
    snapshot_lock_name,
)
from provisioner.node_volumes.volume_executor import Outcome
from provisioner.node_volumes.volume_state import VolumeBusyError, VolumeState
from provisioner.objects.node_handoff import NodeRestoreSource, VolumeSetup
from provisioner.objects.snapshot_handoff import snapshot_id, snapshot_path
from tests.provisioner.node_volumes.test_volume_executor import Stand, counting_setup

SNAP = snapshot_id("snapcontent-1")
RESTORED = "pvc-restored"


@pytest.fixture
def stand(tmp_path: Path) -> Stand:
    root = tmp_path.resolve()
    return Stand(root, counting_setup(root))


def make_snapshot(stand: Stand, state: str = "ready", **record: str) -> Path:
    """A snapshot as the snapshot service leaves it: its directory in the base path's snapshot
    area, and its record in the state directory."""
    path = Path(snapshot_path(str(stand.base), SNAP))
    path.mkdir(parents=True)
    (path / "data").write_text("the snapshot's data")
    (path / ".hidden").write_text("dot files too")
    (path / "sub").mkdir()
    (path / "sub" / "deep").write_text("deep")
    (path / "link").symlink_to("/etc/passwd")
    fields = {
        "id": SNAP,
        "state": state,
        "kind": "copy",
        "base_path": str(stand.base),
        "path": str(path),
        "source_volume": "pvc-src",
        "size_bytes": 1 << 20,
    } | record
    records = stand.state_dir / SNAPSHOT_RECORDS
    records.mkdir(parents=True, exist_ok=True)
    (records / f"{SNAP}.json").write_text(json.dumps(fields))
    return path


def restore_setup(stand: Stand, **changes: str) -> VolumeSetup:
    source = NodeRestoreSource(
        snapshot_id=SNAP,
        snapshot_path=snapshot_path(str(stand.base), SNAP),
        base_path=str(stand.base),
        content_name="snapcontent-1",
    )
    return VolumeSetup(
        str(stand.base),
        str(stand.base / "ns" / "restored"),
        "Filesystem",
        1 << 20,
        restore_source=dataclasses.replace(source, **changes),
    )


def test_a_restore_copies_the_snapshot_in_and_marks_the_copy_whole(stand: Stand) -> None:
    make_snapshot(stand)
    setup = restore_setup(stand)
    executor = stand.executor()
    assert executor.set_up(RESTORED, setup.path, setup) == Outcome("done")
    target = Path(setup.path)
    assert (target / "data").read_text() == "the snapshot's data"
    assert (target / ".hidden").read_text() == "dot files too"
    assert (target / "sub" / "deep").read_text() == "deep"
    assert (target / "link").readlink() == Path("/etc/passwd")
    assert is_copied(setup.base_path, setup.path, RESTORED)
    assert executor.set_up(RESTORED, setup.path, setup) == Outcome("already")
    # The node loses its records; the tenant wrote meanwhile: the whole copy is kept as it is.
    (target / "data").write_text("written by the tenant since")
    for record in (stand.state_dir / "volumes").iterdir():
        record.unlink()
    assert executor.set_up(RESTORED, setup.path, setup) == Outcome("done")
    assert (target / "data").read_text() == "written by the tenant since"


def test_the_restore_holds_its_volume_then_waits_for_the_snapshot_s_lock(stand: Stand) -> None:
    make_snapshot(stand)
    setup = restore_setup(stand)
    state = VolumeState(stand.state_dir)
    outcomes: list[Outcome] = []
    with state.locked(snapshot_lock_name(SNAP), 0):
        worker = threading.Thread(
            target=lambda: outcomes.append(
                stand.executor(lock_wait=20).set_up(RESTORED, setup.path, setup)
            )
        )
        worker.start()
        deadline = time.monotonic() + 10
        while True:  # the new volume's lock is taken first, and held while it waits
            try:
                with state.locked(RESTORED, 0):
                    pass
            except VolumeBusyError:
                break
            assert time.monotonic() < deadline, "the restore never took its volume's lock"
            time.sleep(0.02)
        assert (stand.state_dir / "locks" / f"snapshot-{SNAP}.lock").exists()
        assert not Path(setup.path).exists(), "nothing is made before the snapshot is held"
    worker.join(30)
    assert outcomes == [Outcome("done")]
    # Held by its own work beyond the wait: the restore is retried, nothing is made.
    other = restore_setup(stand)
    other = dataclasses.replace(other, path=str(stand.base / "ns" / "other"))
    with state.locked(snapshot_lock_name(SNAP), 0):
        busy = stand.executor(lock_wait=0.1).set_up("pvc-other", other.path, other)
    assert busy.kind == "busy" and "snapshot" in busy.message
    assert not Path(other.path).exists()


@pytest.mark.parametrize(
    ("record", "kind", "says"),
    [
        ({"state": "creating"}, "busy", "is still being made: the restore waits for it"),
        ({"state": "removed"}, "refused", "was deleted"),
        ({"state": "failed"}, "refused", "is failed, not ready"),
        ({"path": "/elsewhere"}, "refused", "this node made it at /elsewhere"),
        ({"id": "0" * 32}, "refused", "its record names snapshot"),
    ],
)
def test_a_snapshot_whose_record_does_not_say_ready_here_is_not_restored(
    stand: Stand, record: dict[str, str], kind: str, says: str
) -> None:
    make_snapshot(stand, **record)
    setup = restore_setup(stand)
    outcome = stand.executor().set_up(RESTORED, setup.path, setup)
    assert outcome.kind == kind and says in outcome.message, outcome
    assert not Path(setup.path).exists()


def test_without_a_record_or_with_the_directory_swapped_nothing_is_restored(stand: Stand) -> None:
    path = make_snapshot(stand)
    (stand.state_dir / SNAPSHOT_RECORDS / f"{SNAP}.json").unlink()
    setup = restore_setup(stand)
    outcome = stand.executor().set_up(RESTORED, setup.path, setup)
    assert outcome.kind == "refused" and "no record of it" in outcome.message
    # The record is back, but the snapshot's directory became a link to another directory.
    make_snapshot_record_only(stand, path)
    path.rename(path.with_name("moved"))
    path.symlink_to(stand.base / "ns")
    outcome = stand.executor().set_up(RESTORED, setup.path, setup)
    assert outcome.kind == "refused" and "no directory on this node" in outcome.message
    assert not Path(setup.path).exists()


def make_snapshot_record_only(stand: Stand, path: Path) -> None:
    record = {"id": SNAP, "state": "ready", "kind": "copy", "base_path": str(stand.base)}
    (stand.state_dir / SNAPSHOT_RECORDS / f"{SNAP}.json").write_text(
        json.dumps(record | {"path": str(path)})
    )


def test_a_snapshot_path_the_controller_cannot_have_meant_runs_nothing(stand: Stand) -> None:
    make_snapshot(stand)
    victim = stand.base / "ns" / "victim"
    victim.mkdir(parents=True)
    for changes, says in (
        ({"snapshot_path": str(victim)}, "is not its id's place in the snapshot area"),
        ({"snapshot_id": "../../x"}, "not a snapshot id"),
        ({"base_path": "/opt/elsewhere"}, "is not its id's place"),
    ):
        setup = restore_setup(stand, **changes)
        outcome = stand.executor().set_up(RESTORED, setup.path, setup)
        assert outcome.kind == "refused" and says in outcome.message, (changes, outcome)
    assert stand.setup_runs() == 0
    assert not (stand.base / "ns" / "restored").exists()


def test_the_pure_checks() -> None:
    base = "/opt/lp"
    good = NodeRestoreSource(SNAP, snapshot_path(base, SNAP), base, "c")
    assert restore_source_refusal("/opt/lp/ns/v", good, [base]) is None
    assert "not inside a base path of this node" in (
        restore_source_refusal("/opt/other/v", dataclasses.replace(good), ["/opt/other"]) or ""
    )
    elsewhere = NodeRestoreSource(SNAP, snapshot_path("/srv", SNAP), "/srv", "c")
    assert "not inside a base path of this node" in (
        restore_source_refusal("/opt/lp/v", elsewhere, [base]) or ""
    )
    inside = f"{snapshot_path(base, SNAP)}/v"
    assert "holds the new directory" in (restore_source_refusal(inside, good, [base]) or "")
    ready = SnapshotRecordView(SNAP, "ready", "copy", base, snapshot_path(base, SNAP))
    assert restore_record_refusal(ready, good) is None
    moved = restore_record_refusal(dataclasses.replace(ready, base_path="/srv"), good)
    assert moved is not None and not moved[0]
    assert "this node made it at" in moved[1] and "(base path /srv)" in moved[1]
    assert SnapshotRecordView.from_json("[]") is None
    assert SnapshotRecordView.from_json("{") is None
    assert SnapshotRecordView.from_json(json.dumps({"id": SNAP, "state": 1})) is None


def test_a_record_behind_a_symbolic_link_is_no_record(tmp_path: Path) -> None:
    records = tmp_path / SNAPSHOT_RECORDS
    records.mkdir()
    real = tmp_path / "real.json"
    real.write_text(
        json.dumps({"id": SNAP, "state": "ready", "kind": "copy", "base_path": "/b", "path": "/p"})
    )
    (records / f"{SNAP}.json").symlink_to(real)
    assert read_snapshot_record(tmp_path, SNAP) is None
    (records / f"{SNAP}.json").unlink()
    real.rename(records / f"{SNAP}.json")
    assert read_snapshot_record(tmp_path, SNAP) == SnapshotRecordView(
        SNAP, "ready", "copy", "/b", "/p"
    )
