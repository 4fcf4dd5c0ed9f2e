"""Rate limiting shared by the API client (QPS/burst) and the work queue (overall bucket plus
per-item exponential backoff), with the semantics of client-go's flowcontrol and workqueue
limiters."""

from __future__ import annotations

import threading
from collections.abc import Hashable

from provisioner.kube.clock import SYSTEM_CLOCK, Clock

SPARE_PATIENCE_SECONDS = 10.0
"""How long a spare-capacity request waits for a token nobody else needs."""


class TokenBucket:
    """`qps` tokens per second, at most `burst` saved up. `reserve()` takes a token now and says
    how long the caller must wait before using it, so waiters queue up fairly in call order (the
    balance may go negative), like golang.org/x/time/rate's Reserve. qps <= 0 disables limiting."""

    def __init__(self, qps: float, burst: int, clock: Clock = SYSTEM_CLOCK) -> None:
        if qps > 0 and burst < 1:
            raise ValueError(f"burst must be at least 1 when qps > 0, got {burst}")
        self._qps = qps
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock.monotonic()
        self._lock = threading.Lock()

    def twin(self) -> TokenBucket:
        """A full bucket of the same rate and burst, shared with nobody."""
        return TokenBucket(self._qps, int(self._burst), self._clock)

    @property
    def unlimited(self) -> bool:
        return self._qps <= 0

    def reserve(self) -> float:
        """Take one token; return the seconds to wait before acting on it (0 if available now)."""
        if self.unlimited:
            return 0.0
        with self._lock:
            now = self._clock.monotonic()
            elapsed = max(0.0, now - self._last)
            self._last = now
            self._tokens = min(self._burst, self._tokens + elapsed * self._qps)
            self._tokens -= 1.0
            if self._tokens >= 0:
                return 0.0
            return -self._tokens / self._qps

    def acquire(self) -> None:
        """Block until a token is available, then take it."""
        self._clock.sleep(self.reserve())

    def acquire_spare(self, patience: float = SPARE_PATIENCE_SECONDS) -> None:
        """Take a token only when one is saved up: never borrowing ahead, so never delaying a
        `reserve` (or `acquire`) made before or after it, only using what they leave. For
        requests nothing waits on (events): a burst's own requests go first. After `patience`
        seconds it queues up like any other request, so it is late but never starved."""
        if self.unlimited:
            return
        give_up_at = self._clock.monotonic() + patience
        while True:
            with self._lock:
                now = self._clock.monotonic()
                self._tokens = min(
                    self._burst, self._tokens + max(0.0, now - self._last) * self._qps
                )
                self._last = now
                if self._tokens >= 1.0:
                    self._tokens -= 1.0
                    return
                if now >= give_up_at:
                    break
                until_one = (1.0 - self._tokens) / self._qps
            self._clock.sleep(min(until_one, give_up_at - now))
        self.acquire()


class ItemExponentialBackoff:
    """Per-item delay `base * 2**failures`, capped (client-go's
    ItemExponentialFailureRateLimiter)."""

    def __init__(self, base_delay: float = 1.0, max_delay: float = 300.0) -> None:
        if base_delay <= 0 or max_delay < base_delay:
            raise ValueError(
                f"need 0 < base_delay <= max_delay, got base_delay={base_delay} "
                f"max_delay={max_delay}"
            )
        self._base = base_delay
        self._max = max_delay
        self._failures: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def when(self, item: Hashable) -> float:
        """Record one more failure of `item` and return how long it should wait."""
        with self._lock:
            failures = self._failures.get(item, 0)
            self._failures[item] = failures + 1
        # Past 2**64 the float would be absurd anyway; avoid computing it.
        if failures >= 64:
            return self._max
        return min(self._base * (2.0**failures), self._max)

    def forget(self, item: Hashable) -> None:
        with self._lock:
            self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        with self._lock:
            return self._failures.get(item, 0)
