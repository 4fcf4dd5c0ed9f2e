import contextlib
import threading
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from provisioner.kube.api_error import ApiError
from provisioner.kube.client import (
    DEFAULT_REQUEST_TIMEOUT,
    MAX_MESSAGE_LENGTH,
    EventRecorder,
    ObjectReference,
    Timeout,
)
from provisioner.kube.event_correlator import EventCorrelator, EventKey
from tests.provisioner.kube.fakes import FakeClock

WALL = datetime(2025, 1, 1, tzinfo=UTC)


def key(message: str = "m", name: str = "claim", reason: str = "Provisioning") -> EventKey:
    return EventKey("PersistentVolumeClaim", "ns", name, "uid-1", "Normal", reason, message)


def test_first_event_is_created_and_repeats_patch_the_count() -> None:
    correlator = EventCorrelator()
    first = correlator.observe(key(), 0, WALL)
    second = correlator.observe(key(), 1, WALL)
    third = correlator.observe(key(), 2, WALL)
    assert first.action == "create"
    assert first.count == 1
    assert first.name.startswith("claim.")
    assert (second.action, second.name, second.count) == ("patch", first.name, 2)
    assert (third.action, third.count) == ("patch", 3)
    assert third.first_seen == WALL


def test_a_different_message_or_reason_is_a_different_event() -> None:
    correlator = EventCorrelator()
    a = correlator.observe(key("one"), 0, WALL)
    b = correlator.observe(key("two"), 0, WALL)
    c = correlator.observe(key("one", reason="Other"), 0, WALL)
    assert [a.action, b.action, c.action] == ["create"] * 3
    assert len({a.name, b.name, c.name}) == 3


def test_a_repeat_after_the_window_starts_a_new_event() -> None:
    correlator = EventCorrelator(window=600)
    first = correlator.observe(key(), 0, WALL)
    later = correlator.observe(key(), 601, WALL)
    assert later.action == "create"
    assert later.name != first.name


def test_repeats_keep_the_window_sliding() -> None:
    correlator = EventCorrelator(window=600)
    correlator.observe(key(), 0, WALL)
    for now in (500, 1000, 1500):
        assert correlator.observe(key(), now, WALL).action == "patch"


def test_a_flood_from_one_object_is_dropped_then_trickles_through() -> None:
    correlator = EventCorrelator(spam_burst=25, spam_refill_interval=300)
    decisions = [correlator.observe(key(str(i)), 0, WALL).action for i in range(30)]
    assert decisions.count("create") == 25
    assert decisions[25:] == ["drop"] * 5
    assert correlator.observe(key("other", name="another-claim"), 0, WALL).action == "create"
    assert correlator.observe(key("late"), 301, WALL).action == "create"
    assert correlator.observe(key("late2"), 301, WALL).action == "drop"


def test_memory_is_bounded() -> None:
    correlator = EventCorrelator(max_entries=10)
    for i in range(100):
        correlator.observe(key(name=f"claim-{i}"), 0, WALL)
    assert len(correlator._seen) <= 10
    assert len(correlator._budgets) <= 10
    assert correlator.observe(key(name="claim-0"), 1, WALL).action == "create"


class FakeEventApi:
    def __init__(self, fail_with: Exception | None = None) -> None:
        self.requests: list[tuple[str, str, Any, str | None]] = []
        self.events: dict[str, dict[str, Any]] = {}
        self.fail_with = fail_with
        self.lock = threading.Lock()

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
        with self.lock:
            self.requests.append((method, path, body, content_type))
            if self.fail_with is not None:
                raise self.fail_with
            if method == "POST":
                self.events[body["metadata"]["name"]] = dict(body)
                return dict(body)
            name = path.rsplit("/", 1)[1]
            if name not in self.events:
                raise ApiError(status=404, reason="Not Found")
            self.events[name].update(body)
            return self.events[name]


CLAIM = ObjectReference("PersistentVolumeClaim", "data", "ns", "uid-1", resource_version="5")
VOLUME = ObjectReference("PersistentVolume", "pvc-uid-1", uid="uid-2")


@pytest.fixture
def api() -> FakeEventApi:
    return FakeEventApi()


@pytest.fixture
def recorder(api: FakeEventApi) -> Iterator[EventRecorder]:
    recorder = EventRecorder(
        api, "local-path-storage.io/local-path", host="node-1", clock=FakeClock()
    )
    yield recorder
    recorder.stop()


