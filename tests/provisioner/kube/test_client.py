import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client as k8s

from provisioner.kube.api_error import ApiError
from provisioner.kube.client import (
    DEFAULT_USER_AGENT,
    KubeClients,
    KubeConfigError,
    KubeconfigSource,
    RateLimitedApiClient,
    create_clients,
    locate_kubeconfig,
)
from provisioner.kube.credentials import Credentials, FixedAuthorization
from provisioner.kube.rate_limit import TokenBucket
from tests.provisioner.kube.fakes import FakeClock


def test_lookup_order_flag_then_environment_then_in_cluster_then_home(tmp_path: Path) -> None:
    home = tmp_path
    (home / ".kube").mkdir()
    (home / ".kube" / "config").write_text("{}")
    env = {"KUBECONFIG": "/env/config"}
    assert locate_kubeconfig("/flag", env, home, True) == KubeconfigSource("file", "/flag")
    assert locate_kubeconfig(None, env, home, True) == KubeconfigSource("file", "/env/config")
    assert locate_kubeconfig(None, {}, home, True) == KubeconfigSource("in-cluster")
    assert locate_kubeconfig(None, {"KUBECONFIG": ""}, home, False) == KubeconfigSource(
        "file", str(home / ".kube" / "config")
    )


def test_no_credentials_anywhere_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="pass --kubeconfig"):
        locate_kubeconfig(None, {}, tmp_path, False)


