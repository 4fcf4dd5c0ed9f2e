"""Restoring a VolumeSnapshot: a claim of a CSI class whose spec.dataSource (or dataSourceRef)
names a VolumeSnapshot (snapshot.storage.k8s.io) gets a new volume holding a copy of that
snapshot's data, made by the snapshot's node plugin from the snapshot it took itself.

Pure, beside clones.py (claims.decide_claim_action asks `place_restore`). The objects it reads
are fetched on demand by the I/O layer (snapshot_reads.SnapshotReads) for such claims only, as
restores are rare: the VolumeSnapshot, its bound VolumeSnapshotContent and, across namespaces,
the ReferenceGrants of the snapshot's namespace. Nothing here trusts the tenant's side: the
VolumeSnapshot is the tenant's (its status the common controller's), so every fact the restore
rests on is taken from the content (cluster-scoped, written only by controllers and our node
plugin), and the content must point back at that very VolumeSnapshot.

Refused with one sentence (a Warning, nothing made): a snapshot not found or not ready; a
content not bound to it, of another driver, not admitted by us (no SNAPSHOT_SETUP_ANNOTATION)
or whose handle is not the one its setup and node give; a claim smaller than the snapshot; a
class whose paths on that node lack the snapshot's base path; another volumeMode; across
namespaces, no ReferenceGrant that lets the claim's namespace read the snapshot.

Placement is the snapshot's node, as a node-local clone's is its source's (`RestorePlace`
carries the same three facts as clones.ClonePlace: Immediate binds there at once; a selected
node other than it goes back to the scheduler with the same advice).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from provisioner.configuration.class_rules import ClassRules
from provisioner.objects.node_handoff import HandoffError, node_label_value
from provisioner.objects.records import ClaimRecord, DataSource, NodeRecord, quantity_to_bytes
from provisioner.objects.snapshot_handoff import (
    SNAPSHOT_GROUP,
    SNAPSHOT_KIND,
    SNAPSHOT_SETUP_ANNOTATION,
    SnapshotSetup,
    parse_snapshot_handle,
    snapshot_handle,
)
from provisioner.provisioning.clones import ClaimSources, ClonePlace, place_clone

GRANT_GROUP = "gateway.networking.k8s.io"
"""ReferenceGrant's group (v1beta1), as the external-provisioner reads it for the same purpose."""
CLAIM_KIND = "PersistentVolumeClaim"


@dataclass(frozen=True)
class SnapshotLookup:
    """What the I/O layer read for one restore, as the API returned it (None: not found)."""

    driver: str
    """Our CSI driver's name: a content of ours names it."""
    snapshot: Mapping[str, Any] | None
    content: Mapping[str, Any] | None = None
    grants: Sequence[Mapping[str, Any]] = field(default_factory=tuple)
    """The ReferenceGrants of the snapshot's namespace (read only across namespaces)."""


@dataclass(frozen=True, slots=True)
class RestoreSource:
    """The snapshot a restore copies: where its data is, as its content's setup names it."""

    snapshot_namespace: str
    snapshot_name: str
    content_name: str
    snapshot_id: str
    snapshot_path: str
    base_path: str
    node_name: str
    restore_bytes: int

    def describe(self) -> str:
        return f"VolumeSnapshot {self.snapshot_namespace}/{self.snapshot_name}"


@dataclass(frozen=True, slots=True)
class RestorePlace:
    """Where a restore's copy is made: on the snapshot's node (`node_name` None: not selected
    yet under WaitForFirstConsumer), unless `wrong_node` says why the selected node cannot."""

    source: RestoreSource
    node_name: str | None
    wrong_node: str | None = None


