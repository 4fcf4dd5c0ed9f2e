"""The generic loop: informers -> work queue -> workers -> retries, as sig-storage-lib's
`ProvisionController` is to the `Provisioner` it drives.

The loop knows no kind of object. It is given what to watch (a `Watch` per informer handler: for
each event, the keys to queue), a `Reconciler` that says what a key calls for (`reconcile`:
`Settled`, `InBackground` or `Failed`), and a `Lifecycle`, the work run beside the workers,
which the loop starts, checks and stops (as controller-runtime's builder takes watches and a
reconciler apart). Work that ends in the background comes back as a key the reconciler adds to
the queue it was given (`KeyQueue`), never through a call into the loop. The queue (`WorkQueue`,
here beside the workers it feeds) guarantees one worker per key, so a key is never reconciled
twice at once by this process. The loop also owns the process's side of it: start, the liveness
heartbeat, and a stop that drains. It imports only the client layer (`provisioner.kube`): an
import contract in pyproject.toml keeps it so.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from provisioner.kube.clock import SYSTEM_CLOCK, Clock
from provisioner.kube.collection_pause import settle_long_lived
from provisioner.kube.informer import Informer
from provisioner.kube.rate_limit import ItemExponentialBackoff, TokenBucket

log = logging.getLogger(__name__)

DRAIN_SECONDS = 20.0
"""How long SIGTERM lets running reconciles finish."""
INFORMER_STOP_SECONDS = 1.0
"""At a stop, how long each informer's thread may take to end."""

Key = tuple[str, str]
"""(kind, name): what the queue holds. The kinds are the reconciler's; the loop only names them
in its logs and looks up their retry limit."""


@dataclass(frozen=True)
class Settled:
    """The key's work is done: its failures are forgotten (sig-storage-lib's
    `ProvisioningFinished`)."""


@dataclass(frozen=True)
class InBackground:
    """The key's work goes on off the workers: the reconciler adds the key to the queue again
    once it ended, and the key keeps its failures, so a failure then counts as another attempt
    of the same action (sig-storage-lib's `ProvisioningInBackground`)."""


@dataclass(frozen=True)
class Failed:
    """A failure the reconciler expected (a write refused, a helper that failed): retried with
    backoff up to the key's limit, logged with `why` alone. An exception out of `reconcile` is
    retried alike, logged with its traceback."""

    why: str


SETTLED = Settled()
IN_BACKGROUND = InBackground()
Outcome = Settled | InBackground | Failed


class KeyQueue(Protocol):
    """What a reconciler may do with the loop's queue: add a key (a path freed, a background
    run ended); a key added while a worker has it is handed out again once that worker is
    done."""

    def add(self, item: Key, *, low_priority: bool = False) -> None:
        """`low_priority`: a sweep's key, handed out once no other key is ready."""


R = TypeVar("R")


@dataclass(frozen=True)
class Watch(Generic[R]):
    """One informer and one handler of its events. An informer may appear in several watches;
    the loop starts, syncs and stops each informer once."""

    informer: Informer[R]
    on_event: Callable[[str, R | None, R | None], Iterable[Key]]
    """Called on the informer's thread with (informer key, old, new) for an add (old None), an
    update or a resync (old == new) and a delete (new None): the keys to queue. It must be
    cheap and make no API call: a worker does that."""
    sweep_last: bool = False
    """The keys of the informer's first list and of its resyncs queue behind every other key
    (`WorkQueue.add`'s low priority): a sweep over objects that are nearly always settled, so
    that a claim made meanwhile does not wait for it (50,000 volumes at a failover)."""


class Reconciler(Protocol):
    """What the loop drives: sig-storage-lib's `Provision`/`Delete` seam."""

    def reconcile(self, key: Key) -> Outcome:
        """Look at the key's object and do what it calls for; one worker per key at a time."""
        ...


class Lifecycle(Protocol):
    """The reconciler's work beside the workers (helper runs, a publisher), as the loop starts,
    checks and stops it."""

    def start(self) -> None:
        """Once the informers synced, before a worker takes a key."""
        ...

    def stop_starting(self) -> None:
        """At a stop, first: start no background work more."""
        ...

    def wait_for_runs(self, deadline: float) -> Sequence[Key]:
        """At a stop, once the workers are done or the drain ran out: the keys whose
        background work ended by `deadline` (monotonic), for the loop to reconcile once more."""
        ...

    def abandon_runs(self) -> None:
        """At a stop, last: background work still running is ended; whoever leads next redoes
        it."""
        ...

    def liveness(self) -> str | None:
        """None, or the background work that outlived every bound."""
        ...


