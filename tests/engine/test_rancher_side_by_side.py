"""The migration docs/rancher.md promotes: the shipped dev stack goes up on a cluster that already
runs rancher/local-path-provisioner, beside it. Rancher's objects (as its v0.0.37 manifest makes
them: namespace `local-path-storage`, ConfigMap `local-path-config`, its service account,
ClusterRole and class `local-path` of `rancher.io/local-path`) are neither taken over, changed
nor removed, by `up` or by `destroy`, and claims of the stack's class bind through the stack's
provisioner."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from localcluster import LocalCluster, wait_for
from tests.engine.support import (
    StackFactory,
    StackNames,
    Tenant,
    api_get,
    api_request,
    shipped_stack_config,
    unique_suffix,
    volume_location,
    wait_provisioner_ready,
)

RANCHER_NAMESPACE = "local-path-storage"
RANCHER_CONFIG = {
    "nodePathMap": [
        {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/opt/local-path-provisioner"]}
    ]
}
# (collection path, object) in the order rancher's manifest creates them.
RANCHER_OBJECTS: list[tuple[str, dict[str, Any]]] = [
    ("/api/v1/namespaces", {"metadata": {"name": RANCHER_NAMESPACE}}),
    (
        f"/api/v1/namespaces/{RANCHER_NAMESPACE}/serviceaccounts",
        {"metadata": {"name": "local-path-provisioner-service-account"}},
    ),
    (
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {
            "metadata": {"name": "local-path-provisioner-role"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["nodes", "persistentvolumeclaims", "configmaps", "pods"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        },
    ),
    (
        "/apis/storage.k8s.io/v1/storageclasses",
        {
            "metadata": {"name": "local-path"},
            "provisioner": "rancher.io/local-path",
            "volumeBindingMode": "WaitForFirstConsumer",
            "reclaimPolicy": "Delete",
        },
    ),
    (
        f"/api/v1/namespaces/{RANCHER_NAMESPACE}/configmaps",
        {
            "metadata": {"name": "local-path-config"},
            "data": {
                "config.json": json.dumps(RANCHER_CONFIG),
                "setup": '#!/bin/sh\nset -eu\nmkdir -m 0777 -p "$VOL_DIR"\n',
                "teardown": '#!/bin/sh\nset -eu\nrm -rf "$VOL_DIR"\n',
                "helperPod.yaml": "apiVersion: v1\nkind: Pod\nmetadata:\n  name: helper-pod\n",
            },
        },
    ),
]


def object_path(collection: str, document: dict[str, Any]) -> str:
    return f"{collection}/{document['metadata']['name']}"


def rancher_snapshot(cluster: LocalCluster) -> dict[str, tuple[str, str]]:
    """path -> (uid, resourceVersion) of each of rancher's objects."""
    seen = {}
    for collection, document in RANCHER_OBJECTS:
        path = object_path(collection, document)
        found = api_get(cluster, path)
        assert found is not None, f"{path} is gone"
        seen[path] = (found["metadata"]["uid"], found["metadata"]["resourceVersion"])
    return seen


@pytest.fixture
def rancher(cluster: LocalCluster) -> Iterator[dict[str, tuple[str, str]]]:
    """Rancher's objects on the cluster for one test; removed at its end."""
    created: list[str] = []
    try:
        for collection, document in RANCHER_OBJECTS:
            status, answer = api_request(cluster, "POST", collection, document)
            assert status == 201, answer
            created.append(object_path(collection, document))
        yield rancher_snapshot(cluster)
    finally:
        for path in reversed(created):
            api_request(cluster, "DELETE", path)
        wait_for(
            lambda: None if api_get(cluster, f"/api/v1/namespaces/{RANCHER_NAMESPACE}") else True,
            60,
            f"namespace {RANCHER_NAMESPACE} to be gone",
        )


def test_dev_stack_goes_up_beside_rancher_and_leaves_its_objects_alone(
    stacks: StackFactory, cluster: LocalCluster, rancher: dict[str, tuple[str, str]]
) -> None:
    suffix = unique_suffix()
    names = StackNames(suffix=suffix, namespace="", provisioner_name="", class_name="")
    stack = stacks.create(shipped_stack_config("dev"), names)

    preview = stack.preview()
    assert "error" not in preview.output.lower(), preview.output
    stack.up()
    assert rancher_snapshot(cluster) == rancher

    outputs = stack.outputs()
    assert outputs["namespace"] != RANCHER_NAMESPACE
    assert "local-path" not in outputs["storageClassNames"]
    wait_provisioner_ready(cluster, outputs["namespace"])
    tenant = Tenant(cluster, outputs["storageClassNames"][0])
    tenant.claim_with_consumer("beside-rancher")
    volume = tenant.wait_bound("beside-rancher")
    annotations = volume["metadata"]["annotations"]
    assert annotations["pv.kubernetes.io/provisioned-by"] == outputs["provisionerName"]
    _, _, on_disk = volume_location(cluster, volume)
    assert on_disk.is_dir()
    tenant.delete_claim("beside-rancher")
    wait_for(lambda: None if on_disk.exists() else True, 60, "the released volume's directory")

    stack.destroy()
    assert rancher_snapshot(cluster) == rancher
