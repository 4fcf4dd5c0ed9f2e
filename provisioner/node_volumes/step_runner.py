"""Runs a volume's steps (volume_steps.py) as processes, in order, each within the config's
cmdTimeoutSeconds, stopping at the first that fails.

Each step runs in a session of its own, and a step past its deadline is killed with its whole
process group (a setup script's children too): otherwise a child holding the output pipe open
would keep the plugin waiting after the step itself was killed, as a helper pod's deadline
would not. Each runs confined by bubblewrap to what its helper pod would see of the node
(sandbox.py); the step dies with the bwrap that runs it. What a step wrote (stdout and stderr
together) is kept to its tail, for the event.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from provisioner.node_volumes.sandbox import (
    BWRAP,
    DEFAULT_PATH,
    SYSTEM,
    SYSTEM_SHELL,
    Shell,
    View,
    confined_argv,
)
from provisioner.node_volumes.volume_steps import NodeStep

__all__ = [
    "DEFAULT_PATH",
    "SYSTEM",
    "SYSTEM_SHELL",
    "Shell",
    "StepResult",
    "run_step",
    "run_steps",
    "sandbox_problem",
]

TAIL_BYTES = 2048
MISSING_BWRAP = (
    "bwrap is not on the PATH: the node plugin runs each volume step confined by bubblewrap;"
    " install the node's `bubblewrap` package, or run the plugin from the project's image"
)


@dataclass(frozen=True)
class StepResult:
    name: str
    ok: bool
    tail: str
    """The end of what the step wrote, or why it did not run to its end."""


def run_steps(
    steps: Sequence[NodeStep], timeout_seconds: float, shell: Shell = SYSTEM
) -> list[StepResult]:
    """The results of the steps that ran: all of them, or up to the first that failed."""
    results: list[StepResult] = []
    for step in steps:
        result = run_step(step, timeout_seconds, shell)
        results.append(result)
        if not result.ok:
            break
    return results


def run_step(step: NodeStep, timeout_seconds: float, shell: Shell = SYSTEM) -> StepResult:
    # Only the step's own environment and a PATH: a helper container sees nothing of the
    # plugin's own (its service account's address, its options).
    env = {"PATH": shell.path(), **step.env}
    # Confined to its view (sandbox.py): a step sees its base path, not the node's others.
    # A view path must be a directory: bwrap would bind a file as well, or fail less clearly.
    try:
        argv = confined_argv(shell.argv(step.argv), step.view, shell)
    except ValueError as error:
        return StepResult(step.name, False, f"{step.name}: {error}")
    for path in (*step.view.read_write, *step.view.read_only):
        if not Path(path).is_dir():
            return StepResult(step.name, False, f"{step.name}: {path} is not a directory")
    # bwrap found on the plugin's own PATH, not on the step's (the shell directory comes first).
    if (bwrap := shutil.which(BWRAP)) is None:
        return StepResult(step.name, False, f"{step.name}: {MISSING_BWRAP}")
    process = subprocess.Popen(
        [bwrap, *argv[1:]],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd="/",
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=timeout_seconds)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return StepResult(
            step.name,
            False,
            _tail(output) + f"\n{step.name}: killed after {timeout_seconds:g}s (cmdTimeoutSeconds)",
        )
    tail = _tail(output)
    if process.returncode != 0:
        tail += f"\n{step.name}: exit status {process.returncode}"
    return StepResult(step.name, process.returncode == 0, tail.strip())


def sandbox_problem() -> str | None:
    """Why no step could run confined on this node, or None: bwrap missing from the plugin's
    PATH, or refused what the steps ask of it (a kernel without the namespaces, a container
    not allowed to make them). A probe step, bwrap's --version run inside a sandbox of its
    own, says it before the plugin takes any volume."""
    bwrap = shutil.which(BWRAP)
    if bwrap is None:
        return MISSING_BWRAP
    probe = [bwrap, *confined_argv([bwrap, "--version"], View(), SYSTEM)[1:]]
    try:
        result = subprocess.run(
            probe, stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{bwrap} cannot confine the volume steps: {error}"
    if result.returncode != 0:
        why = result.stderr.decode("utf-8", "replace").strip().splitlines()[-1:]
        return f"{bwrap} cannot confine the volume steps: {' '.join(why) or result.returncode}"
    return None


def _tail(output: bytes | None) -> str:
    return (output or b"")[-TAIL_BYTES:].decode("utf-8", "replace")
