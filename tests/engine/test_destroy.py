"""`pulumi destroy` removes everything the stack made (its namespace with the provisioner,
the cluster-scoped RBAC, the StorageClasses) and nothing it did not: bound volumes, their
PersistentVolume objects and the data in their directories survive."""

from __future__ import annotations

from localcluster import LocalCluster, wait_for
from tests.engine.support import (
    StackFactory,
    api_get,
    up_with_a_bound_claim,
    volume_location,
)


def test_destroy_removes_the_stack_and_keeps_bound_volumes_and_their_data(
    stacks: StackFactory, cluster: LocalCluster
) -> None:
    stack, _, volume = up_with_a_bound_claim(stacks, "keep-me")
    names = stack.names
    _, _, on_disk = volume_location(cluster, volume)
    (on_disk / "data.txt").write_text("the tenant's data\n", encoding="utf-8")

    destroyed = stack.destroy()
    # The stack, its 2 components, 10 objects and the kubernetes provider.
    assert destroyed.ops() == {"delete": 14}

    cluster_role = f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{names.namespace}:provisioner"
    binding = (
        f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{names.namespace}:provisioner"
    )
    for path in (
        f"/apis/storage.k8s.io/v1/storageclasses/{names.class_name}",
        cluster_role,
        binding,
    ):
        assert api_get(cluster, path) is None, path
    wait_for(
        lambda: True if api_get(cluster, f"/api/v1/namespaces/{names.namespace}") is None else None,
        60,
        f"namespace {names.namespace} to be gone",
    )

    survivor = api_get(cluster, f"/api/v1/persistentvolumes/{volume['metadata']['name']}")
    assert survivor is not None
    assert survivor["status"]["phase"] == "Bound"
    assert (on_disk / "data.txt").read_text(encoding="utf-8") == "the tenant's data\n"
