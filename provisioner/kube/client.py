"""API client setup: where the credentials come from, one rate limiter every request passes
through, and a user agent that names us in the apiserver's audit log; and the Events this
process records (`EventRecorder`), which are requests like any other.

The provisioner talks to the API with plain JSON: `KubeClients.request_json` sends dicts and
returns dicts, and the informers list and watch through `KubeClients.list_function`, raw. Both
go straight to `RateLimitedApiClient.call_api` (`transport`), so start-up imports nothing of the
kubernetes package. The generated client validates every body into its pydantic models and
writes datetimes with `isoformat()`, which drops the fraction when it is zero (a Lease's
MicroTime then fails to parse on the server); we need none of that. Its typed API objects
(`core`, `storage`, ...) are still there for tests and tools, built on the same transport when
first used: importing them builds hundreds of pydantic model classes.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from http import HTTPStatus
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import quote, urlencode

from urllib3.exceptions import HTTPError

from provisioner.kube.api_error import ApiError
from provisioner.kube.clock import SYSTEM_CLOCK, Clock
from provisioner.kube.credentials import (
    SERVICE_ACCOUNT_DIR,
    Credentials,
    CredentialsError,
    PluginNeeded,
    credentials_via_plugin,
    in_cluster_credentials,
)
from provisioner.kube.event_correlator import Decision, EventCorrelator, EventKey
from provisioner.kube.kubeconfig import kubeconfig_credentials, read_kubeconfig
from provisioner.kube.rate_limit import TokenBucket
from provisioner.kube.transport import RateLimitedApiClient, Timeout
from provisioner.version import VERSION

__all__ = ["RateLimitedApiClient", "Timeout"]

log = logging.getLogger(__name__)

DEFAULT_USER_AGENT = f"local-path-storage-provisioner/{VERSION}"
DEFAULT_QPS = 20.0
DEFAULT_BURST = 30
# Informers hold one long-lived watch connection each and helper-pod runs one per worker: the
# pool must cover those plus the ordinary requests, or urllib3 keeps discarding connections.
DEFAULT_CONNECTION_POOL_SIZE = 32
DEFAULT_REQUEST_TIMEOUT = 30.0
LEADER_ELECTION_CONNECTIONS = 1
"""The elector sends one request at a time."""


class KubeConfigError(Exception):
    """No usable credentials were found, or the chosen kubeconfig could not be loaded."""


@dataclass(frozen=True)
class KubeconfigSource:
    kind: Literal["file", "in-cluster"]
    path: str | None = None
    """The kubeconfig path (a `:`-separated list when it came from $KUBECONFIG)."""


def locate_kubeconfig(
    flag: str | None,
    environ: Mapping[str, str],
    home: Path,
    in_cluster_available: bool,
) -> KubeconfigSource:
    """The lookup order: the --kubeconfig flag, $KUBECONFIG, the in-cluster service account,
    then ~/.kube/config."""
    if flag:
        return KubeconfigSource("file", flag)
    from_environment = environ.get("KUBECONFIG", "")
    if from_environment:
        return KubeconfigSource("file", from_environment)
    if in_cluster_available:
        return KubeconfigSource("in-cluster")
    default = home / ".kube" / "config"
    if default.is_file():
        return KubeconfigSource("file", str(default))
    raise KubeConfigError(
        "no Kubernetes credentials found: not running in a pod, $KUBECONFIG is unset and "
        f"{default} does not exist; pass --kubeconfig"
    )


class JsonRequester(Protocol):
    """What the lease, event and pod code needs of the client (tests substitute fakes)."""

    def request_json(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: Timeout = DEFAULT_REQUEST_TIMEOUT,
    ) -> dict[str, Any]: ...


# The list and watch parameters the informers and the helper-pod runner pass, by the generated
# client's argument names, and their names on the wire.
_LIST_PARAMETERS = {
    "_continue": "continue",
    "limit": "limit",
    "resource_version": "resourceVersion",
    "resource_version_match": "resourceVersionMatch",
    "label_selector": "labelSelector",
    "field_selector": "fieldSelector",
    "watch": "watch",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "timeout_seconds": "timeoutSeconds",
}


@dataclass(frozen=True)
class ListFunction:
    """A list (or, with watch=True, watch) call of one collection, e.g. `/api/v1/nodes`, that
    takes the generated client's arguments and returns the raw urllib3 response, as the
    generated `list_*` methods do with `_preload_content=False` (non-2xx raises ApiError)."""

    api_client: RateLimitedApiClient
    path: str

    def __call__(
        self,
        *,
        _preload_content: bool = False,
        _request_timeout: Timeout | None = None,
        **parameters: Any,
    ) -> Any:
        if _preload_content:
            raise ValueError("a ListFunction only returns raw responses")
        query = [
            (_LIST_PARAMETERS[name], value)
            for name, value in parameters.items()
            if value is not None
        ]
        response = self.api_client.call_api(
            "GET",
            request_url(self.api_client.configuration.host, self.path, query),
            {"Accept": "application/json"},
            timeout=_request_timeout,
        )
        if not 200 <= response.status <= 299:
            raise ApiError.from_response(response, _text(response.data))
        return response


class KubeClients:
    def __init__(self, api_client: RateLimitedApiClient) -> None:
        self.api_client = api_client

    @classmethod
    def from_api_client(cls, api_client: RateLimitedApiClient) -> KubeClients:
        return cls(api_client)

    @cached_property
    def typed_api_client(self) -> Any:
        """The generated client's ApiClient, sending through `api_client` (built on first use)."""
        from provisioner.kube.typed_client import typed_api_client  # noqa: PLC0415 (see above)

        return typed_api_client(self.api_client)

    @cached_property
    def core(self) -> Any:
        """The generated `CoreV1Api` (tests and tools; the provisioner sends JSON itself)."""
        from kubernetes import client as k8s  # noqa: PLC0415 (see the module's docstring)

        return k8s.CoreV1Api(self.typed_api_client)

    @cached_property
    def storage(self) -> Any:
        from kubernetes import client as k8s  # noqa: PLC0415

        return k8s.StorageV1Api(self.typed_api_client)

    @cached_property
    def coordination(self) -> Any:
        from kubernetes import client as k8s  # noqa: PLC0415

        return k8s.CoordinationV1Api(self.typed_api_client)

    @cached_property
    def events(self) -> Any:
        from kubernetes import client as k8s  # noqa: PLC0415

        return k8s.EventsV1Api(self.typed_api_client)

    @contextmanager
    def spare_capacity(self) -> Iterator[None]:
        """Requests this thread makes meanwhile wait for capacity no other request needs: for
        writes nothing waits on (events), so that a burst's own requests go first."""
        with self.api_client.spare_capacity():
            yield

    def leader_election_clients(self) -> KubeClients:
        """Clients for the Lease alone (see `RateLimitedApiClient.dedicated`): a renewal must
        not queue behind a burst of work for a token or a connection, and must not outlive the
        timeout the elector gives it, or a leader could work on past its lease."""
        api_client = self.api_client.dedicated(
            user_agent=f"{self.api_client.user_agent} leader-election",
            pool_size=LEADER_ELECTION_CONNECTIONS,
        )
        return KubeClients(api_client)

    def list_function(self, path: str) -> ListFunction:
        """The raw list/watch call of the collection at `path` (see `ListFunction`)."""
        return ListFunction(self.api_client, path)

    def request_json(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: Timeout = DEFAULT_REQUEST_TIMEOUT,
    ) -> dict[str, Any]:
        """Send `body` as JSON to `path` (e.g. `/api/v1/namespaces/x/pods`) and return the
        decoded response. Raises `ApiError` (with `.status`) on non-2xx."""
        headers = {"Accept": "application/json"}
        payload = None
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
            payload = json.dumps(body)
        response = self.api_client.call_api(
            method,
            request_url(self.api_client.configuration.host, path, list((query or {}).items())),
            headers,
            payload,
            timeout,
        )
        data = response.data
        if not 200 <= response.status <= 299:
            raise ApiError.from_response(response, _text(data))
        if not data:
            return {}
        decoded: dict[str, Any] = json.loads(data)
        return decoded

    def close(self) -> None:
        self.api_client.close()


