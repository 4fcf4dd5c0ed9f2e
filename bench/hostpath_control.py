"""The control for a CSI consumer's start: the same number of consumers, spread over the same
real nodes the same way, created at once, each with a hostPath volume of its own (inline, type
DirectoryOrCreate) and nothing to provision.

Why: a burst's consumers reach their kubelets as their claims are bound. With CSI volumes and
the binder's limit lifted, 40 claims are Bound within about 3 s, so 40 consumers arrive at two
kubelets together and queue for sandboxes and containers; the helper-pod class's consumers
arrive one by one as their helpers end. Held against those, a CSI consumer's start measures the
arrival, not the volume. Here the only difference from a CSI burst's consumers is the volume:
a hostPath mount in place of the node plugin's NodePublishVolume, the floor a CSI start is held
against (`goals.HOSTPATH_AT_ONCE`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.api import RawApi
from bench.burst import (
    CONSUMERS_PATH,
    consumer,
    consumer_starts,
    spread,
    watch_consumers,
)
from bench.stats import Latencies

CONTROL_PREFIX = "hostpath-"


def hostpath_consumer(name: str, directory: Path, image: str, node: str | None) -> dict[str, Any]:
    """A consumer as `burst.consumer` makes one, its volume an inline hostPath instead of a
    claim."""
    pod = consumer(name, "", image, node)
    pod["spec"]["volumes"] = [
        {"name": "data", "hostPath": {"path": str(directory / name), "type": "DirectoryOrCreate"}}
    ]
    return pod


def run_hostpath_consumers(
    api: RawApi,
    *,
    count: int,
    nodes: Sequence[str],
    directory: Path,
    image: str,
    concurrency: int,
    timeout: float,
) -> Latencies:
    """Each control consumer's start (bound to its node -> Running), once all `count` run;
    then all deleted, and gone before this returns. `directory`: where the kubelets make the
    volumes (the caller removes it)."""
    names = [f"{CONTROL_PREFIX}{index:05d}" for index in range(count)]
    timeline = watch_consumers(api)
    try:
        with ThreadPoolExecutor(concurrency) as pool:
            list(
                pool.map(
                    lambda name, node: api.create(
                        CONSUMERS_PATH, hostpath_consumer(name, directory, image, node)
                    ),
                    names,
                    [spread(i, nodes) for i in range(count)],
                )
            )
        timeline.wait_until(
            lambda: all(name in timeline.reached["running"] for name in names),
            timeout,
            f"{count} hostPath consumers Running",
        )
        scheduled = {n: t for n, t in timeline.reached["scheduled"].items() if n in names}
        starts = consumer_starts(scheduled, dict(timeline.reached["running"]))
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(lambda name: api.delete(f"{CONSUMERS_PATH}/{name}"), names))
        timeline.wait_until(
            lambda: all(name in timeline.deleted for name in names),
            timeout,
            "the hostPath consumers gone",
        )
    finally:
        timeline.stop()
    time.sleep(1.0)  # the kubelets' teardown of the last ones, before the next burst's quiet look
    return Latencies.of(starts)
