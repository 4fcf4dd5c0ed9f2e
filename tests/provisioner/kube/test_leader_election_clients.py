"""The Lease's clients: a request ends within its timeout, once, against a server that accepts
and never answers (the shared client's urllib3 default retried a GET or PUT three times, each
with the whole timeout again), and they never wait for the shared bucket's tokens."""

import logging
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from urllib3.exceptions import HTTPError

from provisioner.kube.client import DEFAULT_USER_AGENT, KubeClients
from provisioner.kube.credentials import Credentials
from provisioner.kube.rate_limit import TokenBucket
from provisioner.kube.transport import RateLimitedApiClient


class SilentServer:
    """Accepts connections, reads, never answers; counts the connections."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.socket.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.connections.append(connection)

    def close(self) -> None:
        self.socket.close()
        for connection in self.connections:
            connection.close()


@pytest.fixture
def server() -> Iterator[SilentServer]:
    silent = SilentServer()
    yield silent
    silent.close()


def shared_clients(url: str, bucket: TokenBucket) -> KubeClients:
    return KubeClients(RateLimitedApiClient(Credentials(host=url), bucket, user_agent="t"))


@pytest.mark.parametrize("method", ["GET", "PUT"])
def test_a_lease_request_to_a_silent_server_ends_in_its_timeout_without_retries(
    server: SilentServer, method: str
) -> None:
    lease = shared_clients(server.url, TokenBucket(20, 30)).leader_election_clients()
    started = time.monotonic()
    with pytest.raises(HTTPError):
        lease.request_json(method, "/apis/coordination.k8s.io/v1/leases/x", body={}, timeout=0.3)
    assert time.monotonic() - started < 0.6
    assert len(server.connections) == 1, "the request was sent again"


def test_lease_requests_do_not_wait_behind_the_shared_bucket(server: SilentServer) -> None:
    shared = TokenBucket(qps=0.01, burst=1)
    shared.reserve()  # the next shared token is 100 s away
    clients = shared_clients(server.url, shared)
    lease = clients.leader_election_clients()
    assert lease.api_client.user_agent == "t leader-election"
    started = time.monotonic()
    with pytest.raises(HTTPError):
        lease.request_json("GET", "/apis/coordination.k8s.io/v1/leases/x", timeout=0.2)
    assert time.monotonic() - started < 0.5
    assert shared.reserve() > 50, "the lease request took no token of the shared bucket"


def test_the_default_user_agent_names_the_lease_clients() -> None:
    api_client = RateLimitedApiClient(
        Credentials(host="http://127.0.0.1:1"), TokenBucket(1, 1), user_agent=DEFAULT_USER_AGENT
    )
    lease = KubeClients(api_client).leader_election_clients()
    assert lease.api_client.user_agent == f"{DEFAULT_USER_AGENT} leader-election"


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_the_shared_client_never_sends_a_request_again_after_it_was_sent(
    server: SilentServer, method: str
) -> None:
    """A read timeout may follow a request the server applied: sending it again would turn our
    own PUT into a 409 and our own DELETE into a 404. Only the caller's retry, which reads the
    state first, may repeat it."""
    clients = shared_clients(server.url, TokenBucket(20, 30))
    started = time.monotonic()
    with pytest.raises(HTTPError):
        clients.request_json(method, "/api/v1/persistentvolumes/x", body={}, timeout=0.3)
    assert time.monotonic() - started < 0.6
    assert len(server.connections) == 1, "the request was sent again"


def test_the_shared_client_still_retries_a_connection_that_was_never_made(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing was sent, so trying again is safe: a refused connection is retried."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now: every connect is refused
    caplog.set_level(logging.WARNING, logger="urllib3.connectionpool")
    clients = shared_clients(f"http://127.0.0.1:{port}", TokenBucket(20, 30))
    with pytest.raises(HTTPError):
        clients.request_json("GET", "/api/v1/nodes", timeout=0.3)
    retried = [record for record in caplog.records if "Retrying" in record.getMessage()]
    assert len(retried) == 3, "urllib3's 3 retries of a connection that was refused"