def grant_refusal(
    claim_namespace: str,
    snapshot_namespace: str,
    snapshot_name: str,
    grants: Sequence[Mapping[str, Any]],
) -> str | None:
    """None when a claim of `claim_namespace` may restore the snapshot: the same namespace, or
    a ReferenceGrant in the snapshot's namespace from PersistentVolumeClaims of the claim's
    namespace to VolumeSnapshots (all of them, or this one by name)."""
    if claim_namespace == snapshot_namespace:
        return None
    for grant in grants:
        spec = grant.get("spec") or {}
        if _grants_from(spec.get("from"), claim_namespace) and _grants_to(
            spec.get("to"), snapshot_name
        ):
            return None
    return (
        f"a ReferenceGrant in {snapshot_namespace} must allow PersistentVolumeClaims of"
        f" {claim_namespace}"
    )


def _grants_from(entries: Any, claim_namespace: str) -> bool:
    return isinstance(entries, list) and any(
        isinstance(entry, Mapping)
        and entry.get("group") == ""
        and entry.get("kind") == CLAIM_KIND
        and entry.get("namespace") == claim_namespace
        for entry in entries
    )


def _grants_to(entries: Any, snapshot_name: str) -> bool:
    return isinstance(entries, list) and any(
        isinstance(entry, Mapping)
        and entry.get("group") == SNAPSHOT_GROUP
        and entry.get("kind") == SNAPSHOT_KIND
        and entry.get("name", "") in ("", None, snapshot_name)
        for entry in entries
    )


def _node_of(key: str, nodes: Mapping[str, NodeRecord]) -> str | None:
    """The node whose label value `key` is (a handle names a node by it)."""
    return next((name for name in nodes if node_label_value(name) == key), None)


def _snapshot_refusal(
    snapshot: Mapping[str, Any] | None, named: str
) -> tuple[str, str | None] | str:
    """The snapshot's bound content name (and its restoreSize quantity), or why not."""
    if snapshot is None:
        return f"{named} (spec.dataSource) not found: create it, or fix the name"
    status = snapshot.get("status") or {}
    if (snapshot.get("metadata") or {}).get("deletionTimestamp"):
        return f"{named} is being deleted: a restore needs a snapshot that stays"
    if status.get("readyToUse") is not True:
        return f"{named} is not ready to use yet: the restore is made once it is"
    content_name = status.get("boundVolumeSnapshotContentName")
    if not isinstance(content_name, str) or not content_name:
        return f"{named} is bound to no VolumeSnapshotContent"
    restore_size = status.get("restoreSize")
    return content_name, restore_size if isinstance(restore_size, str) else None


def _content_refusal(
    content: Mapping[str, Any] | None,
    content_name: str,
    *,
    snapshot: Mapping[str, Any],
    driver: str,
    nodes: Mapping[str, NodeRecord],
) -> tuple[SnapshotSetup, str] | str:
    """The content's setup and the node holding the snapshot, or why it is not ours to
    restore."""
    named = f"VolumeSnapshotContent {content_name}"
    if content is None:
        return f"{named} not found"
    metadata = content.get("metadata") or {}
    spec = content.get("spec") or {}
    status = content.get("status") or {}
    reference = spec.get("volumeSnapshotRef") or {}
    snapshot_meta = snapshot.get("metadata") or {}
    if (reference.get("namespace"), reference.get("name")) != (
        snapshot_meta.get("namespace"),
        snapshot_meta.get("name"),
    ) or (reference.get("uid") and reference.get("uid") != snapshot_meta.get("uid")):
        return f"{named} is not bound to this VolumeSnapshot"
    if spec.get("driver") != driver:
        return f"{named} is of driver {spec.get('driver')!r}, not {driver}: not ours to restore"
    text = (metadata.get("annotations") or {}).get(SNAPSHOT_SETUP_ANNOTATION)
    if not isinstance(text, str):
        return f"{named} was not admitted by this provisioner (no {SNAPSHOT_SETUP_ANNOTATION})"
    try:
        setup = SnapshotSetup.from_json(text)
    except HandoffError as error:
        return f"{named}: {error}"
    handle = status.get("snapshotHandle")
    parsed = parse_snapshot_handle(handle) if isinstance(handle, str) else None
    node = _node_of(parsed[0], nodes) if parsed is not None else None
    if parsed is None or node is None or handle != snapshot_handle(node, setup.snapshot_id):
        return (
            f"{named}'s snapshotHandle {handle!r} names no snapshot {setup.snapshot_id} of a"
            " node of this cluster"
        )
    return setup, node


