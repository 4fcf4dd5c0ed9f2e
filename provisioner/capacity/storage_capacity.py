"""The CSIStorageCapacity objects the scheduler should see: one per (node, StorageClass of
ours), carrying the free budget of that node's best base path for the class.

kube-scheduler's volume binding consults these objects only for a provisioner whose CSIDriver
says `storageCapacity: true`, and then a node with no matching object counts as having no room
at all. So once we publish, every node a class can use gets an object: a path without a
`capacity` is published as `UNLIMITED_BYTES`, and a node the class cannot use (config.json
serves no path there) gets none, which keeps the scheduler off it. We publish when any base
path declares a capacity, or when our CSIDriver asks for capacity (else nothing, and what we
published before is deleted).

Pure: the publisher in `shell/capacity_publisher` lists what exists and writes only the
differences `capacity_changes` returns.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from provisioner.configuration.config import DEFAULT_NODE_AFFINITY_KEY, ProvisionerConfig
from provisioner.objects.quantities import format_bytes, quantity_to_bytes
from provisioner.objects.records import NodeRecord, StorageClassRecord
from provisioner.provisioning.claims import candidate_base_paths
from provisioner.provisioning.paths import PathEntry, best_free_bytes, committed_bytes, path_rooms

CAPACITY_OWNER_LABEL = "local-path-storage.io/capacity-owner"
"""On every CSIStorageCapacity we publish: its value identifies the provisioner name, and only
objects carrying it are ever updated or deleted."""
HOSTNAME_LABEL = DEFAULT_NODE_AFFINITY_KEY
_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class CapacityObject:
    """What one CSIStorageCapacity says (the part we compare and write)."""

    name: str
    hostname: str
    storage_class: str
    capacity_bytes: int


@dataclass(frozen=True, slots=True)
class CapacityChanges:
    create: tuple[CapacityObject, ...] = ()
    update: tuple[CapacityObject, ...] = ()
    delete: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.create) + len(self.update) + len(self.delete)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def owner_label_value(provisioner_name: str) -> str:
    """A valid label value naming the provisioner: readable, made unique by a digest."""
    readable = _LABEL_UNSAFE.sub("-", provisioner_name).strip("-._")[:45]
    return f"{readable}-{_digest(provisioner_name)[:8]}" if readable else _digest(provisioner_name)


def capacity_object_name(provisioner_name: str, node_name: str, class_name: str) -> str:
    """Deterministic, so every leader computes the same set and writes nothing new."""
    return f"lps-{_digest(provisioner_name, node_name, class_name)}"


def desired_capacities(
    config: ProvisionerConfig,
    classes: Iterable[StorageClassRecord],
    nodes: Mapping[str, NodeRecord],
    entries: Iterable[PathEntry],
    *,
    provisioner_name: str,
    driver_wants_capacity: bool = False,
) -> dict[str, CapacityObject]:
    """Name -> object for every (node, class of ours) the class can use; {} when we do not
    publish (no budget anywhere and our CSIDriver does not ask)."""
    if not (config.declares_capacity() or driver_wants_capacity):
        return {}
    by_node: dict[str, list[PathEntry]] = defaultdict(list)
    for entry in entries:
        by_node[entry.node].append(entry)
    desired: dict[str, CapacityObject] = {}
    ours = [c for c in classes if c.provisioner == provisioner_name]
    for node in nodes.values():
        hostname = node.labels.get(HOSTNAME_LABEL, node.name)
        for storage_class in ours:
            candidates = candidate_base_paths(config, storage_class, node.name)
            if not candidates:
                continue
            if config.shared_path_for(storage_class.name) is not None:
                free = best_free_bytes(path_rooms({}, candidates, {}))
            else:
                capacities = config.capacities_for(storage_class.name, node.name)
                committed = committed_bytes(by_node.get(node.name, ()), node.name, candidates)
                free = best_free_bytes(path_rooms(capacities, candidates, committed))
            name = capacity_object_name(provisioner_name, node.name, storage_class.name)
            desired[name] = CapacityObject(name, hostname, storage_class.name, free)
    return desired


def capacity_object_from_api(obj: Mapping[str, object]) -> CapacityObject | None:
    """What an existing CSIStorageCapacity says; None for one not in our shape."""
    meta = obj.get("metadata")
    topology = obj.get("nodeTopology")
    if not isinstance(meta, dict) or not isinstance(topology, dict):
        return None
    labels = topology.get("matchLabels") or {}
    capacity = obj.get("maximumVolumeSize") or obj.get("capacity")
    try:
        size = quantity_to_bytes(str(capacity)) if capacity is not None else -1
    except ValueError:
        size = -1
    return CapacityObject(
        str(meta.get("name", "")),
        str(labels.get(HOSTNAME_LABEL, "")),
        str(obj.get("storageClassName", "")),
        size,
    )


def capacity_changes(
    desired: Mapping[str, CapacityObject], current: Mapping[str, CapacityObject | None]
) -> CapacityChanges:
    """The writes that turn `current` (our labelled objects, by name) into `desired`. The
    topology and class of an object are immutable in the API, so an object whose node's
    hostname or class changed is deleted and created again."""
    create: list[CapacityObject] = []
    update: list[CapacityObject] = []
    delete: list[str] = []
    for name, want in sorted(desired.items()):
        have = current.get(name)
        if name not in current:
            create.append(want)
        elif have is None or (have.hostname, have.storage_class) != (
            want.hostname,
            want.storage_class,
        ):
            delete.append(name)
            create.append(want)
        elif have.capacity_bytes != want.capacity_bytes:
            update.append(want)
    delete += sorted(name for name in current if name not in desired)
    return CapacityChanges(tuple(create), tuple(update), tuple(delete))


def capacity_manifest(
    wanted: CapacityObject, *, namespace: str, provisioner_name: str
) -> dict[str, object]:
    size = format_bytes(wanted.capacity_bytes)
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIStorageCapacity",
        "metadata": {
            "name": wanted.name,
            "namespace": namespace,
            "labels": {CAPACITY_OWNER_LABEL: owner_label_value(provisioner_name)},
        },
        "nodeTopology": {"matchLabels": {HOSTNAME_LABEL: wanted.hostname}},
        "storageClassName": wanted.storage_class,
        "capacity": size,
        "maximumVolumeSize": size,
    }
