"""Compact records of the API objects the decisions look at, and their builders.

Caches of typed client models for 10,000 volumes and claims cost seconds and hundreds of MiB;
the decisions need a dozen fields each. The builders take the API's JSON form (camelCase
dicts, as a raw list or watch returns them) and keep only those fields, so the shell can cache
records and the pure decisions in `claims` never see a client object.

Most of what a record keeps repeats from object to object (annotation and label keys, class
and node names, access modes, sizes): those strings and small tuples are shared (interned), so
10,000 records hold one copy each instead of 10,000. Names, UIDs and paths are unique and kept
as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from sys import intern
from typing import Any

from provisioner.core.quantities import quantity_to_bytes

__all__ = ["quantity_to_bytes"]  # re-exported: the decisions read sizes through records

BETA_STORAGE_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"


@dataclass(frozen=True, slots=True)
class DataSource:
    """A claim's spec.dataSourceRef (or spec.dataSource): the object to fill its volume from."""

    api_group: str
    kind: str
    name: str
    namespace: str | None = None
    """Only a dataSourceRef names one (another namespace's source, an alpha feature)."""


@dataclass(frozen=True, slots=True)
class ClaimRecord:
    uid: str
    namespace: str
    name: str
    resource_version: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    storage_class_name: str | None = None
    """spec.storageClassName, or the legacy beta annotation when the spec leaves it unset."""
    selected_node: str | None = None
    """The scheduler's `volume.kubernetes.io/selected-node` annotation."""
    access_modes: tuple[str, ...] = ()
    requested_storage: str | None = None
    """spec.resources.requests.storage, as the API wrote the quantity."""
    volume_mode: str = "Filesystem"
    has_selector: bool = False
    data_source: DataSource | None = None
    """spec.dataSourceRef, else spec.dataSource: what the claim asks its volume be made from."""
    volume_name: str = ""
    being_deleted: bool = False
    status_capacity: str | None = None
    """status.capacity.storage: what the claim has been told it has."""