def place_restore(
    claim: ClaimRecord,
    data_source: DataSource,
    *,
    rules: ClassRules,
    lookup: SnapshotLookup | None,
    nodes: Mapping[str, NodeRecord],
) -> RestorePlace | str:
    """The snapshot the claim is to be restored from and where, or why it cannot be (see the
    module's doc). Call only for restores of ours (snapshot_reads.restores_here) with a
    storage request."""
    if lookup is None:
        return "a restore needs its VolumeSnapshot looked up, which this caller has not"
    namespace = data_source.namespace or claim.namespace
    named = f"VolumeSnapshot {namespace}/{data_source.name}"
    refusal = grant_refusal(claim.namespace, namespace, data_source.name, lookup.grants)
    if refusal is not None:
        return f"{named} is in another namespace: {refusal}"
    bound = _snapshot_refusal(lookup.snapshot, named)
    if isinstance(bound, str):
        return bound
    # The claim's size was accepted before its source is looked at (decide_claim_action).
    assert lookup.snapshot is not None and claim.requested_bytes is not None
    content_name, snapshot_size = bound
    found = _content_refusal(
        lookup.content, content_name, snapshot=lookup.snapshot, driver=lookup.driver, nodes=nodes
    )
    if isinstance(found, str):
        return found
    setup, node = found
    content = lookup.content or {}
    size = (content.get("status") or {}).get("restoreSize")
    if not isinstance(size, int) or isinstance(size, bool):
        size = quantity_to_bytes(snapshot_size) if snapshot_size else setup.size_bytes
    requested = claim.requested_bytes
    if requested < size:
        return f"{named} needs {size} bytes to restore, more than this claim requests ({requested})"
    if setup.base_path not in rules.base_paths_on(node):
        return (
            f"{named} is kept in base path {setup.base_path} on node {node}, which StorageClass"
            f" {rules.name} does not give there: restore it into a class that does"
        )
    content_mode = (content.get("spec") or {}).get("sourceVolumeMode") or "Filesystem"
    if claim.volume_mode != content_mode:
        return (
            f"{named} is of a {content_mode} volume, this claim asks volumeMode"
            f" {claim.volume_mode}: restore it with volumeMode {content_mode}"
        )
    source = RestoreSource(
        snapshot_namespace=namespace,
        snapshot_name=data_source.name,
        content_name=content_name,
        snapshot_id=setup.snapshot_id,
        snapshot_path=setup.path,
        base_path=setup.base_path,
        node_name=node,
        restore_bytes=size,
    )
    wrong_node = None
    if claim.selected_node and claim.selected_node != node:
        wrong_node = (
            f"selected node {claim.selected_node} cannot hold a restore of {source.describe()}:"
            f" its data is on node {node}; pin the claim's consumer there (node affinity on"
            f" kubernetes.io/hostname={node})"
        )
    if rules.binding_mode == "Immediate" or claim.selected_node == node:
        return RestorePlace(source, node, wrong_node)
    return RestorePlace(source, None, wrong_node)


def place_source(
    claim: ClaimRecord,
    rules: ClassRules,
    nodes: Mapping[str, NodeRecord],
    *,
    sources: ClaimSources | None,
    snapshots: SnapshotLookup | None,
    provisioner_name: str,
) -> ClonePlace | RestorePlace | str | None:
    """Where the claim's data source pins it (a clone's source, a restore's snapshot: a claim
    the I/O layer read a snapshot for), why it cannot be filled from it, or None for a claim
    with no data source."""
    if claim.data_source is None:
        return None
    if snapshots is not None:
        return place_restore(claim, claim.data_source, rules=rules, lookup=snapshots, nodes=nodes)
    return place_clone(
        claim,
        claim.data_source,
        rules=rules,
        sources=sources,
        nodes=nodes,
        provisioner_name=provisioner_name,
    )
