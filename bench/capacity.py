"""The burst with capacity on: what ours gets beyond the plain workspace, and how its
CSIStorageCapacity writes are counted.

With capacity on, ours runs under a provisioner name the API accepts as a CSIDriver name (a DNS
name without `/`; the plain workspace's name has one), its base path declares a budget large
enough for the whole burst on any one node, and the cluster has a CSIDriver of that name with
`storageCapacity: true`, so the real kube-scheduler filters nodes on the published objects.
The Go reference does not understand the object form of a path: it never gets this config.

Pure: the burst and the workspace do the I/O.
"""

from __future__ import annotations

import json
from typing import Any

from bench.audit import RequestCounts
from provisioner.objects.quantities import format_bytes, quantity_to_bytes

CAPACITY_PROVISIONER_NAME = "capacity.bench.local-path-storage.io"
CAPACITY_RESOURCE = "csistoragecapacities"
CAPACITY_WRITE_VERBS = frozenset({"create", "update", "patch", "delete"})
CLAIM_SIZE = "1Gi"
WRITES_METRIC = "local_path_csistoragecapacity_writes_total"


def burst_budget(claims: int, claim_size: str = CLAIM_SIZE) -> str:
    """A base path budget that holds every claim of the burst on one node, so no node is ever
    refused for room: the budget is published, never binding."""
    return format_bytes(max(claims, 1) * quantity_to_bytes(claim_size))


def capacity_config(base_path: str, budget: str) -> dict[str, Any]:
    """config.json with the object form of the base path (ours only)."""
    return {
        "nodePathMap": [
            {
                "node": "DEFAULT_PATH_FOR_NON_LISTED_NODES",
                "paths": [{"path": base_path, "capacity": budget}],
            }
        ]
    }


def declares_capacity(config_json: str) -> bool:
    """Whether a config.json uses the object form anywhere: the reference must not get one."""
    config = json.loads(config_json)
    entries = list(config.get("nodePathMap") or ())
    entries += list(config.get("storageClassConfigs", {}).values())
    for entry in entries:
        for path in entry.get("paths") or ():
            if isinstance(path, dict):
                return True
    return False


def csi_driver(name: str) -> dict[str, Any]:
    """The CSIDriver that makes kube-scheduler read the CSIStorageCapacity objects of `name`."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {"name": name},
        "spec": {
            "storageCapacity": True,
            "attachRequired": False,
            "podInfoOnMount": False,
            "volumeLifecycleModes": ["Persistent"],
        },
    }


def capacity_writes(counts: RequestCounts) -> int:
    """create/update/patch/delete requests on csistoragecapacities in an audit count."""
    total = 0
    for kind, number in counts.by_kind.items():
        verb, _, resource = kind.partition(" ")
        if resource == CAPACITY_RESOURCE and verb in CAPACITY_WRITE_VERBS:
            total += number
    return total


def counter_total(metrics_text: str, name: str) -> float:
    """The sum over all label sets of one counter in Prometheus text exposition; 0 when the
    counter has no samples yet."""
    total = 0.0
    for line in metrics_text.splitlines():
        if not line or line.startswith("#"):
            continue
        metric, _, rest = line.partition("{") if "{" in line else line.partition(" ")
        if metric.strip() != name:
            continue
        value = rest.rsplit("}", 1)[-1].split()
        if value:
            total += float(value[0])
    return total
