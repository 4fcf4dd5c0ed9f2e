"""Render mode, the route for Argo CD or Flux users: `pulumi up` with `renderYamlToDirectory`
writes plain manifests and contacts no cluster, whether or not the stack also sets
`kubernetes:kubeconfig`; applied to a cluster the stack never touched, they give a running
provisioner that binds a claim."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import utils

from localcluster import LocalCluster
from tests.engine.support import (
    StackFactory,
    StackNames,
    Tenant,
    api_get,
    base_config,
    volume_location,
    wait_provisioner_ready,
)


def rendered_documents(directory: Path) -> list[dict[str, Any]]:
    documents: list[dict[str, Any]] = []
    for path in sorted(directory.rglob("*.yaml")):
        documents.extend(doc for doc in yaml.safe_load_all(path.read_text("utf-8")) if doc)
    return documents


def apply_in_order(cluster: LocalCluster, documents: list[dict[str, Any]]) -> None:
    """Namespaces first, as `kubectl apply -R -f` users order them (or Argo CD's sync waves)."""
    ordered = sorted(documents, key=lambda doc: doc["kind"] != "Namespace")
    utils.create_from_yaml(cluster.admin_client, yaml_objects=ordered)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("with_kubeconfig", [True, False], ids=["kubeconfig-set", "no-kubeconfig"])
def test_rendered_manifests_deploy_a_working_provisioner(
    stacks: StackFactory, cluster: LocalCluster, tmp_path: Path, with_kubeconfig: bool
) -> None:
    names = StackNames.fresh()
    out = tmp_path / "manifests-out"
    config = {**base_config(names), "renderYamlToDirectory": str(out)}
    stack = stacks.create(config, names, kubeconfig=with_kubeconfig)

    stack.up()
    assert stack.outputs()["renderedTo"] == str(out)
    # Nothing reached the cluster.
    assert api_get(cluster, f"/api/v1/namespaces/{names.namespace}") is None
    documents = rendered_documents(out)
    kinds = sorted(doc["kind"] for doc in documents)
    assert kinds == sorted(
        [
            "Namespace",
            "ServiceAccount",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "ConfigMap",
            "Deployment",
            "StorageClass",
        ]
    )

    apply_in_order(cluster, documents)
    try:
        wait_provisioner_ready(cluster, names.namespace)
        tenant = Tenant(cluster, names.class_name)
        tenant.claim_with_consumer("from-rendered")
        _, path, on_disk = volume_location(cluster, tenant.wait_bound("from-rendered"))
        assert path.startswith("/opt/local-path-provisioner/")
        assert on_disk.is_dir()
    finally:
        cluster.core_v1().delete_namespace(names.namespace)
        cluster.storage_v1().delete_storage_class(names.class_name)
        rbac = cluster.rbac_v1()
        rbac.delete_cluster_role_binding(f"{names.namespace}:provisioner")
        rbac.delete_cluster_role(f"{names.namespace}:provisioner")
