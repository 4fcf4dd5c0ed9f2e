"""Recording core/v1 Events about claims and volumes, the way client-go's recorder does, simplified:

- the caller never waits and never sees an error: events go through a bounded queue to one
  background thread, and failures are logged (an event is worth less than the work it reports);
- repeats of the same event (same object, type, reason, message) within 10 minutes update the
  existing Event's count and lastTimestamp instead of creating new objects (the correlator);
- a per-object token bucket (burst 25, one more every 5 minutes) drops floods from one object.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from typing import Any, Literal

from urllib3.exceptions import HTTPError

from provisioner.kube.api_error import ApiError
from provisioner.kube.client import JsonRequester
from provisioner.kube.clock import SYSTEM_CLOCK, Clock
from provisioner.kube.event_correlator import Decision, EventCorrelator, EventKey

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]
MAX_MESSAGE_LENGTH = 1024


@dataclass(frozen=True)
class ObjectReference:
    """The object an event is about; uid and resource_version pin it to one incarnation."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"
    resource_version: str = ""

    @classmethod
    def from_object(
        cls, obj: Mapping[str, Any], kind: str, api_version: str = "v1"
    ) -> ObjectReference:
        """From a raw API object dict (list items carry no kind, so it is given)."""
        metadata = obj.get("metadata") or {}
        return cls(
            kind=kind,
            name=str(metadata.get("name", "")),
            namespace=str(metadata.get("namespace") or ""),
            uid=str(metadata.get("uid") or ""),
            api_version=api_version,
            resource_version=str(metadata.get("resourceVersion") or ""),
        )

    def as_dict(self) -> dict[str, str]:
        fields = {
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
            "apiVersion": self.api_version,
            "resourceVersion": self.resource_version,
        }
        return {key: value for key, value in fields.items() if value}


@dataclass(frozen=True)
class _Pending:
    decision: Decision
    involved: ObjectReference
    event_type: str
    reason: str
    message: str
    timestamp: datetime


def _time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    def __init__(
        self,
        clients: JsonRequester,
        component: str,
        *,
        host: str = "",
        correlator: EventCorrelator | None = None,
        max_pending: int = 1000,
        clock: Clock = SYSTEM_CLOCK,
        spare_capacity: Callable[[], AbstractContextManager[None]] = nullcontext,
    ) -> None:
        """`component` (the provisioner name) becomes source.component and
        reportingComponent; `host` (the node or pod) becomes source.host. Each event is sent
        within `spare_capacity()`: with the client's, events use only the request rate the
        work they report leaves (a burst's PVs are not held up behind its events)."""
        self._clients = clients
        self._spare_capacity = spare_capacity
        self._component = component
        self._host = host
        self._correlator = correlator or EventCorrelator()
        self._clock = clock
        self._pending: queue.Queue[_Pending | None] = queue.Queue(max_pending)
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def normal(self, involved: ObjectReference, reason: str, message: str) -> None:
        self.event(involved, "Normal", reason, message)

    def warning(self, involved: ObjectReference, reason: str, message: str) -> None:
        self.event(involved, "Warning", reason, message)

    def event(
        self, involved: ObjectReference, event_type: EventType, reason: str, message: str
    ) -> None:
        """Queue an event; never blocks and never raises."""
        try:
            if len(message) > MAX_MESSAGE_LENGTH:
                message = message[: MAX_MESSAGE_LENGTH - 3] + "..."
            key = EventKey(
                involved.kind,
                involved.namespace,
                involved.name,
                involved.uid,
                event_type,
                reason,
                message,
            )
            wall_now = self._clock.now()
            decision = self._correlator.observe(key, self._clock.monotonic(), wall_now)
            if decision.action == "drop":
                log.debug(
                    "event %s on %s/%s dropped (too many)", reason, involved.kind, involved.name
                )
                return
            self._ensure_started()
            self._pending.put_nowait(
                _Pending(decision, involved, event_type, reason, message, wall_now)
            )
        except queue.Full:
            log.warning(
                "event queue full, dropping event %s on %s/%s", reason, involved.kind, involved.name
            )
        except Exception:
            log.exception("recording event %s failed", reason)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued event was sent (or failed). For tests and shutdown."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._pending.unfinished_tasks == 0:
                return True
            time.sleep(0.02)
        return self._pending.unfinished_tasks == 0

    def stop(self, timeout: float = 5.0) -> None:
        """Send what is queued (within `timeout`), then end the background thread."""
        with self._start_lock:
            thread = self._thread
            self._thread = None
        if thread is None:
            return
        try:
            self._pending.put(None, timeout=timeout)
        except queue.Full:
            log.warning("event queue still full at shutdown; pending events are lost")
            return
        thread.join(timeout)

    def _ensure_started(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._send_loop, name="event-recorder", daemon=True
                )
                self._thread.start()

    def _send_loop(self) -> None:
        while True:
            pending = self._pending.get()
            try:
                if pending is None:
                    return
                with self._spare_capacity():
                    self._send(pending)
            except (ApiError, HTTPError, OSError) as e:
                assert pending is not None
                log.warning(
                    "posting event %s on %s/%s failed: %s",
                    pending.reason,
                    pending.involved.kind,
                    pending.involved.name,
                    _describe(e),
                )
            except Exception:
                log.exception("posting event failed")
            finally:
                self._pending.task_done()

    def _send(self, pending: _Pending) -> None:
        decision = pending.decision
        namespace = pending.involved.namespace or "default"
        collection = f"/api/v1/namespaces/{namespace}/events"
        if decision.action == "patch":
            patch = {
                "count": decision.count,
                "lastTimestamp": _time(pending.timestamp),
                "message": pending.message,
            }
            try:
                self._clients.request_json(
                    "PATCH",
                    f"{collection}/{decision.name}",
                    body=patch,
                    content_type="application/strategic-merge-patch+json",
                )
                return
            except ApiError as e:
                # The Event expired (TTL) or its creation failed: create it afresh.
                if e.status != HTTPStatus.NOT_FOUND:
                    raise
        self._clients.request_json("POST", collection, body=self._event_body(pending, namespace))

    def _event_body(self, pending: _Pending, namespace: str) -> dict[str, Any]:
        decision = pending.decision
        source: dict[str, str] = {"component": self._component}
        if self._host:
            source["host"] = self._host
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": decision.name, "namespace": namespace},
            "involvedObject": pending.involved.as_dict(),
            "type": pending.event_type,
            "reason": pending.reason,
            "message": pending.message,
            "source": source,
            "reportingComponent": self._component,
            "reportingInstance": self._host or self._component,
            "firstTimestamp": _time(decision.first_seen or pending.timestamp),
            "lastTimestamp": _time(pending.timestamp),
            "count": decision.count,
        }


def _describe(error: Exception) -> str:
    if isinstance(error, ApiError):
        return f"HTTP {error.status} {error.reason}: {error.body}"
    return f"{type(error).__name__}: {error}"
