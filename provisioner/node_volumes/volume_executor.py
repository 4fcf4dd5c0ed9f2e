"""Makes and removes CSI volumes' directories on this node: the checks, the volume's lock, its
record, and the steps (volume_steps.py) run as processes.

Before anything, without a lock: the PV's directory must be the one the setup or the permit
names, inside one of this node's base paths (volume_checks.py), and a permit must be current for
the PV as the caller saw it (node_handoff.removal_refusal). Then, under the volume's lock, the
record decides (volume_records.py), and a teardown asks the caller to confirm the permit once
more from a fresh read of the PV (`confirm`): the watch that brought the permit may lag behind
an admin who re-bound the volume meanwhile. The gate's facts are the controller's; the node only
confirms that the permit it acts on is current, and its owner check runs in the scripts, on the
node, just before anything goes.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import grpc

from provisioner.configuration.config import BasePathRules, ConfigBundle
from provisioner.csi.csi_errors import CsiError
from provisioner.csi.mount_table import mount_at
from provisioner.csi.mounts import read_mount_table
from provisioner.csi.node_paths import VolumeDirectory
from provisioner.node_volumes import block_volumes, volume_layout
from provisioner.node_volumes.block_volumes import BlockBusyError
from provisioner.node_volumes.clone_copy import copy_source, is_copied, mark_copied
from provisioner.node_volumes.restore_checks import (
    SnapshotRecordView,
    restore_record_refusal,
    restore_source_refusal,
)
from provisioner.node_volumes.snapshot_restore import (
    read_snapshot_record,
    restore_into,
    snapshot_lock_name,
)
from provisioner.node_volumes.step_runner import SYSTEM, Shell, StepResult, run_steps
from provisioner.node_volumes.volume_checks import (
    clone_source_refusal,
    missing_base_path_refusal,
    path_refusal,
)
from provisioner.node_volumes.volume_layout import FilesystemKinds
from provisioner.node_volumes.volume_records import (
    RecordConflictError,
    SetupDecision,
    SourceDecision,
    TeardownDecision,
    VolumeRecord,
    clone_source_decision,
    setup_decision,
    teardown_decision,
)
from provisioner.node_volumes.volume_state import VolumeBusyError, VolumeState
from provisioner.node_volumes.volume_steps import (
    VolumeTarget,
    failed_setup_clean_up,
    node_steps,
    parents_step,
    subvolume_steps,
)
from provisioner.objects.node_handoff import (
    NodeCloneSource,
    NodeRemoval,
    NodeRestoreSource,
    VolumeSetup,
    removal_refusal,
)

log = logging.getLogger(__name__)

BASE_PATH_MODE = 0o755
"""What the kubelet gives a `DirectoryOrCreate` hostPath it makes."""

BLOCK = "Block"
"""A VolumeSetup's volume_mode for a volume served as a device (block_volumes.py)."""

OutcomeKind = Literal["done", "already", "refused", "failed", "busy"]


@dataclass(frozen=True)
class Outcome:
    """`done`: this call made or removed the directory; `already`: it was so (a removal: the PV
    is to be marked again); `refused`: a check said no, nothing ran; `failed`: a step failed,
    `busy`: another process holds the volume (both to retry)."""

    kind: OutcomeKind
    message: str = ""
    notice: str = ""
    """What the admin should hear of a success (quota groups this call turned on), or ""."""

    @property
    def ok(self) -> bool:
        return self.kind in ("done", "already")


