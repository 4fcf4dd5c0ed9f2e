"""One watch for every helper pod, fanned out to the runs waiting on them.

A run used to open a watch of its own on its pod: one extra API request per helper run and one
open stream per busy worker. The controller already keeps an informer on all helper pods in its
namespace, so it publishes their changes here and each run follows its pod from this hub,
in the same watch-event shape the runner reads from a watch of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Any

from provisioner.kube.clock import SYSTEM_CLOCK, Clock

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


def _identity(pod: dict[str, Any]) -> tuple[str, str]:
    metadata = pod.get("metadata") or {}
    return str(metadata.get("uid") or ""), str(metadata.get("resourceVersion") or "")


class PodEventHub:
    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self._clock = clock
        self._changed = threading.Condition()
        self._latest: dict[str, tuple[str, dict[str, Any]]] = {}
        """Last event per live pod name (a run may start following after its pod already
        changed); a deletion is kept only while somebody follows that name."""
        self._followers: dict[str, int] = {}

    def publish(self, event_type: str, pod: dict[str, Any]) -> None:
        """Called from the informer's handlers with the pod as the API returned it."""
        name = str((pod.get("metadata") or {}).get("name") or "")
        with self._changed:
            if event_type == DELETED and name not in self._followers:
                self._latest.pop(name, None)
                return
            self._latest[name] = (event_type, pod)
            self._changed.notify_all()

    def follow(self, pod: dict[str, Any], until: float) -> Generator[dict[str, Any]]:
        """Watch events for this pod (this uid) newer than the state given, until `until` on
        the clock's monotonic time; ends quietly at `until` like a watch that timed out."""
        name = str(pod["metadata"]["name"])
        uid, seen_version = _identity(pod)
        with self._changed:
            self._followers[name] = self._followers.get(name, 0) + 1
        try:
            while True:
                with self._changed:
                    event = self._next(name, uid, seen_version, until)
                if event is None:
                    return
                event_type, current = event
                seen_version = _identity(current)[1]
                yield {"type": event_type, "object": current}
                if event_type == DELETED:
                    return
        finally:
            with self._changed:
                self._followers[name] -= 1
                if not self._followers[name]:
                    del self._followers[name]
                    if self._latest.get(name, ("",))[0] == DELETED:
                        del self._latest[name]

    def _next(
        self, name: str, uid: str, seen_version: str, until: float
    ) -> tuple[str, dict[str, Any]] | None:
        while True:
            latest = self._latest.get(name)
            if latest is not None:
                event_type, current = latest
                current_uid, version = _identity(current)
                if current_uid == uid and version != seen_version:
                    return event_type, current
            remaining = until - self._clock.monotonic()
            if remaining <= 0:
                return None
            self._changed.wait(remaining)
