"""Plain resource dicts, shaped as the Kubernetes provider's inputs the policies receive."""

from __future__ import annotations

import json
from typing import Any

import yaml

from policy.resources import Resource
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
)

GOOD_CONFIG = {
    "nodePathMap": [
        {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/opt/local-path-provisioner"]}
    ]
}
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
CLUSTER_ROLE = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"
ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
CLUSTER_ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
PINNED_HELPER_POD = DEFAULT_HELPER_POD_YAML.replace("image: busybox", "image: busybox:1.37.0")


def config_map(
    config: Any = None, helper_pod: str = PINNED_HELPER_POD, name: str = "local-path-config"
) -> Resource:
    text = config if isinstance(config, str) else json.dumps(config or GOOD_CONFIG)
    data = {
        "config.json": text,
        "setup": DEFAULT_SETUP_SCRIPT,
        "teardown": DEFAULT_TEARDOWN_SCRIPT,
        "helperPod.yaml": helper_pod,
    }
    return Resource(CONFIG_MAP, {"metadata": {"name": name}, "data": data}, f"urn::cm::{name}")


def helper_pod(**container: Any) -> str:
    template = yaml.safe_load(PINNED_HELPER_POD)
    template["spec"]["containers"][0].update(container)
    return yaml.safe_dump(template)


def storage_class(
    name: str = "local-path",
    *,
    default: bool = False,
    reclaim_policy: str | None = None,
    **parameters: str,
) -> Resource:
    props: dict[str, Any] = {
        "metadata": {
            "name": name,
            "annotations": {"storageclass.kubernetes.io/is-default-class": str(default).lower()},
        },
        "provisioner": "local-path-storage.io/local-path",
        "parameters": parameters,
    }
    if reclaim_policy is not None:
        props["reclaimPolicy"] = reclaim_policy
    return Resource(STORAGE_CLASS, props, f"urn::sc::{name}")


def deployment(
    *,
    replicas: float = 2.0,
    args: tuple[str, ...] = ("--leader-election",),
    memory_limit: str | None = "192Mi",
    env: tuple[dict[str, Any], ...] = (),
) -> Resource:
    limits = {"memory": memory_limit} if memory_limit else {}
    container = {
        "name": "provisioner",
        "image": "local-path-storage/provisioner:0.1.0",
        "command": ["local-path-storage-provisioner"],
        "args": ["--provisioner-name=local-path-storage.io/local-path", *args],
        "env": list(env),
        "resources": {"requests": {"memory": "64Mi"}, "limits": limits},
    }
    props = {
        "metadata": {"name": "local-path-storage-provisioner"},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [container]}}},
    }
    return Resource(DEPLOYMENT, props, "urn::deployment")


def cluster_role(*rules: dict[str, Any], kind: str = CLUSTER_ROLE) -> Resource:
    return Resource(kind, {"metadata": {"name": "lps:provisioner"}, "rules": list(rules)}, "urn::r")
