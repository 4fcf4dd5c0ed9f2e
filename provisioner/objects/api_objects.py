"""The fields of the API objects that the records read, as msgspec Structs.

An informer decodes each claim, volume, class and node of a list or watch straight into these
(`msgspec.json.Decoder(PersistentVolume)`): every member not named here (managedFields, most of
the spec, the status conditions) is skipped by msgspec's C parser without being made into Python
objects. At 50,000 volumes that was most of the start-up's CPU: decoding each object into dicts
with the standard `json` module and throwing nearly all of it away.

None of them is tracked by the cycle collector (`gc=False`): they hold only strings, numbers,
and lists and dicts of them, so no cycle can pass through them, and tens of thousands decoded at
start would otherwise set off collection after collection.

Names follow the API's JSON (`rename="camel"`: `resource_version` is `resourceVersion`). Every
field has a default and every container may be absent or null, as the API omits empty members;
a member of the wrong type (a label value that is not a string) is refused by the decoder, where
the apiserver's own validation already refuses it. `records` turns these into the compact
records the decisions read; callers that hold a dict (a response the shell read) go through
`msgspec.convert` to the same Structs, so one builder serves both.
"""

from __future__ import annotations

from typing import Any

import msgspec


class ObjectMeta(msgspec.Struct, rename="camel", gc=False):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    annotations: dict[str, str] | None = None
    labels: dict[str, str] | None = None
    finalizers: list[str] | None = None
    deletion_timestamp: str | None = None


class _ApiObject(msgspec.Struct, gc=False):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


def object_name(obj: _ApiObject) -> str:
    """An informer's key for a cluster-scoped object."""
    return obj.metadata.name


def object_uid(obj: _ApiObject) -> str:
    """An informer's key by UID (claims: a claim recreated under its name is another claim)."""
    return obj.metadata.uid


class ResourceRequirements(msgspec.Struct, gc=False):
    requests: dict[str, str] | None = None


class TypedObjectReference(msgspec.Struct, rename="camel", gc=False):
    """spec.dataSource or spec.dataSourceRef of a claim."""

    api_group: str | None = None
    kind: str = ""
    name: str = ""
    namespace: str | None = None


class ClaimSpec(msgspec.Struct, rename="camel", gc=False):
    storage_class_name: str | None = None
    access_modes: list[str] | None = None
    resources: ResourceRequirements | None = None
    volume_mode: str | None = None
    selector: dict[str, Any] | None = None
    data_source: TypedObjectReference | None = None
    data_source_ref: TypedObjectReference | None = None
    volume_name: str | None = None


class ClaimStatus(msgspec.Struct, rename="camel", gc=False):
    phase: str | None = None
    capacity: dict[str, str] | None = None
    allocated_resources: dict[str, str] | None = None
    allocated_resource_statuses: dict[str, str] | None = None


class PersistentVolumeClaim(_ApiObject):
    spec: ClaimSpec = msgspec.field(default_factory=ClaimSpec)
    status: ClaimStatus = msgspec.field(default_factory=ClaimStatus)


class PathSource(msgspec.Struct, gc=False):
    """spec.hostPath or spec.local of a volume."""

    path: str | None = None


class CsiSource(msgspec.Struct, rename="camel", gc=False):
    """spec.csi of a volume: the parts a CSI volume of ours is told apart by."""

    driver: str = ""
    volume_handle: str = ""
    volume_attributes: dict[str, str] | None = None


class NodeSelectorRequirement(msgspec.Struct, gc=False):
    key: str = ""
    operator: str = ""
    values: list[str] | None = None


class NodeSelectorTerm(msgspec.Struct, rename="camel", gc=False):
    match_expressions: list[NodeSelectorRequirement] | None = None


class NodeSelector(msgspec.Struct, rename="camel", gc=False):
    node_selector_terms: list[NodeSelectorTerm] | None = None


class VolumeNodeAffinity(msgspec.Struct, gc=False):
    required: NodeSelector | None = None


class ObjectReference(msgspec.Struct, gc=False):
    """spec.claimRef of a volume."""

    namespace: str = ""
    name: str = ""
    uid: str = ""


class VolumeSpec(msgspec.Struct, rename="camel", gc=False):
    host_path: PathSource | None = None
    local: PathSource | None = None
    csi: CsiSource | None = None
    node_affinity: VolumeNodeAffinity | None = None
    claim_ref: ObjectReference | None = None
    capacity: dict[str, str] | None = None
    persistent_volume_reclaim_policy: str | None = None
    storage_class_name: str | None = None
    volume_mode: str | None = None


class VolumeStatus(msgspec.Struct, gc=False):
    phase: str | None = None


class PersistentVolume(_ApiObject):
    spec: VolumeSpec = msgspec.field(default_factory=VolumeSpec)
    status: VolumeStatus = msgspec.field(default_factory=VolumeStatus)


class StorageClass(_ApiObject, rename="camel"):
    provisioner: str = ""
    parameters: dict[str, str] | None = None
    reclaim_policy: str | None = None
    volume_binding_mode: str | None = None
    mount_options: list[str] | None = None
    allow_volume_expansion: bool | None = None


class NodeCondition(msgspec.Struct, gc=False):
    type: str = ""
    status: str = ""


class NodeSpec(msgspec.Struct, gc=False):
    unschedulable: bool | None = None


class NodeStatus(msgspec.Struct, gc=False):
    conditions: list[NodeCondition] | None = None


class Node(_ApiObject):
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)
