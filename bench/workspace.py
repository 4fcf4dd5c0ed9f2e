"""What both implementations get in a cluster before they start: the same namespace, helper
service account, ConfigMap (config.json, setup, teardown, helperPod.yaml), config directory on
disk and StorageClasses, under one provisioner name.

Ours with capacity on (`capacity_budget`) gets its own provisioner name (a valid CSIDriver
name), a budget on its base path and the CSIDriver; see `bench.capacity`. Ours with CSI volumes
(`csi`) gets its own short provisioner name, classes with `volumeType: csi` and its driver's
CSIDriver; see `bench.csi`. Never the reference.

The helper template carries the harness's helper label, so the harness runs rancher's helper
pods for real too (rancher keeps a template's labels; ours adds the label itself anyway).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.api import RawApi
from bench.capacity import CAPACITY_PROVISIONER_NAME, capacity_config, csi_driver
from bench.csi import CSI_CLASS_PARAMETERS, CSI_PROVISIONER_NAME
from bench.csi import csi_driver as csi_volumes_driver
from localcluster import HELPER_POD_LABEL, HELPER_POD_LABEL_VALUE, LocalCluster
from provisioner.configuration.config import (
    DEFAULT_HELPER_POD_YAML,
    DEFAULT_SETUP_SCRIPT,
    DEFAULT_TEARDOWN_SCRIPT,
)
from provisioner.provisioning.fresh_directory import OWNERS_DIR

PROVISIONER_NAME = "bench.local-path-storage.io/local-path"
PROVISIONER_NAMESPACE = "lps-bench"
CLAIM_NAMESPACE = "bench-claims"
HELPER_SERVICE_ACCOUNT = "local-path-helper"
CONFIGMAP = "local-path-config"
BASE_PATH = "/opt/local-path-provisioner"
BURST_CLASS = "bench-local-path"
SCALE_CLASS = "bench-local-path-retain"
CLASSES = ((BURST_CLASS, "Delete"), (SCALE_CLASS, "Retain"))


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
    provisioner_name: str = PROVISIONER_NAME
    capacity_budget: str | None = None
    """The budget on the base path when capacity is on (ours only), else None."""
    csi: bool = False
    """The classes make CSI volumes (ours only)."""

    @property
    def config_file(self) -> Path:
        return self.config_dir / "config.json"

    @property
    def helper_pod_file(self) -> Path:
        return self.config_dir / "helperPod.yaml"


def config_files(capacity_budget: str | None = None) -> dict[str, str]:
    config: dict[str, object] = {
        "nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": [BASE_PATH]}]
    }
    if capacity_budget is not None:
        config = capacity_config(BASE_PATH, capacity_budget)
    return {
        "config.json": json.dumps(config),
        "setup": DEFAULT_SETUP_SCRIPT,
        "teardown": DEFAULT_TEARDOWN_SCRIPT,
        "helperPod.yaml": HELPER_POD_YAML,
    }


def prepare_workspace(
    cluster: LocalCluster,
    api: RawApi,
    work_dir: Path,
    capacity_budget: str | None = None,
    *,
    csi: bool = False,
) -> Workspace:
    """With `capacity_budget`, the capacity-on workspace: budget, own name and CSIDriver; with
    `csi`, the CSI volumes' workspace: own name, `volumeType: csi` classes and CSIDriver."""
    if csi and capacity_budget is not None:
        raise ValueError("capacity and CSI volumes are benchmarked apart")
    name = PROVISIONER_NAME
    if capacity_budget is not None:
        name = CAPACITY_PROVISIONER_NAME
    if csi:
        name = CSI_PROVISIONER_NAME
    files = config_files(capacity_budget)
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
    for class_name, policy in CLASSES:
        api.create(
            "/apis/storage.k8s.io/v1/storageclasses",
            {
                "metadata": {"name": class_name},
                "provisioner": name,
                "reclaimPolicy": policy,
                "volumeBindingMode": "WaitForFirstConsumer",
                **({"parameters": CSI_CLASS_PARAMETERS} if csi else {}),
            },
        )
    if capacity_budget is not None:
        api.create("/apis/storage.k8s.io/v1/csidrivers", csi_driver(name))
    if csi:
        api.create("/apis/storage.k8s.io/v1/csidrivers", csi_volumes_driver(name))
    return Workspace(cluster, config_dir, name, capacity_budget, csi)


def volume_directories(cluster: LocalCluster) -> int:
    """How many volume directories exist on all nodes' disks: not the owner markers'
    directory, which `prepare` makes (always, for a CSI volume) and keeps."""
    count = 0
    for node in cluster.nodes:
        base = cluster.node_dir(node) / BASE_PATH.lstrip("/")
        if base.is_dir():
            count += sum(1 for entry in base.iterdir() if entry.name != OWNERS_DIR)
    return count
