"""The copy of a clone's source into its new directory on the node (volume_executor.py holds
both volumes' locks around it): the new directory emptied of an earlier attempt's partial
copy, the `clone` step (volume_steps.clone_step) run, and the new directory emptied again
when the copy failed, so that the clean-up's `finish` removes it with the gate's permit.

Why emptying needs no permit: it is the new volume's own directory, which its own setup made
just before under its lock (`prepare`'s owner marker says so), that no pod has been given yet
(NodePublishVolume waits for this setup), and a class with reuseExistingData cannot clone
(clones.place_clone): what is in it is a partial copy of this very clone, never anyone's data.
clone_step.py argues the same for the helper pod's copy.

Why a mark beside the owner marker, once the copy is whole (`mark_copied`, COPIED_SUFFIX in the
base path's owners directory): the node's record of the setup lives in the plugin's state
directory, which a node can lose while its data disk stays (the root disk replaced, the
plugin's state directory moved). A setup run again then finds the directory full: with the
mark it is this clone's whole copy, in use by its pods, and is never emptied or copied over;
without it, it can only be a partial copy, since a pod gets the volume only after the mark
is written (NodePublishVolume waits for the setup). The mark is not in the volume, whose
tenant controls everything in it.

The emptying never follows a symbolic link: the partial copy holds the tenant's links as
links, and every removal is made relative to a descriptor of the new directory opened without
following one (shutil.rmtree's descriptor-based walk below it).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from provisioner.node_volumes.step_runner import Shell, StepResult, run_step
from provisioner.node_volumes.volume_steps import GNU_CP, clone_step
from provisioner.objects.node_handoff import NodeCloneSource
from provisioner.provisioning.fresh_directory import COPIED_SUFFIX, owner_marker_path

GNU_CP_HINT = f"cloning needs GNU cp (coreutils) at {GNU_CP} where the node plugin runs its steps"


def copy_source(
    source: NodeCloneSource,
    volume_name: str,
    target_path: str,
    base_path: str,
    *,
    timeout_seconds: float,
    shell: Shell,
) -> StepResult:
    """Copies the source's contents into `target_path` (call holding both volumes' locks,
    after the setup made `target_path`) and marks the copy whole (`mark_copied`); on failure
    `target_path` is left empty and the result says what failed and what to do."""
    return copy_into(
        source.path,
        f"source volume {source.volume_name} ({source.path})",
        volume_name,
        target_path,
        base_path,
        timeout_seconds=timeout_seconds,
        shell=shell,
    )


def copy_into(
    source_path: str,
    described: str,
    volume_name: str,
    target_path: str,
    base_path: str,
    *,
    timeout_seconds: float,
    shell: Shell,
) -> StepResult:
    """`copy_source` for any directory the caller holds (a clone's source volume, a restore's
    snapshot), `described` in the messages: the same emptying, confined copy and mark."""
    try:
        if empty_directory(target_path):
            earlier = f"{target_path} held an earlier attempt's partial copy: emptied\n"
        else:
            earlier = ""
    except OSError as error:
        return StepResult("clone", False, f"cannot empty {target_path} before the copy: {error}")
    result = run_step(clone_step(source_path, target_path), timeout_seconds, shell)
    if result.ok:
        try:
            mark_copied(base_path, target_path, volume_name)
            return StepResult("clone", True, earlier + result.tail)
        except OSError as error:
            result = StepResult("clone", False, f"cannot mark the copy whole: {error}")
    try:
        empty_directory(target_path)
        emptied = f"{target_path} was emptied"
    except OSError as error:
        emptied = f"{target_path} could not be emptied ({error})"
    hint = f" ({GNU_CP_HINT})" if "unrecognized option" in result.tail else ""
    return StepResult(
        "clone",
        False,
        f"{result.tail}\ncopying {described} failed{hint};"
        f" {emptied} and the setup is retried: if the base path is full, free space there or"
        " delete this claim",
    )


def empty_directory(path: str) -> bool:
    """Removes everything inside the directory `path`, not `path` itself, without following
    a symbolic link; whether there was anything. OSError when `path` is not a directory
    (a symbolic link to one included) or something in it cannot be removed."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        names = os.listdir(fd)  # noqa: PTH208 -- a descriptor: no path to follow a link through
        for name in names:
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                shutil.rmtree(name, dir_fd=fd)
            else:
                os.unlink(name, dir_fd=fd)
        return bool(names)
    finally:
        os.close(fd)


def copied_mark(base_path: str, volume_path: str) -> Path:
    return Path(owner_marker_path(base_path, volume_path) + COPIED_SUFFIX)


def is_copied(base_path: str, volume_path: str, volume_name: str) -> bool:
    """Whether this volume's copy into `volume_path` was made whole (its mark names it). A mark
    naming another volume (a directory an earlier volume had at the same path) is not this
    copy's; neither mark nor owners directory is read through a symbolic link."""
    mark = copied_mark(base_path, volume_path)
    if mark.parent.is_symlink():
        return False
    try:
        fd = os.open(mark, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    with os.fdopen(fd, "rb") as held:
        return held.read(256).decode("utf-8", "replace") == volume_name


def mark_copied(base_path: str, volume_path: str, volume_name: str) -> None:
    """Writes the mark that the copy is whole, durably (written, synced, renamed into place,
    the directory synced), before the setup is recorded and any pod gets the volume."""
    mark = copied_mark(base_path, volume_path)
    owners = mark.parent
    if owners.is_symlink() or not owners.is_dir():
        raise OSError(f"{owners} is not the base path's owners directory")
    partial = owners / f".{mark.name}.{os.getpid()}"
    fd = os.open(
        partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
    )
    try:
        os.write(fd, volume_name.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    partial.replace(mark)
    directory = os.open(owners, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
