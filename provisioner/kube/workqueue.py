"""A rate-limited work queue with client-go's guarantees, which the controller relies on for "no
double provisioning":

- a key waiting in the queue is held once, however often it is added (dedup);
- a key being processed is never handed to a second worker; added again meanwhile, it is queued
  again when the first worker calls `done`;
- failures back off per key (exponential, capped) and all retries share one token bucket.

One deliberate difference: after `shutdown()`, `get()` returns None at once instead of draining
what is still queued. Pending keys are recomputed by whoever runs next (informer resync or the next
leader), so draining would only delay a shutdown.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

from provisioner.kube.clock import SYSTEM_CLOCK, Clock
from provisioner.kube.rate_limit import ItemExponentialBackoff, TokenBucket

T = TypeVar("T", bound=Hashable)


class QueueMetrics(Protocol):
    """What the queue reports; `provisioner.kube.metrics.Metrics.queue_metrics` implements it."""

    def added(self) -> None: ...

    def retried(self) -> None: ...

    def report_depth(self, read: Callable[[], int]) -> None:
        """Called once: `read()` gives the depth whenever it is asked for (a scrape), so that
        no add or get pays for reporting it."""


class WorkQueue(Generic[T]):
    def __init__(
        self,
        name: str = "",
        *,
        base_delay: float = 1.0,
        max_delay: float = 300.0,
        qps: float = 10.0,
        burst: int = 100,
        clock: Clock = SYSTEM_CLOCK,
        metrics: QueueMetrics | None = None,
    ) -> None:
        self.name = name
        self._clock = clock
        self._metrics = metrics
        self._backoff = ItemExponentialBackoff(base_delay, max_delay)
        self._bucket = TokenBucket(qps, burst, clock)
        self._condition = threading.Condition(threading.Lock())
        self._queue: deque[T] = deque()
        self._dirty: set[T] = set()
        self._processing: set[T] = set()
        # Delayed adds: a heap of (ready_at, sequence, item); `_ready_at` holds each item's
        # earliest time, so a heap entry that no longer matches it is stale and skipped.
        self._waiting: list[tuple[float, int, T]] = []
        self._ready_at: dict[T, float] = {}
        self._sequence = itertools.count()
        self._shutting_down = False
        if metrics is not None:
            # len() of a deque needs no lock: a scrape reads it as it is at that moment.
            metrics.report_depth(lambda: len(self._queue))

    def add(self, item: T) -> None:
        with self._condition:
            self._add_locked(item)

    def add_after(self, item: T, delay: float) -> None:
        """Add `item` once `delay` seconds have passed; an earlier pending time wins."""
        if delay <= 0:
            self.add(item)
            return
        with self._condition:
            if self._shutting_down:
                return
            ready_at = self._clock.monotonic() + delay
            current = self._ready_at.get(item)
            if current is not None and current <= ready_at:
                return
            self._ready_at[item] = ready_at
            heapq.heappush(self._waiting, (ready_at, next(self._sequence), item))
            self._condition.notify()

    def add_rate_limited(self, item: T) -> None:
        """Re-add a failed item after its backoff, or later if the overall bucket is empty."""
        delay = max(self._backoff.when(item), self._bucket.reserve())
        if self._metrics is not None:
            self._metrics.retried()
        self.add_after(item, delay)

    def forget(self, item: T) -> None:
        """Reset the item's backoff (call after it was processed successfully)."""
        self._backoff.forget(item)

    def num_requeues(self, item: T) -> int:
        return self._backoff.num_requeues(item)

    def get(self, timeout: float | None = None) -> T | None:
        """The next item to process, marked as processing until `done(item)`. Blocks until one is
        ready; returns None on shutdown or when `timeout` seconds pass first."""
        deadline = None if timeout is None else self._clock.monotonic() + timeout
        with self._condition:
            while True:
                if self._shutting_down:
                    return None
                now = self._clock.monotonic()
                self._promote_due_locked(now)
                if self._queue:
                    item = self._queue.popleft()
                    self._dirty.discard(item)
                    self._processing.add(item)
                    return item
                wait = self._waiting[0][0] - now if self._waiting else None
                if deadline is not None:
                    remaining = deadline - now
                    if remaining <= 0:
                        return None
                    wait = remaining if wait is None else min(wait, remaining)
                self._condition.wait(wait)

    def done(self, item: T) -> None:
        """Processing of `item` finished; if it was added meanwhile, queue it again now."""
        with self._condition:
            self._processing.discard(item)
            if item in self._dirty and not self._shutting_down:
                self._queue.append(item)
                self._condition.notify()

    def shutdown(self) -> None:
        """Stop handing out items: blocked and future `get()` calls return None."""
        with self._condition:
            self._shutting_down = True
            self._queue.clear()
            self._dirty.clear()
            self._waiting.clear()
            self._ready_at.clear()
            self._condition.notify_all()

    @property
    def shutting_down(self) -> bool:
        with self._condition:
            return self._shutting_down

    def __len__(self) -> int:
        """Items ready to be handed out (not those processing or waiting for a delay)."""
        with self._condition:
            self._promote_due_locked(self._clock.monotonic())
            return len(self._queue)

    def _add_locked(self, item: T) -> None:
        if self._shutting_down or item in self._dirty:
            return
        self._dirty.add(item)
        if self._metrics is not None:
            self._metrics.added()
        if item in self._processing:
            return
        self._queue.append(item)
        self._condition.notify()

    def _promote_due_locked(self, now: float) -> None:
        while self._waiting and self._waiting[0][0] <= now:
            ready_at, _, item = heapq.heappop(self._waiting)
            if self._ready_at.get(item) == ready_at:
                del self._ready_at[item]
                self._add_locked(item)