class VolumeExecutor:
    def __init__(
        self,
        node_name: str,
        bundle: ConfigBundle,
        base_paths: Mapping[str, BasePathRules],
        state: VolumeState,
        *,
        lock_wait_seconds: float | None = None,
        shell: Shell = SYSTEM,
        kinds: FilesystemKinds | None = None,
    ) -> None:
        self.node_name = node_name
        self.kinds = FilesystemKinds() if kinds is None else kinds
        self.shell = shell
        self.bundle = bundle
        self.base_paths = dict(base_paths)
        self.state = state
        self.timeout = float(bundle.config.cmd_timeout_seconds)
        # A holder runs at most five steps, each within the timeout (a clone's setup on
        # btrfs: prepare's parents, prepare, create, the copy, and finish after a failure).
        self.lock_wait = 5 * self.timeout + 5 if lock_wait_seconds is None else lock_wait_seconds

    def set_up(self, volume_name: str, volume_path: str, setup: VolumeSetup) -> Outcome:
        """Makes the volume's directory unless this node did already (`already`); a clone's
        (`setup.clone_source`) with a copy of its source's data in it."""
        refusal = path_refusal(volume_path, setup.path, setup.base_path, self.base_paths)
        source = setup.clone_source
        restore = setup.restore_source
        if refusal is None and source is not None:
            refusal = clone_source_refusal(volume_name, setup.path, source, self.base_paths)
        if refusal is None and restore is not None:
            refusal = restore_source_refusal(setup.path, restore, self.base_paths)
        if refusal is not None:
            return Outcome("refused", refusal)
        target = VolumeTarget.of(volume_name, self.node_name, setup)
        try:
            with self.state.locked(volume_name, self.lock_wait), ExitStack() as held:
                record = self.state.read(volume_name)
                decision = setup_decision(record, setup.path, _is_directory(setup.path))
                if decision is SetupDecision.DONE:
                    return Outcome("already")
                if (source or restore) is not None and is_copied(
                    setup.base_path, setup.path, volume_name
                ):
                    # The copy was made whole before, and this node lost its record of the
                    # setup since (clone_copy): the directory holds the clone's (or the
                    # restore's) data, in use; only the setup runs again, as for any volume,
                    # and nothing is copied.
                    log.info("volume %s: its copy in %s is whole already", volume_name, setup.path)
                    source = restore = None
                if source is not None:
                    # The source's lock, taken second and held through the copy: its
                    # teardown runs only under it (by this node's plugin, whichever process),
                    # so nothing of the source goes while it is copied, and the copy is whole.
                    # That is why a CSI clone needs no look at the source after the copy (the
                    # helper pod's `clones.source_changed`, whose teardown may run beside
                    # it). Always the new volume's lock first, then its source's: a source
                    # is older than every clone of it (it was Bound before the clone's PV was
                    # made), so a chain of holders waits on ever older volumes, never in a
                    # cycle. Taken before the setup runs, so that a source not ready leaves
                    # nothing made.
                    try:
                        held.enter_context(self.state.locked(source.volume_name, self.lock_wait))
                    except VolumeBusyError:
                        return Outcome(
                            "busy",
                            f"the clone's source volume {source.volume_name} is busy (its setup"
                            " or teardown runs): the copy is retried",
                        )
                    waits = self._source_problem(source)
                    if waits is not None:
                        return waits
                snapshot: SnapshotRecordView | None = None
                if restore is not None:
                    held_snapshot = self._hold_snapshot(held, restore)
                    if isinstance(held_snapshot, Outcome):
                        return held_snapshot
                    snapshot = held_snapshot
                missing = self._make_base_path(setup.base_path)
                if missing is not None:
                    return Outcome("failed", missing)
                results, notice, made = self._make_and_fill(
                    volume_name, target, setup, source=source, restore=restore, snapshot=snapshot
                )
                if _succeeded(results) and setup.volume_mode == BLOCK:
                    # Last: a clone's or a restore's copy brought its source's file, which is
                    # kept (made longer if this volume is larger).
                    results.append(_make_block(setup))
                if _succeeded(results):
                    self.state.write(
                        volume_name, VolumeRecord("set-up", setup.path, setup.size_bytes)
                    )
                    log.info("volume %s: made %s%s", volume_name, setup.path, made)
                    return Outcome("done", notice=notice)
                clean_up = run_steps(
                    failed_setup_clean_up(target, self.bundle, setup.clean_up),
                    self.timeout,
                    self.shell,
                )
                message = _failure("setup", results)
                if clean_up and not _succeeded(clean_up):
                    message += "; the clean-up after it: " + _failure("clean-up", clean_up)
                return Outcome("failed", message)
        except RecordConflictError as conflict:
            return Outcome("failed", str(conflict))
        except VolumeBusyError as busy:
            return Outcome("busy", str(busy))

    def _make_and_fill(
        self,
        volume_name: str,
        target: VolumeTarget,
        setup: VolumeSetup,
        *,
        source: NodeCloneSource | None,
        restore: NodeRestoreSource | None,
        snapshot: SnapshotRecordView | None,
    ) -> tuple[list[StepResult], str, str]:
        """Under the locks `set_up` holds: the directory made in its layout, then a clone's
        copy or a restore's. The steps' results, the quota notice, and what the log says of
        the data it got."""
        notice = ""
        if self._layout(setup) == "subvolume":
            # A clone of a subvolume, or a restore of a snapshot the snapshot service made on
            # btrfs (a read-only subvolume), is a writable snapshot of it: instant, and whole
            # at once, whatever its size.
            of = _snapshot_of(source, restore, snapshot)
            results, made, notice = self._make_subvolume(target, setup, of)
            if made == "snapshot" and _succeeded(results):
                # The data came whole with its snapshot: no copy, but the same mark a whole
                # copy leaves (clone_copy), for a setup run again.
                assert of is not None
                step = "clone" if source is not None else "restore"
                got = (
                    f" as a snapshot of {of[1]}"
                    if source is not None
                    else f" restored from {of[1]}, a snapshot"
                )
                try:
                    mark_copied(setup.base_path, setup.path, volume_name)
                    return results, notice, got
                except OSError as error:
                    # Retried: the snapshot is there, and the retry copies over it.
                    results.append(
                        StepResult(step, False, f"cannot mark the {step} whole: {error}")
                    )
                    return results, notice, ""
        else:
            results = run_steps(node_steps("create", target, self.bundle), self.timeout, self.shell)
        if source is not None and _succeeded(results):
            results.append(
                copy_source(
                    source,
                    volume_name,
                    setup.path,
                    setup.base_path,
                    timeout_seconds=self.timeout,
                    shell=self.shell,
                )
            )
            return results, notice, f" with a copy of {source.path}"
        if restore is not None and snapshot is not None and _succeeded(results):
            results.append(
                restore_into(
                    restore,
                    snapshot,
                    volume_name,
                    setup.path,
                    setup.base_path,
                    timeout_seconds=self.timeout,
                    shell=self.shell,
                )
            )
            return results, notice, f" restored from {restore.snapshot_path}"
        return results, notice, ""

    def _hold_snapshot(
        self, held: ExitStack, restore: NodeRestoreSource
    ) -> SnapshotRecordView | Outcome:
        """Takes the restore's snapshot's lock into `held` (second, after the new volume's:
        snapshot_restore.py says why no cycle) and reads this node's record of it: the
        snapshot to copy, or what to report. Held through the copy, so the snapshot's
        removal (under the same lock) waits for it, or ran before and left its record
        `removed`."""
        try:
            held.enter_context(
                self.state.locked(snapshot_lock_name(restore.snapshot_id), self.lock_wait)
            )
        except VolumeBusyError:
            return Outcome(
                "busy",
                f"snapshot {restore.snapshot_id} is busy (being made or removed): the restore"
                " is retried",
            )
        record = read_snapshot_record(self.state.directory, restore.snapshot_id)
        problem = restore_record_refusal(record, restore)
        if problem is not None:
            waits, why = problem
            return Outcome("busy" if waits else "refused", why)
        assert record is not None
        if not _is_directory(restore.snapshot_path):
            return Outcome(
                "refused",
                f"snapshot {restore.snapshot_id}'s directory {restore.snapshot_path} is no"
                " directory on this node (gone, or a symbolic link): nothing to restore",
            )
        return record

    def _layout(self, setup: VolumeSetup) -> volume_layout.Layout:
        """A Filesystem volume on btrfs is a subvolume; anything else a plain directory (a
        block volume's layout is its own)."""
        if setup.volume_mode != "Filesystem":
            return "directory"
        try:
            return self.kinds.layout(setup.base_path)
        except OSError:
            return "directory"  # no base path to look at: `prepare` says so in its own words

    def _make_subvolume(
        self, target: VolumeTarget, setup: VolumeSetup, of: tuple[str, str] | None
    ) -> tuple[list[StepResult], volume_layout.SubvolumeMade | None, str]:
        """The steps of a volume on btrfs: `prepare` makes its parents, the plugin its
        directory (a subvolume, or a snapshot of `of`, the (base path, path) of a clone's
        source or a restore's snapshot), `prepare` checks and marks it, the limit is set to
        the volume's size, then the setup runs. The results, what was made (None: nothing, a
        step failed first) and the quota notice."""
        results = run_steps([parents_step(target, self.bundle)], self.timeout, self.shell)
        if not _succeeded(results):
            return results, None, ""
        source_fd = None if of is None else volume_layout.subvolume_to_snapshot(*of)
        try:
            made = volume_layout.make_subvolume(setup.base_path, setup.path, source_fd)
        except (OSError, ValueError) as error:
            results.append(
                StepResult("prepare", False, f"cannot make {setup.path} a btrfs subvolume: {error}")
            )
            return results, None, ""
        finally:
            if source_fd is not None:
                os.close(source_fd)
        prepare, create = subvolume_steps(target, self.bundle, node_made=made != "existing")
        results += run_steps([prepare], self.timeout, self.shell)
        if not _succeeded(results):
            return results, made, ""
        # Only now, once `prepare` said the directory is this volume's: an existing one may be
        # a retained volume's, whose limit is not this setup's to change.
        notice = ""
        try:
            fd = volume_layout.open_volume(setup.base_path, setup.path)
            try:
                if volume_layout.is_subvolume_top(fd):
                    notice = volume_layout.limit_size(fd, setup.size_bytes, setup.base_path)
            finally:
                os.close(fd)
        except OSError as error:
            results.append(
                StepResult("prepare", False, f"cannot limit {setup.path} to its size: {error}")
            )
            return results, made, ""
        results += run_steps([create], self.timeout, self.shell)
        return results, made, notice

    def apply_size(self, volume_name: str, setup: VolumeSetup, size_bytes: int) -> Outcome:
        """Gives the set-up volume the size its PV grew to (an expansion the controller made),
        once: `already` when its record says it has it, `busy` while it is not set up."""
        refusal = path_refusal(setup.path, setup.path, setup.base_path, self.base_paths)
        if refusal is not None:
            return Outcome("refused", refusal)
        try:
            with self.state.locked(volume_name, self.lock_wait):
                record = self.state.read(volume_name)
                if record is None or record.state != "set-up" or record.path != setup.path:
                    return Outcome("busy", f"volume {volume_name} is not set up on this node")
                applied = setup.size_bytes if record.size_bytes is None else record.size_bytes
                if applied >= size_bytes:
                    return Outcome("already")
                try:
                    notice = ""
                    if setup.volume_mode == BLOCK:
                        # Its file made longer, then its device told (never shorter).
                        directory = block_volumes.directory_of(setup.base_path, setup.path)
                        block_volumes.grow(directory, size_bytes)
                    else:
                        notice = volume_layout.apply_size(
                            self._layout(setup), setup.base_path, setup.path, size_bytes
                        )
                except CsiError as error:
                    return Outcome(
                        "failed", f"cannot give {setup.path} {size_bytes} bytes: {error.message}"
                    )
                except (OSError, ValueError) as error:
                    return Outcome(
                        "failed", f"cannot give {setup.path} {size_bytes} bytes: {error}"
                    )
                self.state.write(volume_name, VolumeRecord("set-up", setup.path, size_bytes))
                log.info("volume %s: %s now holds %d bytes", volume_name, setup.path, size_bytes)
                return Outcome("done", notice=notice)
        except VolumeBusyError as busy:
            return Outcome("busy", str(busy))

    def _source_problem(self, source: NodeCloneSource) -> Outcome | None:
        """Under the source's lock: None when its directory holds its data (this node set it
        up there and it is still a directory, not a symbolic link), else what to report."""
        decision, why = clone_source_decision(self.state.read(source.volume_name), source.path)
        if decision is SourceDecision.WAIT:
            return Outcome("busy", why)
        if decision is SourceDecision.REFUSE:
            return Outcome("refused", why)
        if not _is_directory(source.path):
            return Outcome(
                "refused",
                f"the clone's source {source.path} (volume {source.volume_name}) is no directory"
                " on this node (gone, or a symbolic link): its data cannot be copied",
            )
        return None

    def tear_down(
        self,
        volume_name: str,
        volume_path: str,
        setup: VolumeSetup,
        removal: NodeRemoval,
        *,
        phase: str,
        claim_uid: str,
        confirm: Callable[[], str | None],
    ) -> Outcome:
        """Removes the volume's directory by the gate's permit, as the PV showed it (`phase`,
        `claim_uid`); `confirm()` reads the PV afresh and says why the permit is no longer
        current, or None. `already`: this node removed it before (mark the PV again)."""
        refusal = path_refusal(volume_path, removal.path, setup.base_path, self.base_paths)
        if refusal is None and setup.path != removal.path:
            refusal = f"the setup names {setup.path}, the permit {removal.path}"
        if refusal is None:
            refusal = removal_refusal(
                removal, volume_name=volume_name, path=volume_path, phase=phase, claim_uid=claim_uid
            )
        if refusal is not None:
            return Outcome("refused", refusal)
        target = VolumeTarget.of(volume_name, self.node_name, setup)
        try:
            with self.state.locked(volume_name, self.lock_wait):
                record = self.state.read(volume_name)
                if teardown_decision(record, removal.path) is TeardownDecision.MARK_ONLY:
                    return Outcome("already")
                stale = confirm()
                if stale is not None:
                    return Outcome("refused", f"the permit is no longer current: {stale}")
                if not os.path.lexists(removal.path) and self._base_path_in_order(setup.base_path):
                    # Gone already (a setup that never ran, a hand-made removal): nothing to
                    # remove; the base path is there and mounted, so it is not a disk away.
                    self.state.write(volume_name, VolumeRecord("removed", removal.path))
                    return Outcome("already", f"{removal.path} was not there")
                if setup.volume_mode == BLOCK:
                    # The device first: a file still attached would go with its directory
                    # while a pod or the kubelet holds it, and the device would outlive it.
                    try:
                        block_volumes.detach(
                            block_volumes.directory_of(setup.base_path, removal.path)
                        )
                    except BlockBusyError as busy:
                        return Outcome("busy", str(busy))
                    except CsiError as error:
                        return Outcome("failed", f"detach: {error.message}")
                    except OSError as error:
                        return Outcome("failed", f"detach of {removal.path}'s device: {error}")
                steps = node_steps("delete", target, self.bundle, removal=removal)
                results = run_steps(steps, self.timeout, self.shell)
                if not _succeeded(results):
                    return Outcome("failed", _failure("teardown", results))
                self.state.write(volume_name, VolumeRecord("removed", removal.path))
                log.info("volume %s: removed %s", volume_name, removal.path)
                return Outcome("done")
        except RecordConflictError as conflict:
            return Outcome("failed", str(conflict))
        except VolumeBusyError as busy:
            return Outcome("busy", str(busy))

    def block_device(self, volume_name: str, setup: VolumeSetup) -> str:
        """For NodePublishVolume: the loop device of a Block volume set up on this node,
        attached again if none is (after a reboot). Under the volume's lock, so no teardown
        detaches it meanwhile. CsiError if there is none to have."""
        directory = self._block_directory(setup)
        try:
            with self.state.locked(volume_name, self.lock_wait):
                record = self.state.read(volume_name)
                if record is None or record.state != "set-up" or record.path != setup.path:
                    raise CsiError(
                        grpc.StatusCode.UNAVAILABLE,
                        f"volume {volume_name} is not set up on this node",
                    )
                return block_volumes.attached_device(directory)
        except VolumeBusyError as busy:
            raise CsiError(grpc.StatusCode.UNAVAILABLE, str(busy)) from None

    def block_usage(self, setup: VolumeSetup) -> block_volumes.BlockUsage:
        return block_volumes.usage(self._block_directory(setup))

    def _block_directory(self, setup: VolumeSetup) -> VolumeDirectory:
        if setup.volume_mode != BLOCK:
            raise CsiError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"volume at {setup.path} is volumeMode {setup.volume_mode}, not Block",
            )
        refusal = path_refusal(setup.path, setup.path, setup.base_path, self.base_paths)
        if refusal is not None:
            raise CsiError(grpc.StatusCode.FAILED_PRECONDITION, refusal)
        return block_volumes.directory_of(setup.base_path, setup.path)

    def forget(self, volume_name: str) -> None:
        """Drops what this node keeps of a volume whose PV is gone."""
        try:
            with self.state.locked(volume_name, 0):
                self.state.forget(volume_name)
        except VolumeBusyError:
            pass  # someone acts on it: forgotten at the next start

    def _make_base_path(self, base_path: str) -> str | None:
        """Makes the base path where it is missing and config.json lets it be made, as the
        kubelet does for a helper pod's `DirectoryOrCreate` hostPath (mode 0755, parents
        included): on the node nobody else would, and `prepare` makes only what lies below it.
        Else why not (the setup fails, to be retried once the admin made it or mounted it)."""
        if os.path.lexists(base_path):
            return None  # whatever it is, `prepare` checks it before anything is made in it
        refusal = missing_base_path_refusal(base_path, self.base_paths[base_path])
        if refusal is None:
            try:
                Path(base_path).mkdir(mode=BASE_PATH_MODE, parents=True, exist_ok=True)
            except OSError as error:
                return f"cannot make base path {base_path} on this node: {error.strerror}"
        return refusal

    def _base_path_in_order(self, base_path: str) -> bool:
        rules = self.base_paths.get(base_path)
        if rules is None or not _is_directory(base_path):
            return False
        return not rules.mount_point or mount_at(read_mount_table(), base_path) is not None


