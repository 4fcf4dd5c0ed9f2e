"""A helper pod's deletion that fails is tried again until the pod is gone.

A run deletes its pod once it ended, and no one else looks at a finished pod that a run
followed: when that one DELETE failed (a 5xx from an API server restarting behind its load
balancer), the Succeeded pod stayed for good, for the next leader (or a rolled-back 0.1.0,
which waits out its helper timeout on such a pod) to meet under the volume's own name.

Here the setup pod's deletions are answered 503 three times, not carried out: the claim
binds all the same, and the pod is gone within the backoff's first tries (1, 2 and 4 s).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from localcluster import LocalCluster
from tests.faults.api_answer_faults import provisioner_with_faults
from tests.faults.support import helper_pods, unique_base_path, wait_no_helper_pods
from tests.provisioner.e2e.support import ConfigFiles, ProvisionerSetup, default_config

pytestmark = pytest.mark.cluster

NODE = {"kubernetes.io/hostname": "node-1"}
FAILED_DELETIONS = 3
GONE_WITHIN = 30.0
"""The three retries' 7 s, the kubelet's look and the informer's word, with room."""


def test_a_setup_pods_deletion_answered_503_is_tried_again_until_the_pod_is_gone(
    make_setup: Callable[..., ProvisionerSetup], cluster: LocalCluster
) -> None:
    setup = make_setup(ConfigFiles(config=default_config(unique_base_path("pod-deletions"))))
    pods = f"/api/v1/namespaces/{setup.namespace}/pods/"
    with provisioner_with_faults(setup, cluster) as (_, faults):
        deletions = faults.arm(
            "DELETE", lambda path: path.startswith(pods + "helper-"), 503, times=FAILED_DELETIONS
        )
        storage_class = setup.create_class("deletions")
        setup.create_claim("data", storage_class)
        setup.create_consumer("app", "data", NODE)
        volume = setup.wait_bound("data")
        deletions.wait_answered(1, 30)
        left = [pod["metadata"]["name"] for pod in helper_pods(setup)]
        assert left == [f"helper-create-{volume['metadata']['name']}"], left
        wait_no_helper_pods(setup, timeout=GONE_WITHIN)
        assert deletions.answered == FAILED_DELETIONS
