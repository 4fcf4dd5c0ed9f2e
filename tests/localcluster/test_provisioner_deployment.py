"""End to end through the image table: the provisioner's Deployment, as components/ declares
it (namespace, accounts, RBAC from components.rbac, ConfigMap, Deployment), runs the real
`local-path-storage-provisioner` in a pod; a WaitForFirstConsumer claim binds and its
directory appears on the node; releasing it removes the directory."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from components import naming, rbac
from localcluster import LocalCluster, wait_for
from localcluster.raw_api import call_json, manifest
from provisioner.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
)
from tests.localcluster.image_pods import container_status, is_ready, log_of

pytestmark = pytest.mark.cluster

IMAGE = naming.DEFAULT_IMAGE  # local-path-storage/provisioner:0.1.0, the image-table default
NODE_PATH = "/opt/lps-deployed"


def _rules(rules: tuple[rbac.PolicyRule, ...]) -> list[dict[str, Any]]:
    return [
        {
            "apiGroups": [rule.api_group],
            "resources": list(rule.resources),
            "verbs": list(rule.verbs),
        }
        for rule in rules
    ]


def _pod_template(provisioner_name: str) -> dict[str, Any]:
    """components/deployment.py's pod template, spelled as the API spells it."""
    arguments = [
        f"--provisioner-name={provisioner_name}",
        f"--config={naming.CONFIG_DIRECTORY}/config.json",
        f"--configmap-name={naming.CONFIG_MAP_NAME}",
        f"--service-account-name={naming.HELPER_SERVICE_ACCOUNT}",
        "--worker-threads=2",
        "--metrics-port=8080",
        "--leader-election",
    ]
    container = {
        "name": "provisioner",
        "image": IMAGE,
        "command": ["local-path-storage-provisioner"],
        "args": arguments,
        "env": [
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            }
        ],
        "ports": [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}],
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "metrics"},
            "initialDelaySeconds": 5,
            "periodSeconds": 10,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "metrics"},
            "periodSeconds": 1,
            "failureThreshold": 2,
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "config", "mountPath": naming.CONFIG_DIRECTORY, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    return {
        "metadata": {"labels": {"app": "provisioner"}},
        "spec": {
            "serviceAccountName": naming.PROVISIONER_SERVICE_ACCOUNT,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [container],
            "volumes": [
                {"name": "config", "configMap": {"name": naming.CONFIG_MAP_NAME}},
                {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}},
            ],
        },
    }


class Installation:
    """The objects components/deployment.py and a StorageClass declare, created for real."""

    def __init__(self, cluster: LocalCluster) -> None:
        suffix = uuid.uuid4().hex[:6]
        self.cluster = cluster
        self.namespace = f"deployed-{suffix}"
        self.provisioner_name = f"deployed-{suffix}.lps.io/local-path"
        self.storage_class = f"deployed-{suffix}"
        self.cluster_scoped = naming.cluster_scoped_name(self.namespace)

    def create(self) -> None:
        core, access = self.cluster.core_v1(), self.cluster.rbac_v1()
        namespace, account = self.namespace, naming.PROVISIONER_SERVICE_ACCOUNT
        labels = {"pod-security.kubernetes.io/enforce": "privileged"}
        core.create_namespace(manifest({"metadata": {"name": namespace, "labels": labels}}))
        core.create_namespaced_service_account(namespace, manifest({"metadata": {"name": account}}))
        helper = {"metadata": {"name": naming.HELPER_SERVICE_ACCOUNT}}
        core.create_namespaced_service_account(
            namespace, manifest({**helper, "automountServiceAccountToken": False})
        )
        subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
        access.create_cluster_role(
            manifest(
                {"metadata": {"name": self.cluster_scoped}, "rules": _rules(rbac.CLUSTER_RULES)}
            )
        )
        access.create_cluster_role_binding(
            manifest(
                {
                    "metadata": {"name": self.cluster_scoped},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": self.cluster_scoped,
                    },
                    "subjects": [subject],
                }
            )
        )
        access.create_namespaced_role(
            namespace,
            manifest({"metadata": {"name": account}, "rules": _rules(rbac.NAMESPACE_RULES)}),
        )
        access.create_namespaced_role_binding(
            namespace,
            manifest(
                {
                    "metadata": {"name": account},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": account,
                    },
                    "subjects": [subject],
                }
            ),
        )
        config = {
            "nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [NODE_PATH]}]
        }
        data = {
            "config.json": json.dumps(config),
            "setup": DEFAULT_SETUP_SCRIPT,
            "teardown": DEFAULT_TEARDOWN_SCRIPT,
            "helperPod.yaml": DEFAULT_HELPER_POD_YAML,
        }
        core.create_namespaced_config_map(
            namespace, manifest({"metadata": {"name": naming.CONFIG_MAP_NAME}, "data": data})
        )
        self.cluster.storage_v1().create_storage_class(
            manifest(
                {
                    "metadata": {"name": self.storage_class},
                    "provisioner": self.provisioner_name,
                    "reclaimPolicy": "Delete",
                    "volumeBindingMode": "WaitForFirstConsumer",
                }
            )
        )
        deployment = {
            "metadata": {"name": "local-path-storage-provisioner"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "provisioner"}},
                "template": _pod_template(self.provisioner_name),
            },
        }
        client.AppsV1Api(self.cluster.admin_client).create_namespaced_deployment(
            namespace, manifest(deployment)
        )

    def delete(self) -> None:
        core, storage, access = (
            self.cluster.core_v1(),
            self.cluster.storage_v1(),
            self.cluster.rbac_v1(),
        )
        removals: list[Callable[[], object]] = [
            lambda: core.delete_namespace(self.namespace),
            lambda: storage.delete_storage_class(self.storage_class),
            lambda: access.delete_cluster_role_binding(self.cluster_scoped),
            lambda: access.delete_cluster_role(self.cluster_scoped),
        ]
        for remove in removals:
            try:
                remove()
            except ApiException as error:
                if error.status != 404:
                    raise