def test_an_event_is_posted_with_the_fields_kubectl_shows(
    api: FakeEventApi, recorder: EventRecorder
) -> None:
    recorder.normal(CLAIM, "Provisioning", "External provisioner is provisioning volume")
    assert recorder.flush()
    method, path, body, _ = api.requests[0]
    assert (method, path) == ("POST", "/api/v1/namespaces/ns/events")
    assert body["involvedObject"] == {
        "kind": "PersistentVolumeClaim",
        "name": "data",
        "namespace": "ns",
        "uid": "uid-1",
        "apiVersion": "v1",
        "resourceVersion": "5",
    }
    assert body["type"] == "Normal"
    assert body["reason"] == "Provisioning"
    assert body["source"] == {"component": "local-path-storage.io/local-path", "host": "node-1"}
    assert body["count"] == 1
    assert body["firstTimestamp"] == body["lastTimestamp"] == "2025-01-01T00:00:00Z"


def test_repeats_are_patched_onto_the_first_event(
    api: FakeEventApi, recorder: EventRecorder
) -> None:
    for _ in range(3):
        recorder.warning(VOLUME, "VolumeFailedDelete", "teardown failed")
    assert recorder.flush()
    assert [r[0] for r in api.requests] == ["POST", "PATCH", "PATCH"]
    assert api.requests[0][1] == "/api/v1/namespaces/default/events"
    assert api.requests[2][3] == "application/strategic-merge-patch+json"
    (event,) = api.events.values()
    assert event["count"] == 3


def test_a_vanished_event_is_created_again_on_the_next_repeat(
    api: FakeEventApi, recorder: EventRecorder
) -> None:
    recorder.normal(CLAIM, "Provisioning", "again")
    assert recorder.flush()
    api.events.clear()
    recorder.normal(CLAIM, "Provisioning", "again")
    assert recorder.flush()
    assert [r[0] for r in api.requests] == ["POST", "PATCH", "POST"]
    assert next(iter(api.events.values()))["count"] == 2


def test_api_failures_never_reach_the_caller() -> None:
    api = FakeEventApi(fail_with=ApiError(status=403, reason="Forbidden"))
    recorder = EventRecorder(api, "component")
    recorder.normal(CLAIM, "Provisioning", "x")
    assert recorder.flush()
    api.fail_with = OSError("connection refused")
    recorder.warning(CLAIM, "ProvisioningFailed", "y")
    assert recorder.flush()
    recorder.stop()
    assert len(api.requests) == 2


def test_long_messages_are_truncated(api: FakeEventApi, recorder: EventRecorder) -> None:
    recorder.warning(CLAIM, "ProvisioningFailed", "x" * 5000)
    assert recorder.flush()
    message = api.requests[0][2]["message"]
    assert len(message) == MAX_MESSAGE_LENGTH
    assert message.endswith("...")


def test_a_full_queue_drops_events_instead_of_blocking() -> None:
    gate = threading.Event()

    class SlowApi(FakeEventApi):
        def request_json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
            gate.wait(5)
            return super().request_json(method, path, **kwargs)

    api = SlowApi()
    recorder = EventRecorder(api, "component", max_pending=2)
    for i in range(10):
        recorder.normal(CLAIM, "Provisioning", f"message {i}")
    gate.set()
    assert recorder.flush()
    recorder.stop()
    assert 2 <= len(api.requests) <= 3


def test_object_reference_from_a_raw_object() -> None:
    raw = {"metadata": {"name": "data", "namespace": "ns", "uid": "u", "resourceVersion": "9"}}
    reference = ObjectReference.from_object(raw, "PersistentVolumeClaim")
    assert reference == ObjectReference("PersistentVolumeClaim", "data", "ns", "u", "v1", "9")
    assert ObjectReference("PersistentVolume", "pv").as_dict() == {
        "kind": "PersistentVolume",
        "name": "pv",
        "apiVersion": "v1",
    }


def test_events_are_sent_on_the_client_s_spare_capacity(api: FakeEventApi) -> None:
    """Each request is made inside `spare_capacity()` (the client's: only the rate the work
    it reports leaves), so a burst's PVs are not held up behind its events."""
    inside: list[bool] = []
    spare = threading.local()

    @contextlib.contextmanager
    def spare_capacity() -> Iterator[None]:
        spare.on = True
        try:
            yield
        finally:
            spare.on = False

    original = api.request_json

    def request_json(method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        inside.append(getattr(spare, "on", False))
        return original(method, path, **kwargs)

    api.request_json = request_json  # type: ignore[method-assign]
    recorder = EventRecorder(api, "component", spare_capacity=spare_capacity)
    recorder.normal(CLAIM, "Provisioning", "x")
    recorder.normal(CLAIM, "Provisioning", "x")
    assert recorder.flush()
    recorder.stop()
    assert inside == [True, True]
