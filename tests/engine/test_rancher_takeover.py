"""The takeover stack (`adopt: {from: rancher}`) on a cluster running rancher v0.0.37: rancher's
objects as its manifest makes them, volumes provisioned by rancher's real binary (run on the
host as the bench runs it: the harness runs only our image, so rancher's own Deployment pod is
kwok's fake and the binary is stopped where the scale-down would stop it).

Preview shows the imports and the scale-down; `up` keeps rancher's class and ConfigMap (same
objects, now the stack's), scales rancher's Deployment to 0 and runs ours under rancher's
name, which serves rancher's volumes (data kept, a released one removed) and binds a new claim;
rancher's service account loses its rights (its two bindings' subjects); `destroy` leaves the
class, the ConfigMap, the volumes, rancher's Deployment and its RBAC in place for the way back,
which docs/rancher.md's one patch per binding completes.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import LocalCluster, wait_for
from provisioner.provisioning.annotations import PROVISIONED_BY
from tests.engine.support import (
    StackFactory,
    StackNames,
    Tenant,
    api_get,
    api_request,
    unique_suffix,
    volume_location,
    wait_provisioner_ready,
)
from tests.provisioner.e2e.rancher_process import (
    RANCHER_SETUP,
    RANCHER_TEARDOWN,
    RancherProcess,
    labelled_helper_pod,
)

NAMESPACE = "local-path-storage"
PROVISIONER = "rancher.io/local-path"
CLASS = "local-path"
CONFIG = {
    "nodePathMap": [
        {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/opt/local-path-provisioner"]}
    ]
}
FILES = {
    "config.json": json.dumps(CONFIG),
    "setup": RANCHER_SETUP,
    "teardown": RANCHER_TEARDOWN,
    "helperPod.yaml": labelled_helper_pod(),
}
DEPLOYMENT_PATH = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/local-path-provisioner"
CLASS_PATH = f"/apis/storage.k8s.io/v1/storageclasses/{CLASS}"
CONFIG_MAP_PATH = f"/api/v1/namespaces/{NAMESPACE}/configmaps/local-path-config"
RANCHER_LABELS = {"app": "local-path-provisioner"}
RANCHER_ACCOUNT = {
    "kind": "ServiceAccount",
    "name": "local-path-provisioner-service-account",
    "namespace": NAMESPACE,
}
NO_ONE = {
    "kind": "Group",
    "apiGroup": "rbac.authorization.k8s.io",
    "name": "local-path-storage:taken-over-from-rancher",
}
RBAC = "/apis/rbac.authorization.k8s.io/v1"
CLUSTER_BINDING_PATH = f"{RBAC}/clusterrolebindings/local-path-provisioner-bind"
BINDING_PATH = f"{RBAC}/namespaces/{NAMESPACE}/rolebindings/local-path-provisioner-bind"
ROLE_PATHS = (
    f"{RBAC}/clusterroles/local-path-provisioner-role",
    f"{RBAC}/namespaces/{NAMESPACE}/roles/local-path-provisioner-role",
)


def _binding(kind: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "local-path-provisioner-bind"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": kind,
            "name": "local-path-provisioner-role",
        },
        "subjects": [RANCHER_ACCOUNT],
    }


# (collection, object) in the order rancher's v0.0.37 manifest creates them.
RANCHER_OBJECTS: list[tuple[str, dict[str, Any]]] = [
    ("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}),
    (
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts",
        {"metadata": {"name": "local-path-provisioner-service-account"}},
    ),
    (
        f"{RBAC}/namespaces/{NAMESPACE}/roles",
        {
            "metadata": {"name": "local-path-provisioner-role"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["pods"],
                    "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
                }
            ],
        },
    ),
    (
        f"{RBAC}/clusterroles",
        {
            "metadata": {"name": "local-path-provisioner-role"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["nodes", "persistentvolumeclaims", "configmaps", "pods"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": [""],
                    "resources": ["persistentvolumes"],
                    "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
                },
            ],
        },
    ),
    (f"{RBAC}/namespaces/{NAMESPACE}/rolebindings", _binding("Role")),
    (f"{RBAC}/clusterrolebindings", _binding("ClusterRole")),
    (
        f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments",
        {
            "metadata": {"name": "local-path-provisioner"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": RANCHER_LABELS},
                "template": {
                    "metadata": {"labels": RANCHER_LABELS},
                    "spec": {
                        "serviceAccountName": "local-path-provisioner-service-account",
                        "containers": [
                            {
                                "name": "local-path-provisioner",
                                "image": "docker.io/rancher/local-path-provisioner:v0.0.37",
                                "command": ["local-path-provisioner", "--debug", "start"],
                            }
                        ],
                    },
                },
            },
        },
    ),
    (
        "/apis/storage.k8s.io/v1/storageclasses",
        {
            "metadata": {"name": CLASS},
            "provisioner": PROVISIONER,
            "volumeBindingMode": "WaitForFirstConsumer",
            "reclaimPolicy": "Delete",
        },
    ),
    (
        f"/api/v1/namespaces/{NAMESPACE}/configmaps",
        {"metadata": {"name": "local-path-config"}, "data": FILES},
    ),
]


def takeover_config() -> dict[str, Any]:
    return {
        "adopt": {"from": "rancher"},
        "nodePathMap": CONFIG["nodePathMap"],
        "setupScript": RANCHER_SETUP,
        "teardownScript": RANCHER_TEARDOWN,
        "storageClasses": [
            {"name": CLASS, "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer"}
        ],
    }


@pytest.fixture
def rancher(cluster: LocalCluster, tmp_path: Path) -> Iterator[RancherProcess]:
    """rancher's objects, and its binary serving them; everything removed at the end."""
    for collection, document in RANCHER_OBJECTS:
        status, answer = api_request(cluster, "POST", collection, document)
        assert status == 201, answer
    config_dir = tmp_path / "rancher-config"
    config_dir.mkdir()
    for key, text in FILES.items():
        (config_dir / key).write_text(text)
    process = RancherProcess(
        cluster,
        config_dir,
        PROVISIONER,
        NAMESPACE,
        tmp_path / "rancher.log",
        service_account="local-path-provisioner-service-account",
    )
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop(signal.SIGKILL)
        api_request(cluster, "DELETE", CLASS_PATH)
        listed = api_get(cluster, "/api/v1/persistentvolumes") or {"items": []}
        for volume in listed["items"]:
            if volume["spec"].get("storageClassName") == CLASS:
                api_request(
                    cluster, "DELETE", f"/api/v1/persistentvolumes/{volume['metadata']['name']}"
                )
        for path in (CLUSTER_BINDING_PATH, ROLE_PATHS[0]):
            api_request(cluster, "DELETE", path)
        api_request(cluster, "DELETE", f"/api/v1/namespaces/{NAMESPACE}")
        wait_for(
            lambda: None if api_get(cluster, f"/api/v1/namespaces/{NAMESPACE}") else True,
            90,
            f"namespace {NAMESPACE} to be gone",
        )


