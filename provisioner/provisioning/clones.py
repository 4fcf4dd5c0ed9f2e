"""Cloning a volume: a claim whose spec.dataSource (or dataSourceRef) names a Bound claim of
ours gets a new volume holding a copy of that claim's data. rancher has no clones (its issue
352), nor has kubevirt's hostpath-provisioner (411); OpenEBS LocalPV refuses any dataSource.

What this module decides, on records (claims.decide_claim_action asks `place_clone`;
the fixed `clone` helper step in clone_step.py makes the copy):
- Served: a source of kind PersistentVolumeClaim with an empty apiGroup. A VolumeSnapshot in a
  CSI class is a restore (snapshot_sources.py). Any other kind (a VolumeSnapshot in another
  class, a volume populator's resource) is left alone, without an event: another controller
  may fill such a claim, and it is none of ours.
- Refused with the reason (a Warning event, nothing made): a source in another namespace, not
  found, being deleted or not Bound, of another class, whose volume we did not make or whose
  path is not one of the class's, larger than the new claim; and a class with
  reuseExistingData (its `prepare` may hand over an existing directory, which the copy would
  overwrite).
- Placement: a node-local copy is made on the source's node, the only one that holds the
  data. With Immediate binding it goes there at once; with WaitForFirstConsumer a selected
  node other than the source's goes back to the scheduler (the selected-node annotation
  removed, as the CSI external-provisioner does when a node cannot serve), with a Warning that
  says how to pin the consumer. A shared filesystem holds the source on every node: any node.
- After the copy, before the PV is saved: the source is looked at again (`source_changed`).
  A source whose claim or volume went or began to go meanwhile may have lost files under the
  copy (its teardown may have run beside it), so the copy is given back, never handed out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from provisioner.configuration.class_rules import ClassRules
from provisioner.objects.records import (
    ClaimRecord,
    DataSource,
    NodeRecord,
    VolumeRecord,
)
from provisioner.provisioning.annotations import PROVISIONED_BY
from provisioner.provisioning.paths import is_deletable_path, is_strictly_inside
from provisioner.provisioning.volume_facts import volume_base_paths, volume_size_bytes


@dataclass(frozen=True, slots=True)
class CloneSource:
    """The volume a clone copies: where its data is, checked against its PV and the config."""

    claim_namespace: str
    claim_name: str
    claim_uid: str
    volume_name: str
    path: str
    base_path: str
    """The configured base path holding `path` (what the copy's checks see it through)."""
    node_name: str | None
    """The node holding the data; None on a shared filesystem (every node sees it)."""
    volume_type: str | None = None
    """The source volume's type (records.VolumeRecord.volume_type): a CSI clone copies only
    a CSI volume, which its node plugin set up and keeps a record of."""
    volume_mode: str = "Filesystem"
    """The source PV's volumeMode: a CSI clone keeps it (a Block volume's directory holds one
    device file)."""

    def describe(self) -> str:
        return f"claim {self.claim_namespace}/{self.claim_name} (volume {self.volume_name})"


@dataclass(frozen=True, slots=True)
class ClonePlace:
    """Where a clone's copy is made: from `source`, on `node_name` for a node-local source
    (None: the scheduler has not selected it yet, or the source is on a shared filesystem,
    where any node does), unless `wrong_node` says why the selected node cannot hold it."""

    source: CloneSource
    node_name: str | None
    wrong_node: str | None = None


class ClaimSources(Protocol):
    """The caches a clone's source is looked up in."""

    def claim(self, namespace: str, name: str) -> ClaimRecord | None: ...
    def volume(self, name: str) -> VolumeRecord | None: ...


def source_claim_refusal(
    claim: ClaimRecord, source: DataSource, source_claim: ClaimRecord | None
) -> str | None:
    """Why the source claim itself cannot be cloned into `claim`, or None."""
    named = f"source claim {source.namespace or claim.namespace}/{source.name}"
    if source.namespace is not None and source.namespace != claim.namespace:
        return (
            f"{named} is in another namespace: a clone's source must be a claim in its own"
            f" namespace ({claim.namespace}); copy the data there first"
        )
    if source_claim is None:
        return f"{named} (spec.dataSource) not found: create it, or fix the name"
    if source_claim.being_deleted:
        return f"{named} is being deleted: a clone needs a source that stays"
    if source_claim.storage_class_name != claim.storage_class_name:
        return (
            f"{named} is of StorageClass {source_claim.storage_class_name!r}, this claim of"
            f" {claim.storage_class_name!r}: a clone must be of its source's class"
        )
    if not source_claim.volume_name:
        return f"{named} is not Bound yet: the clone is made once it is"
    return None


def source_volume_refusal(
    source_claim: ClaimRecord,
    volume: VolumeRecord | None,
    *,
    provisioned_by: str | None,
    provisioner_name: str,
    requested_bytes: int,
    source_bytes: int,
) -> str | None:
    """Why the source claim's volume cannot be copied, or None. `provisioned_by` is the
    volume's provisioned-by annotation, `source_bytes` its capacity."""
    named = f"source claim {source_claim.namespace}/{source_claim.name}"
    if volume is None:
        return f"{named} is bound to volume {source_claim.volume_name}, which is not found"
    if volume.claim_ref is None or volume.claim_ref.uid != source_claim.uid:
        return f"volume {volume.name} is not bound to {named}"
    if provisioned_by != provisioner_name:
        return (
            f"volume {volume.name} of {named} was provisioned by"
            f" {provisioned_by or 'no provisioner'}, not {provisioner_name}: only volumes this"
            " provisioner made can be cloned"
        )
    if volume.path is None:
        return f"volume {volume.name} of {named} has neither a hostPath nor a local path"
    if source_bytes > requested_bytes:
        return (
            f"{named} holds {volume.capacity}, more than this claim requests: request at"
            f" least {volume.capacity}"
        )
    return None


def source_changed(
    source: CloneSource, claim: ClaimRecord | None, volume: VolumeRecord | None
) -> str | None:
    """Read again after the copy: why the copy may not be whole (the source went, or began
    to go, while it was made), or None."""
    named = f"source {source.describe()}"
    if claim is None or claim.uid != source.claim_uid:
        return f"{named} was deleted during the copy"
    if claim.being_deleted:
        return f"{named} began to be deleted during the copy"
    if volume is None or claim.volume_name != source.volume_name:
        return f"{named} lost its volume during the copy"
    if volume.being_deleted or volume.phase != "Bound" or volume.path != source.path:
        return f"{named}: its volume was released or deleted during the copy"
    return None


def place_clone(
    claim: ClaimRecord,
    data_source: DataSource,
    *,
    rules: ClassRules,
    sources: ClaimSources | None,
    nodes: Mapping[str, NodeRecord],
    provisioner_name: str,
) -> ClonePlace | str:
    """The volume the claim is to be a copy of and where the copy goes, or why it cannot be
    (see `clones`)."""
    if sources is None:
        return "cloning needs the claim and volume caches, which this caller has not"
    source_claim = sources.claim(claim.namespace, data_source.name)
    refusal = source_claim_refusal(claim, data_source, source_claim)
    if refusal is not None:
        return refusal
    # The claim's size was accepted before its source is looked at (decide_claim_action).
    assert source_claim is not None and claim.requested_bytes is not None
    volume = sources.volume(source_claim.volume_name)
    refusal = source_volume_refusal(
        source_claim,
        volume,
        provisioned_by=volume.annotations.get(PROVISIONED_BY) if volume else None,
        provisioner_name=provisioner_name,
        requested_bytes=claim.requested_bytes,
        source_bytes=volume_size_bytes(volume) if volume else 0,
    )
    if refusal is not None:
        return refusal
    assert volume is not None and volume.path is not None
    if rules.reuse_existing_data:
        return (
            f"StorageClass {rules.name} sets reuseExistingData: a clone needs a"
            " directory of its own, never one with data already in it; use a class without it"
        )
    place = volume_base_paths(volume, rules, nodes)
    if isinstance(place, str):
        return f"cannot tell which node holds volume {volume.name}: {place}"
    node_name, base_paths = place
    if not is_deletable_path(volume.path, base_paths):
        return (
            f"volume {volume.name}'s path {volume.path} is not clean and strictly inside a"
            f" base path configured for it ({', '.join(base_paths) or 'none'}): not copied"
        )
    found = CloneSource(
        claim_namespace=source_claim.namespace,
        claim_name=source_claim.name,
        claim_uid=source_claim.uid,
        volume_name=volume.name,
        path=volume.path,
        base_path=next(base for base in base_paths if is_strictly_inside(volume.path, base)),
        node_name=node_name,
        volume_type=volume.volume_type,
        volume_mode=volume.volume_mode,
    )
    source_node = found.node_name
    if source_node is None or not claim.selected_node or claim.selected_node == source_node:
        wrong_node = None
    else:
        wrong_node = (
            f"selected node {claim.selected_node} cannot hold a clone of {found.describe()}:"
            f" its data is on node {source_node}; pin the claim's consumer there (node"
            f" affinity on kubernetes.io/hostname={source_node})"
        )
    # A node-local copy goes to the source's node, at once with Immediate binding, once it
    # is selected with WaitForFirstConsumer.
    if rules.binding_mode == "Immediate" or claim.selected_node == source_node:
        return ClonePlace(found, source_node, wrong_node)
    return ClonePlace(found, None, wrong_node)
