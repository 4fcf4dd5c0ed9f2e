"""Compact records of the API objects the decisions look at, and their builders.

Caches of typed client models for 10,000 volumes and claims cost seconds and hundreds of MiB;
the decisions need a dozen fields each. The builders take the objects as an informer decoded
them (the Structs of `api_objects`, holding only what is read here) or, from the shell's other
reads, the API's JSON form as a dict (converted to the same Structs), and keep only those
fields, so the shell can cache records and the pure decisions in `claims` never see a client
object.

Records are frozen msgspec Structs outside the cycle collector (`gc=False`: they hold strings,
tuples and dicts of strings, never a cycle): one is made in a third of the time of a frozen
dataclass, and the collector never walks the cache. `msgspec.structs.replace` copies one with
changes.

Most of what a record keeps repeats from object to object (annotation and label keys, class
and node names, access modes, sizes): those strings and small tuples are shared (interned), so
10,000 records hold one copy each instead of 10,000. Names, UIDs and paths are unique and kept
as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from sys import intern
from typing import Any, TypeVar

import msgspec

from provisioner.objects.api_objects import (
    Node,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    TypedObjectReference,
)
from provisioner.objects.node_handoff import VOLUME_PATH_KEY
from provisioner.objects.quantities import QuantityTooLarge, quantity_to_bytes
from provisioner.objects.snapshot_handoff import SNAPSHOT_GROUP, SNAPSHOT_KIND

__all__ = ["quantity_to_bytes"]  # re-exported: the decisions read sizes through records

BETA_STORAGE_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"
_Object = TypeVar("_Object", PersistentVolumeClaim, PersistentVolume, StorageClass, Node)


CLAIM_KIND = "PersistentVolumeClaim"


class DataSource(msgspec.Struct, frozen=True, gc=False):
    """A claim's spec.dataSourceRef (or spec.dataSource): the object to fill its volume from."""

    api_group: str
    kind: str
    name: str
    namespace: str | None = None
    """Only a dataSourceRef names one (another namespace's source, an alpha feature)."""

    @property
    def is_claim(self) -> bool:
        """Another claim: the one source we fill a claim from (a clone); any other kind is
        left to whoever serves it."""
        return self.kind == CLAIM_KIND and not self.api_group

    @property
    def is_volume_snapshot(self) -> bool:
        """A VolumeSnapshot of the external-snapshotter's group: a restore, in a CSI class."""
        return self.kind == SNAPSHOT_KIND and self.api_group == SNAPSHOT_GROUP


class ClaimRecord(msgspec.Struct, frozen=True, gc=False):
    uid: str
    namespace: str
    name: str
    resource_version: str = ""
    annotations: Mapping[str, str] = msgspec.field(default_factory=dict)
    labels: Mapping[str, str] = msgspec.field(default_factory=dict)
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
    allocated_storage: str | None = None
    """status.allocatedResources.storage: the size a resize last set out to allocate (None:
    never resized, or resized by a version that did not say it)."""
    resize_status: str | None = None
    """status.allocatedResourceStatuses.storage: where a resize stands (None: none under way)."""
    requested_bytes: int | None = None
    """`requested_storage` in bytes, read once per version of the claim (`__post_init__`, on
    every decode and construction): None when it is absent or no size we accept."""
    request_problem: str | None = None
    """Why `requested_storage` is no size we accept, in words for the claim's Event."""

    def __post_init__(self) -> None:
        requested, problem = _request_in_bytes(self)
        msgspec.structs.force_setattr(self, "requested_bytes", requested)
        msgspec.structs.force_setattr(self, "request_problem", problem)


def _request_in_bytes(claim: ClaimRecord) -> tuple[int | None, str | None]:
    if claim.requested_storage is None:
        return None, None
    try:
        return quantity_to_bytes(claim.requested_storage), None
    except QuantityTooLarge as error:
        return None, (
            f"claim {claim.namespace}/{claim.name} requests {error}:"
            " request a smaller spec.resources.requests.storage"
        )
    except ValueError as error:
        return None, str(error)


