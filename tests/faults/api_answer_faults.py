"""Answers the API server did not give: an in-process provisioner's chosen requests are answered
with an error status, after being sent on (the server carried the request out and only its
answer was lost or turned into a 5xx, as behind a failing proxy or load balancer) or without
(the server never saw it, as with a 429 from a priority-and-fairness queue).

This rewrites answers at the provisioner's one way to the server (`RateLimitedApiClient
.call_api`), below the code under test, so every layer above it sees exactly what a faulty
network would show it. (The lease-request proxy for leader election is another module.)
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from urllib3 import HTTPResponse

from localcluster import LocalCluster, wait_for
from provisioner.process.app import Provisioner
from tests.faults.support import in_process_provisioner
from tests.provisioner.e2e.support import ProvisionerSetup

REASONS = {429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass
class Fault:
    """The first `times` requests that `method` and `matches(path)` pick are answered `status`;
    with `send_first`, each is sent on and carried out by the server first."""

    method: str
    matches: Callable[[str], bool]
    status: int | None
    """None: not a fault but a delay, with `hold_last`: the request waits until `release()`
    before it is sent, then the server's own answer comes back."""
    times: int
    send_first: bool
    hold_last: bool = False
    """The last of them waits (sent on already, if `send_first`) until `release()`."""
    answered: int = 0
    holding: threading.Event = field(default_factory=threading.Event)
    _released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self._released.set()

    @property
    def released(self) -> bool:
        return self._released.is_set()

    def wait_answered(self, count: int, timeout: float) -> None:
        wait_for(lambda: self.answered >= count or None, timeout, f"{count} faulty answers")


class AnswerFaults:
    """Rewrites the answers of the provisioner's requests the armed faults pick."""

    def __init__(self, provisioner: Provisioner) -> None:
        self._faults: list[Fault] = []
        self._lock = threading.Lock()
        api_client: Any = provisioner.clients.api_client
        original = api_client.call_api

        def call_api(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            path = url.split("://", 1)[-1].partition("/")[2].partition("?")[0]
            fault = self._pick(method, f"/{path}")
            if fault is None:
                return original(method, url, *args, **kwargs)
            if fault.status is None:
                fault.holding.set()
                fault._released.wait(120)
                return original(method, url, *args, **kwargs)
            if fault.send_first:
                original(method, url, *args, **kwargs).read()  # the server carried it out
            if fault.hold_last and fault.answered == fault.times:
                fault.holding.set()
                fault._released.wait(120)
            return _answer(fault.status)

        api_client.call_api = call_api

    def arm(
        self,
        method: str,
        matches: Callable[[str], bool],
        status: int | None,
        *,
        times: int = 1,
        send_first: bool = False,
        hold_last: bool = False,
    ) -> Fault:
        fault = Fault(method, matches, status, times, send_first, hold_last)
        with self._lock:
            self._faults.append(fault)
        return fault

    def release_all(self) -> None:
        with self._lock:
            for fault in self._faults:
                fault.release()
            self._faults.clear()

    def _pick(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.method == method and fault.answered < fault.times and fault.matches(path):
                    fault.answered += 1
                    return fault
        return None


def _answer(status: int) -> HTTPResponse:
    reason = REASONS.get(status, "Error")
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": status}
    return HTTPResponse(
        body=json.dumps({**body, "message": f"injected {status}", "reason": reason}).encode(),
        status=status,
        reason=reason,
        headers={"Content-Type": "application/json"},
        preload_content=True,
    )


@contextmanager
def provisioner_with_faults(
    setup: ProvisionerSetup, cluster: LocalCluster, extra: Sequence[str] = ()
) -> Iterator[tuple[Provisioner, AnswerFaults]]:
    """A provisioner for `setup` running in this process, its answers open to faults (`extra`:
    more flags)."""
    provisioner = in_process_provisioner(setup, cluster, extra)
    faults = AnswerFaults(provisioner)
    runner = threading.Thread(target=provisioner.run, name="provisioner-main", daemon=True)
    runner.start()
    try:
        wait_for(lambda: provisioner.controller.has_synced() or None, 60, "informers to sync")
        yield provisioner, faults
    finally:
        faults.release_all()
        provisioner.stop()
        runner.join(60)
