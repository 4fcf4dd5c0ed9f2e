"""A bad stack value fails `pulumi preview` with one `error:` line that names the key path, and
the cluster is left exactly as it was (the deployed stack's objects untouched, nothing new)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from localcluster import LocalCluster
from scripts.pulumi_engine import PulumiEngine
from tests.engine.support import (
    EngineStack,
    StackFactory,
    api_get,
    base_config,
    error_lines,
)

PREFIX = "error: stack config local-path-storage:"

# (id, change to the stack's config, the key path the error must name)
BAD_VALUES: list[tuple[str, dict[str, Any], str]] = [
    (
        "relative path",
        {"nodePathMap": [{"node": "n1", "paths": ["data"]}]},
        "nodePathMap[0].paths[0]",
    ),
    ("reclaim policy", {"class": {"reclaimPolicy": "Recycle"}}, "storageClasses[0].reclaimPolicy"),
    (
        "Immediate binding on node paths",
        {"class": {"volumeBindingMode": "Immediate"}},
        "storageClasses[0].volumeBindingMode",
    ),
    (
        "escaping pathPattern",
        {"class": {"parameters": {"pathPattern": "{{ .PVC.Namespace }}/{{ .PVC.Name }}/../../x"}}},
        "storageClasses[0].parameters.pathPattern",
    ),
    (
        "nodePath on no node",
        {"class": {"parameters": {"nodePath": "/mnt/x"}}},
        "storageClasses[0].parameters.nodePath",
    ),
    (
        "permPattern as a number",
        {"class": {"parameters": {"permPattern": 504}}},
        "storageClasses[0].parameters.permPattern",
    ),
    (
        "unsafe helper template",
        {
            "helperPodTemplate": {
                "apiVersion": "v1",
                "kind": "Pod",
                "spec": {"hostNetwork": True, "containers": [{"name": "h", "image": "busybox"}]},
            }
        },
        "helperPodTemplate",
    ),
    ("misspelt key", {"nodePathmap": []}, "nodePathmap"),
    ("no replicas", {"replicas": 0}, "replicas"),
    ("namespace name", {"namespace": "Local_Path"}, "namespace"),
    ("metrics port", {"metricsPort": 70000}, "metricsPort"),
    ("memory quantity", {"memoryLimit": "lots"}, "memoryLimit"),
    ("provisioner name", {"provisionerName": "not a name!"}, "provisionerName"),
    ("two default classes", {"extraDefaultClass": True}, "storageClasses[1].isDefault"),
    (
        "one directory shared and a node path",
        {
            "nodePathMap": [],
            "storageClassConfigs": {
                "shared-twin": {"sharedFileSystemPath": "/opt/lps-same"},
                "node-twin": {
                    "nodePathMap": [
                        {"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["/opt/lps-same"]}
                    ]
                },
            },
        },
        'storageClassConfigs["node-twin"].nodePathMap[0].paths[0]',
    ),
    (
        "one directory under two node affinity keys",
        {"extraClass": {"name": "by-disk", "parameters": {"nodeAffinityKey": "example.com/disk"}}},
        "storageClasses[1].parameters.nodeAffinityKey",
    ),
    (
        "csi: another volume type",
        {"class": {"volumeType": "hostPath"}},
        "storageClasses[0].volumeType",
    ),
    (
        "csi: a default volume type too",
        {"class": {"volumeType": "csi", "defaultVolumeType": "local"}},
        "storageClasses[0].defaultVolumeType",
    ),
    (
        "csi: a node plugin key",
        {"class": {"volumeType": "csi"}, "csiNodePlugin": {"kubeletDirectory": "var/lib/kubelet"}},
        "csiNodePlugin.kubeletDirectory",
    ),
]


def with_change(config: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    changed = copy.deepcopy(config)
    for key, value in change.items():
        if key == "class":
            changed["storageClasses"][0].update(value)
        elif key == "extraDefaultClass":
            changed["storageClasses"][0]["isDefault"] = True
            changed["storageClasses"].append({"name": "second-default", "isDefault": True})
        elif key == "extraClass":
            changed["storageClasses"].append(value)
        else:
            changed[key] = value
    return changed


def snapshot(cluster: LocalCluster, namespace: str) -> dict[str, str]:
    """name -> resourceVersion of every object a stack could create or change."""
    collections = [
        "/api/v1/namespaces",
        "/apis/storage.k8s.io/v1/storageclasses",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        f"/api/v1/namespaces/{namespace}/configmaps",
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        f"/apis/apps/v1/namespaces/{namespace}/deployments",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
    ]
    seen: dict[str, str] = {}
    for collection in collections:
        listed = api_get(cluster, collection)
        assert listed is not None
        for item in listed["items"]:
            metadata = item["metadata"]
            seen[f"{collection}/{metadata['name']}"] = metadata["resourceVersion"]
    return seen


@pytest.fixture(scope="module")
def deployed(
    pulumi_engine: PulumiEngine,
    cluster: LocalCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[EngineStack]:
    """One stack, up once; each test previews a bad version of its config."""
    work = tmp_path_factory.mktemp("invalid-config")
    factory = StackFactory(pulumi_engine, cluster, work, Path(work / "state"))
    stack = factory.create()
    stack.up()
    yield stack
    factory.cleanup()


@pytest.mark.parametrize(
    ("change", "key_path"),
    [pytest.param(change, key_path, id=name) for name, change, key_path in BAD_VALUES],
)
def test_bad_value_fails_preview_with_one_line_and_touches_nothing(
    deployed: EngineStack, cluster: LocalCluster, change: dict[str, Any], key_path: str
) -> None:
    good_file = deployed.stack_file.read_text(encoding="utf-8")
    document = yaml.safe_load(good_file)
    config = {
        key.split(":", 1)[1]: value
        for key, value in document["config"].items()
        if key.startswith("local-path-storage:")
    }
    assert config.keys() >= base_config(deployed.names).keys()
    bad = with_change(config, change)
    for key, value in bad.items():
        document["config"][f"local-path-storage:{key}"] = value
    before = snapshot(cluster, deployed.names.namespace)
    deployed.stack_file.write_text(yaml.safe_dump(document), encoding="utf-8")
    try:
        output = deployed.failed_preview()
    finally:
        deployed.stack_file.write_text(good_file, encoding="utf-8")

    errors = error_lines(output)
    assert len(errors) == 1, output
    assert errors[0].startswith(f"{PREFIX}{key_path}: "), errors[0]
    assert snapshot(cluster, deployed.names.namespace) == before
