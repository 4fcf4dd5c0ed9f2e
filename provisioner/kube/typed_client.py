"""The generated kubernetes client's ApiClient, sending through our transport.

Imported only when a typed API object is first used (`KubeClients.core`, ...): tests and tools
use them, the provisioner does not. The generated client still does what it does (URLs,
bodies, models, its own ApiException for refusals), but the bytes go through
`RateLimitedApiClient.call_api`: the same rate limiter, credentials, user agent and connection
pool as every other request.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from provisioner.kube.transport import RateLimitedApiClient


class _ThroughTransport:
    """Stands in for the generated REST client's urllib3 pool."""

    def __init__(self, transport: RateLimitedApiClient) -> None:
        self._transport = transport

    def request(
        self,
        method: str,
        url: str,
        *,
        body: Any = None,
        headers: dict[str, str] | None = None,
        timeout: Any = None,
        fields: Any = None,
        preload_content: bool = False,
        **_: Any,
    ) -> Any:
        if fields:
            raise ValueError("form fields are not sent through the provisioner's transport")
        return self._transport.call_api(method, url, headers, body, timeout)

    def clear(self) -> None:
        """The pool is the transport's; it is closed with it."""


def typed_api_client(transport: RateLimitedApiClient) -> Any:
    configuration = k8s.Configuration(host=transport.configuration.host)
    api_client = k8s.ApiClient(configuration)
    api_client.user_agent = transport.user_agent
    # Its REST client keeps doing the bodies and timeouts; only the sending is ours.
    api_client.rest_client.pool_manager = _ThroughTransport(transport)  # type: ignore[assignment]
    return api_client
