"""The node's side of a restore (volume_executor.py calls it under the new volume's lock, then
the snapshot's): the snapshot's lock, this node's record of the snapshot, and the copy.

Lock order: the new volume's lock first, then the snapshot's. A snapshot is older than every
restore of it (its content was ready before the restore was placed), and the snapshot's own
work (making it, removing it) takes the snapshot's lock then its source volume's: a holder of a
restore's locks never waits on a volume younger than the snapshot it holds, so no cycle.

The snapshot's lock is a volume lock of VolumeState under the name `snapshot_lock_name(id)`
(`snapshot-<id>`): the file locks/snapshot-<id>.lock beside the volumes' locks, in the
plugin's state directory. PV names of ours are pvc-<uid>, so none collides with it.
"""

from __future__ import annotations

import os
from pathlib import Path

from provisioner.node_volumes.clone_copy import copy_into
from provisioner.node_volumes.restore_checks import SnapshotRecordView
from provisioner.node_volumes.step_runner import Shell, StepResult
from provisioner.objects.node_handoff import NodeRestoreSource

SNAPSHOT_RECORDS = "snapshots"
"""The snapshot service's records: <state-dir>/snapshots/<id>.json, written by rename."""


def snapshot_lock_name(snapshot_id: str) -> str:
    """The name the snapshot's lock is taken under (`VolumeState.locked`)."""
    return f"snapshot-{snapshot_id}"


def read_snapshot_record(state_dir: Path, snapshot_id: str) -> SnapshotRecordView | None:
    """This node's record of the snapshot (call under its lock), None when there is none or it
    does not read as one. The one place a restore reads the snapshot service's records: it
    never follows a symbolic link (the state directory is the plugin's own, but the record
    decides which directory is copied)."""
    path = state_dir / SNAPSHOT_RECORDS / f"{snapshot_id}.json"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return None  # a symbolic link (ELOOP), or unreadable: no record to trust
    with os.fdopen(fd, "rb") as held:
        return SnapshotRecordView.from_json(held.read(1 << 16).decode("utf-8", "replace"))


def restore_into(
    source: NodeRestoreSource,
    record: SnapshotRecordView,
    volume_name: str,
    target_path: str,
    base_path: str,
    *,
    timeout_seconds: float,
    shell: Shell,
) -> StepResult:
    """Fills the new volume's directory (made by its setup just before) from the snapshot,
    holding both locks, and marks it whole as a clone's copy is (clone_copy.mark_copied), so a
    node that lost its records never empties a restore in use.

    A snapshot made on btrfs is not copied here: the new volume is a writable snapshot of it
    (volume_executor makes it so, `_snapshot_of`), unless the snapshot could not be taken (the
    two on different filesystems): then, as everywhere, the confined copy step shares extents
    where the filesystem can (cp --reflink=auto) and keeps holes. `record` is the snapshot's,
    read under its lock, which the caller holds through the copy."""
    del record  # the caller read it for the snapshot's kind; the copy needs only its path
    return copy_into(
        source.snapshot_path,
        f"snapshot {source.snapshot_id} ({source.snapshot_path})",
        volume_name,
        target_path,
        base_path,
        timeout_seconds=timeout_seconds,
        shell=shell,
    )
