"""When each object of a collection appeared, reached a milestone and went away, from a watch.

Why: per-claim latency is claim creation to Bound, and the only way to see each transition as it
happens without hammering the apiserver with polls is a watch. Timestamps are wall-clock seconds
on this machine, the same clock the audit log is read against.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import urllib3

from bench.api import ApiError, RawApi

WATCH_SECONDS = 10
Milestone = Callable[[dict[str, Any]], bool]


class ObjectTimeline:
    """Watches `path` (a collection URL) from a background thread until `stop()`."""

    def __init__(
        self,
        api: RawApi,
        path: str,
        milestones: Mapping[str, Milestone] | None = None,
        label_selector: str = "",
        keep: Callable[[dict[str, Any]], Any] | None = None,
        *,
        parts_done: Callable[[dict[str, Any]], Iterable[str]] | None = None,
    ) -> None:
        """`parts_done(object)`: the parts of the object (say, the volumes of a shared helper
        pod) that it shows done; `part_done` records when each was first seen so."""
        self._api = api
        self._path = path
        self._milestones = dict(milestones or {})
        self._query = {"labelSelector": label_selector} if label_selector else {}
        self.first_seen: dict[str, float] = {}
        self.reached: dict[str, dict[str, float]] = {key: {} for key in self._milestones}
        """milestone -> object name -> when the milestone was first seen to hold"""
        self.deleted: dict[str, float] = {}
        self.uid: dict[str, str] = {}
        self._keep = keep
        self._parts_done = parts_done
        self.part_done: dict[str, float] = {}
        """part -> when `parts_done` first named it"""
        self.kept: dict[str, Any] = {}
        """object name -> `keep(object)` from its first sighting (when `keep` is given)"""
        self._live: set[str] = set()
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch {path}", daemon=True)

    def start(self) -> ObjectTimeline:
        self._thread.start()
        if not self._synced.wait(60):
            raise TimeoutError(f"could not list {self._path}")
        return self

    def stop(self) -> None:
        self._stop.set()
        # The thread ends at its next event or watch timeout; nothing waits on it.
        self._thread.join(0.5)

    # Reading.
    def live(self) -> int:
        with self._lock:
            return len(self._live)

    def wait_until(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        """Waits until `condition()` holds (checked on every event)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
                self._changed.wait(min(left, 1.0))

    def reached_count(self, milestone: str) -> int:
        with self._lock:
            return len(self.reached[milestone])

    # The watch loop.
    def _record(self, obj: dict[str, Any], now: float, deleted: bool = False) -> None:
        name = obj["metadata"]["name"]
        self.first_seen.setdefault(name, now)
        self.uid.setdefault(name, obj["metadata"].get("uid", ""))
        if self._keep is not None and name not in self.kept:
            self.kept[name] = self._keep(obj)
        if deleted:
            self._live.discard(name)
            self.deleted.setdefault(name, now)
            return
        self._live.add(name)
        for part in self._parts_done(obj) if self._parts_done is not None else ():
            self.part_done.setdefault(part, now)
        for key, milestone in self._milestones.items():
            if name not in self.reached[key] and milestone(obj):
                self.reached[key][name] = now

    def _relist(self) -> str:
        items, version = self._api.list_all(self._path, **self._query)
        now = time.time()
        with self._changed:
            present = {item["metadata"]["name"] for item in items}
            for name in self._live - present:
                self._live.discard(name)
                self.deleted.setdefault(name, now)
            for item in items:
                self._record(item, now)
            self._changed.notify_all()
        return version

    def _run(self) -> None:
        version = ""
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._relist()
                    self._synced.set()
                for event in self._api.watch(self._path, version, WATCH_SECONDS, **self._query):
                    kind, obj = event["type"], event["object"]
                    if kind == "ERROR":
                        version = ""
                        break
                    version = obj["metadata"].get("resourceVersion", version)
                    if kind == "BOOKMARK":
                        continue
                    with self._changed:
                        self._record(obj, time.time(), deleted=kind == "DELETED")
                        self._changed.notify_all()
                    if self._stop.is_set():
                        break
            except (ApiError, OSError, ValueError, urllib3.exceptions.HTTPError):
                version = ""
                self._stop.wait(0.2)
