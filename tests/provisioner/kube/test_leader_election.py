"""Leader election against an in-memory Lease API with the server's optimistic concurrency;
test_leader_election_cluster.py runs the main scenarios against the real apiserver."""

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from provisioner.kube import leader_election
from provisioner.kube.api_error import ApiError
from provisioner.kube.client import DEFAULT_REQUEST_TIMEOUT, JsonRequester, Timeout
from provisioner.kube.leader_election import (
    LeaderElectionConfig,
    LeaderElector,
    default_identity,
    lease_name_for,
)
from tests.provisioner.kube.fakes import wait_until

FAST = LeaderElectionConfig(lease_duration=1.0, renew_deadline=0.6, retry_period=0.1)


class FakeLeaseApi:
    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.lock = threading.Lock()
        self.unreachable_for: set[str] = set()
        self.writes: list[tuple[str, str]] = []
        self.written_at: list[float] = []
        self.reads = 0
        self.fault: Callable[[FakeLeaseApi, float], None] | None = None
        """While set, every request calls it with its timeout instead of being answered."""
        self.faulted: list[tuple[float, float]] = []
        """(when, timeout) of each request sent to `fault`."""
        self.closed = threading.Event()
        """Set after the test: requests hanging on it return."""

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
        fault = self.fault
        if fault is not None:
            assert isinstance(timeout, float)
            self.faulted.append((time.monotonic(), timeout))
            fault(self, timeout)
        with self.lock:
            if method == "GET":
                self.reads += 1
                if self.lease is None:
                    raise ApiError(status=404, reason="Not Found")
                return _copy(self.lease)
            holder = body["spec"].get("holderIdentity")
            if holder in self.unreachable_for:
                raise OSError("network down")
            if method == "POST" and self.lease is not None:
                raise ApiError(status=409, reason="AlreadyExists")
            if method == "PUT" and body["metadata"].get("resourceVersion") != str(self.version):
                raise ApiError(status=409, reason="Conflict")
            self.version += 1
            self.lease = _copy(body)
            self.lease["metadata"]["resourceVersion"] = str(self.version)
            self.writes.append((method, holder))
            self.written_at.append(time.monotonic())
            return _copy(self.lease)

    @property
    def spec(self) -> dict[str, Any]:
        assert self.lease is not None
        spec: dict[str, Any] = self.lease["spec"]
        return spec

    @property
    def holder(self) -> str | None:
        return None if self.lease is None else self.spec.get("holderIdentity")


