"""Starting, watching and ending one helper container's sandbox process.

Why: a kubelet kills a container at its pod's active deadline or when the pod is deleted, and
kills every process the container left behind when it ends. This does the same for the sandbox
(`unshare` + pod_sandbox.py): it runs in its own session, is watched without being reaped (so
its process group id stays ours), and its whole group is killed once it is over.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from localcluster.processes import peek_exit_code, signal_group

SANDBOX_SCRIPT = Path(__file__).with_name("pod_sandbox.py")
SIGKILL_EXIT_CODE = 137
POLL_SECONDS = 0.05


@dataclass(frozen=True)
class SandboxOutcome:
    """How a container ended: its exit code (128+N for signal N), whether the pod's active
    deadline killed it, and why it could not start (empty when it did start)."""

    exit_code: int
    deadline_exceeded: bool
    start_failure: str


def sandbox_argv(plan_path: Path, start_failure_path: Path) -> list[str]:
    argv = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        sys.executable,
        "-I",
        "-S",
        str(SANDBOX_SCRIPT),
        str(plan_path),
        str(start_failure_path),
    ]
    setpriv = shutil.which("setpriv")
    # Called from the pod's own thread, which outlives the process: the parent-death signal
    # then fires only if the whole harness dies.
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


def run_sandbox(
    plan_path: Path,
    log_path: Path,
    *,
    deadline_seconds: float | None,
    cancelled: threading.Event,
    on_started: Callable[[int], None],
) -> SandboxOutcome | None:
    """Runs the sandbox to its end with its output appended to `log_path`; None when
    `cancelled` was set first (the process is then killed)."""
    start_failure_path = plan_path.with_name("start-failure")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            sandbox_argv(plan_path, start_failure_path),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    on_started(process.pid)
    deadline = time.monotonic() + deadline_seconds if deadline_seconds else None
    deadline_exceeded = False
    while peek_exit_code(process) is None and not cancelled.is_set():
        if deadline is not None and time.monotonic() >= deadline:
            deadline_exceeded = True
            break
        cancelled.wait(POLL_SECONDS)
    # Not reaped yet, so the group id is still ours: kill whatever is left in it.
    signal_group(process.pid, signal.SIGKILL)
    exit_code = process.wait()
    if cancelled.is_set():
        return None
    failure = ""
    if start_failure_path.exists():
        failure = start_failure_path.read_text(encoding="utf-8", errors="replace")
    if deadline_exceeded:
        exit_code = SIGKILL_EXIT_CODE
    elif exit_code < 0:
        exit_code = 128 - exit_code
    return SandboxOutcome(exit_code, deadline_exceeded, failure)
