"""The largest setup script config.json accepts runs, in a helper pod of its own and in a batch
pod: each passes it to `sh` in one environment variable, and the emulated kubelet and the
batch wrapper really exec, so a script the kernel refuses (E2BIG, over MAX_ARG_STRLEN) would
fail its volume here. One byte more is refused at config load (tests/provisioner/configuration/
test_config.py, and the hot reload in test_bad_config.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from provisioner.configuration.config import DEFAULT_SETUP_SCRIPT, MAX_SCRIPT_BYTES
from tests.faults.support import (
    SHARED_HELPER_PODS,
    HelperPodRecorder,
    create_claims_with_consumers,
    events_with_reason,
    unique_base_path,
    wait_all_bound,
    wait_no_helper_pods,
)
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    default_config,
    volume_node,
    volume_path,
)

pytestmark = pytest.mark.cluster

MARKER = "largest-script-ran"


def largest_setup_script() -> str:
    """The default setup, slowed so that volumes queue up for a batch pod, leaving a marker in
    the volume, padded with a comment to exactly the most config.json accepts."""
    script = DEFAULT_SETUP_SCRIPT.replace("set -eu\n", "set -eu\nsleep 0.5\n", 1)
    script += f': > "$VOL_DIR/{MARKER}"\n'
    padding = MAX_SCRIPT_BYTES - len(script.encode()) - len("#\n")
    script += "#" + "x" * padding + "\n"
    assert len(script.encode()) == MAX_SCRIPT_BYTES
    return script


def test_the_largest_accepted_script_runs_in_its_own_pod_and_in_a_batch_pod(
    make_setup: Callable[..., ProvisionerSetup],
    record_helper_pods: Callable[[ProvisionerSetup], HelperPodRecorder],
) -> None:
    base = unique_base_path("largest")
    setup = make_setup(ConfigFiles(config=default_config(base), setup=largest_setup_script()))
    setup.start(*SHARED_HELPER_PODS)
    storage_class = setup.create_class("largest")
    recorder = record_helper_pods(setup)
    names = [f"large-{number}" for number in range(6)]
    create_claims_with_consumers(setup, storage_class, names, {"kubernetes.io/hostname": "node-1"})

    wait_all_bound(setup, names, timeout=180)
    wait_no_helper_pods(setup, timeout=60)
    pods = [pod for pod in recorder.stop() if pod.action == "create"]
    sizes = sorted(len(pod.volumes) for pod in pods)
    assert sizes[0] == 1 and sizes[-1] > 1, f"not both pod shapes: {sizes} volumes per pod"
    for name in names:
        assert not events_with_reason(setup, name, "ProvisioningFailed"), name
        volume = setup.wait_bound(name)
        directory = setup.node_path(volume_node(volume), volume_path(volume))
        assert (directory / MARKER).exists(), f"{name}: the setup script did not run"
