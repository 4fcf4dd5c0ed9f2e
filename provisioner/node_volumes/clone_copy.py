"""The copy of a clone's source into its new directory on the node (volume_executor.py holds
both volumes' locks around it): the new directory emptied of an earlier attempt's partial
copy, the `clone` step (volume_steps.clone_step) run, and the new directory emptied again
when the copy failed, so that the clean-up's `finish` removes it with the gate's permit.

Why emptying needs no permit: it is the new volume's own directory, which its own setup made
just before under its lock (`prepare`'s owner marker says so), that no pod has been given yet
(NodePublishVolume waits for this setup), and a class with reuseExistingData cannot clone
(clones.place_clone): what is in it is a partial copy of this very clone, never anyone's data.
clone_step.py argues the same for the helper pod's copy.

The emptying never follows a symbolic link: the partial copy holds the tenant's links as
links, and every removal is made relative to a descriptor of the new directory opened without
following one (shutil.rmtree's descriptor-based walk below it).
"""

from __future__ import annotations

import os
import shutil
import stat

from provisioner.node_volumes.step_runner import Shell, StepResult, run_step
from provisioner.node_volumes.volume_steps import clone_step
from provisioner.objects.node_handoff import NodeCloneSource

GNU_CP_HINT = "cloning needs GNU cp (coreutils) at /usr/bin/cp where the node plugin runs its steps"


def copy_source(
    source: NodeCloneSource, target_path: str, timeout_seconds: float, shell: Shell
) -> StepResult:
    """Copies the source's contents into `target_path` (call holding both volumes' locks,
    after the setup made `target_path`); on failure `target_path` is left empty and the
    result says what failed and what to do."""
    try:
        if empty_directory(target_path):
            earlier = f"{target_path} held an earlier attempt's partial copy: emptied\n"
        else:
            earlier = ""
    except OSError as error:
        return StepResult("clone", False, f"cannot empty {target_path} before the copy: {error}")
    result = run_step(clone_step(source.path, target_path), timeout_seconds, shell)
    if result.ok:
        return StepResult("clone", True, earlier + result.tail)
    try:
        empty_directory(target_path)
        emptied = f"{target_path} was emptied"
    except OSError as error:
        emptied = f"{target_path} could not be emptied ({error})"
    hint = f" ({GNU_CP_HINT})" if "unrecognized option" in result.tail else ""
    return StepResult(
        "clone",
        False,
        f"{result.tail}\ncopying source volume {source.volume_name} ({source.path}) failed{hint};"
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
