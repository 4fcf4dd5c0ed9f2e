"""The leader killed in the middle of a provision: its setup ran (or runs), its PV is not saved,
and the standby takes the lease. The claim must bind promptly to the directory the first setup
made, with one PV and nothing left behind: the setup is idempotent, a helper pod left over
(finished, or still running) is deleted by the new leader before it takes any work, and the
retry's `prepare` recognises the claim's own earlier attempt by its owner marker (see
provisioner/provisioning/fresh_directory.py).

The leader talks to the API server through `LeaseFaultProxy`, which holds the one request the
interleaving needs (never sent on) while the test kills the leader with SIGKILL: the deletion of
its Succeeded setup pod (the pod is left over), or the PV's POST (the pod is gone). A setup that
waits for a file the test writes keeps a node's batch pod Running while the leader dies (a
volume's own pod left running: test_left_helper_pods.py).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import LocalCluster, wait_for
from provisioner.configuration.config import DEFAULT_SETUP_SCRIPT
from tests.faults.lease_proxy import LeaseFaultProxy
from tests.faults.support import (
    assert_each_claim_bound_once,
    assert_no_orphan_directories,
    events_with_reason,
    helper_pods,
    holder_pid,
    lease_holder,
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
    volume_path,
)

pytestmark = pytest.mark.cluster

LEASE_FLAGS = (
    "--leader-election-lease-duration=5",
    "--leader-election-renew-deadline=3",
    "--leader-election-retry-period=0.5",
)
BIND_WITHIN = 30.0
"""From the kill: the lease's 5 s to expire, the standby's start, and the provision again."""
NODE = "node-1"
ON_NODE = {"kubernetes.io/hostname": NODE}
NAMESPACED = "{{ .PVC.Namespace }}/{{ .PVC.Name }}"
# Every run of the setup leaves a line: the retry must run in the first setup's directory.
COUNTING_SETUP = DEFAULT_SETUP_SCRIPT.replace(
    "set -eu\n", 'set -eu\necho run >> "$VOL_DIR/setup-runs"\n', 1
)
# The setup says it is waiting, then waits until the test lets it finish.
GATED_SETUP = DEFAULT_SETUP_SCRIPT.replace(
    "set -eu\n",
    "set -eu\n"
    'echo run >> "$VOL_DIR/setup-runs"\n'
    'touch "$VOL_DIR/waiting"\n'
    'while [ ! -e "$VOL_DIR/go" ]; do sleep 0.1; done\n',
    1,
)


@pytest.fixture
def proxy(cluster: LocalCluster) -> Iterator[LeaseFaultProxy]:
    started = LeaseFaultProxy(cluster).start()
    yield started
    started.close()


def start_pair(
    setup: ProvisionerSetup, proxy: LeaseFaultProxy, work_dir: Path, *extra: str
) -> tuple[ProvisionerProcess, ProvisionerProcess]:
    """The leader through the proxy, then a standby talking to the API server directly."""
    kubeconfig = proxy.kubeconfig(work_dir / "proxied.yaml")
    leader = setup.start(*LEASE_FLAGS, *extra, kubeconfig=kubeconfig)
    standby = setup.start(*LEASE_FLAGS, *extra, wait_ready=False)
    wait_for(
        lambda: True if standby.probe("/readyz")[1].startswith("standby") else None,
        30,
        "the second replica to report standby",
    )
    assert holder_pid(lease_holder(setup)) == leader.pid, "the Lease names the proxied replica"
    return leader, standby


def claim_uid(setup: ProvisionerSetup, name: str) -> str:
    return str(setup.claim(name)["metadata"]["uid"])


def pod_path(setup: ProvisionerSetup, pod: str) -> str:
    return f"/api/v1/namespaces/{setup.namespace}/pods/{pod}"


def pod_phases(setup: ProvisionerSetup) -> dict[str, str]:
    return {
        pod["metadata"]["name"]: str((pod.get("status") or {}).get("phase"))
        for pod in helper_pods(setup)
    }


def handed_over(setup: ProvisionerSetup, claim: str) -> bool | None:
    """Whether the leader handed the claim's setup to its batcher (it says Provisioning)."""
    return True if events_with_reason(setup, claim, "Provisioning") else None


def kill_and_wait_for_takeover(
    setup: ProvisionerSetup, leader: ProvisionerProcess, standby: ProvisionerProcess
) -> float:
    """SIGKILL the leader; returns when (monotonic) it died, once the standby leads."""
    leader.kill()
    killed_at = time.monotonic()
    wait_for(
        lambda: holder_pid(lease_holder(setup)) == standby.pid or None,
        15,
        "the standby to take the Lease",
        interval=0.1,
    )
    return killed_at


def assert_bound_in_time(setup: ProvisionerSetup, names: list[str], killed_at: float) -> None:
    wait_all_bound(setup, names, timeout=BIND_WITHIN)
    took = time.monotonic() - killed_at
    print(f"bound {took:.1f}s after the leader was killed")
    assert took <= BIND_WITHIN


def assert_settled(setup: ProvisionerSetup, base: str, names: list[str]) -> list[dict[str, Any]]:
    wait_no_helper_pods(setup, timeout=30)
    volumes = assert_each_claim_bound_once(setup, names)
    assert_no_orphan_directories(setup.cluster, [base], volumes)
    return volumes


