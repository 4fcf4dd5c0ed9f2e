"""API client setup: where the credentials come from, one rate limiter every request passes
through, and a user agent that names us in the apiserver's audit log.

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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import quote, urlencode

from provisioner.kube.api_error import ApiError
from provisioner.kube.credentials import (
    SERVICE_ACCOUNT_DIR,
    Credentials,
    CredentialsError,
    PluginNeeded,
    credentials_via_plugin,
    in_cluster_credentials,
)
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
