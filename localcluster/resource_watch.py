"""List, then watch for a while, then list again: the loop behind each runner's informer.

Why: the runners must see every pod (and ConfigMap) change quickly, survive an API server
restart, and now and then look again at objects they left alone (a pod waiting for its node).
A short watch between full lists gives all three with one small loop, shared by the helper
runner and the image-table runner.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Any

from kubernetes import watch

from localcluster.event_log import EventLog
from localcluster.pod_api import API_ERRORS
from localcluster.raw_api import call_json

Listed = Callable[[list[dict[str, Any]]], None]
"""Called with every object of a full list."""
Changed = Callable[[str, dict[str, Any]], None]
"""Called with each watch event's type (ADDED, MODIFIED, DELETED) and object."""


class ResourceWatch:
    """Runs `list_call` and a watch on it in a thread until `stopping` is set."""

    def __init__(
        self,
        name: str,
        list_call: Callable[..., Any],
        *,
        on_listed: Listed,
        on_changed: Changed,
        log: EventLog,
        stopping: threading.Event,
        resync_seconds: int,
        **selectors: str,
    ) -> None:
        self.name = name
        self.list_call = list_call
        self.on_listed = on_listed
        self.on_changed = on_changed
        self.log = log
        self.stopping = stopping
        self.resync_seconds = resync_seconds
        self.selectors = selectors
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._watch: watch.Watch | None = None

    def start(self) -> None:
        self.thread.start()

    def join(self) -> None:
        """Ends the watch now (its socket is shut down) and waits for the thread; call after
        setting `stopping`."""
        current = self._watch
        if current is not None:
            current.stop()  # type: ignore[no-untyped-call]
        if self.thread.is_alive():
            self.thread.join(timeout=self.resync_seconds + 5)

    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                listing = call_json(self.list_call, **self.selectors)
                self.on_listed(listing.get("items") or [])
                # Events stay plain JSON (the handlers read `raw_object`): building the
                # client's models for every event was most of the cost for pods with many
                # containers.
                self._watch = watch.Watch(return_type=object)  # type: ignore[no-untyped-call]
                if self.stopping.is_set():
                    return
                stream = self._watch.stream(  # type: ignore[no-untyped-call]
                    self.list_call,
                    resource_version=listing["metadata"]["resourceVersion"],
                    timeout_seconds=self.resync_seconds,
                    **self.selectors,
                )
                for event in stream:
                    if self.stopping.is_set():
                        break
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self.on_changed(event["type"], event["raw_object"])
            except API_ERRORS as error:
                if not self.stopping.is_set():
                    self.log.write(f"{self.name}: watch interrupted ({type(error).__name__})")
                    self.stopping.wait(0.5)
            except Exception:  # noqa: BLE001 - the runner must outlive any one bad event
                self.log.write(f"{self.name}: loop error, retrying: {traceback.format_exc()}")
                self.stopping.wait(0.5)