@pytest.mark.parametrize("held", ["setup-pod-delete", "pv-post"])
def test_a_leader_killed_after_its_setup_before_the_pv_leaves_the_claim_to_the_next(
    make_setup: Callable[..., ProvisionerSetup],
    proxy: LeaseFaultProxy,
    tmp_path: Path,
    held: str,
) -> None:
    """`setup-pod-delete`: the leader dies once its setup pod Succeeded, before deleting it
    (the reported case: the new leader finds a Succeeded pod of the volume's own name);
    `pv-post`: it dies as it would save the PV, its pods gone."""
    base = unique_base_path("handover")
    setup = make_setup(ConfigFiles(config=default_config(base), setup=COUNTING_SETUP))
    leader, standby = start_pair(setup, proxy, tmp_path)
    storage_class = setup.create_class("handover", parameters={"pathPattern": NAMESPACED})
    setup.create_claim("data", storage_class)
    volume_name = f"pvc-{claim_uid(setup, 'data')}"
    if held == "setup-pod-delete":
        arrived = proxy.hold("DELETE", pod_path(setup, f"helper-create-{volume_name}"))
    else:
        arrived = proxy.hold("POST", "/api/v1/persistentvolumes")
    setup.create_consumer("data", "data", ON_NODE)
    wait_for(lambda: arrived.is_set() or None, 60, f"the leader's held request ({held})")

    directory = setup.node_path(NODE, f"{base}/{setup.namespace}/data")
    first_setup = directory.stat().st_ino
    assert (directory / "setup-runs").read_text() == "run\n"
    assert not our_volumes(setup)
    phases = pod_phases(setup)
    if held == "setup-pod-delete":
        assert phases == {f"helper-create-{volume_name}": "Succeeded"}, phases
    killed_at = kill_and_wait_for_takeover(setup, leader, standby)

    assert_bound_in_time(setup, ["data"], killed_at)
    (volume,) = assert_settled(setup, base, ["data"])
    assert volume_path(volume) == f"{base}/{setup.namespace}/data"
    assert directory.stat().st_ino == first_setup, "the retry made a directory of its own"
    # The standby ran the setup again (a Succeeded pod it found it deleted first).
    assert (directory / "setup-runs").read_text() == "run\nrun\n"
    assert standby.alive()


@pytest.mark.parametrize("batch_end", ["running", "succeeded"])
def test_a_leader_killed_with_a_batch_pod_leaves_its_claims_to_the_next(
    make_setup: Callable[..., ProvisionerSetup],
    proxy: LeaseFaultProxy,
    tmp_path: Path,
    batch_end: str,
) -> None:
    """One pod per node: the first claim's setup holds the node while two more arrive, which
    then share the node's next pod. `running`: the leader dies while that batch pod runs; the
    standby deletes it (a pod it did not start serves those volumes) and runs them again once
    it is gone. `succeeded`: it dies once the batch pod Succeeded, before deleting it and
    before saving the PVs; the standby finds a finished pod and runs them again."""
    base = unique_base_path("handover-batch")
    setup = make_setup(ConfigFiles(config=default_config(base), setup=GATED_SETUP))
    leader, standby = start_pair(setup, proxy, tmp_path, "--helper-pods-per-node=1")
    storage_class = setup.create_class("batch")
    names = ["first", "second", "third"]

    def directory(name: str) -> Path:
        uid = claim_uid(setup, name)
        return setup.node_path(NODE, f"{base}/pvc-{uid}_{setup.namespace}_{name}")

    def let_batch_finish() -> None:
        for name in names[1:]:
            gate = directory(name)
            gate.mkdir(parents=True, exist_ok=True)  # the batch may not have reached it yet
            (gate / "go").touch()

    setup.create_claim("first", storage_class)
    setup.create_consumer("first", "first", ON_NODE)
    wait_for(lambda: (directory("first") / "waiting").exists() or None, 60, "the first setup")
    for name in names[1:]:
        setup.create_claim(name, storage_class)
        setup.create_consumer(name, name, ON_NODE)
    # Both reach the leader's batcher (Provisioning is said as it hands a setup over) while
    # the node's one pod runs: they queue for its next pod.
    for name in names[1:]:
        wait_for(functools.partial(handed_over, setup, name), 60, f"{name} handed over")
    (directory("first") / "go").touch()
    setup.wait_bound("first")

    def batch_pod() -> str | None:
        batches = [name for name in pod_phases(setup) if name.startswith("helper-batch-create-")]
        return batches[0] if batches else None

    batch = wait_for(batch_pod, 60, "the leader's batch pod")
    # The two queued in either order, so the pod's first init container is either one's.
    wait_for(
        lambda: any((directory(name) / "waiting").exists() for name in names[1:]) or None,
        60,
        "the batch to run",
    )
    if batch_end == "succeeded":
        proxy.hold("POST", "/api/v1/persistentvolumes")
        deleting = proxy.hold("DELETE", pod_path(setup, batch))
        let_batch_finish()
        wait_for(lambda: deleting.is_set() or None, 60, "the leader to delete its batch pod")
        assert pod_phases(setup).get(batch) == "Succeeded"
        assert len(our_volumes(setup)) == 1, "only the first claim's PV is saved"
    else:
        # Its init containers (one per volume) run: the pod is Pending until the last is done.
        assert pod_phases(setup).get(batch) in ("Pending", "Running")
    killed_at = kill_and_wait_for_takeover(setup, leader, standby)
    if batch_end == "running":
        wait_for(lambda: batch not in pod_phases(setup) or None, 20, "the standby to delete it")
        let_batch_finish()

    assert_bound_in_time(setup, names, killed_at)
    volumes = assert_settled(setup, base, names)
    assert len(volumes) == len(names)
