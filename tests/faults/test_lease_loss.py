"""A leader that cannot renew its lease stops before anyone else may start, whatever the API
server does to its Lease requests, during a SIGTERM drain too.

The leader talks to the API server through `LeaseFaultProxy`, the standby directly. The proxy
then stops answering the leader's Lease requests (accepts them and never answers) while its
other requests keep flowing, so the leader could go on working. It must exit non-zero within
the lease duration after its last successful renewal, and no write of it may reach the server
after the standby's first (taking the Lease). Before, one timeout served three lease requests,
urllib3 repeated each after its read timeout, and the renewal had no deadline of its own: the
old leader worked on beside the new one (about 80 s at the defaults), and a lease lost during
a drain was ignored until the drain ended.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client

from localcluster import LocalCluster, wait_for
from localcluster.raw_api import call_json
from provisioner.configuration.config import DEFAULT_SETUP_SCRIPT
from provisioner.kube.leader_election import lease_name_for
from tests.faults.lease_proxy import LeaseFaultProxy
from tests.faults.support import (
    assert_each_claim_bound_once,
    holder_pid,
    lease_holder,
    our_volumes,
    unique_base_path,
    wait_all_bound,
)
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerProcess,
    ProvisionerSetup,
    default_config,
)

pytestmark = pytest.mark.cluster

LEASE_DURATION = 5.0
LEASE_FLAGS = (
    f"--leader-election-lease-duration={LEASE_DURATION}",
    "--leader-election-renew-deadline=3",
    "--leader-election-retry-period=0.5",
)
TAKEOVER_WITHIN = LEASE_DURATION + 10.0
"""Generous: the standby needs the lease duration and a retry period or two."""
HOSTNAME = "kubernetes.io/hostname"


@pytest.fixture
def proxy(cluster: LocalCluster) -> Iterator[LeaseFaultProxy]:
    started = LeaseFaultProxy(cluster).start()
    yield started
    started.close()


class ExitWatch:
    """When (wall clock) a replica's process ended, seen by a thread waiting on it."""

    def __init__(self, replica: ProvisionerProcess) -> None:
        self.exited_at: float | None = None
        self._replica = replica
        threading.Thread(target=self._wait, name="exit-watch", daemon=True).start()

    def _wait(self) -> None:
        self._replica.process.wait()
        self.exited_at = time.time()

    def wait(self, until: float) -> float | None:
        """The exit time, waiting until `until` (wall clock) at most."""
        while self.exited_at is None and time.time() < until:
            time.sleep(0.05)
        return self.exited_at


class ClaimStream:
    """A claim and its consumer every `interval` seconds on a thread, so there is always new
    work for whoever leads."""

    def __init__(self, setup: ProvisionerSetup, storage_class: str, interval: float) -> None:
        self.names: list[str] = []
        self._setup = setup
        self._class = storage_class
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="claims", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            name = f"stream-{len(self.names):03d}"
            self._setup.create_claim(name, self._class)
            self._setup.create_consumer(name, name, None)
            self.names.append(name)

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join(30)
        return list(self.names)


def start_pair(
    setup: ProvisionerSetup, proxy: LeaseFaultProxy, work_dir: Path
) -> tuple[ProvisionerProcess, ProvisionerProcess]:
    """The leader through the proxy, then a standby talking to the API server directly."""
    leader = setup.start(*LEASE_FLAGS, kubeconfig=proxy.kubeconfig(work_dir / "proxied.yaml"))
    standby = setup.start(*LEASE_FLAGS, wait_ready=False)
    wait_for(
        lambda: True if standby.probe("/readyz")[1].startswith("standby") else None,
        30,
        "the second replica to report standby",
    )
    assert holder_pid(lease_holder(setup)) == leader.pid, "the Lease names the proxied replica"
    # Its first write may have created the Lease (201): the tests measure from a renewal (200),
    # so one must have gone through the proxy before any fault is armed.
    wait_for(
        lambda: proxy.lease_writes_answered(200) or None,
        LEASE_DURATION,
        "the leader's first renewal through the proxy",
        interval=0.1,
    )
    return leader, standby