class ClaimReference(msgspec.Struct, frozen=True, gc=False):
    namespace: str
    name: str
    uid: str


class VolumeRecord(msgspec.Struct, frozen=True, gc=False):
    name: str
    annotations: Mapping[str, str] = msgspec.field(default_factory=dict)
    phase: str = ""
    reclaim_policy: str = "Delete"
    storage_class_name: str = ""
    path: str | None = None
    """hostPath.path, local.path or the directory a CSI volume's attributes name
    (node_handoff.VOLUME_PATH_KEY); None when the volume has none of them (not one of our
    shapes)."""
    volume_type: str | None = None
    """"hostPath", "local" or "csi", matching `path`."""
    csi_driver: str | None = None
    """A CSI volume's driver (a volume of ours only when it is our driver's)."""
    affinity: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Every required `In` expression of the node affinity, as (key, values)."""
    finalizers: tuple[str, ...] = ()
    being_deleted: bool = False
    claim_ref: ClaimReference | None = None
    capacity: str | None = None
    volume_mode: str = "Filesystem"


class StorageClassRecord(msgspec.Struct, frozen=True, gc=False):
    name: str
    provisioner: str
    parameters: Mapping[str, str] = msgspec.field(default_factory=dict)
    reclaim_policy: str = "Delete"
    binding_mode: str = "Immediate"
    mount_options: tuple[str, ...] = ()
    annotations: Mapping[str, str] = msgspec.field(default_factory=dict)
    allow_volume_expansion: bool = False


class NodeRecord(msgspec.Struct, frozen=True, gc=False):
    name: str
    labels: Mapping[str, str] = msgspec.field(default_factory=dict)
    ready: bool = True
    unschedulable: bool = False


# Distinct tuples seen (access modes, affinity values, finalizers): few in any real cluster;
# past this many, new ones are simply not shared.
_MAX_SHARED_TUPLES = 4096
_shared_tuples: dict[tuple[str, ...], tuple[str, ...]] = {}


def _optional_shared(value: str | None) -> str | None:
    return None if value is None else intern(value)


def _strings(value: dict[str, str] | None) -> dict[str, str]:
    return {intern(k): intern(v) for k, v in value.items()} if value else {}


def _shared_tuple(values: list[str] | None) -> tuple[str, ...]:
    if not values:
        return ()
    strings = tuple(map(intern, values))
    shared = _shared_tuples.get(strings)
    if shared is not None:
        return shared
    if len(_shared_tuples) < _MAX_SHARED_TUPLES:
        _shared_tuples[strings] = strings
    return strings


def claim_record(obj: PersistentVolumeClaim | Mapping[str, Any]) -> ClaimRecord:
    claim = _as_struct(obj, PersistentVolumeClaim)
    meta, spec = claim.metadata, claim.spec
    annotations = _strings(meta.annotations)
    class_name = spec.storage_class_name
    if class_name is None:
        class_name = annotations.get(BETA_STORAGE_CLASS_ANNOTATION)
    requests = spec.resources.requests if spec.resources is not None else None
    capacity = claim.status.capacity
    allocated = claim.status.allocated_resources
    resize_statuses = claim.status.allocated_resource_statuses
    return ClaimRecord(
        uid=meta.uid,
        namespace=intern(meta.namespace),
        name=meta.name,
        resource_version=meta.resource_version,
        annotations=annotations,
        labels=_strings(meta.labels),
        storage_class_name=_optional_shared(class_name),
        selected_node=annotations.get("volume.kubernetes.io/selected-node") or None,
        access_modes=_shared_tuple(spec.access_modes),
        requested_storage=_optional_shared(requests.get("storage") if requests else None),
        volume_mode=intern(spec.volume_mode or "Filesystem"),
        has_selector=spec.selector is not None,
        data_source=_data_source(spec.data_source_ref) or _data_source(spec.data_source),
        volume_name=spec.volume_name or "",
        being_deleted=meta.deletion_timestamp is not None,
        status_capacity=_optional_shared(capacity.get("storage") if capacity else None),
        allocated_storage=_optional_shared(allocated.get("storage") if allocated else None),
        resize_status=_optional_shared(resize_statuses.get("storage") if resize_statuses else None),
    )


_NO_REFERENCE = TypedObjectReference()
"""`{}`: as good as no reference (the claim's other field, if any, is read instead)."""


def _data_source(value: TypedObjectReference | None) -> DataSource | None:
    """dataSourceRef wins over dataSource: the API server keeps them equal when both are set,
    and only dataSourceRef may name a namespace."""
    if value is None or value == _NO_REFERENCE:
        return None
    return DataSource(
        api_group=value.api_group or "",
        kind=value.kind,
        name=value.name,
        namespace=value.namespace or None,
    )


def volume_record(obj: PersistentVolume | Mapping[str, Any]) -> VolumeRecord:
    volume = _as_struct(obj, PersistentVolume)
    meta, spec = volume.metadata, volume.spec
    path, volume_type, driver = None, None, None
    sources = [s for s in (spec.host_path, spec.local, spec.csi) if s is not None]
    if len(sources) == 1 and spec.host_path is not None:
        path, volume_type = spec.host_path.path, "hostPath"
    elif len(sources) == 1 and spec.local is not None:
        path, volume_type = spec.local.path, "local"
    elif len(sources) == 1 and spec.csi is not None:
        path = (spec.csi.volume_attributes or {}).get(VOLUME_PATH_KEY)
        volume_type, driver = "csi", intern(spec.csi.driver)
    required = spec.node_affinity.required if spec.node_affinity is not None else None
    affinity = tuple(
        (intern(expression.key), _shared_tuple(expression.values))
        for term in (required.node_selector_terms if required is not None else None) or ()
        for expression in term.match_expressions or ()
        if expression.operator == "In"
    )
    ref = spec.claim_ref
    return VolumeRecord(
        name=meta.name,
        annotations=_strings(meta.annotations),
        phase=intern(volume.status.phase or ""),
        reclaim_policy=intern(spec.persistent_volume_reclaim_policy or "Delete"),
        storage_class_name=intern(spec.storage_class_name or ""),
        path=path,
        volume_type=volume_type,
        csi_driver=driver,
        affinity=affinity,
        finalizers=_shared_tuple(meta.finalizers),
        being_deleted=meta.deletion_timestamp is not None,
        claim_ref=None if ref is None else ClaimReference(intern(ref.namespace), ref.name, ref.uid),
        capacity=_optional_shared(spec.capacity.get("storage") if spec.capacity else None),
        volume_mode=intern(spec.volume_mode or "Filesystem"),
    )


def storage_class_record(obj: StorageClass | Mapping[str, Any]) -> StorageClassRecord:
    storage_class = _as_struct(obj, StorageClass)
    return StorageClassRecord(
        name=storage_class.metadata.name,
        provisioner=storage_class.provisioner,
        parameters=_strings(storage_class.parameters),
        reclaim_policy=storage_class.reclaim_policy or "Delete",
        binding_mode=storage_class.volume_binding_mode or "Immediate",
        mount_options=tuple(storage_class.mount_options or ()),
        annotations=_strings(storage_class.metadata.annotations),
        allow_volume_expansion=bool(storage_class.allow_volume_expansion),
    )


def node_record(obj: Node | Mapping[str, Any]) -> NodeRecord:
    node = _as_struct(obj, Node)
    conditions = node.status.conditions or ()
    return NodeRecord(
        name=node.metadata.name,
        labels=_strings(node.metadata.labels),
        ready=any(c.type == "Ready" and c.status == "True" for c in conditions),
        unschedulable=bool(node.spec.unschedulable),
    )


def _as_struct(obj: _Object | Mapping[str, Any], kind: type[_Object]) -> _Object:
    """The object as the Struct its builder reads: as an informer decoded it, or converted from
    the API's JSON form as the shell read it (a dict); a member of the wrong type is a ValueError
    naming it."""
    if isinstance(obj, kind):
        return obj
    try:
        return msgspec.convert(obj, kind)
    except msgspec.ValidationError as e:
        raise ValueError(f"{kind.__name__}: {e}") from e
