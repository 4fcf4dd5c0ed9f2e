"""A leader told to stop leaves no helper pod to whoever leads next, not even one whose creation
was on its way when the stop began.

Why it matters: the next leader meets such a pod under its own name for the volume and has to
replace it or wait it out, and another version may not do that well. In the upgrade test a
0.1.0 leader, after a rollback, replaced a pod the newer version had left and then waited out
its helper timeout (120 s) before that claim bound (docs/upgrading.md).

The interleaving is forced: the setup pod's POST is held before it reaches the API server while
the leader is told to stop, and let through one second after the stop's drain has given up on
that run. Before, the stop deleted the pods it knew of (by name: not there yet), released the
Lease, and the creation landed after it: a pod nobody follows. Now the stop closes the runner,
waits for the creation already sent, deletes every helper pod and waits until they are gone,
and only then releases the Lease.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from localcluster import LocalCluster, wait_for
from provisioner.loop.controller import DRAIN_SECONDS
from tests.faults.api_answer_faults import provisioner_with_faults
from tests.faults.support import helper_pods, lease_holder, unique_base_path
from tests.provisioner.e2e.support import ConfigFiles, ProvisionerSetup, default_config

pytestmark = pytest.mark.cluster

NODE = {"kubernetes.io/hostname": "node-1"}
LET_THROUGH_AFTER_DRAIN_SECONDS = 1.0
WATCH_AFTER_RELEASE_SECONDS = 5.0


def test_a_stop_leaves_no_helper_pod_not_even_one_whose_creation_was_on_its_way(
    make_setup: Callable[..., ProvisionerSetup], cluster: LocalCluster
) -> None:
    setup = make_setup(ConfigFiles(config=default_config(unique_base_path("stop-clears"))))
    pods_path = f"/api/v1/namespaces/{setup.namespace}/pods"
    with provisioner_with_faults(setup, cluster, extra=("--leader-election",)) as (
        provisioner,
        faults,
    ):
        leader = lease_holder(setup)
        assert leader, "the provisioner leads before it works"
        creation = faults.arm("POST", lambda path: path == pods_path, None, hold_last=True)
        storage_class = setup.create_class("stop")
        setup.create_claim("data", storage_class)
        setup.create_consumer("app", "data", NODE)
        wait_for(lambda: creation.holding.is_set() or None, 60, "the setup pod's creation")

        provisioner.stop()
        release = threading.Timer(DRAIN_SECONDS + LET_THROUGH_AFTER_DRAIN_SECONDS, creation.release)
        release.start()
        try:
            wait_for(
                lambda: lease_holder(setup) != leader or None,
                DRAIN_SECONDS + 30,
                "the stopping leader to release the Lease",
                interval=0.05,
            )
            at_release = [pod["metadata"]["name"] for pod in helper_pods(setup)]
            let_through_first = creation.released
            # Whatever the stop left would show up here: a creation that lands late.
            later: list[str] = []
            until = time.monotonic() + WATCH_AFTER_RELEASE_SECONDS
            while time.monotonic() < until and not later:
                later = [pod["metadata"]["name"] for pod in helper_pods(setup)]
                time.sleep(0.2)
        finally:
            release.cancel()
            creation.release()
        assert at_release == [], f"helper pods left when the Lease was released: {at_release}"
        assert later == [], f"a helper pod appeared after the Lease was released: {later}"
        assert let_through_first, "the Lease went before the creation on its way was answered"
        assert setup.phase("data") == "Pending", "the stopped leader bound the claim"
