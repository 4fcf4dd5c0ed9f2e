"""Child processes the harness owns: started with a log file, stopped by PID, never by name.

Why: a test run must leave nothing behind, also when it fails or is interrupted. Each child
gets its own session (so a Ctrl-C in the terminal reaches the harness, which then stops the
children in order, and so the child's own children can be signalled as one group); when started
from the main thread it also gets a parent-death signal via `setpriv --pdeathsig`, so even a
SIGKILLed harness does not leave a control plane running. (The parent-death signal belongs to
the thread that forks; it is only set from the main thread, which lives as long as the process.)
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

DEFAULT_STOP_GRACE_SECONDS = 10.0


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of `pid` (clock ticks since boot), or None when it is gone.

    Recorded with a PID so a later `stop` does not signal an unrelated process that reused it.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return None
    # The command name (field 2) may contain spaces; fields after it are space separated.
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[19])


def is_same_process_alive(pid: int, start_time: int | None) -> bool:
    """True when `pid` runs and is the process that was recorded with `start_time`."""
    current = process_start_time(pid)
    if current is None:
        return False
    state = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()[0]
    if state == "Z":
        return False
    return start_time is None or current == start_time


def peek_exit_code(popen: subprocess.Popen[bytes]) -> int | None:
    """The exit status of a child without reaping it (None while it runs).

    Not reaping keeps the PID (and so its process group id) reserved until `stop`, so signalling
    the group later can never reach an unrelated process that reused the number.
    """
    if popen.returncode is not None:
        return popen.returncode
    try:
        result = os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return popen.poll()
    if result is None:
        return None
    if result.si_code == os.CLD_EXITED:
        return result.si_status
    return -result.si_status


def signal_group(pid: int, signum: int) -> None:
    """Sends `signum` to the process group led by `pid` (ours: started with a new session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


class ManagedProcess:
    """One long-running child with its output appended to `log_path`."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        stop_signal: int = signal.SIGTERM,
    ) -> None:
        self.name = name
        self.stop_signal = stop_signal
        """The signal `stop` sends first: the one the program shuts down cleanly on (the
        snapshot controller handles only SIGINT; SIGTERM kills it mid-work)."""
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self._popen: subprocess.Popen[bytes] | None = None
        self.start_time: int | None = None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = self.argv
        setpriv = shutil.which("setpriv")
        if setpriv and threading.current_thread() is threading.main_thread():
            argv = [setpriv, "--pdeathsig", "KILL", "--", *argv]
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        self.start_time = process_start_time(self._popen.pid)

    def exit_code(self) -> int | None:
        """None while running (or never started), else the exit status (negative: signal)."""
        return peek_exit_code(self._popen) if self._popen else None

    def is_running(self) -> bool:
        return self._popen is not None and peek_exit_code(self._popen) is None

    def wait_exited(self, timeout_seconds: float) -> bool:
        """Waits up to `timeout_seconds` for the child to exit, without reaping it."""
        deadline = time.monotonic() + timeout_seconds
        while self.is_running():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def stop(self, grace_seconds: float = DEFAULT_STOP_GRACE_SECONDS) -> None:
        """`stop_signal` (SIGTERM) to the child's process group, SIGKILL after `grace_seconds`,
        then reap."""
        if self._popen is None:
            return
        pid = self._popen.pid
        if self._popen.returncode is None:
            signal_group(pid, self.stop_signal)
            if not self.wait_exited(grace_seconds):
                signal_group(pid, signal.SIGKILL)
            self.wait_exited(grace_seconds)
            # The leader is a zombie until reaped, so its group id cannot have been reused:
            # whatever it left behind in its group is ours to kill.
            signal_group(pid, signal.SIGKILL)
        self._popen.wait()

    def last_log_line(self) -> str:
        """The last non-empty line of the log, for one-line error reports."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 4096))
                tail = log.read().decode("utf-8", "replace")
        except OSError:
            return ""
        lines = [line.strip() for line in tail.splitlines() if line.strip()]
        return lines[-1] if lines else ""


def stop_all(processes: Sequence[ManagedProcess], grace_seconds: float) -> None:
    """Stops several processes in parallel: SIGTERM to all, then wait on each in turn."""
    for process in processes:
        if process.is_running() and process.pid is not None:
            signal_group(process.pid, process.stop_signal)
    deadline = time.monotonic() + grace_seconds
    for process in processes:
        process.stop(grace_seconds=max(0.1, deadline - time.monotonic()))
