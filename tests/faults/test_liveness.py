"""/healthz tells a wedged process from a busy one, so the kubelet restarts only what is stuck.

A real provisioner runs in this process against the local cluster. A wedge is forced where
production ones happen, in an API call that never returns (a half-open connection, a deadlock
under a client lock): the test holds one kind of request until it lets go. The bounds that
make a wedge visible are minutes in production (a worker may wait for a helper for the
config's cmdTimeoutSeconds, a healthy watch can be silent for its whole timeout); they are
shortened here so the test takes seconds, and the code under test is the same.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from localcluster import LocalCluster, wait_for
from provisioner.configuration.config import DEFAULT_NODE
from provisioner.kube import informer as informer_module
from provisioner.process import app as app_module
from provisioner.process.app import Provisioner
from tests.faults.support import in_process_provisioner, unique_base_path
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    creatable,
)

pytestmark = pytest.mark.cluster

HOSTNAME = "kubernetes.io/hostname"
# (method, URL with its query) -> hold this request?
RequestMatcher = Callable[[str, str], bool]


class Wedge:
    """Holds every API request the matcher picks until released, as a hung connection would."""

    def __init__(self, provisioner: Provisioner) -> None:
        self.matcher: RequestMatcher | None = None
        self.held = threading.Event()
        self._release = threading.Event()
        api_client: Any = provisioner.clients.api_client
        original = api_client.call_api

        def call_api(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            matcher = self.matcher
            if matcher is not None and matcher(method, url):
                self.held.set()
                self._release.wait()
            return original(method, url, *args, **kwargs)

        api_client.call_api = call_api

    def arm(self, matcher: RequestMatcher) -> None:
        self.matcher = matcher

    def release(self) -> None:
        self.matcher = None
        self._release.set()


def healthz(provisioner: Provisioner) -> tuple[int, str]:
    url = f"http://127.0.0.1:{provisioner.server.port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode().strip()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode().strip()


@contextmanager
def running(
    setup: ProvisionerSetup, cluster: LocalCluster, tune: Callable[[Provisioner], None]
) -> Iterator[tuple[Provisioner, Wedge]]:
    provisioner = in_process_provisioner(setup, cluster)
    wedge = Wedge(provisioner)
    tune(provisioner)
    runner = threading.Thread(target=provisioner.run, name="provisioner-main", daemon=True)
    runner.start()
    try:
        wait_for(lambda: provisioner.controller.has_synced() or None, 60, "informers to sync")
        yield provisioner, wedge
    finally:
        wedge.release()
        provisioner.stop()
        runner.join(60)


def wait_healthz(provisioner: Provisioner, status: int, timeout: float) -> str:
    def answered() -> str | None:
        code, body = healthz(provisioner)
        return body if code == status else None

    return wait_for(answered, timeout, f"/healthz to answer {status}")


def test_a_worker_stuck_on_one_claim_fails_healthz_and_recovers_when_it_moves_on(
    make_setup: Callable[..., ProvisionerSetup],
    cluster: LocalCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = unique_base_path("wedged-worker")
    setup = make_setup(
        ConfigFiles(
            config={
                "nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(base)]}],
                "cmdTimeoutSeconds": 5,
            }
        )
    )
    # A worker may take two helper runs (a setup helper and its clean-up), each cmdTimeoutSeconds
    # and the time its kubelet takes to stop it (5 s grace, 5 s margin), plus API calls; the
    # production margin for those calls is two minutes.
    monkeypatch.setattr(app_module, "STALL_MARGIN_SECONDS", 0.0)
    with running(setup, cluster, lambda _: None) as (provisioner, wedge):
        assert healthz(provisioner) == (200, "ok")
        wedge.arm(lambda method, url: method == "POST" and "/api/v1/persistentvolumes" in url)
        storage_class = setup.create_class("wedged")
        setup.create_claim("data", storage_class)
        setup.create_consumer("app", "data", {HOSTNAME: "node-1"})
        wait_for(lambda: wedge.held.is_set() or None, 60, "the PV create to be held")

        # Busy but within its bound: still alive.
        assert healthz(provisioner)[0] == 200
        reason = wait_healthz(provisioner, 500, 2 * (5 + 5 + 5) + 30)
        uid = setup.claim("data")["metadata"]["uid"]
        assert reason.startswith("worker-") and f"has been on claim {uid}" in reason, reason

        wedge.release()
        setup.wait_bound("data")
        assert wait_healthz(provisioner, 200, 30) == "ok"


def test_an_informer_whose_watch_hangs_fails_healthz_and_recovers_when_it_returns(
    make_setup: Callable[..., ProvisionerSetup],
    cluster: LocalCluster,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = unique_base_path("wedged-informer")
    setup = make_setup(
        ConfigFiles(config={"nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(base)]}]})
    )
    # In production a healthy watch may stay silent for up to its 600 s timeout; here 2 s.
    monkeypatch.setattr(informer_module, "WATCH_READ_MARGIN", 1.0)
    monkeypatch.setattr(informer_module, "LIST_REQUEST_TIMEOUT", 1.0)

    def short_watches(provisioner: Provisioner) -> None:
        claims: Any = provisioner.caches.claims
        claims._watch_timeout_range = (1, 2)
        claims._backoff = (0.2, 1.0)

    def claim_watch(method: str, url: str) -> bool:
        path, _, query = url.partition("?")
        watching = "watch=true" in query.lower()
        return method == "GET" and path.endswith("/persistentvolumeclaims") and watching

    with running(setup, cluster, short_watches) as (provisioner, wedge):
        bound = provisioner.caches.claims.progress_bound
        assert bound == 5.0, bound
        # Several short watches come and go, each a sign of progress: alive throughout.
        for _ in range(4):
            assert healthz(provisioner) == (200, "ok")
            threading.Event().wait(1.5)

        wedge.arm(claim_watch)
        wait_for(lambda: wedge.held.is_set() or None, 30, "a claim watch to be held")
        reason = wait_healthz(provisioner, 500, 30)
        assert "informer claims" in reason and "no progress" in reason, reason

        wedge.release()
        assert wait_healthz(provisioner, 200, 30) == "ok"
        # And it still works: a claim binds.
        storage_class = setup.create_class("after-wedge")
        setup.create_claim("data", storage_class)
        setup.create_consumer("app", "data", {HOSTNAME: "node-1"})
        setup.wait_bound("data")
