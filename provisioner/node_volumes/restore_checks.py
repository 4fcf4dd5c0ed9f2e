"""Whether this node plugin may restore a snapshot into a new volume: pure.

The controller names the snapshot in the new volume's setup (`NodeRestoreSource`), but the node
trusts neither that path nor a handle on its own: before any lock, the snapshot's path must be
exactly SNAPSHOT_AREA/<id> of a base path of this node (`restore_source_refusal`); under the
snapshot's lock, this node's own record of that snapshot must say it made it there and that it
is ready (`restore_record_refusal`). The record is the snapshot service's (written by rename in
<state-dir>/snapshots/<id>.json); `SnapshotRecordView` is the part of it a restore reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from provisioner.node_volumes.volume_checks import path_refusal
from provisioner.objects.node_handoff import NodeRestoreSource
from provisioner.objects.snapshot_handoff import snapshot_path
from provisioner.provisioning.paths import is_strictly_inside

READY = "ready"
CREATING = "creating"


@dataclass(frozen=True)
class SnapshotRecordView:
    """What a restore reads of the node's record of a snapshot."""

    id: str
    state: str
    """creating, ready, failed or removed."""
    kind: str
    """btrfs, reflink or copy: how the snapshot was made (a btrfs one is restored in place)."""
    base_path: str
    path: str

    @staticmethod
    def from_json(text: str) -> SnapshotRecordView | None:
        """The view of a record, or None for text that is not one."""
        try:
            fields = json.loads(text)
        except ValueError:
            return None
        if not isinstance(fields, dict):
            return None
        values = [fields.get(name) for name in ("id", "state", "kind", "base_path", "path")]
        if not all(isinstance(value, str) for value in values):
            return None
        return SnapshotRecordView(*(str(value) for value in values))


def restore_source_refusal(
    volume_path: str, source: NodeRestoreSource, node_base_paths: Iterable[str]
) -> str | None:
    """For a restore's setup, before any lock: None when the snapshot's directory may be read
    at all; else why not. It must be its id's place in the snapshot area of the base path the
    setup names, one of this node's, and neither it nor the new directory inside the other."""
    named = f"the restore's snapshot {source.snapshot_id} ({source.snapshot_path})"
    try:
        expected = snapshot_path(source.base_path, source.snapshot_id)
    except ValueError as error:
        return f"{named}: {error}"
    if source.snapshot_path != expected:
        return f"{named} is not its id's place in the snapshot area of {source.base_path}"
    refusal = path_refusal(
        source.snapshot_path, source.snapshot_path, source.base_path, node_base_paths
    )
    if refusal is not None:
        return f"{named}: {refusal}"
    if source.snapshot_path == volume_path or is_strictly_inside(volume_path, source.snapshot_path):
        return f"{named} holds the new directory {volume_path}"
    if is_strictly_inside(source.snapshot_path, volume_path):
        return f"{named} is inside the new directory {volume_path}"
    return None


def restore_record_refusal(
    record: SnapshotRecordView | None, source: NodeRestoreSource
) -> tuple[bool, str] | None:
    """Under the snapshot's lock, from this node's record of it: None when it may be copied;
    else (whether to wait for it, why not). A snapshot being made is waited for; one this
    node has no record of, or made elsewhere, or removed, or failed, is refused."""
    named = f"snapshot {source.snapshot_id} (VolumeSnapshotContent {source.content_name})"
    if record is None:
        return False, f"{named}: this node has no record of it (never made here, or forgotten)"
    if record.id != source.snapshot_id:
        return False, f"{named}: its record names snapshot {record.id}"
    if (record.base_path, record.path) != (source.base_path, source.snapshot_path):
        return False, (
            f"{named}: this node made it at {record.path} (base path {record.base_path}), not"
            f" at {source.snapshot_path} ({source.base_path})"
        )
    if record.state == CREATING:
        return True, f"{named} is still being made: the restore waits for it"
    if record.state == "removed":
        return False, f"{named} was deleted: delete this claim, or restore another snapshot"
    if record.state != READY:
        return False, f"{named} is {record.state}, not ready: it cannot be restored"
    return None
