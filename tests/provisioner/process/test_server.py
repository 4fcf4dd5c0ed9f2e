import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from provisioner.process.server import ProbeServer


@pytest.fixture
def readiness_state() -> dict[str, object]:
    return {"ready": False, "reason": "informers not synced"}


@pytest.fixture
def server(readiness_state: dict[str, object]) -> Iterator[ProbeServer]:
    registry = CollectorRegistry()
    Counter("demo_things", "things", registry=registry).inc(3)
    probe = ProbeServer(
        "127.0.0.1",
        0,
        registry,
        lambda: (bool(readiness_state["ready"]), str(readiness_state["reason"])),
    )
    probe.start()
    yield probe
    probe.stop()


def get(server: ProbeServer, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_healthz_is_ok_even_when_not_ready(server: ProbeServer) -> None:
    assert get(server, "/healthz") == (200, "ok\n")


def test_readyz_reports_the_reason_until_ready(
    server: ProbeServer, readiness_state: dict[str, object]
) -> None:
    assert get(server, "/readyz") == (503, "informers not synced\n")
    readiness_state.update(ready=True, reason="")
    assert get(server, "/readyz") == (200, "ready\n")


def test_metrics_serves_the_given_registry(server: ProbeServer) -> None:
    status, body = get(server, "/metrics")
    assert status == 200
    assert "demo_things_total 3.0" in body


def test_unknown_path_is_404(server: ProbeServer) -> None:
    assert get(server, "/nope")[0] == 404


def test_healthz_reports_what_is_wedged() -> None:
    state = {"alive": True, "reason": "ok"}
    probe = ProbeServer(
        "127.0.0.1",
        0,
        CollectorRegistry(),
        lambda: (True, "ready"),
        liveness=lambda: (bool(state["alive"]), str(state["reason"])),
    )
    probe.start()
    try:
        assert get(probe, "/healthz") == (200, "ok\n")
        state.update(alive=False, reason="worker-3 has been on claim u-1 for 900s")
        assert get(probe, "/healthz") == (500, "worker-3 has been on claim u-1 for 900s\n")
    finally:
        probe.stop()


def test_a_probe_sent_before_the_server_starts_waits_for_its_answer() -> None:
    """The port listens from the server's construction: a kubelet probe sent while the process
    still starts (provisioner.process.app waits for the caches' first sync) is answered once
    the server starts, not refused, so a starting replica logs no failed probe."""
    readiness = {"ready": False}
    probe = ProbeServer("127.0.0.1", 0, CollectorRegistry(), lambda: (readiness["ready"], ""))
    answers: list[tuple[int, str]] = []
    asking = threading.Thread(target=lambda: answers.append(get(probe, "/readyz")))
    try:
        asking.start()
        time.sleep(0.3)
        assert not answers, "answered before the server started"
        readiness["ready"] = True
        probe.start()
        asking.join(5)
        assert answers == [(200, "ready\n")]
    finally:
        probe.stop()
