"""Two classes on one base path of one node, one naming its volumes' node by the hostname label
and the other by a custom nodeAffinityKey: their volumes are on the same disk, and a path one
class's Released volume holds is a path the other class's claim must not take while that
volume's teardown may still run.

Here the Released volume's PV DELETE is refused (as an admission webhook or a brief RBAC gap
would), so its teardown is redone until the DELETE goes through; meanwhile a claim of the other
class, under the same namespace and name, renders the same directory. Its data must survive the
redone teardown: the claim waits for the old volume to go, then gets a fresh directory.

A real provisioner runs in this process (`api_answer_faults`), so the test can refuse its PV
DELETE while every other request goes through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from localcluster import LocalCluster, wait_for
from provisioner.configuration.config import DEFAULT_NODE
from tests.faults.api_answer_faults import provisioner_with_faults
from tests.faults.support import create_claims_with_consumers, events_with_reason, unique_base_path
from tests.provisioner.e2e.support import (
    ConfigFiles,
    ProvisionerSetup,
    creatable,
    volume_path,
    wait_gone,
)

pytestmark = pytest.mark.cluster

NODE = {"kubernetes.io/hostname": "node-1"}
DISK_LABEL = "local-path-storage.io/test-disk-host"
PATTERN = {"pathPattern": "{{ .PVC.Namespace }}/{{ .PVC.Name }}"}
VOLUMES = "/api/v1/persistentvolumes"
TENANT_FILE = "written-by-the-tenant"


@pytest.fixture
def node_1_disk_label(cluster: LocalCluster) -> Iterator[str]:
    """node-1 carries DISK_LABEL for the test's custom-key class; taken off again after it."""
    core = cluster.core_v1()
    core.patch_node("node-1", {"metadata": {"labels": {DISK_LABEL: "disk-of-node-1"}}})
    try:
        yield "disk-of-node-1"
    finally:
        core.patch_node("node-1", {"metadata": {"labels": {DISK_LABEL: None}}})


def tenant_writes(setup: ProvisionerSetup, path: str) -> Path:
    written = setup.node_path("node-1", path) / TENANT_FILE
    try:
        written.write_text("precious")
    except FileNotFoundError:
        pytest.fail(f"the new volume's directory {path} was removed before its tenant wrote")
    return written


def test_a_redone_teardown_under_another_affinity_key_spares_the_new_volume(
    make_setup: Callable[..., ProvisionerSetup], cluster: LocalCluster, node_1_disk_label: str
) -> None:
    base = unique_base_path("two-keys")
    config = {"nodePathMap": [{"node": DEFAULT_NODE, "paths": [creatable(base)]}]}
    setup = make_setup(ConfigFiles(config=config))
    with provisioner_with_faults(setup, cluster) as (_, faults):
        by_hostname = setup.create_class("by-hostname", parameters=PATTERN)
        by_disk = setup.create_class(
            "by-disk", parameters={**PATTERN, "nodeAffinityKey": DISK_LABEL}
        )
        create_claims_with_consumers(setup, by_hostname, ["data"], NODE)
        old_volume = setup.wait_bound("data")
        old_name, path = old_volume["metadata"]["name"], volume_path(old_volume)

        # The old volume's PV DELETE is refused until the test lets it go: its teardown runs,
        # fails at the DELETE, and is redone.
        refused = faults.arm("DELETE", lambda p: p == f"{VOLUMES}/{old_name}", 403, times=10**6)
        setup.core.delete_namespaced_pod("data", setup.namespace, grace_period_seconds=0)
        setup.core.delete_namespaced_persistent_volume_claim("data", setup.namespace)
        refused.wait_answered(1, 120)

        # The claim comes back under the other class: the same directory on the same disk.
        create_claims_with_consumers(setup, by_disk, ["data"], NODE)

        def bound_or_waiting() -> str | None:
            if setup.phase("data") == "Bound":
                return "bound"
            return "waiting" if events_with_reason(setup, "data", "WaitingForPath") else None

        first = wait_for(bound_or_waiting, 120, "the new claim to bind or wait for its path")
        written = None
        if first == "bound":
            # Bound at once: the tenant writes before the old teardown is done for good.
            new_volume = setup.wait_bound("data")
            assert volume_path(new_volume) == path
            written = tenant_writes(setup, path)
        faults.release_all()
        wait_gone(lambda: setup.volume(old_name), 120, "the old PV")
        new_volume = setup.wait_bound("data", timeout=120)
        assert volume_path(new_volume) == path and new_volume["metadata"]["name"] != old_name
        terms = new_volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        assert terms[0]["matchExpressions"][0]["key"] == DISK_LABEL
        if written is None:
            written = tenant_writes(setup, path)
        assert written.exists(), "the old volume's redone teardown removed the new volume's data"
        assert first == "waiting", "the claim of the other class did not wait for the old volume"