@dataclass(frozen=True, slots=True)
class ClaimReference:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class VolumeRecord:
    name: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    phase: str = ""
    reclaim_policy: str = "Delete"
    storage_class_name: str = ""
    path: str | None = None
    """hostPath.path or local.path; None when the volume has neither (not one of our shapes)."""
    volume_type: str | None = None
    """"hostPath" or "local", matching `path`."""
    affinity: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Every required `In` expression of the node affinity, as (key, values)."""
    finalizers: tuple[str, ...] = ()
    being_deleted: bool = False
    claim_ref: ClaimReference | None = None
    capacity: str | None = None
    volume_mode: str = "Filesystem"


@dataclass(frozen=True, slots=True)
class StorageClassRecord:
    name: str
    provisioner: str
    parameters: Mapping[str, str] = field(default_factory=dict)
    reclaim_policy: str = "Delete"
    binding_mode: str = "Immediate"
    mount_options: tuple[str, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    allow_volume_expansion: bool = False


@dataclass(frozen=True, slots=True)
class NodeRecord:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ready: bool = True
    unschedulable: bool = False


# Distinct tuples seen (access modes, affinity values, finalizers): few in any real cluster;
# past this many, new ones are simply not shared.
_MAX_SHARED_TUPLES = 4096
_shared_tuples: dict[tuple[str, ...], tuple[str, ...]] = {}


def _shared(value: Any) -> str:
    return intern(str(value))


def _optional_shared(value: Any) -> str | None:
    return None if value is None else intern(str(value))


def _strings(value: Any) -> dict[str, str]:
    return {intern(str(k)): intern(str(v)) for k, v in (value or {}).items()}


def _shared_tuple(values: Any) -> tuple[str, ...]:
    strings = tuple(intern(str(v)) for v in values or ())
    shared = _shared_tuples.get(strings)
    if shared is not None:
        return shared
    if len(_shared_tuples) < _MAX_SHARED_TUPLES:
        _shared_tuples[strings] = strings
    return strings


def claim_record(obj: Mapping[str, Any]) -> ClaimRecord:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    annotations = _strings(meta.get("annotations"))
    class_name = spec.get("storageClassName")
    if class_name is None:
        class_name = annotations.get(BETA_STORAGE_CLASS_ANNOTATION)
    requests = (spec.get("resources") or {}).get("requests") or {}
    storage = requests.get("storage")
    return ClaimRecord(
        uid=str(meta.get("uid", "")),
        namespace=_shared(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        annotations=annotations,
        labels=_strings(meta.get("labels")),
        storage_class_name=_optional_shared(class_name),
        selected_node=annotations.get("volume.kubernetes.io/selected-node") or None,
        access_modes=_shared_tuple(spec.get("accessModes")),
        requested_storage=_optional_shared(storage),
        volume_mode=_shared(spec.get("volumeMode") or "Filesystem"),
        has_selector=spec.get("selector") is not None,
        data_source=_data_source(spec.get("dataSourceRef") or spec.get("dataSource")),
        volume_name=spec.get("volumeName") or "",
        being_deleted=meta.get("deletionTimestamp") is not None,
        status_capacity=_optional_shared(
            ((obj.get("status") or {}).get("capacity") or {}).get("storage")
        ),
    )


def _data_source(value: Any) -> DataSource | None:
    """dataSourceRef wins over dataSource: the API server keeps them equal when both are set,
    and only dataSourceRef may name a namespace."""
    if not value:
        return None
    namespace = value.get("namespace")
    return DataSource(
        api_group=str(value.get("apiGroup") or ""),
        kind=str(value.get("kind", "")),
        name=str(value.get("name", "")),
        namespace=str(namespace) if namespace else None,
    )


def volume_record(obj: Mapping[str, Any]) -> VolumeRecord:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    path, volume_type = None, None
    if spec.get("hostPath") and not spec.get("local"):
        path, volume_type = spec["hostPath"].get("path"), "hostPath"
    elif spec.get("local") and not spec.get("hostPath"):
        path, volume_type = spec["local"].get("path"), "local"
    required = ((spec.get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms")
    affinity = tuple(
        (_shared(expression.get("key", "")), _shared_tuple(expression.get("values")))
        for term in required or ()
        for expression in term.get("matchExpressions") or ()
        if expression.get("operator") == "In"
    )
    ref = spec.get("claimRef")
    return VolumeRecord(
        name=str(meta.get("name", "")),
        annotations=_strings(meta.get("annotations")),
        phase=_shared((obj.get("status") or {}).get("phase", "")),
        reclaim_policy=_shared(spec.get("persistentVolumeReclaimPolicy") or "Delete"),
        storage_class_name=_shared(spec.get("storageClassName") or ""),
        path=path,
        volume_type=volume_type,
        affinity=affinity,
        finalizers=_shared_tuple(meta.get("finalizers")),
        being_deleted=meta.get("deletionTimestamp") is not None,
        claim_ref=None
        if not ref
        else ClaimReference(
            _shared(ref.get("namespace", "")), ref.get("name", ""), ref.get("uid", "")
        ),
        capacity=_optional_shared((spec.get("capacity") or {}).get("storage")),
        volume_mode=_shared(spec.get("volumeMode") or "Filesystem"),
    )


def storage_class_record(obj: Mapping[str, Any]) -> StorageClassRecord:
    meta = obj.get("metadata") or {}
    return StorageClassRecord(
        name=str(meta.get("name", "")),
        provisioner=str(obj.get("provisioner", "")),
        parameters=_strings(obj.get("parameters")),
        reclaim_policy=obj.get("reclaimPolicy") or "Delete",
        binding_mode=obj.get("volumeBindingMode") or "Immediate",
        mount_options=tuple(obj.get("mountOptions") or ()),
        annotations=_strings(meta.get("annotations")),
        allow_volume_expansion=bool(obj.get("allowVolumeExpansion")),
    )


def node_record(obj: Mapping[str, Any]) -> NodeRecord:
    meta = obj.get("metadata") or {}
    conditions = (obj.get("status") or {}).get("conditions") or ()
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return NodeRecord(
        name=str(meta.get("name", "")),
        labels=_strings(meta.get("labels")),
        ready=ready,
        unschedulable=bool((obj.get("spec") or {}).get("unschedulable")),
    )
