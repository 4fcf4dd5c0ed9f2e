"""The last line of defence of leader election: a thread of its own that calls `on_expired` when
the leader's deadline passes without a renewal moving it.

The election thread stops leading when a renewal fails past the deadline, but only if it gets
to run: a request that trickles its answer byte by byte, a DNS lookup or TLS handshake that
hangs, or a callback that blocks can keep it from ever looking at the clock. This thread does
not depend on any request returning, so the process ends on time whatever the election thread
is stuck in (client-go and sig-storage-lib end the process on "leaderelection lost" likewise).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class LeaseWatchdog:
    def __init__(
        self,
        on_expired: Callable[[], None],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._on_expired = on_expired
        self._monotonic = monotonic
        self._changed = threading.Condition()
        self._deadline: float | None = None
        self._watching = False
        """A thread is in `_watch` (set and cleared under the lock, unlike `is_alive`)."""

    def arm(self, deadline: float) -> None:
        """Call `on_expired` once `deadline` (monotonic) passes, unless armed again with a later
        one or disarmed first."""
        with self._changed:
            self._deadline = deadline
            if not self._watching:
                self._watching = True
                threading.Thread(target=self._watch, name="lease-watchdog", daemon=True).start()
            self._changed.notify_all()

    def disarm(self) -> None:
        with self._changed:
            self._deadline = None
            self._changed.notify_all()

    def _watch(self) -> None:
        with self._changed:
            while True:
                if self._deadline is None:
                    self._watching = False
                    return
                remaining = self._deadline - self._monotonic()
                if remaining <= 0:
                    self._deadline = None
                    self._watching = False
                    break
                self._changed.wait(remaining)
        self._on_expired()
