"""Takes, confirms and removes this node's snapshots: the checks, the locks, the record, and the
data operation (a read-only btrfs subvolume snapshot, or the confined copy step).

Before anything, without a lock: the source's directory and the snapshot's place must lie inside
one of this node's base paths, the snapshot's at its id's place in the snapshot area
(snapshot_records.setup_refusal). Then the snapshot's lock, and the source volume's second (the
same lock its setup and teardown take, volume_executor.py): nothing of the source goes while it
is copied. Locks are always taken newer object first, then the older one it reads: a snapshot,
then its source (a volume Bound before the snapshot was asked for); a clone, then its source; a
restore, then its snapshot (ready before the restored volume was made). A chain of holders thus
waits on ever older objects, never in a cycle, and every wait is bounded (`busy`, retried).
Under them the source's own record must say this node set it up at that very path: a setup
cannot make the node copy a directory it did not make for that volume.

The snapshot area (`<base>/SNAPSHOT_AREA`, 0700, root's) and everything in it is this plugin's
alone: no volume is there (setup_refusal), no pod mounts it. So what an earlier attempt left at a
snapshot's place (a copy cut short) is emptied without a permit, under the snapshot's lock, as a
clone's partial copy is (clone_copy.py). A snapshot's own top directory keeps its source's
owner and modes (a btrfs snapshot, or cp -a of `<source>/.`), so that a restore gives them back;
the area's 0700 is what keeps everyone else out. Removal of a snapshot taken is the gate's decision
alone: only with its permit, confirmed on a fresh read of the content, after the owner check.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import posixpath
import shutil
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace

from provisioner.node_volumes import btrfs_ioctl
from provisioner.node_volumes.filesystem_kind import filesystem_type, supports_reflink
from provisioner.node_volumes.snapshot_records import (
    SnapshotConflictError,
    SnapshotKind,
    SnapshotRecord,
    TakeDecision,
    import_refusal,
    setup_refusal,
    take_decision,
)
from provisioner.node_volumes.snapshot_store import SnapshotStore
from provisioner.node_volumes.step_runner import SYSTEM, Shell, run_step
from provisioner.node_volumes.volume_checks import path_refusal
from provisioner.node_volumes.volume_executor import Outcome, OutcomeKind
from provisioner.node_volumes.volume_state import VolumeBusyError, VolumeState
from provisioner.node_volumes.volume_steps import clone_step, snapshot_removal_step
from provisioner.objects.snapshot_handoff import (
    SNAPSHOT_AREA,
    SnapshotRemoval,
    SnapshotSetup,
    snapshot_owner,
    snapshot_removal_refusal,
)
from provisioner.provisioning.fresh_directory import OWNERS_DIR

log = logging.getLogger(__name__)

AREA_MODE = 0o700
SUBVOLUME_ROOT_INODE = 256
"""BTRFS_FIRST_FREE_OBJECTID: the inode number of every btrfs subvolume's top directory."""
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


@dataclass(frozen=True)
class SnapshotOutcome:
    """As a volume's `Outcome` (done, already, refused, failed, busy), with the snapshot's
    record where there is one (done/already: ready, or removed for a removal)."""

    outcome: Outcome
    record: SnapshotRecord | None = None

    @property
    def ok(self) -> bool:
        return self.outcome.ok

    @property
    def message(self) -> str:
        return self.outcome.message


def _outcome(
    kind: OutcomeKind, message: str = "", record: SnapshotRecord | None = None
) -> SnapshotOutcome:
    return SnapshotOutcome(Outcome(kind, message), record)


