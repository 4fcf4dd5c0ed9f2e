"""Leader election on a real Lease: one leader among two, takeover after a release, and after
the leader stops renewing."""

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from provisioner.kube.client import DEFAULT_REQUEST_TIMEOUT, KubeClients, Timeout
from provisioner.kube.leader_election import LeaderElectionConfig, LeaderElector
from provisioner.kube.lease_watch import lease_watch
from tests.provisioner.kube.fakes import wait_until

pytestmark = pytest.mark.cluster

CONFIG = LeaderElectionConfig(lease_duration=2.0, renew_deadline=1.5, retry_period=0.3)


class Partitionable:
    """The real client, until `cut()`: then every request fails like a lost network."""

    def __init__(self, clients: KubeClients) -> None:
        self._clients = clients
        self.cut_off = False

    def cut(self) -> None:
        self.cut_off = True

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
        if self.cut_off:
            raise OSError("network unreachable")
        return self._clients.request_json(
            method, path, query=query, body=body, content_type=content_type, timeout=timeout
        )


class Candidate:
    def __init__(self, clients: KubeClients, namespace: str, identity: str) -> None:
        self.api = Partitionable(clients)
        self.log: list[str] = []
        self.elector = LeaderElector(
            self.api,
            namespace,
            "local-path-storage.io-local-path",
            identity=identity,
            config=CONFIG,
            on_started_leading=lambda: self.log.append("started"),
            on_stopped_leading=lambda: self.log.append("stopped"),
        )
        self.elector.start()


@pytest.fixture
def candidates(clients: KubeClients, namespace: str) -> Iterator[Callable[[str], Candidate]]:
    made: list[Candidate] = []

    def make(identity: str) -> Candidate:
        candidate = Candidate(clients, namespace, identity)
        made.append(candidate)
        return candidate

    yield make
    for candidate in made:
        candidate.elector.stop()


def lease(clients: KubeClients, namespace: str) -> dict[str, Any]:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/"
    spec: dict[str, Any] = clients.request_json("GET", path + "local-path-storage.io-local-path")[
        "spec"
    ]
    return spec


def test_one_of_two_leads_and_a_release_hands_over_at_once(
    clients: KubeClients, namespace: str, candidates: Callable[[str], Candidate]
) -> None:
    a, b = candidates("a"), candidates("b")
    assert wait_until(lambda: a.elector.is_leader or b.elector.is_leader, timeout=10)
    time.sleep(1.0)
    leader, standby = (a, b) if a.elector.is_leader else (b, a)
    assert not standby.elector.is_leader
    assert lease(clients, namespace)["holderIdentity"] == leader.elector.identity
    leader.elector.stop()
    assert leader.log == ["started", "stopped"]
    released_at = time.monotonic()
    assert wait_until(lambda: standby.elector.is_leader, timeout=5)
    # Faster than waiting out the 2 s lease: the release let the standby in.
    assert time.monotonic() - released_at < 1.5
    spec = lease(clients, namespace)
    assert spec["holderIdentity"] == standby.elector.identity
    assert spec["leaseTransitions"] >= 1


def test_a_leader_that_stops_renewing_is_replaced(
    clients: KubeClients, namespace: str, candidates: Callable[[str], Candidate]
) -> None:
    a = candidates("a")
    assert wait_until(lambda: a.elector.is_leader, timeout=10)
    b = candidates("b")
    time.sleep(0.5)
    assert not b.elector.is_leader
    a.api.cut()
    assert wait_until(lambda: a.log == ["started", "stopped"], timeout=5)
    assert wait_until(lambda: b.elector.is_leader, timeout=10)
    assert lease(clients, namespace)["holderIdentity"] == "b"


def test_a_watch_on_the_lease_hears_each_renewal_and_no_other_lease(
    clients: KubeClients, namespace: str, candidates: Callable[[str], Candidate]
) -> None:
    """`lease_watch` on the real API: the leader's renewals reach `heard` as they are written
    (renewTime after renewTime), and another Lease of the namespace never does."""
    other = "/apis/coordination.k8s.io/v1/namespaces/" + namespace + "/leases"
    clients.request_json(
        "POST",
        other,
        body={"metadata": {"name": "someone-else"}, "spec": {"holderIdentity": "x"}},
    )
    heard: list[dict[str, Any]] = []
    watch = lease_watch(clients, namespace, "local-path-storage.io-local-path", heard.append)
    watch.start()
    try:
        a = candidates("a")
        assert wait_until(lambda: a.elector.is_leader)
        assert wait_until(lambda: len({spec.get("renewTime") for spec in heard}) >= 3, timeout=5)
    finally:
        watch.stop()
    assert {spec.get("holderIdentity") for spec in heard} == {"a"}
    assert heard[-1]["renewTime"] > heard[0]["renewTime"]