def standby_took_over_at(setup: ProvisionerSetup, standby: ProvisionerProcess) -> float:
    """Waits for the standby to hold the Lease; returns its acquireTime (wall clock), which it
    wrote before its write reached the server: no earlier write of its own exists."""
    wait_for(
        lambda: holder_pid(lease_holder(setup)) == standby.pid or None,
        TAKEOVER_WITHIN,
        "the standby to take the Lease",
        interval=0.1,
    )
    coordination = client.CoordinationV1Api(setup.cluster.admin_client)
    lease = call_json(
        coordination.read_namespaced_lease, lease_name_for(setup.name), setup.namespace
    )
    acquired = datetime.strptime(lease["spec"]["acquireTime"], "%Y-%m-%dT%H:%M:%S.%fZ")
    return acquired.replace(tzinfo=UTC).timestamp()


def assert_stopped_in_time(
    leader: ProvisionerProcess, proxy: LeaseFaultProxy, exits: ExitWatch
) -> None:
    renewals = proxy.lease_writes_answered(200)
    assert renewals, "the leader never renewed through the proxy"
    last_renewal = renewals[-1].sent_at
    exited_at = exits.wait(until=last_renewal + LEASE_DURATION + 5.0)
    assert exited_at is not None, (
        f"the leader still runs {time.time() - last_renewal:.1f}s after its last renewal"
        f" (lease {LEASE_DURATION}s)"
    )
    after = exited_at - last_renewal
    print(f"leader exited {after:.2f}s after its last successful renewal")
    assert after <= LEASE_DURATION, f"exited {after:.2f}s after its last renewal"
    assert leader.stop() == 1, leader.log()[-2000:]
    assert "lost the leader lease" in leader.log()


def test_a_leader_whose_lease_requests_hang_stops_before_the_standby_starts(
    make_setup: Callable[..., ProvisionerSetup], proxy: LeaseFaultProxy, tmp_path: Path
) -> None:
    setup = make_setup(ConfigFiles(config=default_config(unique_base_path("lease-hang"))))
    leader, standby = start_pair(setup, proxy, tmp_path)
    exits = ExitWatch(leader)
    claims = ClaimStream(setup, setup.create_class("hang"), interval=0.4)
    try:
        wait_for(lambda: bool(our_volumes(setup)) or None, 60, "the leader to provision")
        proxy.break_leases("hang")
        taken_at = standby_took_over_at(setup, standby)
        # Work keeps coming for a while after the takeover: an old leader still working would
        # write now.
        time.sleep(2)
    finally:
        names = claims.stop()
    late = proxy.writes_since(taken_at)
    assert not late, f"the old leader wrote after the standby took over: {late[:5]}"
    assert_stopped_in_time(leader, proxy, exits)
    wait_all_bound(setup, names, timeout=120)
    assert_each_claim_bound_once(setup, names)


def test_a_lease_lost_during_a_drain_ends_the_process_non_zero(
    make_setup: Callable[..., ProvisionerSetup], proxy: LeaseFaultProxy, tmp_path: Path
) -> None:
    """SIGTERM lets a running setup (30 s here) finish for up to 20 s while the lease is still
    renewed; when renewing fails meanwhile the process must exit 1 by the deadline, not finish
    the drain beside the new leader and exit 0."""
    slow_setup = DEFAULT_SETUP_SCRIPT.replace("set -eu\n", "set -eu\nsleep 30\n", 1)
    files = ConfigFiles(config=default_config(unique_base_path("lease-drain")), setup=slow_setup)
    setup = make_setup(files)
    leader, standby = start_pair(setup, proxy, tmp_path)
    exits = ExitWatch(leader)
    storage_class = setup.create_class("drain")
    setup.create_claim("data", storage_class)
    setup.create_consumer("data", "data", {HOSTNAME: "node-1"})
    helper = f"helper-create-pvc-{setup.claim('data')['metadata']['uid']}"

    def helper_exists() -> bool | None:
        pods = setup.core.list_namespaced_pod(
            setup.namespace, field_selector=f"metadata.name={helper}"
        )
        return True if pods.items else None

    wait_for(helper_exists, 60, "the leader's setup helper", interval=0.2)
    os.kill(leader.pid, signal.SIGTERM)
    wait_for(lambda: "shutting down" in leader.log() or None, 10, "the leader to drain")
    proxy.break_leases("hang")
    taken_at = standby_took_over_at(setup, standby)
    assert_stopped_in_time(leader, proxy, exits)
    late = proxy.writes_since(taken_at)
    assert not late, f"the old leader wrote after the standby took over: {late[:5]}"
    setup.wait_bound("data", timeout=90)
