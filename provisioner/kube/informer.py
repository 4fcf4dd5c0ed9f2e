"""A list-then-watch informer whose cache holds compact records instead of API objects.

The caller says how to decode each object (`objects`: into a msgspec Struct naming only the
members it reads, or into a dict, see `object_decoding`), what it needs from it with
`to_record(obj) -> R | None` (None: not interesting, keep it out of the cache) and how to key
it. Objects are discarded as soon as the record is made: 50,000 volumes must sync in seconds and
fit in a small memory budget.

Semantics follow client-go's reflector and shared informer:
- list in pages of 500 (the watch cache answers a first list in one response, its items
  decoded one at a time), then watch from the list's resourceVersion with bookmarks;
- the first list is served from the apiserver's watch cache (resourceVersion "0",
  NotOlderThan): it may be a moment old, which the watch from its resourceVersion makes good,
  and it spares etcd (and us) a quorum read of every object at start;
- on 410 Gone (resourceVersion compacted away) list again, consistently (never from the cache,
  which could be older than what we have already seen), and deliver the difference;
- on other errors re-watch from the last resourceVersion with exponential backoff (0.8 s..30 s);
- every `resync_period` re-deliver every record as an update (old == new);
- handlers run on the informer's thread and must be quick (enqueue a key, no API calls).

Unlike client-go, an update whose new record equals the old one is not delivered (except by
resync): records hold what the decisions depend on, so such an update cannot change a decision.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any, Generic, TypeVar

from urllib3.exceptions import HTTPError

from provisioner.kube import watch_stream
from provisioner.kube.api_error import ApiError
from provisioner.kube.clock import SYSTEM_CLOCK, Clock
from provisioner.kube.collection_pause import collection_paused
from provisioner.kube.object_decoding import ObjectDecoding, WatchEvent

log = logging.getLogger(__name__)

R = TypeVar("R")
T = TypeVar("T")
Handler = Callable[[str, R | None, R | None], None]
"""Called as handler(key, old, new): old is None for an add, new is None for a delete."""

DEFAULT_RESYNC_PERIOD = 15 * 60.0
DEFAULT_PAGE_SIZE = 500
LIST_REQUEST_TIMEOUT = 60.0
# How long past a watch's own server-side timeout we keep reading before calling it dead.
WATCH_READ_MARGIN = 30.0
CONNECT_TIMEOUT = 10.0
# What client-go's reflector asks for on its first list: anything at least as new as version 0,
# i.e. whatever the apiserver's watch cache holds, without a read of etcd.
_CACHED_LIST = {"resource_version": "0", "resource_version_match": "NotOlderThan"}


def name_key(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def namespaced_name_key(obj: Mapping[str, Any]) -> str:
    metadata = obj["metadata"]
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata['name']}" if namespace else str(metadata["name"])


def uid_key(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["uid"])


class WatchFailedError(Exception):
    """The server ended a watch with an error other than 410 Gone."""


class _GoneError(Exception):
    """The resourceVersion we asked for is no longer available: list again."""


class Informer(Generic[R]):
    def __init__(
        self,
        name: str,
        list_function: Callable[..., Any],
        *,
        objects: ObjectDecoding[T],
        to_record: Callable[[T], R | None],
        key: Callable[[T], str],
        label_selector: str | None = None,
        field_selector: str | None = None,
        resync_period: float = DEFAULT_RESYNC_PERIOD,
        page_size: int = DEFAULT_PAGE_SIZE,
        watch_timeout_range: tuple[int, int] = (300, 600),
        backoff: tuple[float, float] = (0.8, 30.0),
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`list_function` is a list call of the generated client, bound to its namespace if
        any, e.g. `clients.core.list_persistent_volume` or
        `functools.partial(clients.core.list_namespaced_pod, "kube-system")`."""
        self.name = name
        self._list_function = list_function
        self._objects: ObjectDecoding[Any] = objects
        self._to_record: Callable[[Any], R | None] = to_record
        self._key: Callable[[Any], str] = key
        self._selectors = {"label_selector": label_selector, "field_selector": field_selector}
        self._resync_period = resync_period
        self._page_size = page_size
        self._watch_timeout_range = watch_timeout_range
        self._backoff = backoff
        self._clock = clock
        self._cache: dict[str, R] = {}
        self._lock = threading.Lock()
        # By event kind: a first list dispatches one add per object, tens of thousands.
        self._handlers: dict[str, list[Handler[R]]] = {"add": [], "update": [], "delete": []}
        self._resource_version = ""
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._response: watch_stream.RawResponse | None = None
        self._response_lock = threading.Lock()
        self._last_progress = clock.monotonic()

    def add_event_handler(
        self,
        on_add: Handler[R] | None = None,
        on_update: Handler[R] | None = None,
        on_delete: Handler[R] | None = None,
    ) -> None:
        if self._thread is not None:
            raise RuntimeError(f"informer {self.name}: add handlers before start()")
        for kind, handler in (("add", on_add), ("update", on_update), ("delete", on_delete)):
            if handler is not None:
                self._handlers[kind].append(handler)

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"informer {self.name} already started")
        self._thread = threading.Thread(target=self._run, name=f"informer-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        self._stop.set()
        with self._response_lock:
            if self._response is not None:
                watch_stream.interrupt(self._response)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def has_synced(self) -> bool:
        """True once the first complete list is in the cache and delivered to the handlers."""
        return self._synced.is_set()

    def wait_for_sync(self, timeout: float | None = None) -> bool:
        return self._synced.wait(timeout)

    @property
    def resource_version(self) -> str:
        return self._resource_version

    def get(self, key: str) -> R | None:
        with self._lock:
            return self._cache.get(key)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._cache)

    def items(self) -> list[tuple[str, R]]:
        with self._lock:
            return list(self._cache.items())

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    @property
    def progress_bound(self) -> float:
        """The longest a healthy informer goes without a sign of progress: a watch that hears
        nothing until its timeout, the read timeout after it, a list, and the longest backoff."""
        longest_watch = self._watch_timeout_range[1] + WATCH_READ_MARGIN
        return float(longest_watch + LIST_REQUEST_TIMEOUT + self._backoff[1])

    def liveness(self) -> str | None:
        """None while started and making progress; otherwise what is wrong."""
        if self._thread is None or self._stop.is_set():
            return None
        if not self._thread.is_alive():
            return f"informer {self.name}: its thread has ended"
        silent = self._clock.monotonic() - self._last_progress
        if silent > self.progress_bound:
            return f"informer {self.name}: no progress for {silent:.0f}s"
        return None

    def _run(self) -> None:
        failures = 0
        need_list = True
        next_resync = 0.0
        while not self._stop.is_set():
            self._last_progress = self._clock.monotonic()
            try:
                if need_list:
                    self._list_and_replace()
                    need_list = False
                    next_resync = self._clock.monotonic() + self._resync_period
                if self._resync_period > 0 and self._clock.monotonic() >= next_resync:
                    self._resync()
                    next_resync = self._clock.monotonic() + self._resync_period
                started = self._clock.monotonic()
                events = self._watch(until=next_resync)
                if events == 0 and self._clock.monotonic() - started < 1.0:
                    # Ended at once without a word (client-go's "very short watch"): back off
                    # rather than hammer a server or proxy that keeps closing the stream.
                    raise WatchFailedError("the watch ended immediately")
                failures = 0
            except _GoneError:
                log.info("informer %s: resourceVersion expired, listing again", self.name)
                need_list = True
            except (ApiError, HTTPError, WatchFailedError, OSError, ValueError) as e:
                if self._stop.is_set():
                    break
                failures += 1
                log.warning(
                    "informer %s: %s failed (%s); retrying in %.1fs",
                    self.name,
                    "list" if need_list else "watch",
                    _describe_error(e),
                    self._retry_delay(failures),
                )
                self._stop.wait(self._retry_delay(failures))
            except Exception:
                failures += 1
                log.exception("informer %s: unexpected error; retrying", self.name)
                self._stop.wait(self._retry_delay(failures))

    def _retry_delay(self, failures: int) -> float:
        initial, cap = self._backoff
        return float(min(initial * 2 ** min(failures - 1, 32), cap))

    def _list_and_replace(self) -> None:
        from_cache = not self._synced.is_set()
        for attempt in range(3):
            try:
                with collection_paused():
                    records, resource_version = self._list_all(from_cache)
                break
            except ApiError as e:
                if e.status != HTTPStatus.GONE or attempt == 2:
                    raise
                # A continue token expired mid-list: only a fresh list is consistent.
                log.info("informer %s: list continuation expired, restarting list", self.name)
                from_cache = False
        with self._lock:
            previous = self._cache
            self._cache = records
            self._resource_version = resource_version
        for key, record in records.items():
            old = previous.pop(key, None)
            if old is None:
                self._dispatch("add", key, None, record)
            elif old != record:
                self._dispatch("update", key, old, record)
        for key, old in previous.items():
            self._dispatch("delete", key, old, None)
        if not self._synced.is_set():
            log.info("informer %s: synced %d objects", self.name, len(records))
            self._synced.set()

    def _list_all(self, from_cache: bool) -> tuple[dict[str, R], str]:
        records: dict[str, R] = {}
        continue_token: str | None = None
        while True:
            # A continued page carries its resourceVersion in the token (the API refuses both).
            version = _CACHED_LIST if from_cache and continue_token is None else {}
            response = self._list_function(
                limit=self._page_size,
                _continue=continue_token,
                **version,
                **self._selectors,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT, LIST_REQUEST_TIMEOUT),
            )
            items, metadata = self._objects.read_list(response)
            for obj in items:
                record = self._to_record(obj)
                if record is not None:
                    records[self._key(obj)] = record
            continue_token = metadata.continue_token or None
            if continue_token is None:
                return records, metadata.resource_version

    def _watch(self, until: float) -> int:
        """One watch request, read until the server ends it (its timeout, at most until the
        next resync is due) or we stop. Returns the number of events received."""
        timeout = random.randint(*self._watch_timeout_range)  # noqa: S311 (spreading load)
        if self._resync_period > 0:
            timeout = max(1, min(timeout, int(until - self._clock.monotonic()) + 1))
        try:
            response = self._list_function(
                watch=True,
                resource_version=self._resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout,
                **self._selectors,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT, timeout + WATCH_READ_MARGIN),
            )
        except ApiError as e:
            if e.status == HTTPStatus.GONE:
                raise _GoneError from e
            raise
        with self._response_lock:
            self._response = response
            if self._stop.is_set():
                watch_stream.interrupt(response)
        received = 0
        try:
            for line in watch_stream.iter_watch_lines(response):
                if self._stop.is_set():
                    return received
                self._last_progress = self._clock.monotonic()
                received += 1
                self._apply_watch_event(self._objects.event(line))
        except (HTTPError, OSError):
            if self._stop.is_set():
                return received
            raise
        finally:
            with self._response_lock:
                self._response = None
            watch_stream.discard(response)
        return received

    def _apply_watch_event(self, event: WatchEvent[Any]) -> None:
        if event.type == "ERROR":
            code = event.error_code
            if code == HTTPStatus.GONE:
                raise _GoneError
            status = event.status or {}
            raise WatchFailedError(f"watch error {code}: {status.get('message', status)}")
        resource_version = event.resource_version
        obj = event.object
        if obj is None:  # a BOOKMARK
            self._resource_version = resource_version or self._resource_version
            return
        key = self._key(obj)
        if event.type == "DELETED":
            with self._lock:
                old = self._cache.pop(key, None)
            if old is not None:
                self._dispatch("delete", key, old, None)
        else:
            self._store(key, self._to_record(obj))
        self._resource_version = resource_version or self._resource_version

    def _store(self, key: str, record: R | None) -> None:
        with self._lock:
            old = self._cache.get(key)
            if record is None:
                self._cache.pop(key, None)
            else:
                self._cache[key] = record
        if record is None:
            if old is not None:
                self._dispatch("delete", key, old, None)
        elif old is None:
            self._dispatch("add", key, None, record)
        elif old != record:
            self._dispatch("update", key, old, record)

    def _resync(self) -> None:
        for key in self.keys():
            record = self.get(key)
            if record is not None:
                self._dispatch("update", key, record, record)

    def _dispatch(self, kind: str, key: str, old: R | None, new: R | None) -> None:
        for handler in self._handlers[kind]:
            try:
                handler(key, old, new)
            except Exception:
                log.exception("informer %s: %s handler failed for %s", self.name, kind, key)


def _describe_error(error: Exception) -> str:
    if isinstance(error, ApiError):
        return f"HTTP {error.status} {error.reason}"
    return f"{type(error).__name__}: {error}"
