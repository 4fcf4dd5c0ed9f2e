"""A volume whose predecessor's helper pod never goes away: it waits only so long.

The predecessor is a helper pod serving the volume that this provisioner did not start, kept
Terminating by a finalizer once the provisioner deletes it (as a pod on an unreachable node
stays). The provisioner's hold timeout is shortened to a few seconds: after it, the claim gets a
Warning naming that pod and how to free it, /healthz shows the held volume meanwhile, and once
the pod is gone the claim binds.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from localcluster import NEVER_STARTS_IMAGE, wait_for
from localcluster.raw_api import call_json, manifest
from provisioner.helper_pods.pod_shapes import (
    HELPER_ACTION_LABEL,
    HELPER_POD_LABEL,
    HELPER_VOLUME_LABEL,
    label_value,
)
from tests.faults.support import events_with_reason, unique_base_path, wait_all_bound
from tests.provisioner.e2e.support import ConfigFiles, ProvisionerSetup, default_config

pytestmark = pytest.mark.cluster

NODE = {"kubernetes.io/hostname": "node-1"}
HOLD = "test.local-path-storage.io/hold"
PREDECESSOR = "helper-batch-create-predecessor"


def test_a_predecessor_pod_that_never_goes_away_fails_the_volume_after_the_hold_timeout(
    make_setup: Callable[..., ProvisionerSetup],
) -> None:
    base = unique_base_path("held")
    setup = make_setup(ConfigFiles(config=default_config(base)))
    replica = setup.start("--helper-hold-timeout", "5")
    storage_class = setup.create_class("held")
    setup.create_claim("held", storage_class)
    volume = f"pvc-{setup.claim('held')['metadata']['uid']}"
    # What a crashed predecessor left: a pod serving the volume, on its node, that never runs
    # and that a finalizer keeps once it is deleted.
    setup.core.create_namespaced_pod(
        setup.namespace,
        manifest(
            {
                "metadata": {
                    "name": PREDECESSOR,
                    "labels": {
                        HELPER_POD_LABEL: "true",
                        HELPER_ACTION_LABEL: "create",
                        HELPER_VOLUME_LABEL: label_value(volume),
                    },
                    "finalizers": [HOLD],
                },
                "spec": {
                    "nodeName": "node-1",
                    "restartPolicy": "Never",
                    "containers": [{"name": "stuck", "image": NEVER_STARTS_IMAGE}],
                },
            }
        ),
    )
    try:
        setup.create_consumer("held", "held", NODE)

        def healthz_shows_it() -> tuple[int, str] | None:
            answer = replica.probe("/healthz")
            return answer if "held" in answer[1] else None

        held = wait_for(healthz_shows_it, 30, "/healthz to show the held volume", interval=0.2)
        assert held == (200, "ok; helper runs: 0 running, 1 held\n"), held
        failed = setup.wait_event("held", "ProvisioningFailed", timeout=30)
        assert failed["type"] == "Warning"
        message = failed["message"]
        assert f"helper pod {PREDECESSOR}: still Pending, being deleted since" in message
        assert "on node node-1" in message and "remove the pod's finalizers" in message
        pod = call_json(setup.core.read_namespaced_pod, PREDECESSOR, setup.namespace)
        assert pod["metadata"].get("deletionTimestamp"), "it was asked to go"
        assert setup.phase("held") == "Pending"
        assert replica.probe("/healthz")[0] == 200, "a held volume is no wedged process"
    finally:
        setup.core.patch_namespaced_pod(
            PREDECESSOR, setup.namespace, manifest({"metadata": {"finalizers": None}})
        )
    wait_all_bound(setup, ["held"], timeout=120)
    assert len(events_with_reason(setup, "held", "ProvisioningSucceeded")) == 1