@dataclass(frozen=True)
class ControllerSettings:
    workers: int = 8
    retry_limits: Mapping[str, int] = field(default_factory=dict)
    """By key kind: how many failures of a key are retried before the loop gives up on it
    until its next change or resync; 0 or a kind not listed: no limit."""


class Controller:
    def __init__(
        self,
        queue: WorkQueue[Key],
        watches: Sequence[Watch[Any]],
        reconciler: Reconciler,
        lifecycle: Lifecycle,
        settings: ControllerSettings,
    ) -> None:
        """`watches`: what to watch, before any informer starts."""
        self._queue = queue
        self._reconciler = reconciler
        self._lifecycle = lifecycle
        self._settings = settings
        self.informers: list[Informer[Any]] = list(
            {id(watch.informer): watch.informer for watch in watches}.values()
        )
        for watch in watches:
            handler = self._handler(watch)
            watch.informer.add_event_handler(handler, handler, handler)
        # What each worker is on and since when: the work loop's heartbeat for /healthz.
        self._busy: dict[str, tuple[Key, float]] = {}
        self._workers: list[threading.Thread] = []
        self._started = False
        self._informers_started = False
        self._informers_lock = threading.Lock()

    def _handler(self, watch: Watch[R]) -> Callable[[str, R | None, R | None], None]:
        def enqueue(key: str, old: R | None, new: R | None) -> None:
            # A resync hands the cached record as both; the first list runs before has_synced.
            sweep = watch.sweep_last and (old is new or not watch.informer.has_synced)
            for queued in watch.on_event(key, old, new):
                self._queue.add(queued, low_priority=sweep)

        return enqueue

    # -- lifecycle -------------------------------------------------------------------------

    def liveness(self, stall_after: float) -> str | None:
        """None while the work loop and the informers are alive; otherwise what is wedged. A
        worker on one key for longer than `stall_after` (more than any reconcile can take) is
        stuck."""
        if self._queue.shutting_down:
            return None
        if self._informers_started or self._started:
            for informer in self.informers:
                problem = informer.liveness()
                if problem is not None:
                    return problem
        if not self._started:
            return None
        dead = [worker.name for worker in self._workers if not worker.is_alive()]
        if dead:
            return f"worker threads ended: {', '.join(dead)}"
        problem = self._lifecycle.liveness()
        if problem is not None:
            return problem
        now = time.monotonic()
        for worker, (key, since) in sorted(self._busy.copy().items()):
            if now - since > stall_after:
                return f"{worker} has been on {key[0]} {key[1]} for {now - since:.0f}s"
        return None

    def has_synced(self) -> bool:
        return self._started and all(informer.has_synced for informer in self.informers)

    def caches_warm(self) -> bool:
        """Whether the informers run and synced, workers or not (a warm standby's)."""
        return self._informers_started and all(informer.has_synced for informer in self.informers)

    def start_informers(self) -> None:
        """Start the informers, once: a standby keeps its caches in sync (lists and watches,
        nothing written) so that leading costs the lease hand-over, not a cold start. Their
        events queue keys that no worker takes until `start`."""
        with self._informers_lock:
            if self._informers_started:
                return
            self._informers_started = True
        for informer in self.informers:
            informer.start()

    def start(self, sync_timeout: float = 120.0) -> None:
        self.start_informers()
        for informer in self.informers:
            if not informer.wait_for_sync(sync_timeout):
                raise RuntimeError(f"informer {informer.name} did not sync in {sync_timeout:g}s")
        log.info(
            "caches synced: %s",
            ", ".join(f"{len(informer)} {informer.name}" for informer in self.informers),
        )
        settle_long_lived()
        self._lifecycle.start()
        for number in range(self._settings.workers):
            worker = threading.Thread(target=self._work, name=f"worker-{number}", daemon=True)
            worker.start()
            self._workers.append(worker)
        self._started = True

    def stop(self, drain_seconds: float = DRAIN_SECONDS) -> None:
        """On SIGTERM: stop taking work and let running reconciles finish, within drain_seconds.
        Background work still running then is abandoned (`Lifecycle.abandon_runs`): whoever
        leads next redoes it. Bounded by the drain, the lifecycle's stop and
        `INFORMER_STOP_SECONDS` per informer."""
        deadline = time.monotonic() + drain_seconds
        self._lifecycle.stop_starting()
        self._queue.shutdown()
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        self._settle_ended_runs(deadline)
        if self._started:
            # Only a leader's: a standby's abandoning would end the leader's work.
            self._lifecycle.abandon_runs()
        for informer in self.informers:
            informer.stop(timeout=INFORMER_STOP_SECONDS)

    def _settle_ended_runs(self, deadline: float) -> None:
        """At a stop: background runs that end within the drain are carried out here (for the
        local-path side: the PV saved, the PV deleted), as a worker would have; the workers are
        gone. A key a worker still holds (its join timed out) is left to that worker."""
        ended = self._lifecycle.wait_for_runs(deadline)
        busy = {key for key, _ in self._busy.copy().values()}
        for key in ended:
            if time.monotonic() >= deadline:
                log.warning("stopping before %s %s was carried out: left to the next leader", *key)
                continue
            if key in busy:
                continue
            try:
                outcome = self._reconciler.reconcile(key)
            except Exception as error:  # noqa: BLE001 - logged; whoever leads next redoes it
                outcome = Failed(str(error))
            if isinstance(outcome, Failed):
                log.warning("carrying out %s %s at the stop failed: %s", *key, outcome.why)

    # -- workers ---------------------------------------------------------------------------------

    def _work(self) -> None:
        me = threading.current_thread().name
        while True:
            key = self._queue.get()
            if key is None:
                return
            self._busy[me] = (key, time.monotonic())
            try:
                outcome = self._reconciler.reconcile(key)
            except Exception as error:
                log.exception("reconciling %s %s failed", *key)
                self._retry(key, repr(error))
            else:
                match outcome:
                    case Failed(why):
                        self._retry(key, why)
                    case Settled():
                        self._queue.forget(key)
                    case InBackground():
                        pass
            finally:
                self._busy.pop(me, None)
                self._queue.done(key)

    def _retry(self, key: Key, error: str) -> None:
        limit = self._settings.retry_limits.get(key[0], 0)
        failures = self._queue.num_requeues(key)
        if limit and failures >= limit:
            log.error(
                "giving up on %s %s after %d failures (until its next change or resync): %s",
                *key,
                failures + 1,
                error,
            )
            self._queue.forget(key)
            return
        log.warning(
            "%s %s failed (attempt %d), retrying with backoff: %s", *key, failures + 1, error
        )
        self._queue.add_rate_limited(key)


