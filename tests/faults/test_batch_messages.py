"""Batch pods at the largest --helper-batch-size: each volume's outcome still comes back.

A kubelet keeps the last 4096 bytes of a container's termination-message file, then the first
12 KiB / (the pod's containers) of each message: 186 bytes in a pod of 64 volumes. The local
cluster's kubelet stand-in cuts them the same way, so a teardown batch of that size reports
every volume's finish only if the messages were sized for it (before, the finish lines of most
volumes were cut off, and each of them failed its teardown).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from localcluster import wait_for
from provisioner.configuration.config import DEFAULT_TEARDOWN_SCRIPT
from provisioner.helper_pods.batch_pod_shapes import MAX_BATCH_VOLUMES
from tests.faults.support import (
    SHARED_HELPER_PODS,
    HelperPodRecorder,
    assert_no_orphan_directories,
    create_claims_with_consumers,
    events_with_reason,
    helper_pods,
    unique_base_path,
    wait_all_bound,
    wait_no_helper_pods,
)
from tests.provisioner.e2e.support import ConfigFiles, ProvisionerSetup, default_config, wait_gone

pytestmark = pytest.mark.cluster

NODE = {"kubernetes.io/hostname": "node-1"}
# The first volume's teardown holds the node's pod, so that the others queue for the next one.
SLOW_FIRST_TEARDOWN = DEFAULT_TEARDOWN_SCRIPT.replace(
    "set -eu\n", 'set -eu\ncase "$VOL_DIR" in *_first) sleep 8 ;; esac\n', 1
)


def test_a_teardown_batch_of_the_largest_size_reports_every_volume_s_outcome(
    make_setup: Callable[..., ProvisionerSetup],
    record_helper_pods: Callable[[ProvisionerSetup], HelperPodRecorder],
) -> None:
    base = unique_base_path("batch-max")
    setup = make_setup(ConfigFiles(config=default_config(base), teardown=SLOW_FIRST_TEARDOWN))
    setup.start("--helper-batch-size", str(MAX_BATCH_VOLUMES), *SHARED_HELPER_PODS)
    storage_class = setup.create_class("batchmax")
    names = ["first", *(f"v-{number:02d}" for number in range(MAX_BATCH_VOLUMES))]
    create_claims_with_consumers(setup, storage_class, names, NODE)
    volumes = {
        name: claim["spec"]["volumeName"]
        for name, claim in wait_all_bound(setup, names, timeout=300).items()
        if name in names
    }
    wait_no_helper_pods(setup, timeout=60)
    recorder = record_helper_pods(setup)
    for name in names:
        setup.core.delete_namespaced_pod(name, setup.namespace, grace_period_seconds=0)
    setup.core.delete_namespaced_persistent_volume_claim("first", setup.namespace)
    wait_for(lambda: helper_pods(setup) or None, 60, "the first volume's teardown pod")
    for name in names[1:]:
        setup.core.delete_namespaced_persistent_volume_claim(name, setup.namespace)

    for name in names:
        wait_gone(lambda: setup.volume(volumes[name]), 180, f"the PV of {name}")  # noqa: B023
    wait_no_helper_pods(setup, timeout=60)
    pods = [pod for pod in recorder.stop() if pod.action == "delete"]
    largest = max(len(pod.volumes) for pod in pods)
    assert largest >= MAX_BATCH_VOLUMES // 2, [len(pod.volumes) for pod in pods]
    served = [volume for pod in pods for volume in pod.volumes]
    assert sorted(served) == sorted(volumes.values()), "each teardown ran once, none failed"
    for volume in volumes.values():
        assert not events_with_reason(setup, volume, "VolumeFailedDelete"), volume
    assert_no_orphan_directories(setup.cluster, [base], [])
    print(f"teardown pods of {[len(pod.volumes) for pod in pods]} volumes")