def write_kubeconfig(path: Path, server: str = "https://127.0.0.1:6443") -> Path:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "test",
                "clusters": [
                    {"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}
                ],
                "users": [{"name": "u", "user": {"token": "secret-token"}}],
                "contexts": [{"name": "test", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return path


def test_create_clients_from_a_kubeconfig_file(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "config")
    clients = create_clients(str(kubeconfig), environ={})
    try:
        assert clients.api_client.configuration.host == "https://127.0.0.1:6443"
        assert clients.api_client.user_agent == DEFAULT_USER_AGENT
        assert isinstance(clients.api_client, RateLimitedApiClient)
        assert isinstance(clients.core, k8s.CoreV1Api)
        assert isinstance(clients.storage, k8s.StorageV1Api)
        assert isinstance(clients.coordination, k8s.CoordinationV1Api)
        assert isinstance(clients.events, k8s.EventsV1Api)
        # A private configuration: the client's global default stays untouched.
        assert k8s.Configuration.get_default_copy().host != "https://127.0.0.1:6443"
    finally:
        clients.close()


def test_kubeconfig_from_the_environment(tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "env-config", server="https://10.0.0.1:443")
    clients = create_clients(environ={"KUBECONFIG": str(kubeconfig)})
    assert clients.api_client.configuration.host == "https://10.0.0.1:443"
    clients.close()


def test_an_unreadable_kubeconfig_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(KubeConfigError, match=str(missing)):
        create_clients(str(missing), environ={})


class FakeRestResponse:
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.reason = "OK" if status == 200 else "Not Found"
        self.data = json.dumps(body).encode()
        self.headers: dict[str, str] = {}

    def read(self, *args: Any, **kwargs: Any) -> bytes:
        return self.data


Sent = list[tuple[str, str, dict[str, str], Any, Any]]
Limited = tuple[KubeClients, FakeClock, Sent]


class FakePool:
    """The urllib3 pool under the transport: records what would go on the wire."""

    def __init__(self) -> None:
        self.sent: Sent = []

    def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes | str | None,
        headers: Mapping[str, str],
        timeout: urllib3.Timeout | None,
        preload_content: bool,
    ) -> FakeRestResponse:
        assert not preload_content  # every response is handed over unread
        seconds: Any = timeout
        if timeout is not None:
            seconds = timeout.total or (timeout.connect_timeout, timeout.read_timeout)
        self.sent.append((method, url, dict(headers), json.loads(body) if body else None, seconds))
        if url.endswith("/missing"):
            return FakeRestResponse(404, {"kind": "Status", "code": 404})
        return FakeRestResponse(200, {"kind": "Pod", "metadata": {"name": "x"}})

    def clear(self) -> None:
        pass


@pytest.fixture
def limited() -> Limited:
    clock = FakeClock()
    pool = FakePool()
    api_client = RateLimitedApiClient(
        Credentials(host="http://127.0.0.1:1", authorization=FixedAuthorization("Bearer t")),
        TokenBucket(qps=2, burst=1, clock=clock),
        user_agent=DEFAULT_USER_AGENT,
        pool=pool,
    )
    return KubeClients.from_api_client(api_client), clock, pool.sent


def test_every_request_waits_for_a_token(limited: Limited) -> None:
    clients, clock, _ = limited
    for _ in range(3):
        clients.request_json("GET", "/api/v1/namespaces/a/pods/x")
    # 2 qps, burst 1: the first goes at once, each next one half a second after the last.
    assert clock.sleeps == [0, pytest.approx(0.5), pytest.approx(0.5)]
    # Typed calls go through the same limiter.
    clients.core.read_namespaced_pod("x", "a", _preload_content=False)
    assert len(clock.sleeps) == 4


def test_request_json_sends_and_returns_plain_dicts(limited: Limited) -> None:
    clients, _, sent = limited
    body = {"spec": {"renewTime": "2025-01-01T00:00:00.000000Z"}}
    result = clients.request_json(
        "PATCH",
        "/x",
        body=body,
        query={"dryRun": "All"},
        content_type="application/merge-patch+json",
        timeout=3,
    )
    assert result == {"kind": "Pod", "metadata": {"name": "x"}}
    method, url, headers, sent_body, timeout = sent[-1]
    assert (method, url, timeout) == ("PATCH", "http://127.0.0.1:1/x?dryRun=All", 3)
    assert sent_body == body
    assert headers["Content-Type"] == "application/merge-patch+json"


def test_request_json_raises_api_exceptions_with_the_status(limited: Limited) -> None:
    clients, _, _ = limited
    with pytest.raises(ApiError) as error:
        clients.request_json("GET", "/missing")
    assert error.value.status == 404


def test_every_request_carries_our_user_agent_and_the_credentials(limited: Limited) -> None:
    clients, _, sent = limited
    clients.request_json("GET", "/api/v1/namespaces/a/pods/x")
    clients.list_function("/api/v1/pods")(watch=True, timeout_seconds=5, label_selector="a=b")
    clients.core.read_namespaced_pod("x", "a", _preload_content=False)
    assert [url for _, url, _, _, _ in sent] == [
        "http://127.0.0.1:1/api/v1/namespaces/a/pods/x",
        "http://127.0.0.1:1/api/v1/pods?watch=true&timeoutSeconds=5&labelSelector=a%3Db",
        "http://127.0.0.1:1/api/v1/namespaces/a/pods/x",
    ]
    for _, _, headers, _, _ in sent:
        assert headers["User-Agent"] == DEFAULT_USER_AGENT
        assert headers["Authorization"] == "Bearer t"


def test_a_thread_s_spare_capacity_requests_wait_for_tokens_nobody_else_needs() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=1, clock=clock)
    pool = FakePool()
    api_client = RateLimitedApiClient(
        Credentials(host="http://127.0.0.1:1", authorization=FixedAuthorization("Bearer t")),
        bucket,
        user_agent=DEFAULT_USER_AGENT,
        pool=pool,
    )
    bucket.reserve()  # an ordinary request took the only token
    with KubeClients.from_api_client(api_client).spare_capacity():
        api_client.call_api("GET", "http://127.0.0.1:1/x")
    api_client.call_api("GET", "http://127.0.0.1:1/y")
    assert [url for _, url, _, _, _ in pool.sent] == [
        "http://127.0.0.1:1/x",
        "http://127.0.0.1:1/y",
    ]
    # The spare request waited for a token of its own (0.1 s); the ordinary one after it then
    # borrowed the next (another 0.1 s): neither was served ahead of the earlier reservation.
    assert clock.sleeps == [pytest.approx(0.1), pytest.approx(0.1)]
