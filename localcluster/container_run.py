"""One run of an image-table pod's container: start, probe, stop, and how it ended.

Why: between its start and its exit a container is probed (startup, then readiness and
liveness), may be killed for a failed liveness probe or for the pod's deletion (SIGTERM, then
SIGKILL after the grace period), and its end becomes the `terminated` state a kubelet writes,
with the termination message cut from this run's output only.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from localcluster import container_status as statuses
from localcluster import image_pod_plan as rules
from localcluster.event_log import utc_now
from localcluster.helper_pod_status import failure_message
from localcluster.probes import Prober, ProbeSpec, http_check, parse_probe
from localcluster.running_pod import RunningPod
from localcluster.sandbox_process import SandboxProcess

POLL_SECONDS = 0.1
LOG_TAIL_BYTES = 16384


class ContainerRun:
    """Runs the container of `running` once, from the plan at `plan_path`."""

    def __init__(self, running: RunningPod, plan_path: Path, attempt: int) -> None:
        self.running = running
        self.plan_path = plan_path
        self.attempt = attempt
        self.container = running.pod["spec"]["containers"][0]
        self.process = SandboxProcess(plan_path, running.log_path)
        self.liveness_failed = threading.Event()
        self.probers: list[Prober] = []

    def run(self) -> int | None:
        """The exit code (128+N for signal N, 128 when it could not start); None when the pod
        is gone or being deleted, so it must not be restarted."""
        running = self.running
        log_offset = self._start_log()
        pid = self.process.start()
        running.context.on_process(pid)
        running.log(f"container started, pid {pid} (attempt {self.attempt})")
        started_at = utc_now()
        life = running.life
        life.container_id = statuses.container_id(running.uid, self.attempt)
        life.state = {"running": {"startedAt": started_at}}
        life.ever_started = True
        running.phase = "Running"
        startup = self._probe("startupProbe")
        readiness = self._probe("readinessProbe")
        life.started = startup is None
        life.ready = startup is None and readiness is None
        running.report()
        if startup is not None:
            self._run_prober(startup, None, self._startup_changed)
        else:
            self._start_main_probes()
        stopped_for_good = self._wait()
        for prober in self.probers:
            prober.stop()
        outcome = self.process.finish()
        if stopped_for_good:
            running.log(f"container stopped (exit code {outcome.exit_code})")
            return None
        exit_code = 128 if outcome.start_failure else outcome.exit_code
        message = outcome.start_failure or failure_message(
            self.container, exit_code, self._log_since(log_offset)
        )
        life.state = statuses.terminated(
            exit_code,
            started_at=started_at,
            finished_at=utc_now(),
            container_id=life.container_id,
            message=message,
        )
        life.ready = life.started = False
        running.log(f"container exited with {exit_code}")
        running.report()
        return exit_code

    def _start_log(self) -> int:
        """Separates this run's output from the one before; returns where this run starts."""
        path = self.running.log_path
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab") as log:
            if self.attempt:
                restart = self.running.life.restart_count
                log.write(f"----- localcluster: restart {restart} at {utc_now()} -----\n".encode())
            return log.tell()

    def _log_since(self, offset: int) -> bytes:
        with self.running.log_path.open("rb") as log:
            log.seek(max(offset, log.seek(0, 2) - LOG_TAIL_BYTES))
            return log.read()

    # Probes.
    def _probe(self, key: str) -> ProbeSpec | None:
        try:
            return parse_probe(self.container.get(key), self.container)
        except ValueError as error:
            self.running.log(f"{key} ignored: {error}")
            return None

    def _check(self, spec: ProbeSpec) -> bool:
        network = self.running.network
        return http_check(spec, network.new_socket, network.pod_ip)

    def _run_prober(
        self, spec: ProbeSpec, initial: bool | None, on_change: Callable[[bool], None]
    ) -> None:
        prober = Prober(spec, lambda: self._check(spec), initial=initial, on_change=on_change)
        self.probers.append(prober)
        prober.start()

    def _start_main_probes(self) -> None:
        readiness = self._probe("readinessProbe")
        liveness = self._probe("livenessProbe")
        if readiness is not None:
            self._run_prober(readiness, False, self._readiness_changed)
        if liveness is not None:
            self._run_prober(liveness, True, self._liveness_changed)

    def _startup_changed(self, succeeded: bool) -> None:
        if not succeeded:
            self._liveness_changed(False)
            return
        self.probers[0].stop()  # the startup probe has done its job
        self.running.life.started = True
        self.running.life.ready = self._probe("readinessProbe") is None
        self.running.report()
        self._start_main_probes()

    def _readiness_changed(self, ready: bool) -> None:
        if self.process.exit_code() is None and not self.running.stopping():
            self.running.life.ready = ready
            self.running.report()

    def _liveness_changed(self, alive: bool) -> None:
        if not alive:
            self.running.log("liveness probe failed: the container will be restarted")
            self.liveness_failed.set()
            self.running.changed.set()

    # Waiting for the end.
    def _wait(self) -> bool:
        """Until the container exits or is stopped; True when the pod is gone or deleted."""
        running = self.running
        while self.process.exit_code() is None:
            if running.gone.is_set():
                return True
            if running.deleting.is_set():
                self._stop(rules.grace_seconds(running.pod))
                return True
            if self.liveness_failed.is_set():
                probe = self.container.get("livenessProbe") or {}
                grace = probe.get("terminationGracePeriodSeconds")
                self._stop(float(grace) if grace is not None else rules.grace_seconds(running.pod))
                return False
            running.changed.wait(POLL_SECONDS)
            running.changed.clear()
        return False

    def _stop(self, grace: float) -> None:
        """SIGTERM, then SIGKILL (by finish()) once `grace` has passed."""
        self.running.life.ready = False
        self.running.report()
        self.process.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.process.exit_code() is None and time.monotonic() < deadline:
            if self.running.gone.is_set():
                return
            time.sleep(POLL_SECONDS / 2)
