"""API client setup: where the credentials come from, one rate limiter every request passes
through, and a user agent that names us in the apiserver's audit log.

The informers list and watch through `KubeClients.list_function`, raw: the generated API
classes (`core`, `storage`, ...) are built on first use only, because importing one builds
hundreds of pydantic model classes (about a second and 15 MiB at start-up) that the running
provisioner never needs.

Besides the typed API objects, `KubeClients.request_json` sends plain dicts and returns plain
dicts. The generated client validates every body into its pydantic models and writes datetimes
with `isoformat()`, which drops the fraction when it is zero: a Lease's MicroTime then fails to
parse on the server. Sending our own JSON avoids that, and the model round trip with it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Protocol

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from provisioner.kube.rate_limit import TokenBucket

log = logging.getLogger(__name__)

DEFAULT_USER_AGENT = "local-path-storage-provisioner/0.1.0"
DEFAULT_QPS = 20.0
DEFAULT_BURST = 30
# Informers hold one long-lived watch connection each and helper-pod runs one per worker: the
# pool must cover those plus the ordinary requests, or urllib3 keeps discarding connections.
DEFAULT_CONNECTION_POOL_SIZE = 32
DEFAULT_REQUEST_TIMEOUT = 30.0

Timeout = float | tuple[float, float]


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


class RateLimitedApiClient(k8s.ApiClient):
    """The generated client funnels every request, typed or raw, through `call_api`."""

    def __init__(self, configuration: k8s.Configuration, bucket: TokenBucket) -> None:
        super().__init__(configuration)
        self._bucket = bucket
        self._spare = threading.local()

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        if getattr(self._spare, "on", False):
            self._bucket.acquire_spare()
        else:
            self._bucket.acquire()
        return super().call_api(*args, **kwargs)

    @contextmanager
    def spare_capacity(self) -> Iterator[None]:
        """This thread's requests meanwhile use only the rate the others leave (see
        `TokenBucket.acquire_spare`)."""
        self._spare.on = True
        try:
            yield
        finally:
            self._spare.on = False


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
    generated `list_*` methods do with `_preload_content=False` (non-2xx raises ApiException)."""

    api_client: k8s.ApiClient
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
        request = self.api_client.param_serialize(
            method="GET",
            resource_path=self.path,
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response: Any = self.api_client.call_api(*request, _request_timeout=_request_timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response


class KubeClients:
    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.api_client = api_client

    @classmethod
    def from_api_client(cls, api_client: k8s.ApiClient) -> KubeClients:
        return cls(api_client)

    @cached_property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api_client)

    @cached_property
    def storage(self) -> k8s.StorageV1Api:
        return k8s.StorageV1Api(self.api_client)

    @cached_property
    def coordination(self) -> k8s.CoordinationV1Api:
        return k8s.CoordinationV1Api(self.api_client)

    @cached_property
    def events(self) -> k8s.EventsV1Api:
        return k8s.EventsV1Api(self.api_client)

    @contextmanager
    def spare_capacity(self) -> Iterator[None]:
        """Requests this thread makes meanwhile wait for capacity no other request needs: for
        writes nothing waits on (events), so that a burst's own requests go first."""
        if isinstance(self.api_client, RateLimitedApiClient):
            with self.api_client.spare_capacity():
                yield
        else:
            yield

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
        decoded response. Raises the client's `ApiException` (with `.status`) on non-2xx."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        request = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query.items()) if query else None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        # The generated client leaves RESTResponse untyped.
        response: Any = self.api_client.call_api(*request, _request_timeout=timeout)
        data = response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(
                http_resp=response, body=data.decode("utf-8", "replace"), data=None
            )
        if not data:
            return {}
        decoded: dict[str, Any] = json.loads(data)
        return decoded

    def close(self) -> None:
        self.api_client.close()  # type: ignore[no-untyped-call]


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
    """Load credentials (see `locate_kubeconfig`) into a private Configuration (never the
    client's global default) and build the API objects on a rate-limited ApiClient."""
    configuration = k8s.Configuration()
    source = _load_configuration(
        configuration, kubeconfig, context, os.environ if environ is None else environ
    )
    log.info("Kubernetes API at %s (credentials: %s)", configuration.host, _describe(source))
    configuration.connection_pool_maxsize = connection_pool_size
    api_client = RateLimitedApiClient(configuration, TokenBucket(qps, burst))
    api_client.user_agent = user_agent
    return KubeClients.from_api_client(api_client)


def _load_configuration(
    configuration: k8s.Configuration,
    kubeconfig: str | None,
    context: str | None,
    environ: Mapping[str, str],
) -> KubeconfigSource:
    in_cluster = (
        bool(environ.get("KUBERNETES_SERVICE_HOST"))
        and Path("/var/run/secrets/kubernetes.io/serviceaccount/token").is_file()
    )
    source = locate_kubeconfig(kubeconfig, environ, Path.home(), in_cluster)
    try:
        if source.kind == "in-cluster":
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        else:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=source.path,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
    except (k8s_config.ConfigException, OSError, ValueError) as e:
        raise KubeConfigError(f"cannot load credentials from {_describe(source)}: {e}") from e
    return source


def _describe(source: KubeconfigSource) -> str:
    return "in-cluster service account" if source.kind == "in-cluster" else f"{source.path}"
