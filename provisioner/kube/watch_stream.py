"""Reading raw watch responses: each event's line, or each event as a plain dict.

The informers and the helper-pod runner call the API with `_preload_content=False` and parse the
JSON themselves: the client's typed models cost about 8x the time and 3x the memory of dicts,
and nothing here needs them. The informers decode each line with `object_decoding` (into the
Structs their records read); the helper-pod runner, which follows one pod, takes dicts.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from typing import Any, Protocol

log = logging.getLogger(__name__)


class RawResponse(Protocol):
    """The part of urllib3.HTTPResponse used here (tests substitute a fake)."""

    @property
    def data(self) -> bytes: ...

    def stream(
        self, amt: int | None = ..., decode_content: bool | None = ...
    ) -> Iterator[bytes]: ...

    def shutdown(self) -> None: ...

    def close(self) -> None: ...

    def release_conn(self) -> None: ...


def iter_watch_events(response: RawResponse) -> Iterator[dict[str, Any]]:
    """Each watch event (`{"type": ..., "object": {...}}`) as the server sends it, one JSON
    document per line. Ends when the server closes the stream."""
    for line in iter_watch_lines(response):
        yield json.loads(line)


def iter_watch_lines(response: RawResponse) -> Iterator[bytes]:
    """Each watch event's JSON text (one document per line, blank lines skipped). Ends when the
    server closes the stream."""
    pending: list[bytes] = []
    for chunk in response.stream(None, decode_content=False):
        if not chunk:
            continue
        lines = chunk.split(b"\n")
        if len(lines) == 1:
            pending.append(chunk)
            continue
        pending.append(lines[0])
        complete = [b"".join(pending), *lines[1:-1]]
        pending = [lines[-1]] if lines[-1] else []
        for line in complete:
            if line.strip():
                yield line
    tail = b"".join(pending)
    if tail.strip():
        yield tail


def interrupt(response: RawResponse) -> None:
    """Unblock a thread reading `response` (used to stop a watch from another thread). Closing
    the response from here could deadlock on the SSL socket's lock; shutting down the socket's
    read side makes the blocked read return instead."""
    # ValueError/RuntimeError: already released or closed, so nothing is blocked on it.
    with contextlib.suppress(ValueError, RuntimeError, OSError):
        response.shutdown()


def discard(response: RawResponse) -> None:
    """Close a response that may be half-read, so its connection is not reused mid-stream."""
    try:
        response.close()
    except OSError as e:
        log.debug("closing a watch response: %s", e)
    release(response)


def release(response: RawResponse) -> None:
    try:
        response.release_conn()
    except OSError as e:
        log.debug("releasing a connection: %s", e)


def watch_error_code(event: dict[str, Any]) -> int | None:
    """The HTTP code carried by an ERROR watch event (a Status object), if any."""
    status = event.get("object")
    if isinstance(status, dict):
        code = status.get("code")
        if isinstance(code, int):
            return code
    return None


def resource_version_of(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        return str(metadata.get("resourceVersion") or "")
    return ""
