"""The node plugin's state on the node's disk, in its state directory on the host (by default
<kubelet root>/plugins/<driver>/): a lock and a record (volume_records.py) per volume.

The lock is an exclusive `flock` on locks/<volume>.lock: the kernel's, so it holds between two
plugin processes on one node (a restarted plugin, the old and new pod of a DaemonSet rollout,
which see the same host directory), and it is released when its holder dies, however it dies.
At most one process acts on a volume's directory at a time: every action on it runs under it.

A record is replaced by rename after an fsync, so it is the old one or the new one after a
crash, never half of one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

from provisioner.node_volumes.volume_records import VolumeRecord

log = logging.getLogger(__name__)

LOCKS = "locks"
RECORDS = "volumes"
LOCK_POLL_SECONDS = 0.05
_PLAIN_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,200}[a-z0-9])?$")


class VolumeBusyError(Exception):
    """Another process held the volume's lock for longer than the caller would wait."""


def file_name(volume_name: str) -> str:
    """A volume's name as a file name: itself when it is a plain, short PV name, else a hash
    (a PV name may be 253 characters, a file name at most 255 bytes)."""
    if _PLAIN_NAME.match(volume_name) and volume_name not in (".", ".."):
        return volume_name
    return "h-" + hashlib.sha256(volume_name.encode()).hexdigest()


class VolumeState:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        for sub in (LOCKS, RECORDS):
            (directory / sub).mkdir(parents=True, exist_ok=True, mode=0o700)

    @contextlib.contextmanager
    def locked(self, volume_name: str, wait_seconds: float) -> Iterator[None]:
        """Holds the volume's lock; VolumeBusyError when another process holds it `wait_seconds`."""
        path = self.directory / LOCKS / f"{file_name(volume_name)}.lock"
        deadline = time.monotonic() + wait_seconds
        fd = self._acquire(path, deadline)
        try:
            yield
        finally:
            os.close(fd)

    def _acquire(self, path: Path, deadline: float) -> int:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        while True:
            fd = os.open(path, flags, 0o600)
            try:
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() >= deadline:
                            raise VolumeBusyError(f"another process holds {path}") from None
                        time.sleep(LOCK_POLL_SECONDS)
                # `forget` unlinks a lock file while holding it: a lock taken on the unlinked
                # file excludes nobody who opens the path anew, so take it again on the new one.
                try:
                    current = path.lstat()
                except FileNotFoundError:
                    current = None
                held = os.fstat(fd)
                if current is not None and (current.st_dev, current.st_ino) == (
                    held.st_dev,
                    held.st_ino,
                ):
                    return fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)

    def read(self, volume_name: str) -> VolumeRecord | None:
        """The volume's record (call under its lock); None when there is none."""
        path = self._record_path(volume_name)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        record = VolumeRecord.from_json(text)
        if record is None:
            log.warning("%s is not a volume record: treated as none", path)
        return record

    def write(self, volume_name: str, record: VolumeRecord) -> None:
        """Replaces the volume's record, durably (call under its lock)."""
        write_durably(self._record_path(volume_name), record.to_json())

    def forget(self, volume_name: str) -> None:
        """Drops the record and the lock file of a volume whose PV is gone (under its lock)."""
        for path in (
            self._record_path(volume_name),
            self.directory / LOCKS / f"{file_name(volume_name)}.lock",
        ):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def recorded(self) -> list[str]:
        """The file names (see `file_name`) of every volume with a record."""
        return sorted(
            entry.name.removesuffix(".json")
            for entry in (self.directory / RECORDS).iterdir()
            if entry.name.endswith(".json") and not entry.name.startswith(".")
        )

    def _record_path(self, volume_name: str) -> Path:
        return self.directory / RECORDS / f"{file_name(volume_name)}.json"


def write_durably(path: Path, text: str) -> None:
    """`path` replaced by `text` as one step that survives a crash: written beside it (0600, no
    link followed), synced, renamed over it, and the rename synced."""
    temporary = path.with_name(f".{path.name}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o600)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    temporary.replace(path)
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as error:  # some filesystems refuse a directory's fsync
        if error.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)
