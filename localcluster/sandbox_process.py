"""Starting, watching and ending one container's sandbox process.

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
SANDBOX_LAUNCH = (
    "import sys; sys.path.append(sys.argv[1]); import pod_sandbox;"
    " sys.exit(pod_sandbox.main(sys.argv[2:]))"
)
"""Imported rather than run as a file, so that its compiled form is cached: it starts with
every container, and compiling it each time was a quarter of its start-up."""
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
        "--uts",
        "--propagation",
        "private",
        "--",
        sys.executable,
        "-I",
        "-S",
        "-c",
        SANDBOX_LAUNCH,
        str(SANDBOX_SCRIPT.parent),
        str(plan_path),
        str(start_failure_path),
    ]
    setpriv = shutil.which("setpriv")
    # Called from the pod's own thread, which outlives the process: the parent-death signal
    # then fires only if the whole harness dies.
    return [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv


class SandboxProcess:
    """One start of a container: the sandbox process, its output appended to `log_path`."""

    def __init__(self, plan_path: Path, log_path: Path) -> None:
        self.plan_path = plan_path
        self.log_path = log_path
        self.start_failure_path = plan_path.with_name("start-failure")
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> int:
        """Starts the sandbox in a session of its own; returns its PID."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.start_failure_path.unlink(missing_ok=True)
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                sandbox_argv(self.plan_path, self.start_failure_path),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self._process.pid

    @property
    def pid(self) -> int:
        assert self._process is not None, "not started"
        return self._process.pid

    def exit_code(self) -> int | None:
        """None while it runs; not reaped, so its process group id stays ours."""
        assert self._process is not None, "not started"
        return peek_exit_code(self._process)

    def signal(self, signum: int) -> None:
        """Sends `signum` to the container's whole process group."""
        signal_group(self.pid, signum)

    def finish(self) -> SandboxOutcome:
        """Kills whatever is left in the group, reaps, and says how it ended (exit code 128+N
        for signal N; the start failure, empty when the command did start)."""
        assert self._process is not None, "not started"
        signal_group(self._process.pid, signal.SIGKILL)
        exit_code = self._process.wait()
        failure = ""
        if self.start_failure_path.exists():
            failure = self.start_failure_path.read_text(encoding="utf-8", errors="replace")
        return SandboxOutcome(128 - exit_code if exit_code < 0 else exit_code, False, failure)


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
    process = SandboxProcess(plan_path, log_path)
    on_started(process.start())
    deadline = time.monotonic() + deadline_seconds if deadline_seconds else None
    deadline_exceeded = False
    while process.exit_code() is None and not cancelled.is_set():
        if deadline is not None and time.monotonic() >= deadline:
            deadline_exceeded = True
            break
        cancelled.wait(POLL_SECONDS)
    outcome = process.finish()
    if cancelled.is_set():
        return None
    if deadline_exceeded:
        return SandboxOutcome(SIGKILL_EXIT_CODE, True, outcome.start_failure)
    return outcome
