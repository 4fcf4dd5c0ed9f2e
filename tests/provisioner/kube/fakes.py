"""Test doubles for the kube shell: a clock that only moves when told, and raw HTTP responses."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from provisioner.kube.informer import Informer

R = TypeVar("R")


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.start = start
        self.time = start
        self.sleeps: list[float] = []
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        return self.time

    def now(self) -> datetime:
        return datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=self.time - self.start)

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self.time += max(0.0, seconds)

    def advance(self, seconds: float) -> None:
        with self._lock:
            self.time += seconds


class FakeResponse:
    """A raw (urllib3-like) response: a JSON body, or a watch stream given as byte chunks that
    can end (server closed) or stay open until `shutdown()` (like a quiet watch)."""

    def __init__(
        self,
        body: Any = None,
        chunks: list[bytes] | None = None,
        *,
        stay_open: bool = False,
        open_for: float | None = None,
    ) -> None:
        self._body = body
        self._chunks = chunks or []
        self._stay_open = stay_open
        self._open_for = open_for
        self.interrupted = threading.Event()
        self.closed = False
        self.released = False

    @property
    def data(self) -> bytes:
        return json.dumps(self._body).encode()

    def stream(self, amt: int | None = None, decode_content: bool | None = None) -> Iterator[bytes]:
        if self._body is not None:
            # A list read as it arrives: in small pieces, as the apiserver's HTTP chunks are.
            data = self.data
            yield from (data[start : start + 64] for start in range(0, len(data), 64))
            return
        for chunk in self._chunks:
            if self.interrupted.is_set():
                raise OSError("connection shut down")
            yield chunk
        if self._stay_open:
            self.interrupted.wait(self._open_for)
            if self.interrupted.is_set():
                raise OSError("connection shut down")

    def shutdown(self) -> None:
        self.interrupted.set()

    def close(self) -> None:
        self.closed = True

    def release_conn(self) -> None:
        self.released = True


def watch_chunks(*events: dict[str, Any], split: bool = False) -> list[bytes]:
    """Events as the server sends them, one JSON line each; `split` cuts every line in two so
    the line assembly across chunks is exercised."""
    data = [json.dumps(event).encode() + b"\n" for event in events]
    if not split:
        return data
    pieces: list[bytes] = []
    for line in data:
        middle = len(line) // 2
        pieces += [line[:middle], line[middle:]]
    return pieces


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll a test condition (tests only: the code under test never polls)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


class HandlerRecorder(Generic[R]):
    """Informer handlers that record (kind, key, old, new) and let a test wait for them."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, R | None, R | None]] = []
        self.changed = threading.Condition()

    def handler(self, kind: str) -> Callable[[str, R | None, R | None], None]:
        def record(key: str, old: R | None, new: R | None) -> None:
            with self.changed:
                self.events.append((kind, key, old, new))
                self.changed.notify_all()

        return record

    def attach(self, informer: Informer[R]) -> None:
        informer.add_event_handler(
            self.handler("add"), self.handler("update"), self.handler("delete")
        )

    def wait_for(self, count: int, timeout: float = 5.0) -> None:
        with self.changed:
            reached = self.changed.wait_for(lambda: len(self.events) >= count, timeout)
            assert reached, self.events

    def wait_for_event(self, kind: str, key: str, timeout: float = 10.0) -> R | None:
        """The new (or, for deletes, old) record of the first matching event."""

        def find() -> tuple[str, str, R | None, R | None] | None:
            return next((e for e in self.events if e[0] == kind and e[1] == key), None)

        with self.changed:
            assert self.changed.wait_for(lambda: find() is not None, timeout), self.events
            found = find()
        assert found is not None
        return found[2] if kind == "delete" else found[3]