@pytest.fixture
def installation(cluster: LocalCluster) -> Iterator[Installation]:
    installed = Installation(cluster)
    try:
        installed.create()
        yield installed
    finally:
        installed.delete()


def test_the_deployed_provisioner_runs_in_its_pod_and_binds_a_claim(
    cluster: LocalCluster, installation: Installation
) -> None:
    core, namespace = cluster.core_v1(), installation.namespace

    def provisioner_pod() -> dict[str, Any] | None:
        pods = call_json(core.list_namespaced_pod, namespace, label_selector="app=provisioner")
        ready = [found for found in pods["items"] if is_ready(found)]
        return ready[0] if ready else None

    running = wait_for(provisioner_pod, 120, "the provisioner's pod to be Ready")
    assert container_status(running)["restartCount"] == 0
    claim = {
        "metadata": {"name": "data"},
        "spec": {
            "storageClassName": installation.storage_class,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    core.create_namespaced_persistent_volume_claim(namespace, manifest(claim))
    consumer = {
        "metadata": {"name": "app"},
        "spec": {
            "containers": [{"name": "app", "image": "registry.invalid/app:1"}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
        },
    }
    core.create_namespaced_pod(namespace, manifest(consumer))
    log = log_of(cluster, running)

    def bound() -> str | None:
        found = call_json(core.read_namespaced_persistent_volume_claim, "data", namespace)
        if found.get("status", {}).get("phase") == "Bound":
            return str(found["spec"]["volumeName"])
        return None

    try:
        volume_name = wait_for(bound, 90, "the claim to bind")
    except TimeoutError:
        pytest.fail(f"claim not bound; provisioner log:\n{log.read_text()[-3000:]}")
    volume = call_json(core.read_persistent_volume, volume_name)
    node = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
    path = (volume["spec"].get("hostPath") or volume["spec"].get("local"))["path"]
    assert path.startswith(f"{NODE_PATH}/")
    directory = cluster.node_dir(node["values"][0]) / path.lstrip("/")
    assert directory.is_dir()
    output = log.read_text()
    assert "credentials: in-cluster service account" in output, output[-3000:]
    assert "403" not in output, output[-3000:]

    core.delete_namespaced_pod("app", namespace, grace_period_seconds=0)
    core.delete_namespaced_persistent_volume_claim("data", namespace)

    def removed() -> bool | None:
        return True if not directory.exists() else None

    wait_for(removed, 90, f"{directory} to be removed after the claim is released")
