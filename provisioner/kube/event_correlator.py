"""Deciding what to do with each event a controller records, as client-go's correlator does
(simplified): repeats of one event within a window become a count on the first Event object,
and a per-object token bucket drops floods. Pure bookkeeping, bounded in memory; the I/O is in
client.py (`EventRecorder`)."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal


@dataclass(frozen=True)
class EventKey:
    """What makes two events "the same" for aggregation (resourceVersion deliberately not)."""

    kind: str
    namespace: str
    name: str
    uid: str
    event_type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    """What to send for one observed event: create a new Event, or patch the count of one."""

    action: Literal["create", "patch", "drop"]
    name: str = ""
    count: int = 0
    first_seen: datetime | None = None


@dataclass
class _Seen:
    name: str
    count: int
    first_seen: datetime
    last_seen: float


@dataclass
class _Budget:
    tokens: float
    updated: float


class EventCorrelator:
    """Pure bookkeeping (no I/O), bounded in memory by LRU eviction."""

    def __init__(
        self,
        *,
        window: float = 600.0,
        max_entries: int = 4096,
        spam_burst: int = 25,
        spam_refill_interval: float = 300.0,
    ) -> None:
        self._window = window
        self._max_entries = max_entries
        self._spam_burst = spam_burst
        self._refill_interval = spam_refill_interval
        self._seen: OrderedDict[EventKey, _Seen] = OrderedDict()
        self._budgets: OrderedDict[tuple[str, str, str, str], _Budget] = OrderedDict()
        self._lock = threading.Lock()
        self._last_name_ns = 0

    def observe(self, key: EventKey, now: float, wall_now: datetime) -> Decision:
        with self._lock:
            if not self._take_budget((key.kind, key.namespace, key.name, key.uid), now):
                return Decision("drop")
            seen = self._seen.get(key)
            if seen is not None and now - seen.last_seen <= self._window:
                seen.count += 1
                seen.last_seen = now
                self._seen.move_to_end(key)
                return Decision("patch", seen.name, seen.count, seen.first_seen)
            # client-go's naming: <object>.<nanoseconds in hex>, made strictly increasing here.
            self._last_name_ns = max(time.time_ns(), self._last_name_ns + 1)
            name = f"{key.name}.{self._last_name_ns:x}"
            self._seen[key] = _Seen(name, 1, wall_now, now)
            self._seen.move_to_end(key)
            _trim(self._seen, self._max_entries)
            return Decision("create", name, 1, wall_now)

    def _take_budget(self, object_key: tuple[str, str, str, str], now: float) -> bool:
        budget = self._budgets.get(object_key)
        if budget is None:
            budget = _Budget(float(self._spam_burst), now)
            self._budgets[object_key] = budget
            _trim(self._budgets, self._max_entries)
        refill = (now - budget.updated) / self._refill_interval
        budget.tokens = min(float(self._spam_burst), budget.tokens + refill)
        budget.updated = now
        self._budgets.move_to_end(object_key)
        if budget.tokens < 1:
            return False
        budget.tokens -= 1
        return True


def _trim(entries: OrderedDict[Any, Any], limit: int) -> None:
    while len(entries) > limit:
        entries.popitem(last=False)
