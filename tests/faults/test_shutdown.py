"""One leader, honest exits: a replica that lost its lease stops at once instead of finishing
(and cleaning up) work the new leader has taken over; a controller that cannot sync exits
non-zero so the kubelet restarts it; /healthz reports the loops' heartbeat.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest

from localcluster import wait_for
from provisioner.configuration.config import DEFAULT_SETUP_SCRIPT
from tests.faults.support import (
    events_with_reason,
    holder_pid,
    lease_holder,
    unique_base_path,
    wait_no_helper_pods,
)
from tests.provisioner.e2e.support import ConfigFiles, ProvisionerSetup, default_config

pytestmark = pytest.mark.cluster

HOSTNAME = "kubernetes.io/hostname"
EXIT_AT_ONCE = 5.0


def test_a_leader_that_lost_its_lease_exits_at_once_and_leaves_its_work_to_the_new_one(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """The leader is frozen (SIGSTOP) while its setup helper runs (40 s); the standby takes the
    lease and deletes the helper pod (to run the setup again once it is gone). Thawed, the old
    leader must exit 1 at once: before, it drained its workers for up to 30 s, still working
    beside the new leader, and then deleted the helper pods it had been following."""
    base = unique_base_path("lost-lease")
    slow_setup = DEFAULT_SETUP_SCRIPT.replace("set -eu\n", "set -eu\nsleep 40\n", 1)
    setup = make_setup(ConfigFiles(config=default_config(base), setup=slow_setup))
    leader = setup.start()
    standby = setup.start(wait_ready=False)
    wait_for(
        lambda: True if standby.probe("/readyz")[1].startswith("standby") else None,
        30,
        "the second replica to report standby",
    )
    assert standby.probe("/healthz") == (200, "ok\n")
    assert leader.probe("/healthz") == (200, "ok\n")
    storage_class = setup.create_class("lost")
    setup.create_claim("data", storage_class)
    uid = setup.claim("data")["metadata"]["uid"]
    setup.create_consumer("data", "data", {HOSTNAME: "node-1"})
    helper = f"helper-create-pvc-{uid}"

    def helper_exists() -> bool | None:
        pods = setup.core.list_namespaced_pod(
            setup.namespace, field_selector=f"metadata.name={helper}"
        )
        return True if pods.items else None

    wait_for(helper_exists, 60, "the leader's setup helper", interval=0.2)

    os.kill(leader.pid, signal.SIGSTOP)
    try:
        wait_for(
            lambda: holder_pid(lease_holder(setup)) == standby.pid or None,
            40,
            "the standby to take the lease",
            interval=0.2,
        )
        setup.wait_ready(standby, timeout=30)
        time.sleep(2)  # the new leader deletes the running helper pod
    finally:
        os.kill(leader.pid, signal.SIGCONT)
    thawed = time.monotonic()
    try:
        leader.process.wait(30)
    finally:
        code = leader.stop()
    exited_after = time.monotonic() - thawed
    assert code == 1, f"exit code {code}"
    assert exited_after < EXIT_AT_ONCE, f"the old leader worked on for {exited_after:.1f}s"
    assert "helper pod" not in leader.log().split("lost the leader lease")[-1], leader.log()[-2000:]

    setup.wait_bound("data", timeout=90)
    wait_no_helper_pods(setup, timeout=30)
    assert not events_with_reason(setup, "data", "ProvisioningFailed")
    assert standby.alive()


@pytest.mark.slow
def test_a_controller_that_cannot_sync_exits_non_zero(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    """Running as an account that may not list volumes, the informers never sync: after the
    sync timeout (120 s) the process must exit non-zero, not 0 as if stopped on purpose."""
    setup = make_setup(ConfigFiles(config=default_config(unique_base_path("no-sync"))))
    kubeconfig = setup.cluster.service_account_kubeconfig(setup.namespace, "local-path-helper")
    replica = setup.start("--no-leader-election", kubeconfig=kubeconfig, wait_ready=False)
    try:
        replica.process.wait(180)
    finally:
        code = replica.stop()
    assert code == 1, replica.log()[-2000:]
    assert "the controller failed to start" in replica.log()
