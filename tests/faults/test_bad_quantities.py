"""Claims asking for sizes no int64 holds, beside normal claims of the same node and batch.

The API server bounds only binary-suffixed quantities, so a claim may request `1e5000` bytes
(whose digits no str() of Python prints, which once failed every volume of its batch pod) or
`999999999999e999987` (whose arithmetic once took seconds of CPU under the controller's paths
lock). Both must be refused with a Warning naming the claim and the limit, while the other
claims of the node bind as if they were not there.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from provisioner.configuration.config import DEFAULT_SETUP_SCRIPT
from tests.faults.support import (
    SHARED_HELPER_PODS,
    HelperPodRecorder,
    assert_each_claim_bound_once,
    event_count,
    events_with_reason,
    unique_base_path,
    wait_all_bound,
)
from tests.provisioner.e2e.support import ConfigFiles, ProvisionerSetup, default_config

pytestmark = pytest.mark.cluster

NODE = {"kubernetes.io/hostname": "node-1"}
SLOW_SETUP = DEFAULT_SETUP_SCRIPT.replace("set -eu\n", "set -eu\nsleep 0.5\n", 1)
BAD_SIZES = {"huge": "1e5000", "costly": "999999999999e999987"}
LIMIT = "9223372036854775807 bytes"


def test_sizes_above_int64_are_refused_and_the_node_s_other_claims_bind_in_their_batch(
    make_setup: Callable[..., ProvisionerSetup],
    record_helper_pods: Callable[[ProvisionerSetup], HelperPodRecorder],
) -> None:
    base = unique_base_path("quantities")
    setup = make_setup(ConfigFiles(config=default_config(base), setup=SLOW_SETUP))
    setup.start(*SHARED_HELPER_PODS)
    storage_class = setup.create_class("quantities")
    recorder = record_helper_pods(setup)
    good = [f"good-{number:02d}" for number in range(10)]
    started = time.monotonic()
    # The first claim gets the node's pod to itself; the rest, the bad ones among them, arrive
    # while it runs and would share the next.
    setup.create_claim(good[0], storage_class)
    setup.create_consumer(good[0], good[0], NODE)
    for name in [*good[1:5], *BAD_SIZES, *good[5:]]:
        setup.create_claim(name, storage_class, size=BAD_SIZES.get(name, "1Gi"))
        setup.create_consumer(name, name, NODE)

    wait_all_bound(setup, good, timeout=90)
    took = time.monotonic() - started
    for name in BAD_SIZES:
        failed = setup.wait_event(name, "ProvisioningFailed", timeout=30)
        assert failed["type"] == "Warning"
        message = failed["message"]
        stored = setup.claim(name)["spec"]["resources"]["requests"]["storage"]  # as printed
        assert f"claim {setup.namespace}/{name} requests '{stored}'" in message, message
        assert LIMIT in message, message
        assert setup.phase(name) == "Pending"
    assert_each_claim_bound_once(setup, good)
    for name in good:
        assert not events_with_reason(setup, name, "ProvisioningFailed"), name
        assert event_count(events_with_reason(setup, name, "ProvisioningSucceeded")) == 1, name
    pods = recorder.stop()
    served = {volume for pod in pods for volume in pod.volumes}
    for name in BAD_SIZES:
        assert f"pvc-{setup.claim(name)['metadata']['uid']}" not in served, "never run"
    assert any(len(pod.volumes) > 1 for pod in pods), "the good claims still shared pods"
    print(f"{len(good)} claims bound in {took:.1f}s beside {len(BAD_SIZES)} refused")
