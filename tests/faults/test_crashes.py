"""The provisioner killed mid-burst, and the API server restarted under it.

A kill -9 leaves whatever was in flight: helper pods running or finished, directories made
whose PV was never saved, PVs saved whose claim's binding has not happened yet. The restarted
replica (after the dead one's lease expires, as in a real Deployment) must finish every claim
without provisioning any of them twice and leave no helper pod and no directory behind.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable

import pytest

from localcluster import wait_for
from tests.faults.support import (
    assert_each_claim_bound_once,
    assert_no_orphan_directories,
    create_claims_with_consumers,
    our_volumes,
    unique_base_path,
    wait_all_bound,
    wait_no_helper_pods,
)
from tests.provisioner.e2e.support import ConfigFiles, ProvisionerSetup, default_config

pytestmark = pytest.mark.cluster

BURST = 100
KILLS = 5


def saved_volume_count(setup: ProvisionerSetup) -> int:
    return len(our_volumes(setup))


def wait_for_progress(setup: ProvisionerSetup, target: int, timeout: float = 120) -> int:
    """Polls the PVs saved so far until there are `target` of them; returns the count seen."""

    def reached() -> int | None:
        count = saved_volume_count(setup)
        return count if count >= target else None

    return wait_for(reached, timeout, f"{target} volumes to be saved", interval=0.05)


@pytest.mark.slow
def test_kill_9_five_times_during_a_burst_binds_every_claim_exactly_once(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    seed = int(os.environ.get("FAULTS_SEED", str(time.time_ns() % 100_000)))
    print(f"FAULTS_SEED={seed}")  # rerun a failure's kill moments with this
    pick = random.Random(seed)
    base = unique_base_path("crash")
    setup = make_setup(ConfigFiles(config=default_config(base)))
    setup.start()
    storage_class = setup.create_class("crash")
    names = [f"burst-{number:03d}" for number in range(BURST)]
    failures: list[BaseException] = []

    def create() -> None:
        try:
            create_claims_with_consumers(setup, storage_class, names)
        except BaseException as error:
            failures.append(error)
            raise

    creator = threading.Thread(target=create, name="burst")
    creator.start()
    # Random moments spread over the burst: after a random number of volumes were saved (the
    # provisioner does dozens a second here, so a clock-based moment would miss the burst).
    targets = sorted(pick.sample(range(1, BURST - 20), KILLS))
    saved_at_kill: list[int] = []
    for target in targets:
        wait_for_progress(setup, target)
        time.sleep(pick.uniform(0, 0.3))
        setup.replicas[-1].kill()
        saved_at_kill.append(saved_volume_count(setup))
        # The dead replica never released its lease: this waits for it to expire (~15 s).
        setup.start()
    creator.join()
    assert not failures, f"creating the burst failed: {failures[0]!r}"
    print(f"kill targets {targets}, volumes saved at each kill: {saved_at_kill}")
    assert saved_at_kill[-1] < BURST, "the burst was over before the last kill"

    wait_all_bound(setup, names, timeout=600)
    wait_no_helper_pods(setup, timeout=120)
    volumes = assert_each_claim_bound_once(setup, names)
    assert_no_orphan_directories(setup.cluster, [base], volumes)
    assert setup.replicas[-1].alive()


def test_apiserver_restart_mid_burst_watches_recover_and_every_claim_binds(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = unique_base_path("apiserver")
    setup = make_setup(ConfigFiles(config=default_config(base)))
    replica = setup.start()
    storage_class = setup.create_class("apiserver")
    before = [f"before-{number:02d}" for number in range(20)]
    after = [f"after-{number:02d}" for number in range(20)]
    create_claims_with_consumers(setup, storage_class, before)
    wait_for_progress(setup, 5)

    restarted_at = time.monotonic()
    setup.cluster.restart_apiserver()
    print(f"kube-apiserver restarted in {time.monotonic() - restarted_at:.1f}s")
    # Claims made after the restart reach the provisioner only through a recovered watch.
    create_claims_with_consumers(setup, storage_class, after)

    wait_all_bound(setup, before + after, timeout=300)
    wait_no_helper_pods(setup, timeout=120)
    volumes = assert_each_claim_bound_once(setup, before + after)
    assert_no_orphan_directories(setup.cluster, [base], volumes)
    assert replica.alive(), "the restart cost the provisioner its process"
    assert replica.probe("/readyz")[1].startswith("leading")
