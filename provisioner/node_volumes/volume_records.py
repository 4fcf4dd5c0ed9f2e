"""The node's own record of what it did to a volume's directory, and what it decides from it:
pure (volume_state.py keeps the records on the node's disk, under the volume's lock).

Why a record: the PV says what is wanted, only the node knows what it did. A setup runs once:
a directory that vanishes after its setup is a lost volume, to report, never to re-create
empty under a pod that expects its data. A removal runs once: the mark on the PV is a PATCH
whose answer may be lost, and a second sighting of the permit then only marks again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Literal

RecordState = Literal["set-up", "removed"]


@dataclass(frozen=True)
class VolumeRecord:
    state: RecordState
    path: str
    size_bytes: int | None = None
    """The size the node applied to the volume (a btrfs qgroup limit; a plain directory has
    none to apply, its size is recorded all the same), so an expansion is applied once; None in
    a record of an earlier version: the setup's size."""

    def to_json(self) -> str:
        fields: dict[str, object] = {"state": self.state, "path": self.path}
        if self.size_bytes is not None:
            fields["size_bytes"] = self.size_bytes
        return json.dumps(fields, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> VolumeRecord | None:
        """The record, or None for a file that is not one (a torn write cannot happen: records
        are replaced by rename; anything else is treated as no record and logged by the caller)."""
        try:
            fields = json.loads(text)
        except ValueError:
            return None
        if not isinstance(fields, dict):
            return None
        state, path = fields.get("state"), fields.get("path")
        if state not in ("set-up", "removed") or not isinstance(path, str):
            return None
        size = fields.get("size_bytes")
        if size is not None and (not isinstance(size, int) or isinstance(size, bool)):
            return None
        return VolumeRecord(state, path, size)


class SetupDecision(Enum):
    RUN = "run the setup"
    DONE = "set up already"


class TeardownDecision(Enum):
    RUN = "run the teardown"
    MARK_ONLY = "removed already: only mark the PV"


class RecordConflictError(Exception):
    """What the record says forbids the action; the message says why and what to do."""


def setup_decision(
    record: VolumeRecord | None, path: str, directory_present: bool
) -> SetupDecision:
    if record is None:
        return SetupDecision.RUN
    if record.path != path:
        raise RecordConflictError(
            f"this node set the volume up at {record.path}, but its PV now names {path}"
        )
    if record.state == "removed":
        raise RecordConflictError(f"this node removed the volume's directory {path} already")
    if not directory_present:
        raise RecordConflictError(
            f"the volume's directory {path} was set up on this node and is gone: its data is"
            " lost or its disk is not mounted; it is not made again empty (restore it, or"
            " delete the claim)"
        )
    return SetupDecision.DONE


def teardown_decision(record: VolumeRecord | None, path: str) -> TeardownDecision:
    if record is not None and record.state == "removed":
        if record.path != path:
            raise RecordConflictError(
                f"this node removed the volume's directory at {record.path}, not {path}"
            )
        return TeardownDecision.MARK_ONLY
    return TeardownDecision.RUN


class SourceDecision(Enum):
    COPY = "copy it"
    WAIT = "not set up on this node yet: retry"
    REFUSE = "never to be copied"


def clone_source_decision(record: VolumeRecord | None, path: str) -> tuple[SourceDecision, str]:
    """From the record of a clone's source on this node (read under the source's lock):
    whether its directory at `path` holds the source's data, and why not. Only a directory
    this node set up for that very volume at that very path is copied: a source not set up
    yet would give an empty copy (its setup comes, so the clone's waits), a removed one
    would give nothing of its data."""
    if record is None:
        return (
            SourceDecision.WAIT,
            f"the clone's source {path} is not set up on this node yet: the copy waits for it",
        )
    if record.path != path:
        return (
            SourceDecision.REFUSE,
            f"this node set the clone's source up at {record.path}, not at {path}",
        )
    if record.state == "removed":
        return (
            SourceDecision.REFUSE,
            f"the clone's source {path} was removed from this node before its data was copied:"
            " delete this claim and clone a claim that exists",
        )
    return SourceDecision.COPY, ""
