"""`pulumi up` of a stack onto real nodes, as docs/install.md does on a user's cluster:
the Deployment's image pulled from the local registry by digest, run by a real kubelet with
in-cluster configuration (the `kubernetes` Service's address and its service-account token),
and a claim of the stack's class bound on a real node by it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from localcluster import LocalCluster
from tests.engine.support import StackFactory, Tenant, volume_location, wait_provisioner_ready
from tests.provisioner.e2e.real_nodes.support import REAL_NODES, real_node_cluster, real_nodes

pytestmark = pytest.mark.realnode


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """This module's cluster: real-1 and real-2 only (it replaces the session's kwok cluster
    for the `stacks` fixture)."""
    with real_node_cluster() as started:
        yield started


def test_the_stack_s_provisioner_from_the_registry_binds_a_claim_on_a_real_node(
    stacks: StackFactory, cluster: LocalCluster
) -> None:
    real = real_nodes(cluster)
    assert real.provisioner is not None
    stack = stacks.create()
    stack.set_config("image", real.provisioner.by_digest)
    stack.up()
    (pod,) = wait_provisioner_ready(cluster, stack.names.namespace, timeout=120)

    assert pod["spec"]["nodeName"] in REAL_NODES
    (status,) = pod["status"]["containerStatuses"]
    assert status["containerID"].startswith("containerd://"), status
    registry_image = f"{real.registry.address}/local-path-storage/provisioner"
    assert status["imageID"] == f"{registry_image}@{real.provisioner.digest}", status
    # In-cluster configuration: no kubeconfig is given, the token is the kubelet's projection.
    container = pod["spec"]["containers"][0]
    assert not any("kubeconfig" in arg for arg in container.get("args") or []), container
    assert not any(env["name"] == "KUBECONFIG" for env in container.get("env") or [])

    tenant = Tenant(cluster, stack.names.class_name)
    tenant.claim_with_consumer("data")
    node, path, on_disk = volume_location(cluster, tenant.wait_bound("data"))
    assert node in REAL_NODES
    assert path.startswith("/opt/local-path-provisioner/")
    assert on_disk.is_dir()
    others = [other for other in REAL_NODES if other != node]
    assert not any((cluster.node_dir(other) / path.lstrip("/")).exists() for other in others)