def _copy(lease: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": dict(lease["metadata"]), "spec": dict(lease["spec"])}


class Candidate:
    def __init__(
        self, api: JsonRequester, identity: str, config: LeaderElectionConfig = FAST
    ) -> None:
        self.log: list[str] = []
        self.elector = LeaderElector(
            api,
            "kube-system",
            "lease",
            identity=identity,
            config=config,
            on_started_leading=lambda: self.log.append("started"),
            on_stopped_leading=lambda: self.log.append("stopped"),
            on_lost_lease=self._lost,
        )
        self.lost_at: list[float] = []
        self.elector.start()

    def _lost(self) -> None:
        self.lost_at.append(time.monotonic())
        self.log.append("lost")


MakeCandidate = Callable[..., Candidate]


@pytest.fixture
def api() -> FakeLeaseApi:
    return FakeLeaseApi()


@pytest.fixture
def candidates(api: FakeLeaseApi) -> Iterator[MakeCandidate]:
    started: list[Candidate] = []

    def make(identity: str, config: LeaderElectionConfig = FAST) -> Candidate:
        candidate = Candidate(api, identity, config)
        started.append(candidate)
        return candidate

    yield make
    api.closed.set()
    for candidate in started:
        candidate.elector.stop()


def test_the_first_candidate_creates_the_lease_and_leads(
    api: FakeLeaseApi, candidates: MakeCandidate
) -> None:
    a = candidates("a")
    assert wait_until(lambda: a.elector.is_leader)
    assert a.log == ["started"]
    assert api.spec["holderIdentity"] == "a"
    assert api.spec["leaseDurationSeconds"] == 1
    assert api.spec["renewTime"].endswith("Z")
    assert "." in api.spec["renewTime"]


def test_only_one_of_several_candidates_leads_and_it_keeps_renewing(
    api: FakeLeaseApi, candidates: MakeCandidate
) -> None:
    group = [candidates(name) for name in "abc"]
    assert wait_until(lambda: any(c.elector.is_leader for c in group))
    time.sleep(1.5)
    leaders = [c for c in group if c.elector.is_leader]
    assert len(leaders) == 1
    assert api.holder == leaders[0].elector.identity
    renewals = [w for w in api.writes if w[1] == api.holder]
    assert len(renewals) >= 5


def test_a_sole_leader_renews_with_one_write_and_no_read(
    api: FakeLeaseApi, candidates: MakeCandidate
) -> None:
    a = candidates("a")
    assert wait_until(lambda: a.elector.is_leader)
    reads, writes = api.reads, len(api.writes)
    time.sleep(1.0)
    assert len(api.writes) - writes >= 5
    assert api.reads == reads


def test_a_renewal_that_conflicts_reads_the_lease_and_steps_down_for_a_new_holder(
    api: FakeLeaseApi, candidates: MakeCandidate
) -> None:
    a = candidates("a")
    assert wait_until(lambda: a.elector.is_leader)
    with api.lock:
        # Someone else took the lease (say, after a long pause of ours): its version moved on.
        assert api.lease is not None
        api.version += 1
        api.lease["metadata"]["resourceVersion"] = str(api.version)
        api.lease["spec"]["holderIdentity"] = "intruder"
    assert wait_until(lambda: not a.elector.is_leader)
    assert a.log == ["started", "lost", "stopped"]


def test_a_released_lease_is_taken_over_at_once(
    api: FakeLeaseApi, candidates: MakeCandidate
) -> None:
    a = candidates("a")
    assert wait_until(lambda: a.elector.is_leader)
    b = candidates("b")
    time.sleep(0.3)
    assert not b.elector.is_leader
    a.elector.stop()
    assert a.log == ["started", "stopped"]
    assert not a.elector.is_leader
    started = time.monotonic()
    assert wait_until(lambda: b.elector.is_leader)
    # Well inside the 1 s lease duration: the release, not the expiry, let b in.
    assert time.monotonic() - started < 0.8
    assert api.spec["leaseTransitions"] >= 1


def test_a_leader_that_cannot_renew_steps_down_and_another_takes_over(
    api: FakeLeaseApi, candidates: MakeCandidate
) -> None:
    a = candidates("a")
    assert wait_until(lambda: a.elector.is_leader)
    b = candidates("b")
    api.unreachable_for.add("a")
    assert wait_until(lambda: a.log == ["started", "lost", "stopped"], timeout=3)
    assert not a.elector.is_leader
    assert wait_until(lambda: b.elector.is_leader, timeout=5)
    assert api.holder == "b"


class ReadTimes:
    """One candidate's view of the Lease API, with the times of its reads."""

    def __init__(self, api: FakeLeaseApi) -> None:
        self.api = api
        self.read_at: list[float] = []

    def request_json(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        if method == "GET":
            self.read_at.append(time.monotonic())
        return self.api.request_json(method, path, **options)


def test_a_standby_takes_an_expired_lease_at_its_expiry_not_at_its_next_tick(
    api: FakeLeaseApi, candidates: MakeCandidate
) -> None:
    """A 3 s lease and a standby whose retry period is 2 s: it sees the holder's last renewal
    within half a second, and takes the lease once 3 s have passed since, not at its next tick
    (up to 4.4 s after the renewal)."""
    lease = LeaderElectionConfig(lease_duration=3.0, renew_deadline=2.5, retry_period=0.1)
    a = candidates("a", lease)
    assert wait_until(lambda: a.elector.is_leader)
    reads = ReadTimes(api)
    slow = LeaderElectionConfig(lease_duration=3.0, renew_deadline=2.5, retry_period=2.0)
    b = Candidate(reads, "b", slow)
    try:
        assert wait_until(lambda: bool(reads.read_at))
        api.unreachable_for.add("a")
        assert wait_until(lambda: api.holder == "b", timeout=10)
    finally:
        b.elector.stop()
    renewals = [
        at for at, (_, holder) in zip(api.written_at, api.writes, strict=True) if holder == "a"
    ]
    taken = api.written_at[api.writes.index(("PUT", "b"))]
    seen = min(at for at in reads.read_at if at > renewals[-1])
    assert seen - renewals[-1] < 0.7, "a standby looks every half second"
    assert 3.0 <= taken - seen < 3.5, (seen - renewals[-1], taken - seen)


class Heard:
    """The leader's view of the Lease API that tells a standby of each write as a watch
    would, once the server applied it."""

    def __init__(self, api: FakeLeaseApi) -> None:
        self.api = api
        self.standby: LeaderElector | None = None

    def request_json(self, method: str, path: str, **options: Any) -> dict[str, Any]:
        answer = self.api.request_json(method, path, **options)
        if method != "GET" and self.standby is not None:
            self.standby.heard(dict(answer["spec"]))
        return answer


def test_a_standby_that_hears_each_renewal_takes_the_lease_its_duration_after_the_last(
    api: FakeLeaseApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Told of each renewal as it is written (`heard`, from a watch on the Lease), a standby
    times the expiry from the renewal itself. Its looks are 2 s apart here and the leader's
    last renewal comes half a second after one: timed from its next look, the lease would be
    taken about 1.5 s late; heard, it is taken 3 s after that renewal, and never sooner."""
    monkeypatch.setattr(leader_election, "STANDBY_LOOK_SECONDS", 2.0)
    lease = LeaderElectionConfig(lease_duration=3.0, renew_deadline=2.5, retry_period=0.1)
    heard = Heard(api)
    a = Candidate(heard, "a", lease)
    reads = ReadTimes(api)
    slow = LeaderElectionConfig(lease_duration=3.0, renew_deadline=2.5, retry_period=2.0)
    b: Candidate | None = None
    try:
        assert wait_until(lambda: a.elector.is_leader)
        b = Candidate(reads, "b", slow)
        heard.standby = b.elector
        assert wait_until(lambda: bool(reads.read_at))
        time.sleep(0.5)
        api.unreachable_for.add("a")
        assert wait_until(lambda: api.holder == "b", timeout=10)
    finally:
        a.elector.stop()
        if b is not None:
            b.elector.stop()
    renewals = [
        at for at, (_, holder) in zip(api.written_at, api.writes, strict=True) if holder == "a"
    ]
    taken = api.written_at[api.writes.index(("PUT", "b"))]
    assert 3.0 <= taken - renewals[-1] < 3.4, taken - renewals[-1]


def test_a_leader_seeing_another_holder_steps_down_immediately(
    api: FakeLeaseApi, candidates: MakeCandidate
) -> None:
    patient = LeaderElectionConfig(lease_duration=30, renew_deadline=20, retry_period=0.1)
    a = candidates("a", patient)
    assert wait_until(lambda: a.elector.is_leader)
    with api.lock:
        api.version += 1
        api.spec["holderIdentity"] = "intruder"
        assert api.lease is not None
        api.lease["metadata"]["resourceVersion"] = str(api.version)
    assert wait_until(lambda: not a.elector.is_leader, timeout=2)
    assert wait_until(lambda: a.log == ["started", "lost", "stopped"], timeout=2)


def test_stop_before_leading_calls_no_callbacks(
    api: FakeLeaseApi, candidates: MakeCandidate
) -> None:
    slow = LeaderElectionConfig(lease_duration=30, renew_deadline=20, retry_period=10)
    a = candidates("a", slow)
    assert wait_until(lambda: a.elector.is_leader)
    b = candidates("b")
    b.elector.stop()
    assert b.log == []
    assert api.holder == "a"


def test_config_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="retry_period < renew_deadline < lease_duration"):
        LeaderElectionConfig(lease_duration=10, renew_deadline=10, retry_period=2)


def test_lease_names_are_valid_dns_subdomains() -> None:
    assert lease_name_for("local-path-storage.io/local-path") == "local-path-storage.io-local-path"
    assert lease_name_for("Rancher.IO/Local_Path") == "rancher.io-local-path"
    assert len(lease_name_for("a" * 400)) == 253
    with pytest.raises(ValueError, match="cannot derive"):
        lease_name_for("///")


def test_a_rancher_name_gets_the_lease_sig_storage_lib_would_hold_for_it() -> None:
    # The library's lock: strings.Replace(provisionerName, "/", "-", -1) in POD_NAMESPACE.
    for name in ("rancher.io/local-path", "cluster.local/nfs-subdir-external-provisioner"):
        assert lease_name_for(name) == name.replace("/", "-")


def test_identities_are_unique_per_elector() -> None:
    assert default_identity() != default_identity()


def hang_forever(api: FakeLeaseApi, timeout: float) -> None:
    """A request whose socket never returns, whatever its timeout (the watchdog's case)."""
    api.closed.wait()
    raise OSError("closed")


def time_out(api: FakeLeaseApi, timeout: float) -> None:
    """A server that accepts and never answers: the request takes its whole timeout."""
    time.sleep(timeout)
    raise OSError("read timed out")


def throttled(api: FakeLeaseApi, timeout: float) -> None:
    raise ApiError(status=429, reason="Too Many Requests")


@pytest.mark.parametrize("fault", [hang_forever, time_out, throttled])
def test_a_leader_that_cannot_renew_is_lost_before_the_lease_could_pass(
    api: FakeLeaseApi, candidates: MakeCandidate, fault: Callable[[FakeLeaseApi, float], None]
) -> None:
    """Whatever the renewals run into, on_lost_lease comes within renew_deadline of the last
    write that reached the server, so before a standby (waiting lease_duration from when it saw
    that write) may start. Before, one timeout served three requests, a hung one had no end."""
    config = LeaderElectionConfig(lease_duration=1.0, renew_deadline=0.6, retry_period=0.2)
    a = candidates("a", config)
    assert wait_until(lambda: a.elector.is_leader)
    api.fault = fault
    assert wait_until(lambda: bool(a.lost_at), timeout=3), "the lease was never declared lost"
    last_write = api.written_at[-1]
    assert a.lost_at[0] - last_write <= config.renew_deadline + 0.05
    assert not a.elector.is_leader
    # No request may outlive the deadline either: each gets only what is left of it.
    late = [(sent, timeout) for sent, timeout in api.faulted if sent + timeout > last_write + 0.65]
    assert not late, late
    assert a.log[:2] == ["started", "lost"]


def test_a_leader_that_stops_releases_without_calling_it_lost(
    api: FakeLeaseApi, candidates: MakeCandidate
) -> None:
    a = candidates("a")
    assert wait_until(lambda: a.elector.is_leader)
    a.elector.stop()
    time.sleep(FAST.lease_duration)
    assert a.log == ["started", "stopped"], "a release is not a loss, and the watchdog is off"
