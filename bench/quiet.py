"""Waits for a quiet control plane before a start-up is measured.

Why: right after the bench writes tens of thousands of objects, etcd and kube-apiserver go on
working for minutes (compaction, the watch cache catching up, kube-controller-manager's resync),
and a provisioner started then shares two CPUs with them: its time to ready measured the
cluster's back-log, not the provisioner (the 2026-11-23 run's 50,000-volume start-ups). A user's
provisioner restarts on a cluster in its steady state, so each start-up waits until the control
plane's processes are idle or their load has settled (`is_quiet`), and the wait is reported
beside the figure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import psutil

QUIET_SHARE = 0.15
"""Control-plane CPU, in CPUs, under which a window is quiet whatever came before: an idle local
cluster with four kwok nodes sits at 0.02-0.05 CPU (measured in 2 s windows)."""
QUIET_WINDOWS = 2
SETTLED_WINDOWS = 3
SETTLED_SPREAD = 0.25
"""Over a large data set the control plane never idles: kube-controller-manager's PV binder
walks every claim and volume once a sync period (15 s in the scale cluster, see
`bench.scale.SCALE_CONTROLLER_MANAGER_FLAGS`), 0.27-0.31 CPU at 50,000 volumes. What
a start-up must not meet is the back-log after the data set was written (compaction, watch
caches and informers catching up), which decays; so the load has settled when the last
windows stay within this fraction of their mean."""
WINDOW_SECONDS = 15.0
"""One PV binder sync period, so each window holds one of its passes."""
MAX_WAIT_SECONDS = 300.0


@dataclass(frozen=True)
class QuietWait:
    seconds: float
    """How long the wait took."""
    last_share: float
    """The control plane's CPU share, in CPUs, over the last window."""
    quiet: bool
    """False when the wait gave up at its limit; the start-up is then measured anyway."""


def is_quiet(shares: Sequence[float]) -> bool:
    """True when the last QUIET_WINDOWS windows each stayed under QUIET_SHARE, or the last
    SETTLED_WINDOWS windows stay within SETTLED_SPREAD of their mean (a steady load)."""
    if len(shares) >= QUIET_WINDOWS and all(s < QUIET_SHARE for s in shares[-QUIET_WINDOWS:]):
        return True
    if len(shares) < SETTLED_WINDOWS:
        return False
    last = shares[-SETTLED_WINDOWS:]
    mean = sum(last) / len(last)
    return all(abs(share - mean) <= SETTLED_SPREAD * mean for share in last)


def _cpu_seconds(processes: Sequence[psutil.Process]) -> float:
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue  # a component that ended is not load
        total += times.user + times.system
    return total


def wait_until_quiet(
    pids: Sequence[int],
    *,
    say: Callable[[str], None] = lambda _: None,
    window: float = WINDOW_SECONDS,
    max_wait: float = MAX_WAIT_SECONDS,
) -> QuietWait:
    """Samples the CPU time of `pids` every `window` seconds until `is_quiet`."""
    processes = [psutil.Process(pid) for pid in pids if psutil.pid_exists(pid)]
    started = time.monotonic()
    shares: list[float] = []
    before = _cpu_seconds(processes)
    told = started
    while True:
        time.sleep(window)
        now_cpu = _cpu_seconds(processes)
        shares.append((now_cpu - before) / window)
        before = now_cpu
        waited = time.monotonic() - started
        if is_quiet(shares):
            return QuietWait(waited, shares[-1], True)
        if waited >= max_wait:
            return QuietWait(waited, shares[-1], False)
        if time.monotonic() - told >= 60:
            told = time.monotonic()
            say(f"waiting for a quiet control plane: {shares[-1]:.2f} CPU after {waited:.0f}s")
