"""A cluster that outlives the command that started it: the detached supervisor and its stop.

Why: `python -m localcluster start` must return to the shell while the cluster (and its helper
pod runner, which is Python) keeps running; so it launches `python -m localcluster run` in a new
session and waits for the state file to say ready. `stop` asks that supervisor to stop
(SIGTERM), and if it is gone or stuck, stops the recorded components by PID itself.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from localcluster.errors import ClusterError
from localcluster.processes import is_same_process_alive, signal_group
from localcluster.state_file import (
    ClusterState,
    RecordedProcess,
    read_state,
    remove_state,
    supervisor_log_path,
)

START_TIMEOUT_SECONDS = 300.0
STOP_TIMEOUT_SECONDS = 60.0
KILL_GRACE_SECONDS = 10.0


def is_alive(process: RecordedProcess) -> bool:
    return is_same_process_alive(process.pid, process.start_time)


def launch(name: str, run_arguments: Sequence[str]) -> ClusterState:
    """Starts the supervisor and waits until its cluster is ready."""
    existing = read_state(name)
    if existing is not None and is_alive(existing.supervisor):
        raise ClusterError(
            f"localcluster: cluster {name!r} is already running (supervisor pid "
            f"{existing.supervisor.pid}); stop it first: python -m localcluster stop --name {name}"
        )
    remove_state(name)
    log_path = supervisor_log_path(name)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "localcluster", "run", "--name", name, *run_arguments],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        state = read_state(name)
        if state is not None and state.ready:
            return state
        if supervisor.poll() is not None:
            lines = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
            detail = lines[-1] if lines else f"exit code {supervisor.returncode}"
            raise ClusterError(f"{detail} (supervisor log: {log_path})")
        time.sleep(0.2)
    signal_group(supervisor.pid, signal.SIGTERM)
    raise ClusterError(f"localcluster: cluster {name!r} was not ready in time; see {log_path}")


def _wait_gone(process: RecordedProcess, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while is_alive(process):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


def stop(name: str) -> bool:
    """Stops the named background cluster; False when there was none."""
    state = read_state(name)
    if state is None:
        return False
    if is_alive(state.supervisor):
        # Signal the supervisor alone: under `run` in a terminal it leads no process group.
        os.kill(state.supervisor.pid, signal.SIGTERM)
        if not _wait_gone(state.supervisor, STOP_TIMEOUT_SECONDS):
            os.kill(state.supervisor.pid, signal.SIGKILL)
    for component in state.components:
        if is_alive(component):
            signal_group(component.pid, signal.SIGTERM)
            if not _wait_gone(component, KILL_GRACE_SECONDS):
                signal_group(component.pid, signal.SIGKILL)
    if state.cluster_dir:
        shutil.rmtree(state.cluster_dir, ignore_errors=True)
    remove_state(name)
    supervisor_log_path(name).unlink(missing_ok=True)
    return True
