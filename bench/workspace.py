"""What both implementations get in a cluster before they start: the same namespace, helper
service account, ConfigMap (config.json, setup, teardown, helperPod.yaml), config directory on
disk and StorageClasses, under one provisioner name.

The helper template carries the harness's helper label, so the harness runs rancher's helper
pods for real too (rancher keeps a template's labels; ours adds the label itself anyway).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.api import RawApi
from localcluster import HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE, LocalCluster
from provisioner.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
)

PROVISIONER_NAME = "bench.local-path-storage.io/local-path"
PROVISIONER_NAMESPACE = "lps-bench"
CLAIM_NAMESPACE = "bench-claims"
HELPER_SERVICE_ACCOUNT = "local-path-helper"
CONFIGMAP = "local-path-config"
BASE_PATH = "/opt/local-path-provisioner"
BURST_CLASS = "bench-local-path"
SCALE_CLASS = "bench-local-path-retain"


def _labelled_helper_template() -> str:
    """rancher's default helperPod.yaml with the harness's helper label added."""
    template = yaml.safe_load(DEFAULT_HELPER_POD_YAML)
    template["metadata"].setdefault("labels", {})[HELPER_POD_LABEL] = HELPER_POD_LABEL_VALUE
    return str(yaml.safe_dump(template, sort_keys=False))


HELPER_POD_YAML = _labelled_helper_template()


@dataclass(frozen=True)
class Workspace:
    cluster: LocalCluster
    config_dir: Path

    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.json"

    @property
    def helper_pod_file(self) -> Path:
        return self.config_dir / "helperPod.yaml"


def config_files() -> dict[str, str]:
    config = {"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [BASE_PATH]}]}
    return {
        "config.json": json.dumps(config),
        "setup": DEFAULT_SETUP_SCRIPT,
        "teardown": DEFAULT_TEARDOWN_SCRIPT,
        "helperPod.yaml": HELPER_POD_YAML,
    }


def prepare_workspace(cluster: LocalCluster, api: RawApi, work_dir: Path) -> Workspace:
    files = config_files()
    config_dir = work_dir / "config"
    config_dir.mkdir(parents=True, exist_ok=True)
    for key, text in files.items():
        (config_dir / key).write_text(text)
    cluster.create_namespace(PROVISIONER_NAMESPACE)
    cluster.create_namespace(CLAIM_NAMESPACE)
    namespaced = f"/api/v1/namespaces/{PROVISIONER_NAMESPACE}"
    api.create(
        f"{namespaced}/serviceaccounts",
        {"metadata": {"name": HELPER_SERVICE_ACCOUNT}, "automountServiceAccountToken": False},
    )
    api.create(f"{namespaced}/configmaps", {"metadata": {"name": CONFIGMAP}, "data": files})
    for name, policy in ((BURST_CLASS, "Delete"), (SCALE_CLASS, "Retain")):
        api.create(
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "metadata": {"name": name},
                "provisioner": PROVISIONER_NAME,
                "reclaimPolicy": policy,
                "volumeBindingMode": "WaitForFirstConsumer",
            },
        )
    return Workspace(cluster, config_dir)


def volume_directories(cluster: LocalCluster) -> int:
    """How many volume directories exist on all nodes' disks."""
    count = 0
    for node in cluster.nodes:
        base = cluster.node_dir(node) / BASE_PATH.lstrip("/")
        if base.is_dir():
            count += sum(1 for _ in base.iterdir())
    return count
