"""Failed helper pods on real nodes, reported as on emulated ones but with what the real kubelet
said: a base path that must exist and does not, a setup script exiting non-zero, a setup past
cmdTimeoutSeconds, and one failing volume inside a batch pod whose others bind.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from localcluster import LocalCluster
from provisioner.configuration.config import DEFAULT_SETUP_SCRIPT
from tests.faults.support import (
    SHARED_HELPER_PODS,
    assert_each_claim_bound_once,
    event_count,
    events_with_reason,
    unique_base_path,
    wait_all_bound,
)
from tests.provisioner.e2e.real_nodes.support import (
    Serve,
    assert_ran_under_containerd_from_the_registry,
    create_writer,
    with_prelude,
)
from tests.provisioner.e2e.support import ProvisionerSetup, eventually

pytestmark = [pytest.mark.realnode, pytest.mark.cluster]


def failed_event(setup: ProvisionerSetup, claim: str, timeout: float) -> dict[str, Any]:
    """The provisioner's first ProvisioningFailed event on this claim."""

    def find() -> dict[str, Any] | None:
        found = events_with_reason(setup, claim, "ProvisioningFailed")
        return found[0] if found else None

    return eventually(find, timeout, f"a ProvisioningFailed event on {claim}")


def claim_on(setup: ProvisionerSetup, names: list[str], node: str = "real-1") -> None:
    storage_class = setup.create_class("failures")
    for name in names:
        setup.create_claim(name, storage_class)
        create_writer(setup, name, name, node, "echo written > /data/file")


def test_a_missing_base_path_is_reported_with_its_fix_while_the_kubelet_cannot_mount_it(
    serving: Serve,
) -> None:
    base = f"/opt/absent-{uuid.uuid4().hex[:6]}"
    setup, _ = serving(base, create=False, config={"cmdTimeoutSeconds": 5})
    claim_on(setup, ["data"])
    event = failed_event(setup, "data", 90)
    message = event["message"]
    assert event["type"] == "Warning"
    assert f"the base path {base} must exist on node real-1" in message, message
    assert "create: true" in message, message
    # The real kubelet keeps such a pod waiting (PodInitializing: its `prepare` is an init
    # container), saying why only in an event on it, and ends it at its deadline only after
    # its mount wait (about two minutes): the provisioner's own wait reports it, with that event.
    assert "waiting: PodInitializing; FailedMount: " in message, message
    assert f"hostPath type check failed: {base} is not a directory" in message, message
    assert setup.phase("data") == "Pending"
    for node in ("real-1", "real-2"):
        assert not setup.node_path(node, base).exists(), f"{base} was made on {node}"


def test_a_setup_exiting_non_zero_is_reported_with_its_exit_code_and_output(
    cluster: LocalCluster,
    serving: Serve,
) -> None:
    script = '#!/bin/sh\necho "cannot prepare $VOL_DIR: disk on fire" >&2\nexit 7\n'
    base = unique_base_path("real-exit")
    setup, recorder = serving(base, setup=script)
    claim_on(setup, ["doomed"])
    event = failed_event(setup, "doomed", 90)
    message = event["message"]
    assert "exit code 7" in message, message
    assert "disk on fire" in message and f"cannot prepare {base}/" in message, message
    assert setup.phase("doomed") == "Pending"
    failed = [pod for pod in recorder.pods() if pod.status.get("phase") == "Failed"]
    assert failed, recorder.pods()
    assert_ran_under_containerd_from_the_registry(cluster, failed[:1])


# Hangs far beyond cmdTimeoutSeconds for claims named slow-*.
HANGING_SETUP = with_prelude(
    DEFAULT_SETUP_SCRIPT,
    'case "$VOL_DIR" in *_slow-*) echo "hanging on $VOL_DIR"; sleep 300 ;; esac\n',
)


def test_a_setup_past_cmd_timeout_seconds_is_ended_by_the_kubelet_and_reported(
    cluster: LocalCluster,
    serving: Serve,
) -> None:
    base = unique_base_path("real-timeout")
    setup, recorder = serving(base, setup=HANGING_SETUP, config={"cmdTimeoutSeconds": 5})
    claim_on(setup, ["slow-1"])
    event = failed_event(setup, "slow-1", 90)
    message = event["message"]
    # The kubelet ended the pod at its activeDeadlineSeconds (cmdTimeoutSeconds) and killed
    # the script after the helper's grace; the report carries that and the script's output.
    assert "failed (DeadlineExceeded, exit code 137)" in message, message
    assert f"hanging on {base}/" in message, message
    assert setup.phase("slow-1") == "Pending"
    timed_out = [pod for pod in recorder.pods() if pod.status.get("reason") == "DeadlineExceeded"]
    assert timed_out, [pod.status.get("reason") for pod in recorder.pods()]
    assert_ran_under_containerd_from_the_registry(cluster, timed_out[:1])


# Every volume's setup says which directory it works on; claims named broken-* fail.
FAILING_SETUP = with_prelude(
    DEFAULT_SETUP_SCRIPT,
    'echo "setup of $VOL_DIR"\n'
    'case "$VOL_DIR" in *_broken-*) echo "no room for $VOL_DIR on purpose" >&2; exit 1 ;; esac\n',
)


def test_one_failing_volume_in_a_batch_fails_alone_and_the_others_bind(
    cluster: LocalCluster,
    serving: Serve,
) -> None:
    base = unique_base_path("real-batch-fail")
    setup, recorder = serving(base, setup=FAILING_SETUP, start_args=SHARED_HELPER_PODS)
    # The first claim gets the node's pod to itself; the others, the broken one among them,
    # arrive while it runs and share the next.
    good = ["good-0", "good-1", "good-2", "good-3"]
    claim_on(setup, [good[0], good[1], "broken-1", *good[2:]])

    wait_all_bound(setup, good, timeout=120)
    message = failed_event(setup, "broken-1", 90)["message"]
    assert "exit code 1" in message, message
    assert f"no room for {base}/" in message and "broken-1 on purpose" in message, message
    assert "good-" not in message, "the tail is the failing volume's own"
    assert "helper-batch-create-" in message, "it failed inside a batch"
    assert setup.phase("broken-1") == "Pending"
    broken = f"pvc-{setup.claim('broken-1')['metadata']['uid']}"
    batches = [pod for pod in recorder.pods() if broken in pod.volumes and len(pod.volumes) > 1]
    assert batches, recorder.pods()
    for name in good:
        assert not events_with_reason(setup, name, "ProvisioningFailed"), name
        assert event_count(events_with_reason(setup, name, "ProvisioningSucceeded")) == 1, name
    assert_each_claim_bound_once(setup, good)
    assert_ran_under_containerd_from_the_registry(cluster, batches[:1])
