"""A recreated claim and its predecessor's teardown: with a pathPattern of namespace and name,
a claim deleted and created again under the same name renders the same directory. While the
old volume's teardown waits in a busy node's queue, its PV may go (an admin deletes a Released
PV and its finalizer; or our own DELETE was carried out, its answer lost, and the informer
lags). The path must stay taken until that teardown ran: the new claim waits, then gets a
fresh directory that the old `rm -rf` never touches.

A real provisioner runs in this process, so the test can see its path book and know that the
old teardown is queued (decided, its pod not yet built) before the PV goes.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from localcluster import LocalCluster, wait_for
from provisioner.configuration.config import DEFAULT_NODE, DEFAULT_TEARDOWN_SCRIPT
from provisioner.process.app import Provisioner
from provisioner.provisioning.paths import TEARING_DOWN
from tests.faults.api_answer_faults import provisioner_with_faults
from tests.faults.support import (
    SHARED_HELPER_PODS,
    HelperPodRecorder,
    HelperPodSeen,
    create_claims_with_consumers,
    events_with_reason,
    unique_base_path,
)
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    creatable,
    volume_path,
    wait_gone,
)

pytestmark = pytest.mark.cluster

NODE = {"kubernetes.io/hostname": "node-1"}
HOLD = ".hold-teardown"
# A volume holding the marker keeps its teardown (and so the node's helper slot) busy until
# the test takes the marker away.
HELD_TEARDOWN = DEFAULT_TEARDOWN_SCRIPT.replace(
    "set -eu\n", f'set -eu\nwhile [ -e "$VOL_DIR/{HOLD}" ]; do sleep 0.2; done\n', 1
)


def book_state(provisioner: Provisioner, volume_name: str) -> str | None:
    entry = provisioner.local_path._paths.get(volume_name)
    return None if entry is None else entry.state


def teardowns(recorder: HelperPodRecorder, volume_name: str) -> list[HelperPodSeen]:
    """The teardown pods seen serving the volume (its own or a batch)."""
    return [pod for pod in recorder.pods() if pod.action == "delete" and volume_name in pod.volumes]


def test_a_claim_recreated_while_its_old_teardown_is_queued_keeps_its_data(
    make_setup: Callable[..., ProvisionerSetup],
    cluster: LocalCluster,
    record_helper_pods: Callable[[ProvisionerSetup], HelperPodRecorder],
) -> None:
    base = unique_base_path("recreated")
    config = {"nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(base)]}]}
    setup = make_setup(ConfigFiles(config=config, teardown=HELD_TEARDOWN))
    # One helper pod per node: the old volume's teardown queues behind the busy one's.
    with provisioner_with_faults(setup, cluster, SHARED_HELPER_PODS) as (provisioner, _):
        storage_class = setup.create_class(
            "recreated", parameters={"pathPattern": "{{ .PVC.Namespace }}/{{ .PVC.Name }}"}
        )
        recorder = record_helper_pods(setup)
        create_claims_with_consumers(setup, storage_class, ["busy", "data"], NODE)
        busy_volume = setup.wait_bound("busy")
        old_volume = setup.wait_bound("data")
        old_name, path = old_volume["metadata"]["name"], volume_path(old_volume)
        hold = setup.node_path("node-1", volume_path(busy_volume)) / HOLD
        hold.touch()

        # The node's helper slot is taken by a teardown that waits for the marker...
        setup.core.delete_namespaced_pod("busy", setup.namespace, grace_period_seconds=0)
        setup.core.delete_namespaced_persistent_volume_claim("busy", setup.namespace)
        busy_name = busy_volume["metadata"]["name"]
        wait_for(lambda: teardowns(recorder, busy_name) or None, 60, "the busy teardown's pod")
        # ...so the old volume's teardown is decided and queued behind it.
        setup.core.delete_namespaced_pod("data", setup.namespace, grace_period_seconds=0)
        setup.core.delete_namespaced_persistent_volume_claim("data", setup.namespace)
        wait_for(
            lambda: book_state(provisioner, old_name) == TEARING_DOWN or None,
            60,
            "the old volume's teardown to be queued",
        )
        assert not teardowns(recorder, old_name), "its pod was built: it is not queued"

        # An admin deletes the Released PV, our finalizer too.
        setup.core.patch_persistent_volume(old_name, {"metadata": {"finalizers": None}})
        setup.core.delete_persistent_volume(old_name)
        wait_gone(lambda: setup.volume(old_name), 60, "the old PV")

        # The claim is created again, and renders the same path.
        create_claims_with_consumers(setup, storage_class, ["data"], NODE)

        def bound_or_waiting() -> str | None:
            if setup.phase("data") == "Bound":
                return "bound"
            return "waiting" if events_with_reason(setup, "data", "WaitingForPath") else None

        first = wait_for(bound_or_waiting, 60, "the new claim to bind or wait for its path")
        written = None
        if first == "bound":
            # Bound at once: the tenant writes into the volume before the old teardown runs.
            written = setup.node_path("node-1", volume_path(setup.wait_bound("data"))) / "data"
            written.write_text("precious")
        hold.unlink()
        wait_for(
            lambda: any(pod.ended for pod in teardowns(recorder, old_name)) or None,
            120,
            "the old teardown to run",
        )
        new_volume = setup.wait_bound("data", timeout=120)
        assert volume_path(new_volume) == path and new_volume["metadata"]["name"] != old_name
        if written is None:
            written = setup.node_path("node-1", path) / "data"
            written.write_text("precious")
        wait_for(
            lambda: book_state(provisioner, old_name) is None or None, 60, "the old path freed"
        )
        assert written.exists(), "the old teardown removed the new volume's data"
        assert first == "waiting", "the recreated claim did not wait for the old teardown"
