"""The floor: how fast this cluster absorbs a given number of API writes from a tight client
loop (create and delete ConfigMaps) at a given concurrency. A burst can not bind faster than the
cluster absorbs the writes it causes, so its time is reported as a multiple of this.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from bench.api import RawApi

FLOOR_NAMESPACE = "bench-floor"


def run_floor(api: RawApi, writes: int, concurrency: int) -> float:
    """Seconds to send `writes` writes (creates and deletes alternating) from `concurrency`
    threads."""
    api.create("/api/v1/namespaces", {"metadata": {"name": FLOOR_NAMESPACE}})
    path = f"/api/v1/namespaces/{FLOOR_NAMESPACE}/configmaps"
    pairs, extra = divmod(writes, 2)

    def write(index: int) -> None:
        name = f"floor-{index:06d}"
        api.create(path, {"metadata": {"name": name}, "data": {"key": "value"}})
        if index < pairs:
            api.delete(f"{path}/{name}", missing_ok=False)

    started = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(write, range(pairs + extra)))
    return time.monotonic() - started
