"""Two replicas: one works, the other waits with its caches warm; killing the worker hands the
rest to the other.

The standby must take the lease within 20 s of the leader's kill -9 (the lease lasts 15 s, the
standby retries every 2 s) and provision exactly the claims the dead leader had not saved a PV
for: its provision counter equals that number, so nothing was provisioned twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from localcluster import wait_for
from tests.faults.support import (
    assert_each_claim_bound_once,
    assert_no_orphan_directories,
    create_claims_with_consumers,
    holder_pid,
    lease_holder,
    metric,
    our_volumes,
    unique_base_path,
    wait_all_bound,
    wait_no_helper_pods,
)
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerProcess,
    ProvisionerSetup,
    default_config,
)

pytestmark = pytest.mark.cluster

PROVISIONED = "controller_persistentvolumeclaim_provision_total"
TAKEOVER_BOUND = 20.0


def wait_for_metric(replica: ProvisionerProcess, name: str, expected: float) -> None:
    """The counter reaches `expected` (it moves a moment after the PV is saved) and stays."""
    seen: list[float] = []

    def reached() -> bool | None:
        seen.append(metric(replica.metrics(), name))
        return True if seen[-1] == expected else None

    try:
        wait_for(reached, 10, f"{name} to be {expected}", interval=0.2)
    except TimeoutError:
        raise AssertionError(f"{name} is {seen[-1]}, expected {expected}") from None


def test_one_leader_at_a_time_and_the_standby_takes_over_a_killed_leaders_burst(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = unique_base_path("leader")
    setup = make_setup(ConfigFiles(config=default_config(base)))
    leader = setup.start()
    standby = setup.start(wait_ready=False)
    # A warm standby: its informers list and watch while it waits (it writes nothing: its
    # provision counter stays 0 below), so leading costs the lease hand-over, not a cold start.
    wait_for(
        lambda: True if standby.probe("/readyz")[1].startswith("standby") else None,
        30,
        "the second replica to report standby",
    )
    wait_for(
        lambda: True if standby.probe("/readyz")[1].strip().endswith("caches warm") else None,
        30,
        "the standby's caches to be warm",
    )
    assert holder_pid(lease_holder(setup)) == leader.pid, "the Lease names the first replica"

    storage_class = setup.create_class("leader")
    first = [f"first-{number:02d}" for number in range(10)]
    create_claims_with_consumers(setup, storage_class, first)
    wait_all_bound(setup, first, timeout=120)
    wait_for_metric(leader, PROVISIONED, len(first))
    assert metric(standby.metrics(), PROVISIONED) == 0, "the standby must not work"
    assert metric(standby.metrics(), "leader_election_master_status") == 0
    assert metric(leader.metrics(), "leader_election_master_status") == 1

    second = [f"second-{number:02d}" for number in range(30)]
    create_claims_with_consumers(setup, storage_class, second)
    wait_for(
        lambda: True if len(our_volumes(setup)) > len(first) else None,
        60,
        "the leader to start on the second burst",
        interval=0.05,
    )
    leader.kill()
    killed_at = time.monotonic()
    # A PV write the leader sent just before dying may still land; the lease cannot pass for
    # 15 s, so counting a moment later is still before the standby can act.
    time.sleep(2)
    saved_before_takeover = len(our_volumes(setup))
    print(f"leader killed with {saved_before_takeover - len(first)}/{len(second)} saved")

    new_holder = wait_for(
        lambda: holder_pid(lease_holder(setup)) == standby.pid or None,
        TAKEOVER_BOUND + 10,
        "the standby to take the Lease",
        interval=0.2,
    )
    takeover = time.monotonic() - killed_at
    print(f"takeover after {takeover:.1f}s")
    assert new_holder
    assert takeover < TAKEOVER_BOUND, f"takeover took {takeover:.1f}s"
    setup.wait_ready(standby, timeout=30)

    everything = first + second
    wait_all_bound(setup, everything, timeout=300)
    wait_no_helper_pods(setup, timeout=120)
    volumes = assert_each_claim_bound_once(setup, everything)
    assert_no_orphan_directories(setup.cluster, [base], volumes)
    # Exactly the claims the dead leader had not saved a PV for: none was provisioned twice.
    wait_for_metric(standby, PROVISIONED, len(everything) - saved_before_takeover)
