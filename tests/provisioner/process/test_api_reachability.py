"""/readyz's "is the API reachable" never waits on the API: it reads what a thread of its own
last heard. The API client here is a stand-in whose answers the test holds (pure logic: the
asking and the reading, not the API)."""

from __future__ import annotations

import threading
import time
from typing import Any

from provisioner.kube.api_error import ApiError
from provisioner.process.api_reachability import ApiReachability

INTERVAL = 0.05


class HeldApi:
    """Answers /version as told; `hold` makes the next asks wait until `release`."""

    def __init__(self) -> None:
        self.answering = True
        self.asked = 0
        self._open = threading.Event()
        self._open.set()

    def hold(self) -> None:
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def request_json(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        assert (method, path) == ("GET", "/version")
        self._open.wait(10)
        self.asked += 1
        if not self.answering:
            raise ApiError(503, "Service Unavailable")
        return {"gitVersion": "v1.36.3"}


def wait_until(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_first_answer_is_there_once_started_and_changes_follow() -> None:
    api = HeldApi()
    checker = ApiReachability(api, interval=INTERVAL)  # type: ignore[arg-type]
    assert not checker.reachable(), "nothing heard before start"
    checker.start()
    try:
        assert checker.reachable()
        api.answering = False
        wait_until(lambda: not checker.reachable())
        api.answering = True
        wait_until(checker.reachable)
    finally:
        checker.stop()


def test_a_probe_does_not_wait_for_an_api_that_hangs() -> None:
    api = HeldApi()
    checker = ApiReachability(api, interval=INTERVAL)  # type: ignore[arg-type]
    checker.start()
    try:
        asked = api.asked
        api.hold()
        time.sleep(3 * INTERVAL)  # the thread is now waiting on the held call
        started = time.monotonic()
        assert checker.reachable(), "the last answer stands while the next one is awaited"
        assert time.monotonic() - started < 0.01
        assert api.asked == asked
    finally:
        api.release()
        checker.stop()
