"""CPU seconds and memory of the process under test, sampled with psutil.

Peak RSS is the kernel's high-water mark (VmHWM), so no short spike between samples is missed.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

MIB = 1024 * 1024


class ProcessMonitor:
    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.pid = pid
        self._process = psutil.Process(pid)
        self._interval = interval
        self._samples: list[tuple[float, int]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="process-monitor", daemon=True)

    def start(self) -> ProcessMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                rss = self._process.memory_info().rss
            except psutil.Error:
                return
            with self._lock:
                self._samples.append((time.time(), rss))
            self._stop.wait(self._interval)

    def cpu_seconds(self) -> float:
        times = self._process.cpu_times()
        return float(times.user + times.system)

    def rss_mib(self) -> float:
        return float(self._process.memory_info().rss) / MIB

    def peak_rss_mib(self) -> float:
        """The process's RSS high-water mark since it started."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024 / MIB
        return max((rss for _, rss in self._samples), default=0) / MIB

    def median_rss_mib(self, since: float) -> float:
        with self._lock:
            values = [rss for at, rss in self._samples if at >= since]
        return statistics.median(values) / MIB if values else self.rss_mib()


@dataclass(frozen=True)
class IdleFigures:
    steady_rss_mib: float
    """Median RSS over the window."""
    cpu_seconds: float
    """CPU (user + system) over the window."""


def idle_window(
    monitors: Sequence[ProcessMonitor], settle_seconds: float, idle_seconds: float
) -> list[IdleFigures]:
    """After `settle_seconds`, each monitored process's figures over the next `idle_seconds`,
    in the monitors' order (their sampling must have started)."""
    time.sleep(settle_seconds)
    idle_from = time.time()
    before = [monitor.cpu_seconds() for monitor in monitors]
    time.sleep(idle_seconds)
    return [
        IdleFigures(monitor.median_rss_mib(idle_from), monitor.cpu_seconds() - cpu)
        for monitor, cpu in zip(monitors, before, strict=True)
    ]
