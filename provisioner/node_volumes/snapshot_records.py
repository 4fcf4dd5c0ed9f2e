"""The node's own record of a snapshot it took, and what it decides from it: pure
(snapshot_store.py keeps the records on the node's disk, under the snapshot's lock).

Why a record, as for volumes (volume_records.py): the content says what is wanted, only the
node knows what it did. A snapshot found on disk with no `ready` record is a partial one (a
copy cut short, a plugin killed): it is emptied and taken again, never reported ready (the
flaw of a layout that trusts a directory's presence). And a handle names a snapshot only where
this node's record says it made it there: an admin's pre-provisioned content cannot point the
node at any other directory.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Literal

from provisioner.node_volumes.volume_checks import path_refusal
from provisioner.objects.snapshot_handoff import SNAPSHOT_AREA, SnapshotSetup, snapshot_path

SnapshotState = Literal["creating", "ready", "failed", "removed"]
SnapshotKind = Literal["btrfs", "reflink", "copy"]
_STATES = ("creating", "ready", "failed", "removed")
_KINDS = ("btrfs", "reflink", "copy")


@dataclass(frozen=True)
class SnapshotRecord:
    id: str
    state: SnapshotState
    kind: SnapshotKind
    base_path: str
    path: str
    source_volume: str
    size_bytes: int
    created_ns: int
    content_uid: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> SnapshotRecord | None:
        """The record, or None for a file that is not one (records are replaced by rename, so
        never torn; anything else counts as no record and is logged by the caller)."""
        try:
            fields = json.loads(text)
        except ValueError:
            return None
        if not isinstance(fields, dict):
            return None
        texts = ("id", "base_path", "path", "source_volume", "content_uid")
        counts = ("size_bytes", "created_ns")
        if not all(isinstance(fields.get(key), str) for key in texts):
            return None
        if not all(
            isinstance(fields.get(key), int) and not isinstance(fields.get(key), bool)
            for key in counts
        ):
            return None
        state, kind = fields.get("state"), fields.get("kind")
        if state not in _STATES or kind not in _KINDS:
            return None
        return SnapshotRecord(
            id=fields["id"],
            state=state,
            kind=kind,
            base_path=fields["base_path"],
            path=fields["path"],
            source_volume=fields["source_volume"],
            size_bytes=fields["size_bytes"],
            created_ns=fields["created_ns"],
            content_uid=fields["content_uid"],
        )


class TakeDecision(Enum):
    TAKE = "take it (emptying what an earlier attempt left)"
    DONE = "taken already"


class SnapshotConflictError(Exception):
    """What the record says forbids the action; the message says why."""


def take_decision(record: SnapshotRecord | None, setup: SnapshotSetup) -> TakeDecision:
    """From the snapshot's record (read under its lock): whether to take it now."""
    if record is None or record.state in ("creating", "failed"):
        if record is not None and record.path != setup.path:
            raise SnapshotConflictError(
                f"this node began snapshot {setup.snapshot_id} at {record.path}, not {setup.path}"
            )
        return TakeDecision.TAKE
    if record.path != setup.path:
        raise SnapshotConflictError(
            f"this node took snapshot {setup.snapshot_id} at {record.path}, not {setup.path}"
        )
    if record.state == "removed":
        raise SnapshotConflictError(
            f"this node removed snapshot {setup.snapshot_id} already; it is not taken again"
        )
    return TakeDecision.DONE


def import_refusal(
    record: SnapshotRecord | None, setup: SnapshotSetup, node_base_paths: Iterable[str]
) -> str | None:
    """For a pre-provisioned content: None when this node holds the snapshot its handle names
    (its own record, ready, at the setup's place, inside one of its base paths); else why not."""
    named = f"handle of snapshot {setup.snapshot_id} names no snapshot this provisioner made"
    if record is None:
        return f"{named} on this node"
    if record.state != "ready":
        return f"{named} that is ready on this node (its record says {record.state})"
    if record.path != setup.path or record.base_path != setup.base_path:
        return f"{named} at {setup.path} on this node (it holds it at {record.path})"
    if record.path != snapshot_path(record.base_path, record.id):
        return f"{named}: its record is not its id's place"
    refusal = path_refusal(record.path, setup.path, setup.base_path, node_base_paths)
    if refusal is not None:
        return f"{named} inside this node's base paths: {refusal}"
    return None


def setup_refusal(setup: SnapshotSetup, node_base_paths: Iterable[str]) -> str | None:
    """Before any lock: None when both the source's directory and the snapshot's place lie
    inside this node's base paths (the base path the setup names), the snapshot's place being
    its id's in the source's base path; else why not."""
    listed = list(node_base_paths)
    if setup.path != snapshot_path(setup.base_path, setup.snapshot_id):
        return f"{setup.path} is not snapshot {setup.snapshot_id}'s place in {setup.base_path}"
    refusal = path_refusal(setup.path, setup.path, setup.base_path, listed)
    if refusal is not None:
        return f"the snapshot's place: {refusal}"
    if setup.imported:
        return None
    refusal = path_refusal(setup.source_path, setup.source_path, setup.base_path, listed)
    if refusal is not None:
        return f"the source volume {setup.source_volume}: {refusal}"
    if setup.source_path == setup.path or setup.path.startswith(setup.source_path + "/"):
        return f"the snapshot's place {setup.path} lies in its source {setup.source_path}"
    area = f"{setup.base_path}/{SNAPSHOT_AREA}"
    if setup.source_path == area or setup.source_path.startswith(area + "/"):
        return f"the source {setup.source_path} lies in the snapshot area, not a volume"
    return None