def uid(cluster: LocalCluster, path: str) -> str:
    found = api_get(cluster, path)
    assert found is not None, f"{path} is gone"
    return str(found["metadata"]["uid"])


def test_the_takeover_stack_adopts_rancher_s_installation_and_serves_its_volumes(
    stacks: StackFactory, cluster: LocalCluster, rancher: RancherProcess
) -> None:
    tenant = Tenant(cluster, CLASS)
    for claim in ("kept", "old"):
        tenant.claim_with_consumer(claim)
    volumes = {claim: tenant.wait_bound(claim) for claim in ("kept", "old")}
    disks = {claim: volume_location(cluster, volume)[2] for claim, volume in volumes.items()}
    for claim, disk in disks.items():
        (disk / "data").write_text(claim)
    uids = {path: uid(cluster, path) for path in (CLASS_PATH, CONFIG_MAP_PATH)}
    names = StackNames(
        suffix=unique_suffix(), namespace=NAMESPACE, provisioner_name="", class_name=""
    )
    stack = stacks.create(takeover_config(), names)

    preview = stack.preview()
    assert ("kubernetes:storage.k8s.io/v1:StorageClass", f"local-path-storage-{CLASS}") in (
        preview.of("import")
    ), preview.output
    assert ("kubernetes:core/v1:ConfigMap", "local-path-storage-config") in preview.of("import")
    assert ("kubernetes:apps/v1:DeploymentPatch", "local-path-storage-rancher-scale-down") in (
        preview.of("create")
    )
    assert "adopting rancher's installation in namespace local-path-storage" in preview.output
    for patch_type in ("ClusterRoleBindingPatch", "RoleBindingPatch"):
        assert f"kubernetes:rbac.authorization.k8s.io/v1:{patch_type}" in {
            type_token for type_token, _ in preview.of("create")
        }, preview.output
    # Where the scale-down stops rancher's pod, the host process stands in for it.
    rancher.stop()
    stack.up()

    assert {path: uid(cluster, path) for path in uids} == uids
    deployment = api_get(cluster, DEPLOYMENT_PATH)
    assert deployment is not None and deployment["spec"]["replicas"] == 0
    for path in (CLUSTER_BINDING_PATH, BINDING_PATH):
        binding = api_get(cluster, path)
        assert binding is not None and binding["subjects"] == [NO_ONE], f"{path}: {binding}"
    wait_provisioner_ready(cluster, NAMESPACE)
    for claim, disk in disks.items():
        assert (disk / "data").read_text() == claim
    tenant.claim_with_consumer("new")
    new = tenant.wait_bound("new")
    assert new["metadata"]["annotations"][PROVISIONED_BY] == PROVISIONER
    tenant.delete_claim("old")
    wait_for(lambda: None if disks["old"].exists() else True, 90, "the released volume's directory")

    stack.destroy()
    assert {path: uid(cluster, path) for path in uids} == uids
    kept = api_get(cluster, f"/api/v1/persistentvolumes/{volumes['kept']['metadata']['name']}")
    assert kept is not None and kept["status"]["phase"] == "Bound"
    assert (disks["kept"] / "data").read_text() == "kept"
    assert api_get(cluster, DEPLOYMENT_PATH) is not None
    for path in ROLE_PATHS:
        assert api_get(cluster, path) is not None, f"{path} is kept for the way back"
    for path in (CLUSTER_BINDING_PATH, BINDING_PATH):
        binding = api_get(cluster, path)
        assert binding is not None and binding["subjects"] == [NO_ONE], binding
        # The way back, as docs/rancher.md ("The way back") gives it.
        status, answer = api_request(
            cluster,
            "PATCH",
            path,
            {"subjects": [RANCHER_ACCOUNT]},
            "application/merge-patch+json",
        )
        assert status == 200 and answer["subjects"] == [RANCHER_ACCOUNT], answer
