"""Pausing Python's cycle collector while informers fill their caches.

A first list makes tens of thousands of records in a few seconds. Each allocation of a
container object counts towards the collector's next run, and every run walks all the young
objects, which here are exactly the records just made and still alive: at 50,000 volumes that
was a quarter of the start-up's CPU, finding nothing to collect (records hold no cycles).
Informers list at the same time on their own threads, so the pause is counted: the collector
runs again when the last list ends, or at once if it was not running before the first.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holders = 0
_was_enabled = False


@contextmanager
def collection_paused() -> Iterator[None]:
    global _holders, _was_enabled  # noqa: PLW0603 (one collector per process)
    with _lock:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _was_enabled:
                gc.enable()


def settle_long_lived() -> None:
    """After the caches are filled: collect once, then exempt every object alive now from later
    collections (`gc.freeze`). The cached records live until replaced and hold no cycles; left
    in the collector's oldest generation, every full collection would walk them all again."""
    gc.collect()
    gc.freeze()
