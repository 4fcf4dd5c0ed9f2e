"""A leader killed (SIGKILL) while a helper pod of its runs: the next leader deletes the pod
before it takes any work, and redoes that pod's work once it is gone, never beside it.

Before, the next leader adopted a running pod of the volume's own name and waited for it: a
pod stuck in its script (here: its first run never ends) held the claim, or the released
volume, until the pod's own deadline (`cmdTimeoutSeconds`, 120 s), and a pod whose volume came
up later, or never, stayed until then too. Here the left pod is gone within seconds of the
takeover, the setup's second run binds the claim in the first run's directory, the teardown's
second run removes the directory and the PV, and no two pods of a volume ever ran at once.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from localcluster import wait_for
from provisioner.configuration.config import DEFAULT_SETUP_SCRIPT, DEFAULT_TEARDOWN_SCRIPT
from tests.faults.support import (
    HelperPodRecorder,
    assert_each_claim_bound_once,
    helper_pods,
    holder_pid,
    lease_holder,
    overlapping_runs,
    unique_base_path,
    wait_no_helper_pods,
)
from tests.faults.test_leader_handover_mid_provision import (
    LEASE_FLAGS,
    NAMESPACED,
    NODE,
    ON_NODE,
    claim_uid,
)
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerProcess,
    ProvisionerSetup,
    default_config,
    volume_path,
    wait_gone,
)

pytestmark = pytest.mark.cluster

SETTLED_WITHIN = 30.0
"""From the kill: the Lease's 5 s to expire, the left pod's 5 s grace, the work again; far
below the 120 s the left pod would hold it for."""


def first_run_hangs(script: str, runs: str) -> str:
    """`script` that counts its runs in the file `runs` (a shell word) and whose first run
    never ends: only its pod's deletion or deadline stops it."""
    return script.replace(
        "set -eu\n",
        "set -eu\n"
        f"echo run >> {runs}\n"
        f'if [ "$(wc -l < {runs})" -eq 1 ]; then while :; do sleep 0.1; done; fi\n',
        1,
    )


HANGING_SETUP = first_run_hangs(DEFAULT_SETUP_SCRIPT, '"$VOL_DIR/setup-runs"')
# A teardown pod mounts the volume's directory alone: it counts there, and the run that goes
# on removes the count with the directory.
HANGING_TEARDOWN = first_run_hangs(DEFAULT_TEARDOWN_SCRIPT, '"$VOL_DIR/teardown-runs"')


def start_pair(setup: ProvisionerSetup) -> tuple[ProvisionerProcess, ProvisionerProcess]:
    """The leader, then a standby."""
    leader = setup.start(*LEASE_FLAGS)
    standby = setup.start(*LEASE_FLAGS, wait_ready=False)
    wait_for(
        lambda: True if standby.probe("/readyz")[1].startswith("standby") else None,
        30,
        "the second replica to report standby",
    )
    assert holder_pid(lease_holder(setup)) == leader.pid
    return leader, standby


def kill_leader_with_its_pod_running(
    setup: ProvisionerSetup, leader: ProvisionerProcess, standby: ProvisionerProcess, pod: str
) -> str:
    """SIGKILL the leader while `pod` runs; returns the pod's UID once the standby leads."""
    (left,) = [p for p in helper_pods(setup) if p["metadata"]["name"] == pod]
    assert (left.get("status") or {}).get("phase") in ("Pending", "Running")
    leader.kill()
    wait_for(
        lambda: holder_pid(lease_holder(setup)) == standby.pid or None,
        15,
        "the standby to take the Lease",
        interval=0.1,
    )
    return str(left["metadata"]["uid"])


def wait_left_pod_gone(setup: ProvisionerSetup, pod: str, uid: str) -> None:
    """The pod of that UID is deleted (a pod of its name made since does not count)."""

    def still_there() -> bool | None:
        return True if any(p["metadata"]["uid"] == uid for p in helper_pods(setup)) else None

    wait_gone(still_there, SETTLED_WITHIN, f"the left pod {pod} to be deleted")


def test_a_new_leader_deletes_a_setup_pod_the_killed_one_left_and_binds_the_claim(
    make_setup: Callable[..., ProvisionerSetup],
    record_helper_pods: Callable[[ProvisionerSetup], HelperPodRecorder],
) -> None:
    base = unique_base_path("left-setup")
    setup = make_setup(ConfigFiles(config=default_config(base), setup=HANGING_SETUP))
    leader, standby = start_pair(setup)
    recorder = record_helper_pods(setup)
    storage_class = setup.create_class("left", parameters={"pathPattern": NAMESPACED})
    setup.create_claim("data", storage_class)
    setup.create_consumer("data", "data", ON_NODE)
    directory = setup.node_path(NODE, f"{base}/{setup.namespace}/data")
    wait_for(lambda: (directory / "setup-runs").exists() or None, 60, "the first setup to run")
    first_setup = directory.stat().st_ino
    pod = f"helper-create-pvc-{claim_uid(setup, 'data')}"

    uid = kill_leader_with_its_pod_running(setup, leader, standby, pod)
    wait_left_pod_gone(setup, pod, uid)
    setup.wait_bound("data", timeout=SETTLED_WITHIN)

    wait_no_helper_pods(setup, timeout=30)
    (volume,) = assert_each_claim_bound_once(setup, ["data"])
    assert volume_path(volume) == f"{base}/{setup.namespace}/data"
    assert directory.stat().st_ino == first_setup, "the retry made a directory of its own"
    assert (directory / "setup-runs").read_text() == "run\nrun\n"
    assert not overlapping_runs(recorder.stop())
    assert standby.alive()


def test_a_new_leader_deletes_a_teardown_pod_the_killed_one_left_and_tears_down_once(
    make_setup: Callable[..., ProvisionerSetup],
    record_helper_pods: Callable[[ProvisionerSetup], HelperPodRecorder],
) -> None:
    base = unique_base_path("left-teardown")
    files = ConfigFiles(config=default_config(base), teardown=HANGING_TEARDOWN)
    setup = make_setup(files)
    leader, standby = start_pair(setup)
    recorder = record_helper_pods(setup)
    storage_class = setup.create_class("left")
    setup.create_claim("data", storage_class)
    setup.create_consumer("data", "data", ON_NODE)
    volume = setup.wait_bound("data")
    name = volume["metadata"]["name"]
    directory = setup.node_path(NODE, volume_path(volume))
    runs = directory / "teardown-runs"
    setup.core.delete_namespaced_pod("data", setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim("data", setup.namespace)
    wait_for(lambda: runs.exists() or None, 60, "the first teardown to run")

    pod = f"helper-delete-{name}"
    uid = kill_leader_with_its_pod_running(setup, leader, standby, pod)
    wait_left_pod_gone(setup, pod, uid)
    wait_gone(lambda: setup.volume(name), SETTLED_WITHIN, f"{name} to be deleted")

    wait_no_helper_pods(setup, timeout=30)
    assert not directory.exists()
    seen = recorder.stop()
    assert not overlapping_runs(seen)
    # The left pod, deleted in its first run, then the one teardown that ran to its end.
    phases = [life.status.get("phase") for life in seen if life.name == pod]
    assert len(phases) == 2 and phases[0] != "Succeeded" and phases[1] == "Succeeded", phases
    assert standby.alive()
