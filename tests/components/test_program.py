"""The whole program against the SDK's mock engine, once per stack file."""

from __future__ import annotations

import functools
from typing import Any

import pulumi
import pytest

from components import rbac
from components.naming import CONFIG_NAMESPACE
from components.program import run
from components.settings import parse_settings
from provisioner.process.app import STOP_BUDGET_SECONDS
from tests.components.mocked_engine import Registration, Run, run_mocked
from tests.components.stack_files import STACKS, engine_config, stack_engine_config, stack_file

DEPLOYMENT = "local-path-storage:index:ProvisionerDeployment"
CLASSES = "local-path-storage:index:StorageClasses"
PROVIDER = "pulumi:providers:kubernetes"
NAMESPACE = "kubernetes:core/v1:Namespace"
SERVICE_ACCOUNT = "kubernetes:core/v1:ServiceAccount"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
CLUSTER_ROLE = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"
CLUSTER_ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
KUBE_DEPLOYMENT = "kubernetes:apps/v1:Deployment"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"

DEPLOYMENT_CHILDREN = [
    (NAMESPACE, "local-path-storage-namespace"),
    (SERVICE_ACCOUNT, "local-path-storage-provisioner-sa"),
    (SERVICE_ACCOUNT, "local-path-storage-helper-sa"),
    (CLUSTER_ROLE, "local-path-storage-clusterrole"),
    (CLUSTER_ROLE_BINDING, "local-path-storage-clusterrolebinding"),
    (ROLE, "local-path-storage-role"),
    (ROLE_BINDING, "local-path-storage-rolebinding"),
    (CONFIG_MAP, "local-path-storage-config"),
    (KUBE_DEPLOYMENT, "local-path-storage-deployment"),
]
CLASS_NAMES = {
    "dev": ["local-path-storage"],
    "staging": ["local-path-storage", "local-path-retain", "fast-ssd", "shared"],
    "prod": ["local-path-storage", "local-path-retain", "shared"],
}


@functools.cache
def stack_run(stack: str) -> Run:
    result = run_mocked(stack_engine_config(stack), run, stack=stack)
    assert result.error is None, result.error
    return result


def kubernetes_objects(result: Run) -> list[Registration]:
    return [r for r in result.registrations if r.type.startswith("kubernetes:")]


@pytest.mark.parametrize("stack", STACKS)
def test_resource_graph(stack: str) -> None:
    result = stack_run(stack)
    pdb = [(PDB, "local-path-storage-pdb")] if stack == "prod" else []
    classes = [(STORAGE_CLASS, f"local-path-storage-{name}") for name in CLASS_NAMES[stack]]
    assert sorted((r.type, r.name) for r in result.registrations) == sorted(
        [
            (PROVIDER, "kubernetes"),
            (DEPLOYMENT, "local-path-storage"),
            (CLASSES, "local-path-storage"),
            *DEPLOYMENT_CHILDREN,
            *pdb,
            *classes,
        ]
    )


@pytest.mark.parametrize("stack", STACKS)
def test_parents_and_provider(stack: str) -> None:
    result = stack_run(stack)
    for component in (result.one(DEPLOYMENT), result.one(CLASSES)):
        assert component.parent_type == "pulumi:pulumi:Stack"
        assert not component.custom
    # The mock engine prefixes the stack's type to top-level URNs; the real one does not.
    provider = f"{PROVIDER}::kubernetes::kubernetes-id"
    for registration in kubernetes_objects(result):
        expected_parent = CLASSES if registration.type == STORAGE_CLASS else DEPLOYMENT
        assert (registration.parent_type, registration.parent_name) == (
            expected_parent,
            "local-path-storage",
        ), registration.name
        assert registration.provider.endswith(provider), registration.name


@pytest.mark.parametrize("stack", STACKS)
def test_labels(stack: str) -> None:
    for registration in kubernetes_objects(stack_run(stack)):
        labels = registration.inputs["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "local-path-storage"
        assert labels["app.kubernetes.io/instance"] == "local-path-storage"
        assert labels["app.kubernetes.io/part-of"] == "local-path-storage"
        assert labels["app.kubernetes.io/managed-by"] == "pulumi"


def registered_rule(rule: rbac.PolicyRule) -> dict[str, list[str]]:
    return {
        "apiGroups": [rule.api_group],
        "resources": list(rule.resources),
        "verbs": list(rule.verbs),
    }


def test_rbac_as_registered() -> None:
    result = stack_run("dev")
    assert result.one(CLUSTER_ROLE).inputs == {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {
            "name": "local-path-storage-system:provisioner",
            "labels": result.one(CLUSTER_ROLE).inputs["metadata"]["labels"],
            "annotations": {"pulumi.com/patchForce": "true"},
        },
        "rules": [registered_rule(rule) for rule in rbac.CLUSTER_RULES],
    }
    role = result.one(ROLE).inputs
    assert role["metadata"]["namespace"] == "local-path-storage-system"
    assert role["rules"] == [registered_rule(rule) for rule in rbac.NAMESPACE_RULES]
    subject = {
        "kind": "ServiceAccount",
        "name": "local-path-storage-provisioner",
        "namespace": "local-path-storage-system",
    }
    cluster_binding = result.one(CLUSTER_ROLE_BINDING).inputs
    assert cluster_binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "local-path-storage-system:provisioner",
    }
    assert cluster_binding["subjects"] == [subject]
    binding = result.one(ROLE_BINDING).inputs
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "local-path-storage-provisioner",
    }
    assert binding["subjects"] == [subject]


