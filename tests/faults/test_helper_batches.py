"""Helper pods shared by the volumes of a busy node: setups and teardowns queued while the node's
helper pod runs go together in its next pod, each volume with its own outcome.

Each test pins its claims to one node and slows the scripts down a little, so that volumes
arrive while that node's pod runs; it records every helper pod the API server saw, in the
order of its changes, to count them and to check that no two pods for one volume ever ran at
once.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from provisioner.core.config import DEFAULT_SETUP_SCRIPT, DEFAULT_TEARDOWN_SCRIPT
from tests.faults.support import (
    HelperPodRecorder,
    assert_each_claim_bound_once,
    assert_no_orphan_directories,
    create_claims_with_consumers,
    event_count,
    events_with_reason,
    overlapping_runs,
    unique_base_path,
    wait_all_bound,
    wait_no_helper_pods,
)
from tests.provisioner.e2e.support import ConfigFiles, ProvisionerSetup, default_config

pytestmark = pytest.mark.cluster

HOSTNAME = "kubernetes.io/hostname"
NODE = {HOSTNAME: "node-1"}
SLOW_SETUP = DEFAULT_SETUP_SCRIPT.replace("set -eu\n", "set -eu\nsleep 0.5\n", 1)
SLOW_TEARDOWN = DEFAULT_TEARDOWN_SCRIPT.replace("set -eu\n", "set -eu\nsleep 0.5\n", 1)


def test_many_claims_for_one_node_bind_with_fewer_helper_pods_than_claims(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = unique_base_path("batch")
    setup = make_setup(ConfigFiles(config=default_config(base), setup=SLOW_SETUP))
    setup.start()
    storage_class = setup.create_class("batch")
    recorder = HelperPodRecorder(setup).start()
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