def request_url(host: str, path: str, query: list[tuple[str, Any]]) -> str:
    """`host` + `path` + the query, booleans written as the API spells them (true, false)."""
    if not query:
        return host + path
    pairs = [
        (name, str(value).lower() if isinstance(value, bool) else value) for name, value in query
    ]
    return f"{host}{path}?{urlencode(pairs, quote_via=quote)}"


def _text(data: bytes | None) -> str | None:
    return data.decode("utf-8", "replace") if data else None


def create_clients(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    qps: float = DEFAULT_QPS,
    burst: int = DEFAULT_BURST,
    user_agent: str = DEFAULT_USER_AGENT,
    connection_pool_size: int = DEFAULT_CONNECTION_POOL_SIZE,
    environ: Mapping[str, str] | None = None,
) -> KubeClients:
    """Load credentials (see `locate_kubeconfig`) and build the rate-limited client on them."""
    environ = os.environ if environ is None else environ
    source, credentials = _load_credentials(kubeconfig, context, environ)
    log.info("Kubernetes API at %s (credentials: %s)", credentials.host, _describe(source))
    try:
        api_client = RateLimitedApiClient(
            credentials,
            TokenBucket(qps, burst),
            user_agent=user_agent,
            pool_size=connection_pool_size,
        )
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError: a bad CA or certificate
        raise KubeConfigError(f"cannot use the credentials from {_describe(source)}: {e}") from e
    return KubeClients.from_api_client(api_client)


def _load_credentials(
    kubeconfig: str | None, context: str | None, environ: Mapping[str, str]
) -> tuple[KubeconfigSource, Credentials]:
    in_cluster = (
        bool(environ.get("KUBERNETES_SERVICE_HOST")) and (SERVICE_ACCOUNT_DIR / "token").is_file()
    )
    source = locate_kubeconfig(kubeconfig, environ, Path.home(), in_cluster)
    try:
        if source.kind == "in-cluster":
            return source, in_cluster_credentials(environ)
        found = kubeconfig_credentials(read_kubeconfig(source.path or ""), context)
        if isinstance(found, PluginNeeded):
            found = credentials_via_plugin(found)
    except CredentialsError as e:
        raise KubeConfigError(f"cannot load credentials from {_describe(source)}: {e}") from e
    return source, found


def _describe(source: KubeconfigSource) -> str:
    return "in-cluster service account" if source.kind == "in-cluster" else f"{source.path}"


# -- Events ---------------------------------------------------------------------------------

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
    """Records core/v1 Events about claims and volumes, the way client-go's recorder does,
    simplified:

    - the caller never waits and never sees an error: events go through a bounded queue to one
      background thread, and failures are logged (an event is worth less than the work it
      reports);
    - repeats of the same event (same object, type, reason, message) within 10 minutes update
      the existing Event's count and lastTimestamp instead of creating new objects (the
      correlator);
    - a per-object token bucket (burst 25, one more every 5 minutes) drops floods from one
      object.
    """

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
                    _describe_error(e),
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


def _describe_error(error: Exception) -> str:
    if isinstance(error, ApiError):
        return f"HTTP {error.status} {error.reason}: {error.body}"
    return f"{type(error).__name__}: {error}"
