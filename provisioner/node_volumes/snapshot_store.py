"""The node's snapshot records on its disk, in the plugin's state directory:
`snapshots/<id>.json` (snapshot_records.py), each replaced by rename after an fsync, and each
snapshot's lock, the same kind of host-wide `flock` a volume's is (volume_state.py), under the
name a restore takes it by (snapshot_restore.snapshot_lock_name): one lock, so a snapshot is
never removed while a restore copies it, nor restored while it is still being taken."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from provisioner.node_volumes.snapshot_records import SnapshotRecord
from provisioner.node_volumes.snapshot_restore import SNAPSHOT_RECORDS, snapshot_lock_name
from provisioner.node_volumes.volume_state import VolumeState, write_durably

log = logging.getLogger(__name__)


class SnapshotStore:
    def __init__(self, state: VolumeState) -> None:
        self.state = state
        self.directory = state.directory / SNAPSHOT_RECORDS
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)

    @contextlib.contextmanager
    def locked(self, snapshot: str, wait_seconds: float) -> Iterator[None]:
        """Holds the snapshot's lock; VolumeBusyError when another process holds it longer."""
        with self.state.locked(snapshot_lock_name(snapshot), wait_seconds):
            yield

    def read(self, snapshot: str) -> SnapshotRecord | None:
        path = self._path(snapshot)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        record = SnapshotRecord.from_json(text)
        if record is None:
            log.warning("%s is not a snapshot record: treated as none", path)
        return record

    def write(self, record: SnapshotRecord) -> None:
        """Replaces the snapshot's record, durably (call under its lock)."""
        write_durably(self._path(record.id), record.to_json())

    def records(self) -> list[SnapshotRecord]:
        """Every readable record (for ListSnapshots), in id order."""
        found = []
        for entry in sorted(self.directory.iterdir()):
            if entry.name.endswith(".json") and not entry.name.startswith("."):
                record = self.read(entry.name.removesuffix(".json"))
                if record is not None:
                    found.append(record)
        return found

    def _path(self, snapshot: str) -> Path:
        if len(snapshot) != 32 or not all(c in "0123456789abcdef" for c in snapshot):
            raise ValueError(f"not a snapshot id: {snapshot!r}")
        return self.directory / f"{snapshot}.json"
