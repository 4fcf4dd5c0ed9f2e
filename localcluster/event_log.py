"""A tiny timestamped line log per harness part, kept in the cluster's logs directory.

Why: the runner and the harness run inside a test process whose output pytest captures; when
something goes wrong a person needs a file to read, next to the components' logs.
"""

from __future__ import annotations

import datetime
import threading
from pathlib import Path


def utc_now() -> str:
    """Now as the RFC 3339 timestamp the Kubernetes API uses (second precision, Z)."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventLog:
    """Appends timestamped lines to a file; safe to use from several threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, line: str) -> None:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S.%f")[:-3]
        with self._lock, self.path.open("a", encoding="utf-8") as log:
            log.write(f"{stamp} {line}\n")
