"""A rate-limited work queue with client-go's guarantees, which the controller relies on for "no
double provisioning":

- a key waiting in the queue is held once, however often it is added (dedup);
- a key being processed is never handed to a second worker; added again meanwhile, it is queued
  again when the first worker calls `done`;
- failures back off per key (exponential, capped) and all retries share one token bucket.

One addition, after controller-runtime's priority queue: a key added with `low_priority` is
handed out only when no other key is ready. A leader's first list of 50,000 bound volumes is
then swept behind the claim that arrived meanwhile, not in front of it. Added again normally
while it waits, a low-priority key moves up.

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
        # Low-priority keys in order; an entry no longer in `_low_dirty` moved up, and is
        # skipped when its turn comes (removing it from the middle would cost a scan).
        self._low: deque[T] = deque()
        self._low_dirty: set[T] = set()
        self._dirty: set[T] = set()
        self._processing: set[T] = set()
        # Delayed adds: a heap of (ready_at, sequence, item); `_ready_at` holds each item's
        # earliest time, so a heap entry that no longer matches it is stale and skipped.
        self._waiting: list[tuple[float, int, T]] = []
        self._ready_at: dict[T, float] = {}
        self._sequence = itertools.count()
        self._shutting_down = False
        if metrics is not None:
            # len() needs no lock: a scrape reads the depth as it is at that moment.
            metrics.report_depth(lambda: len(self._queue) + len(self._low_dirty))

    def add(self, item: T, *, low_priority: bool = False) -> None:
        """Queue `item`; `low_priority`: only once no other item is ready."""
        with self._condition:
            self._add_locked(item, low_priority)

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
                item = self._next_locked()
                if item is not None:
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
                self._enqueue_locked(item)

    def shutdown(self) -> None:
        """Stop handing out items: blocked and future `get()` calls return None."""
        with self._condition:
            self._shutting_down = True
            self._queue.clear()
            self._low.clear()
            self._low_dirty.clear()
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
            waiting_low = len(self._low_dirty) - len(self._processing & self._low_dirty)
            return len(self._queue) + waiting_low

    def _add_locked(self, item: T, low_priority: bool = False) -> None:
        if self._shutting_down:
            return
        if item in self._dirty:
            if not low_priority and item in self._low_dirty:
                self._low_dirty.discard(item)  # its entry in `_low` is now stale
                if item not in self._processing:
                    self._enqueue_locked(item)
            return
        self._dirty.add(item)
        if low_priority:
            self._low_dirty.add(item)
        if self._metrics is not None:
            self._metrics.added()
        if item in self._processing:
            return  # `done` queues it, at the priority it was added with
        self._enqueue_locked(item)

    def _enqueue_locked(self, item: T) -> None:
        (self._low if item in self._low_dirty else self._queue).append(item)
        self._condition.notify()

    def _next_locked(self) -> T | None:
        if self._queue:
            return self._queue.popleft()
        while self._low:
            item = self._low.popleft()
            # A stale entry: the key moved up, or is being processed (`done` queues it again).
            if item in self._low_dirty and item not in self._processing:
                self._low_dirty.discard(item)
                return item
        return None

    def _promote_due_locked(self, now: float) -> None:
        while self._waiting and self._waiting[0][0] <= now:
            ready_at, _, item = heapq.heappop(self._waiting)
            if self._ready_at.get(item) == ready_at:
                del self._ready_at[item]
                self._add_locked(item)