def test_service_accounts() -> None:
    accounts = {
        r.inputs["metadata"]["name"]: r.inputs for r in stack_run("dev").of_type(SERVICE_ACCOUNT)
    }
    assert set(accounts) == {"local-path-storage-provisioner", "local-path-storage-helper"}
    assert accounts["local-path-storage-helper"]["automountServiceAccountToken"] is False
    assert "automountServiceAccountToken" not in accounts["local-path-storage-provisioner"]


def test_namespace_allows_hostpath_helper_pods() -> None:
    metadata = stack_run("dev").one(NAMESPACE).inputs["metadata"]
    assert metadata["name"] == "local-path-storage-system"
    assert metadata["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


@pytest.mark.parametrize("stack", STACKS)
def test_config_map_holds_the_validated_files(stack: str) -> None:
    config_map = stack_run(stack).one(CONFIG_MAP).inputs
    files = parse_settings(stack_engine_config(stack)).deployment.config_files
    assert config_map["metadata"]["name"] == "local-path-config"
    assert config_map["metadata"]["namespace"] == "local-path-storage-system"
    assert config_map["data"] == files.to_data()


def pod_spec(result: Run) -> dict[str, Any]:
    spec: dict[str, Any] = result.one(KUBE_DEPLOYMENT).inputs["spec"]["template"]["spec"]
    return spec


def test_deployment_pod() -> None:
    result = stack_run("dev")
    deployment = result.one(KUBE_DEPLOYMENT).inputs
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["selector"] == {
        "matchLabels": {
            "app.kubernetes.io/name": "local-path-storage",
            "app.kubernetes.io/instance": "local-path-storage",
        }
    }
    spec = pod_spec(result)
    assert spec["terminationGracePeriodSeconds"] == 60
    assert spec["terminationGracePeriodSeconds"] > STOP_BUDGET_SECONDS
    assert spec["serviceAccountName"] == "local-path-storage-provisioner"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert "affinity" not in spec
    (container,) = spec["containers"]
    assert container["args"] == [
        "--provisioner-name=local-path-storage.io/local-path",
        "--config=/etc/config/config.json",
        "--configmap-name=local-path-config",
        "--service-account-name=local-path-storage-helper",
        "--worker-threads=8",
        "--provisioning-retry-count=15",
        "--deletion-retry-count=15",
        "--metrics-port=8080",
        "--leader-election",
    ]
    assert container["env"] == [
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
    ]
    assert container["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    # Ready as soon as it serves: a probe a second, whose first answer waits for the caches.
    assert container["startupProbe"] == {
        "httpGet": {"path": "/healthz", "port": "metrics"},
        "initialDelaySeconds": 2,
        "periodSeconds": 1,
        "timeoutSeconds": 10,
        "failureThreshold": 60,
    }
    assert "initialDelaySeconds" not in container["livenessProbe"]
    assert container["readinessProbe"]["timeoutSeconds"] == 3
    assert container["livenessProbe"]["timeoutSeconds"] == 3
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["resources"] == {
        "requests": {"cpu": "50m", "memory": "64Mi"},
        "limits": {"memory": "192Mi"},
    }


@pytest.mark.parametrize("stack", STACKS)
def test_config_is_mounted_as_a_directory_for_hot_reload(stack: str) -> None:
    result = stack_run(stack)
    spec = pod_spec(result)
    (container,) = spec["containers"]
    config_mounts = [m for m in container["volumeMounts"] if m["name"] == "config"]
    assert config_mounts == [{"name": "config", "mountPath": "/etc/config", "readOnly": True}]
    assert {"name": "config", "configMap": {"name": "local-path-config"}} in spec["volumes"]
    # No config hash on the pod template: a config edit must not roll the Deployment.
    template_metadata = result.one(KUBE_DEPLOYMENT).inputs["spec"]["template"]["metadata"]
    assert set(template_metadata) == {"labels"}


def test_config_edit_changes_the_config_map_only() -> None:
    config = dict(stack_file("dev")["config"])
    config[f"{CONFIG_NAMESPACE}:nodePathMap"] = [
        {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/data/other"]}
    ]
    edited = run_mocked(engine_config(config), run, stack="dev")
    assert edited.error is None
    original = stack_run("dev")
    assert edited.one(KUBE_DEPLOYMENT).inputs == original.one(KUBE_DEPLOYMENT).inputs
    assert edited.one(CONFIG_MAP).inputs != original.one(CONFIG_MAP).inputs


def test_prod_has_two_replicas_spread_and_a_disruption_budget() -> None:
    result = stack_run("prod")
    assert result.one(KUBE_DEPLOYMENT).inputs["spec"]["replicas"] == 2
    anti_affinity = pod_spec(result)["affinity"]["podAntiAffinity"]
    (preferred,) = anti_affinity["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert result.one(PDB).inputs["spec"] == {
        "minAvailable": 1,
        "selector": {
            "matchLabels": {
                "app.kubernetes.io/name": "local-path-storage",
                "app.kubernetes.io/instance": "local-path-storage",
            }
        },
    }
    (container,) = pod_spec(result)["containers"]
    assert "--json-logs" in container["args"]


def test_storage_classes_as_registered() -> None:
    classes = {
        r.inputs["metadata"]["name"]: r.inputs for r in stack_run("staging").of_type(STORAGE_CLASS)
    }
    assert classes["local-path-storage"] == {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": "local-path-storage",
            "labels": classes["local-path-storage"]["metadata"]["labels"],
            "annotations": {
                "storageclass.kubernetes.io/is-default-class": "true",
                "pulumi.com/patchForce": "true",
            },
        },
        "provisioner": "local-path-storage.io/local-path",
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
        "parameters": {"pathPattern": "{{ .PVC.Namespace }}/{{ .PVC.Name }}"},
        "allowVolumeExpansion": True,
    }
    assert classes["local-path-retain"]["reclaimPolicy"] == "Retain"
    assert classes["fast-ssd"]["parameters"] == {
        "nodePath": "/mnt/ssd",
        "nodeAffinityKey": "local-path-storage.io/ssd-host",
    }
    assert classes["fast-ssd"]["metadata"]["annotations"] == {
        "defaultVolumeType": "local",
        "pulumi.com/patchForce": "true",
    }
    assert classes["fast-ssd"]["mountOptions"] == ["noatime"]
    assert classes["shared"]["volumeBindingMode"] == "Immediate"
    assert classes["shared"]["metadata"]["annotations"] == {"pulumi.com/patchForce": "true"}


def test_allowed_topologies_as_registered() -> None:
    classes = {
        r.inputs["metadata"]["name"]: r.inputs for r in stack_run("prod").of_type(STORAGE_CLASS)
    }
    assert classes["local-path-retain"]["allowedTopologies"] == [
        {"matchLabelExpressions": [{"key": "node-role.example.com/database", "values": ["true"]}]}
    ]
    assert "allowedTopologies" not in classes["local-path-storage"]


@pytest.mark.parametrize("stack", STACKS)
def test_stack_outputs(stack: str) -> None:
    assert stack_run(stack).outputs == {
        "namespace": "local-path-storage-system",
        "provisionerName": "local-path-storage.io/local-path",
        "configMapName": "local-path-config",
        "storageClassNames": CLASS_NAMES[stack],
    }


def test_provider_updates_config_maps_in_place() -> None:
    assert stack_run("dev").one(PROVIDER).inputs == {"enableConfigMapMutable": "true"}


def test_cluster_access_reaches_the_provider() -> None:
    config = {
        **stack_file("dev")["config"],
        "kubernetes:kubeconfig": "/tmp/kubeconfig",
        "kubernetes:context": "local",
    }
    result = run_mocked(engine_config(config), run, stack="dev")
    assert result.error is None
    assert result.one(PROVIDER).inputs == {
        "enableConfigMapMutable": "true",
        "kubeconfig": "/tmp/kubeconfig",
        "context": "local",
    }


def test_render_mode_reaches_the_provider_without_cluster_access() -> None:
    """The provider refuses a kubeconfig in render mode; a rendering stack may keep one."""
    config = {
        **stack_file("dev")["config"],
        f"{CONFIG_NAMESPACE}:renderYamlToDirectory": "manifests-out",
        "kubernetes:kubeconfig": "/tmp/kubeconfig",
        "kubernetes:context": "local",
    }
    result = run_mocked(engine_config(config), run, stack="dev")
    assert result.error is None
    assert result.one(PROVIDER).inputs == {
        "enableConfigMapMutable": "true",
        "renderYamlToDirectory": "manifests-out",
    }
    assert result.outputs["renderedTo"] == "manifests-out"


def test_bad_config_fails_before_anything_is_registered() -> None:
    config = dict(stack_file("dev")["config"])
    config[f"{CONFIG_NAMESPACE}:nodePathMap"] = [
        {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/opt/local-path-provisioner"]},
        {"node": "worker-1", "paths": ["data"]},
    ]
    result = run_mocked(engine_config(config), run, stack="dev")
    assert isinstance(result.error, pulumi.RunError)
    assert str(result.error) == (
        'stack config local-path-storage:nodePathMap[1].paths[0]: "data" must be an absolute path'
    )
    assert result.error.__cause__ is None
    assert result.registrations == []
