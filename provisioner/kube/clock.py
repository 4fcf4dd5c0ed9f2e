"""Time, injectable: the queue, the leader elector and the helper-pod runner take a clock so their
timing logic can be tested with a fake one instead of sleeping."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards: for durations and deadlines."""
        ...

    def now(self) -> datetime:
        """Wall-clock time, timezone-aware UTC: for timestamps written into API objects."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


SYSTEM_CLOCK: Clock = SystemClock()
