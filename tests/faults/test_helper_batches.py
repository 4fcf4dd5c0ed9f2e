"""Helper pods shared by the volumes of a busy node: setups and teardowns queued while the node's
helper pod runs go together in its next pod, each volume with its own outcome.

Each test pins its claims to one node and slows the scripts down a little, so that volumes
arrive while that node's pod runs; it records every helper pod the API server saw, in the
order of its changes, to count them and to check that no two pods for one volume ever ran at
once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from localcluster import wait_for
from provisioner.configuration.config import DEFAULT_SETUP_SCRIPT, DEFAULT_TEARDOWN_SCRIPT
from tests.faults.support import (
    SHARED_HELPER_PODS,
    HelperPodRecorder,
    assert_each_claim_bound_once,
    assert_no_orphan_directories,
    claims_by_name,
    create_claims_with_consumers,
    event_count,
    events_with_reason,
    helper_pods,
    overlapping_runs,
    unique_base_path,
    wait_all_bound,
    wait_no_helper_pods,
)
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    default_config,
    volume_path,
    wait_gone,
)

pytestmark = pytest.mark.cluster

HOSTNAME = "kubernetes.io/hostname"
NODE = {HOSTNAME: "node-1"}
SLOW_SETUP = DEFAULT_SETUP_SCRIPT.replace("set -eu\n", "set -eu\nsleep 0.5\n", 1)
SLOW_TEARDOWN = DEFAULT_TEARDOWN_SCRIPT.replace("set -eu\n", "set -eu\nsleep 0.5\n", 1)


def test_many_claims_for_one_node_bind_with_fewer_helper_pods_than_claims(
    make_setup: Callable[..., ProvisionerSetup],
    record_helper_pods: Callable[[ProvisionerSetup], HelperPodRecorder],
) -> None:
    base = unique_base_path("batch")
    setup = make_setup(ConfigFiles(config=default_config(base), setup=SLOW_SETUP))
    setup.start(*SHARED_HELPER_PODS)
    storage_class = setup.create_class("batch")
    recorder = record_helper_pods(setup)
    names = [f"many-{number:02d}" for number in range(24)]
    create_claims_with_consumers(setup, storage_class, names, NODE)

    wait_all_bound(setup, names, timeout=300)
    wait_no_helper_pods(setup, timeout=60)
    pods = [pod for pod in recorder.stop() if pod.action == "create"]
    volumes = assert_each_claim_bound_once(setup, names)
    assert_no_orphan_directories(setup.cluster, [base], volumes)
    served = sorted(volume for pod in pods for volume in pod.volumes)
    assert served == sorted(volume["metadata"]["name"] for volume in volumes), "one run each"
    assert len(pods) < len(names), f"{len(pods)} helper pods for {len(names)} claims"
    assert any(len(pod.volumes) > 1 for pod in pods), "no pod served several volumes"
    assert not overlapping_runs(pods)
    for name in names:
        assert event_count(events_with_reason(setup, name, "Provisioning")) == 1, name
        assert event_count(events_with_reason(setup, name, "ProvisioningSucceeded")) == 1, name
        assert not events_with_reason(setup, name, "ProvisioningFailed"), name
    print(f"{len(pods)} helper pods: {[len(pod.volumes) for pod in pods]} volumes each")


# Every volume's setup says which directory it works on (its own tail must say so); one kind
# of claim fails on purpose.
FAILING_SETUP = DEFAULT_SETUP_SCRIPT.replace(
    "set -eu\n",
    'set -eu\necho "setup of $VOL_DIR"\nsleep 0.5\n'
    'case "$VOL_DIR" in *_broken-*) echo "no room for $VOL_DIR on purpose" >&2; exit 1 ;; esac\n',
    1,
)


def test_a_setup_failing_inside_a_batch_fails_its_claim_alone_with_its_own_tail(
    make_setup: Callable[..., ProvisionerSetup],
    record_helper_pods: Callable[[ProvisionerSetup], HelperPodRecorder],
) -> None:
    base = unique_base_path("batch-fail")
    setup = make_setup(ConfigFiles(config=default_config(base), setup=FAILING_SETUP))
    setup.start(*SHARED_HELPER_PODS)
    storage_class = setup.create_class("batchfail")
    recorder = record_helper_pods(setup)
    first, rest = ["good-00"], [f"good-{number:02d}" for number in range(1, 12)]
    # The first claim gets the node's pod to itself; the others, the broken one among them,
    # arrive while it runs and share the next.
    create_claims_with_consumers(setup, storage_class, first, NODE)
    create_claims_with_consumers(setup, storage_class, [*rest[:5], "broken-1", *rest[5:]], NODE)

    wait_all_bound(setup, first + rest, timeout=300)
    failed = setup.wait_event("broken-1", "ProvisioningFailed", timeout=120)
    message = failed["message"]
    assert "exit code 1" in message, message
    assert f"no room for {base}/" in message and "broken-1 on purpose" in message, message
    assert "good-" not in message, "the tail is the failing volume's own"
    assert "helper-batch-create-" in message, "it failed inside a batch"
    assert setup.phase("broken-1") == "Pending"
    pods = recorder.stop()
    broken = setup.claim("broken-1")["metadata"]["uid"]
    assert any(f"pvc-{broken}" in pod.volumes and len(pod.volumes) > 1 for pod in pods)
    assert not overlapping_runs(pods)
    for name in first + rest:
        assert not events_with_reason(setup, name, "ProvisioningFailed"), name
        assert event_count(events_with_reason(setup, name, "ProvisioningSucceeded")) == 1, name
    # Its retries go on until the claim goes; each leaves no directory behind.
    setup.core.delete_namespaced_pod("broken-1", setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim("broken-1", setup.namespace)
    wait_gone(lambda: helper_pods(setup) or None, 120, "the last retry's helper pods")
    # The clean-up of the last failed attempt runs after its pod went (a finish step of its own),
    # so no helper pod for a moment does not mean it is done: wait for the directory itself.
    base_dir = setup.node_path(NODE[HOSTNAME], base)
    wait_gone(
        lambda: list(base_dir.glob(f"pvc-{broken}*")) or None,
        120,
        "the failed attempts' directory",
    )
    volumes = assert_each_claim_bound_once(setup, first + rest)
    assert_no_orphan_directories(setup.cluster, [base], volumes)


# Fails while the volume holds a marker the test puts there (and takes away to let it pass).
STUCK_MARKER = ".teardown-fails"
FAILING_TEARDOWN = DEFAULT_TEARDOWN_SCRIPT.replace(
    "set -eu\n",
    "set -eu\nsleep 0.5\n"
    f'if [ -e "$VOL_DIR/{STUCK_MARKER}" ]; then\n'
    '  echo "cannot remove $VOL_DIR yet" >&2; exit 1\n'
    "fi\n",
    1,
)


def test_batched_teardowns_remove_every_volume_but_the_failing_one_which_retries(
    make_setup: Callable[..., ProvisionerSetup],
    record_helper_pods: Callable[[ProvisionerSetup], HelperPodRecorder],
) -> None:
    base = unique_base_path("batch-release")
    setup = make_setup(ConfigFiles(config=default_config(base), teardown=FAILING_TEARDOWN))
    setup.start(*SHARED_HELPER_PODS)
    storage_class = setup.create_class("batchrel")
    names = [f"gone-{number:02d}" for number in range(12)]
    create_claims_with_consumers(setup, storage_class, names, NODE)
    volumes = {
        name: claim["spec"]["volumeName"]
        for name, claim in wait_all_bound(setup, names, timeout=300).items()
        if name in names
    }
    paths = {name: volume_path(setup.volume(volume) or {}) for name, volume in volumes.items()}
    stuck = "gone-05"
    marker = setup.node_path("node-1", paths[stuck]) / STUCK_MARKER
    marker.write_text("keep me a while")
    recorder = record_helper_pods(setup)
    for name in names:
        setup.core.delete_namespaced_pod(name, setup.namespace, grace_period_seconds=0)
    for name in names:
        setup.core.delete_namespaced_persistent_volume_claim(name, setup.namespace)

    for name in names:
        if name != stuck:
            volume = volumes[name]
            wait_gone(lambda: setup.volume(volume), 120, f"the PV of {name}")  # noqa: B023
            assert not setup.node_path("node-1", paths[name]).exists(), name
    failed = setup.wait_event(volumes[stuck], "VolumeFailedDelete", timeout=60)
    assert "cannot remove" in failed["message"] and "gone-05" in failed["message"]
    assert f"cannot remove {paths['gone-04']}" not in failed["message"]
    time.sleep(3)  # a retry or two, still failing
    assert setup.volume(volumes[stuck]) is not None, "its PV stays while its data does"
    assert marker.exists()

    marker.unlink()
    wait_gone(lambda: setup.volume(volumes[stuck]), 180, "the PV of the failing volume")
    assert not setup.node_path("node-1", paths[stuck]).exists()
    wait_no_helper_pods(setup, timeout=60)
    pods = [pod for pod in recorder.stop() if pod.action == "delete"]
    assert any(len(pod.volumes) > 1 for pod in pods), "no teardown pod served several volumes"
    assert len({pod.name for pod in pods}) < len(names)
    assert not overlapping_runs(pods)
    assert_no_orphan_directories(setup.cluster, [base], [])


# Slow enough that a batch pod is still running when its provisioner is killed.
VERY_SLOW_SETUP = DEFAULT_SETUP_SCRIPT.replace("set -eu\n", "set -eu\nsleep 2\n", 1)


def test_a_provisioner_killed_while_a_batch_pod_runs_leaves_nothing_run_twice_at_once(
    make_setup: Callable[..., ProvisionerSetup],
    record_helper_pods: Callable[[ProvisionerSetup], HelperPodRecorder],
) -> None:
    """The batch pod outlives its provisioner. The next leader must not run any of its volumes
    again while it may still run (it deletes the pod and waits until it is gone), then bind
    every claim once and leave no directory behind."""
    base = unique_base_path("batch-crash")
    setup = make_setup(ConfigFiles(config=default_config(base), setup=VERY_SLOW_SETUP))
    setup.start(*SHARED_HELPER_PODS)
    storage_class = setup.create_class("batchcrash")
    recorder = record_helper_pods(setup)
    names = [f"crash-{number:02d}" for number in range(10)]
    create_claims_with_consumers(setup, storage_class, names, NODE)

    def batch_running() -> bool | None:
        return (
            True if any(len(p.volumes) > 1 and p.ended is None for p in recorder.pods()) else None
        )

    wait_for(batch_running, 120, "a batch pod", interval=0.1)
    time.sleep(1)
    setup.replicas[-1].kill()
    assert any(len(pod["spec"].get("initContainers") or ()) > 1 for pod in helper_pods(setup))
    setup.start(*SHARED_HELPER_PODS)  # waits for the dead replica's lease to expire (~15 s)

    wait_all_bound(setup, names, timeout=300)
    wait_no_helper_pods(setup, timeout=60)
    pods = recorder.stop()
    assert not overlapping_runs(pods), overlapping_runs(pods)
    volumes = assert_each_claim_bound_once(setup, names)
    assert_no_orphan_directories(setup.cluster, [base], volumes)
    for name in names:
        assert event_count(events_with_reason(setup, name, "ProvisioningSucceeded")) == 1, name


# Hangs for claims named slow-*, far beyond cmdTimeoutSeconds.
HANGING_SETUP = DEFAULT_SETUP_SCRIPT.replace(
    "set -eu\n",
    "set -eu\nsleep 0.5\n"
    'case "$VOL_DIR" in *_slow-*) echo "hanging on $VOL_DIR"; sleep 300 ;; esac\n',
    1,
)


def test_a_setup_outrunning_its_timeout_inside_a_batch_fails_alone(
    make_setup: Callable[..., ProvisionerSetup],
    record_helper_pods: Callable[[ProvisionerSetup], HelperPodRecorder],
) -> None:
    base = unique_base_path("batch-timeout")
    config = {**default_config(base), "cmdTimeoutSeconds": 10}
    setup = make_setup(ConfigFiles(config=config, setup=HANGING_SETUP))
    setup.start(*SHARED_HELPER_PODS)
    storage_class = setup.create_class("batchtimeout")
    recorder = record_helper_pods(setup)
    # quick-0 gets the node's pod to itself and quick-1 and quick-2 the pod beside it; slow-1
    # and the two after it wait for the next free one, slow-1 first.
    first, rest = ["quick-0"], ["quick-1", "quick-2", "quick-3", "quick-4"]
    create_claims_with_consumers(setup, storage_class, ["quick-0", "quick-1", "quick-2"], NODE)
    create_claims_with_consumers(setup, storage_class, ["slow-1", "quick-3", "quick-4"], NODE)

    wait_all_bound(setup, first + rest, timeout=300)
    failed = setup.wait_event("slow-1", "ProvisioningFailed", timeout=120)
    assert "timed out after 10s" in failed["message"], failed["message"]
    assert "exit code 124" in failed["message"], failed["message"]
    assert "helper-batch-create-" in failed["message"], "it timed out inside a batch"
    slow = f"pvc-{setup.claim('slow-1')['metadata']['uid']}"
    batch = next(pod for pod in recorder.pods() if slow in pod.volumes)
    after = batch.volumes[batch.volumes.index(slow) + 1 :]
    assert after, f"no volume after the slow one in {batch}"
    bound = {claim["spec"].get("volumeName") for claim in claims_by_name(setup).values()}
    assert set(after) <= bound, "the volumes after the slow one ran and bound"
    setup.core.delete_namespaced_pod("slow-1", setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim("slow-1", setup.namespace)
    volumes = assert_each_claim_bound_once(setup, first + rest)

    def no_orphans() -> bool | None:
        # The timed-out setup's pod died before its `finish` step: the directory `prepare`
        # made for slow-1 is removed by a clean-up run once the claim is seen gone.
        try:
            assert_no_orphan_directories(setup.cluster, [base], volumes)
        except AssertionError:
            return None
        return True

    wait_for(no_orphans, 120, "slow-1's directory to be removed once its claim went")
    wait_gone(lambda: helper_pods(setup) or None, 120, "the last retry's helper pods")
    assert not overlapping_runs(recorder.stop())
    assert_no_orphan_directories(setup.cluster, [base], volumes)


# Holds a claim named held-N until the test leaves a marker `.release-held-N` in the base path
# (which every volume's container sees, read-only, at $LPS_BASE_VIEW).
HOLDING_SETUP = DEFAULT_SETUP_SCRIPT.replace(
    "set -eu\n",
    "set -eu\n"
    'case "$VOL_DIR" in *_held-*)'
    ' while [ ! -e "$LPS_BASE_VIEW/.release-${VOL_DIR##*_}" ]; do sleep 0.2; done ;; esac\n',
    1,
)


def test_a_batch_volume_binds_as_its_own_setup_ends_and_its_teardown_waits_for_the_pod(
    make_setup: Callable[..., ProvisionerSetup],
    record_helper_pods: Callable[[ProvisionerSetup], HelperPodRecorder],
) -> None:
    """early-1 and held-1 share a pod, early-1 first: early-1's PV is made (and binds) while
    held-1's setup still runs in that pod. Its claim then goes: its teardown waits for the
    pod to end (no two pods serve one volume at once), then removes its directory; held-1's
    volume is untouched."""
    base = unique_base_path("batch-early")
    setup = make_setup(ConfigFiles(config=default_config(base), setup=HOLDING_SETUP))
    replica = setup.start(*SHARED_HELPER_PODS)
    storage_class = setup.create_class("batchearly", reclaim_policy="Delete")
    recorder = record_helper_pods(setup)
    base_dir = setup.node_path(NODE[HOSTNAME], base)
    # held-0 holds the node's pod; early-1, then held-1, queue behind it, in that order.
    create_claims_with_consumers(setup, storage_class, ["held-0"], NODE)
    setup.wait_event("held-0", "Provisioning", timeout=60)
    for name in ("early-1", "held-1"):
        create_claims_with_consumers(setup, storage_class, [name], NODE)
        setup.wait_event(name, "Provisioning", timeout=60)
    (base_dir / ".release-held-0").touch()

    wait_all_bound(setup, ["held-0", "early-1"], timeout=120)
    early = f"pvc-{setup.claim('early-1')['metadata']['uid']}"
    held = f"pvc-{setup.claim('held-1')['metadata']['uid']}"
    batch = next(pod for pod in recorder.pods() if early in pod.volumes)
    assert batch.volumes == (early, held), batch
    assert batch.ended is None, "early-1 bound while its batch pod still ran"
    assert setup.phase("held-1") == "Pending"

    setup.core.delete_namespaced_pod("early-1", setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim("early-1", setup.namespace)

    def teardown_waits() -> bool | None:
        return True if f"volume {early} waits for its earlier batch pod" in replica.log() else None

    wait_for(teardown_waits, 60, "early-1's teardown to wait for its batch pod", interval=0.5)
    (early_dir,) = base_dir.glob(f"{early}_*")
    assert early_dir.is_dir(), "nothing removed while the pod runs"
    (base_dir / ".release-held-1").touch()

    wait_all_bound(setup, ["held-1"], timeout=120)
    wait_gone(lambda: early_dir if early_dir.exists() else None, 120, "early-1's directory")
    wait_gone(lambda: helper_pods(setup) or None, 120, "the helper pods")
    assert not overlapping_runs(recorder.stop())
    volumes = assert_each_claim_bound_once(setup, ["held-0", "held-1"])
    assert_no_orphan_directories(setup.cluster, [base], volumes)