def _make_block(setup: VolumeSetup) -> StepResult:
    """A Block volume's file in its new directory, attached: the last step of its setup."""
    try:
        directory = block_volumes.directory_of(setup.base_path, setup.path)
        block_volumes.make_block_file(directory, setup.size_bytes)
        device = block_volumes.attached_device(directory)
    except CsiError as error:
        return StepResult("block", False, error.message)
    except OSError as error:
        return StepResult("block", False, f"{setup.path}/{block_volumes.BLOCK_FILE}: {error}")
    log.info("block volume at %s: attached as %s", setup.path, device)
    return StepResult("block", True, device)


def _is_directory(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _snapshot_of(
    source: NodeCloneSource | None,
    restore: NodeRestoreSource | None,
    snapshot: SnapshotRecordView | None,
) -> tuple[str, str] | None:
    """What a new volume on btrfs may be a snapshot of: a clone's source (a snapshot is tried,
    and taken where the source is a subvolume), or a restore's snapshot when this node's record
    says it made it as a btrfs snapshot (else the restore copies, as everywhere)."""
    if source is not None:
        return source.base_path, source.path
    if restore is not None and snapshot is not None and snapshot.kind == "btrfs":
        return restore.base_path, restore.snapshot_path
    return None


def _succeeded(results: list[StepResult]) -> bool:
    return all(result.ok for result in results)


def _failure(what: str, results: list[StepResult]) -> str:
    failed = next((result for result in results if not result.ok), None)
    if failed is None:
        return f"{what}: no step ran"
    return f"{what} step {failed.name} failed: {failed.tail or '(no output)'}"