# -- the work queue -------------------------------------------------------------------------

T = TypeVar("T", bound=Hashable)


class QueueMetrics(Protocol):
    """What the queue reports; `provisioner.kube.metrics.Metrics.queue_metrics` implements it."""

    def added(self) -> None: ...

    def retried(self) -> None: ...

    def report_depth(self, read: Callable[[], int]) -> None:
        """Called once: `read()` gives the depth whenever it is asked for (a scrape), so that
        no add or get pays for reporting it."""


class WorkQueue(Generic[T]):
    """A rate-limited work queue with client-go's guarantees, which the loop relies on for
    "no double provisioning":

    - a key waiting in the queue is held once, however often it is added (dedup);
    - a key being processed is never handed to a second worker; added again meanwhile, it is
      queued again when the first worker calls `done`;
    - failures back off per key (exponential, capped) and all retries share one token bucket.

    One addition, after controller-runtime's priority queue: a key added with `low_priority` is
    handed out only when no other key is ready. A leader's first list of 50,000 bound volumes is
    then swept behind the claim that arrived meanwhile, not in front of it. Added again
    normally while it waits, a low-priority key moves up.

    One deliberate difference: after `shutdown()`, `get()` returns None at once instead of
    draining what is still queued. Pending keys are recomputed by whoever runs next (informer
    resync or the next leader), so draining would only delay a shutdown.
    """

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