class SnapshotService:
    def __init__(
        self,
        node_name: str,
        base_paths: Iterable[str],
        state: VolumeState,
        *,
        timeout_seconds: float,
        lock_wait_seconds: float | None = None,
        shell: Shell = SYSTEM,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.node_name = node_name
        self.base_paths = list(base_paths)
        self.state = state
        self.store = SnapshotStore(state)
        self.timeout = timeout_seconds
        # A holder runs one copy and a little file work; a volume's holder up to four steps.
        self.lock_wait = 4 * timeout_seconds + 5 if lock_wait_seconds is None else lock_wait_seconds
        self.shell = shell
        self.clock = clock

    def record(self, snapshot: str) -> SnapshotRecord | None:
        """The snapshot's record as it is now (no lock: a reader's view, for listing)."""
        return self.store.read(snapshot)

    def records(self) -> list[SnapshotRecord]:
        return self.store.records()

    def take(self, setup: SnapshotSetup, content_uid: str) -> SnapshotOutcome:
        """Takes the snapshot unless this node did already (`already`, with its record); a
        setup with `imported` only confirms a snapshot this node holds."""
        if setup.imported:
            return self.confirm_import(setup)
        refusal = setup_refusal(setup, self.base_paths)
        if refusal is not None:
            return _outcome("refused", refusal)
        try:
            with (
                self.store.locked(setup.snapshot_id, self.lock_wait),
                contextlib.ExitStack() as held,
            ):
                record = self.store.read(setup.snapshot_id)
                if take_decision(record, setup) is TakeDecision.DONE:
                    if not _is_directory(setup.path):
                        # Never taken again: its creation time and data were reported.
                        return _outcome(
                            "failed",
                            f"snapshot {setup.snapshot_id} was taken on this node and its data at"
                            f" {setup.path} is gone (its disk is not mounted?): it is not taken"
                            " again; delete the VolumeSnapshot",
                        )
                    return _outcome("already", record=record)
                try:
                    held.enter_context(self.state.locked(setup.source_volume, self.lock_wait))
                except VolumeBusyError:
                    return _outcome(
                        "busy",
                        f"the source volume {setup.source_volume} is busy (its setup or teardown"
                        " runs): the snapshot is retried",
                    )
                problem = self._source_problem(setup)
                if problem is not None:
                    return _outcome("failed", problem)
                return self._take(setup, content_uid)
        except SnapshotConflictError as conflict:
            return _outcome("refused", str(conflict))
        except VolumeBusyError as busy:
            return _outcome("busy", str(busy))

    def confirm_import(self, setup: SnapshotSetup) -> SnapshotOutcome:
        """A pre-provisioned content names a snapshot by handle: only this node's own record,
        ready, at that place inside its base paths, makes it one."""
        try:
            with self.store.locked(setup.snapshot_id, self.lock_wait):
                record = self.store.read(setup.snapshot_id)
        except VolumeBusyError as busy:
            return _outcome("busy", str(busy))
        refusal = import_refusal(record, setup, self.base_paths)
        if refusal is None and not _is_directory(setup.path):
            refusal = f"snapshot {setup.snapshot_id}'s data at {setup.path} is gone"
        if refusal is not None:
            return _outcome("refused", f"{refusal} (node {self.node_name})")
        return _outcome("already", record=record)

    def remove(
        self,
        setup: SnapshotSetup,
        removal: SnapshotRemoval,
        *,
        content_name: str,
        content_uid: str,
        confirm: Callable[[], str | None],
    ) -> SnapshotOutcome:
        """Removes the snapshot's data with the gate's permit `removal`, found on the content
        `content_name`/`content_uid` whose setup is `setup`; `confirm` reads the content afresh
        under the lock and says why the permit is not current (or None). `already`: removed
        before (mark the content again)."""
        refusal = snapshot_removal_refusal(
            removal, setup, content_name=content_name, content_uid=content_uid
        )
        if refusal is None:
            refusal = path_refusal(removal.path, setup.path, setup.base_path, self.base_paths)
        if refusal is not None:
            return _outcome("refused", refusal)
        try:
            with self.store.locked(setup.snapshot_id, self.lock_wait):
                record = self.store.read(setup.snapshot_id)
                if record is not None and record.state == "removed":
                    return _outcome("already", record=record)
                if record is not None and record.path != setup.path:
                    return _outcome(
                        "refused", f"this node holds the snapshot at {record.path}, not there"
                    )
                stale = confirm()
                if stale is not None:
                    return _outcome("refused", f"the permit is no longer current: {stale}")
                try:
                    removed = self._remove(setup)
                except OSError as error:
                    return _outcome("failed", f"removing {setup.path}: {_describe(error)}")
                if removed is not None:
                    return _outcome("refused", removed)
                done = replace(record or _blank_record(setup, content_uid), state="removed")
                self.store.write(done)
                log.info("snapshot %s: removed %s", setup.snapshot_id, setup.path)
                return _outcome("done", record=done)
        except VolumeBusyError as busy:
            return _outcome("busy", str(busy))

    # -- under the locks ------------------------------------------------------------------

    def _source_problem(self, setup: SnapshotSetup) -> str | None:
        source = self.state.read(setup.source_volume)
        if source is None or source.path != setup.source_path:
            return (
                f"the source volume {setup.source_volume} is not set up at {setup.source_path}"
                " on this node (yet): the snapshot waits for it"
            )
        if source.state == "removed":
            return f"the source volume {setup.source_volume} was removed from this node"
        if not _is_directory(setup.source_path):
            return (
                f"the source volume's directory {setup.source_path} is gone (its data is lost or"
                " its disk is not mounted): nothing to snapshot"
            )
        return None

    def _take(self, setup: SnapshotSetup, content_uid: str) -> SnapshotOutcome:
        created = self.clock()
        record = SnapshotRecord(
            id=setup.snapshot_id,
            state="creating",
            kind="copy",
            base_path=setup.base_path,
            path=setup.path,
            source_volume=setup.source_volume,
            size_bytes=setup.size_bytes,
            created_ns=created,
            content_uid=content_uid,
        )
        self.store.write(record)
        try:
            kind, message = self._make(setup)
        except OSError as error:
            kind, message = None, _describe(error)
        if kind is None:
            self.store.write(replace(record, state="failed"))
            return _outcome(
                "failed",
                f"snapshot {setup.snapshot_id} of volume {setup.source_volume} in base path"
                f" {setup.base_path} failed: {message}; it is retried",
            )
        done = replace(record, state="ready", kind=kind)
        self.store.write(done)
        log.info("snapshot %s: %s of %s taken", setup.snapshot_id, kind, setup.source_volume)
        return _outcome("done", record=done)

    def _make(self, setup: SnapshotSetup) -> tuple[SnapshotKind | None, str]:
        name = setup.snapshot_id
        with _opened(setup.base_path, follow=True) as base_fd:
            area_fd = _area(base_fd)
            try:
                _write_marker(base_fd, setup.path, snapshot_owner(name))
                if _clear(area_fd, name):
                    log.info("snapshot %s: emptied an earlier attempt's leftover", name)
                with _opened(setup.source_path) as source_fd:
                    if _is_subvolume(source_fd, setup.source_path):
                        # Atomic and read-only from its first moment: a point-in-time copy.
                        btrfs_ioctl.snapshot(source_fd, area_fd, name, read_only=True)
                        return "btrfs", ""
                kind: SnapshotKind = "reflink" if supports_reflink(area_fd) else "copy"
                os.mkdir(name, AREA_MODE, dir_fd=area_fd)
                copy = clone_step(setup.source_path, setup.path)
                result = run_step(copy, self.timeout, self.shell)
                if result.ok:
                    return kind, ""
                with contextlib.suppress(OSError):
                    _clear(area_fd, name)
                if "No space left" in result.tail or "quota exceeded" in result.tail:
                    return None, _no_space(setup)
                return None, f"the copy failed: {result.tail.strip() or '(no output)'}"
            except OSError as error:
                with contextlib.suppress(OSError):
                    _clear(area_fd, name)
                if error.errno in _NO_SPACE:
                    return None, _no_space(setup)
                raise
            finally:
                os.close(area_fd)

    def _remove(self, setup: SnapshotSetup) -> str | None:
        """Removes the snapshot after its owner check; why not when the check says no."""
        owner = snapshot_owner(setup.snapshot_id)
        with _opened(setup.base_path, follow=True) as base_fd:
            marker = _read_marker(base_fd, setup.path)
            try:
                area_fd = btrfs_ioctl.open_directory(SNAPSHOT_AREA, dir_fd=base_fd)
            except FileNotFoundError:
                area_fd = None
            try:
                present = area_fd is not None and _exists(area_fd, setup.snapshot_id)
                if present and marker != owner:
                    named = f"names {marker}" if marker else "is missing"
                    return f"its owner marker {named}, not {owner}: {setup.path} is left as it is"
                if present and area_fd is not None:
                    problem = self._destroy(area_fd, setup)
                    if problem is not None:
                        raise OSError(errno.EIO, problem)
                if marker == owner:
                    _remove_marker(base_fd, setup.path)
                return None
            finally:
                if area_fd is not None:
                    os.close(area_fd)

    def _destroy(self, area_fd: int, setup: SnapshotSetup) -> str | None:
        """A btrfs snapshot by the kernel, a copy by `rm -rf` confined to the snapshot area;
        what failed, or None."""
        found = os.stat(setup.snapshot_id, dir_fd=area_fd, follow_symlinks=False)
        if stat.S_ISDIR(found.st_mode) and found.st_ino == SUBVOLUME_ROOT_INODE:
            try:
                btrfs_ioctl.destroy_subvolume(area_fd, setup.snapshot_id)
                return None
            except OSError as error:
                if error.errno not in (errno.ENOTTY, errno.EINVAL):
                    raise
        area = posixpath.dirname(setup.path)
        result = run_step(snapshot_removal_step(area, setup.path), self.timeout, self.shell)
        if not result.ok:
            return result.tail.strip() or "rm failed"
        if _exists(area_fd, setup.snapshot_id):
            return f"{setup.path} is still there after rm"
        return None


def _is_directory(path: str) -> bool:
    """A directory at `path` itself, not a symbolic link to one."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _blank_record(setup: SnapshotSetup, content_uid: str) -> SnapshotRecord:
    return SnapshotRecord(
        id=setup.snapshot_id,
        state="removed",
        kind="copy",
        base_path=setup.base_path,
        path=setup.path,
        source_volume=setup.source_volume,
        size_bytes=setup.size_bytes,
        created_ns=0,
        content_uid=content_uid,
    )


def _describe(error: OSError) -> str:
    return f"{error.strerror or error}" + (f" ({error.filename})" if error.filename else "")


def _no_space(setup: SnapshotSetup) -> str:
    return (
        f"no space left in base path {setup.base_path} for the copy (the partial copy was"
        " emptied): free space there or delete the snapshot"
    )


@contextlib.contextmanager
def _opened(path: str, *, follow: bool = False) -> Iterator[int]:
    """An fd on the directory `path`; its last component never followed through a symlink
    unless `follow` (a base path is the admin's, and may be a link)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        yield fd
    finally:
        os.close(fd)


def _area(base_fd: int) -> int:
    """An fd on the base path's snapshot area, made 0700 if missing; refused (OSError) where
    it is anything but a directory (a symlink included)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(SNAPSHOT_AREA, AREA_MODE, dir_fd=base_fd)
    fd = btrfs_ioctl.open_directory(SNAPSHOT_AREA, dir_fd=base_fd)
    os.fchmod(fd, AREA_MODE)
    return fd


def _exists(directory_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=directory_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _clear(area_fd: int, name: str) -> bool:
    """Removes `name` in the snapshot area, whatever it is (a subvolume by the kernel, a copy
    without following a link); whether there was anything."""
    try:
        found = os.stat(name, dir_fd=area_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(found.st_mode):
        os.unlink(name, dir_fd=area_fd)
        return True
    if found.st_ino == SUBVOLUME_ROOT_INODE:
        try:
            btrfs_ioctl.destroy_subvolume(area_fd, name)
            return True
        except OSError as error:
            if error.errno not in (errno.ENOTTY, errno.EINVAL, errno.EPERM):
                raise
    shutil.rmtree(name, dir_fd=area_fd)
    return True


def _is_subvolume(fd: int, path: str) -> bool:
    return os.fstat(fd).st_ino == SUBVOLUME_ROOT_INODE and filesystem_type(path) == "btrfs"


def _marker_name(snapshot_path_: str) -> str:
    return hashlib.sha256(snapshot_path_.encode()).hexdigest()


def _owners(base_fd: int, *, make: bool) -> int | None:
    if make:
        with contextlib.suppress(FileExistsError):
            os.mkdir(OWNERS_DIR, 0o755, dir_fd=base_fd)
    try:
        return btrfs_ioctl.open_directory(OWNERS_DIR, dir_fd=base_fd)
    except FileNotFoundError:
        return None


def _write_marker(base_fd: int, path: str, owner: str) -> None:
    """The owner marker, in the volumes' format (fresh_directory.py: the owner's name and a
    newline, in the base path's owners directory, named by the SHA-256 of the path), written
    durably before anything is made at `path`."""
    owners = _owners(base_fd, make=True)
    assert owners is not None
    name = _marker_name(path)
    partial = f".{name}.{os.getpid()}"
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(partial, flags, 0o644, dir_fd=owners)
        try:
            os.write(fd, f"{owner}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(partial, name, src_dir_fd=owners, dst_dir_fd=owners)
        os.fsync(owners)
    finally:
        os.close(owners)


def _read_marker(base_fd: int, path: str) -> str:
    owners = _owners(base_fd, make=False)
    if owners is None:
        return ""
    try:
        fd = os.open(_marker_name(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=owners)
    except FileNotFoundError:
        return ""
    finally:
        os.close(owners)
    with os.fdopen(fd, "rb") as held:
        return held.read(512).decode("utf-8", "replace").rstrip("\n")


def _remove_marker(base_fd: int, path: str) -> None:
    owners = _owners(base_fd, make=False)
    if owners is None:
        return
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_marker_name(path), dir_fd=owners)
    finally:
        os.close(owners)
