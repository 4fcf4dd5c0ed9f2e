"""Which claims are ours, the one action each needs now, and the PersistentVolume that answers
a provisioned one: a claim's journey from its decision to its PV.

Pure functions over the compact records: the provisioner looks the objects up in its caches,
calls `decide_claim_action`, and carries out what comes back. Each outcome carries its reason,
which becomes the event or log line. What a PV of ours says is in `volume_facts`; what it needs
now, in `volume_decisions`.

Decisions where we differ from rancher and the library (documented here, tested in
tests/provisioner/provisioning/test_claims.py):
- A claim with a selector is rejected for shared paths too; one with volumeMode Block is
  rejected unless its volume is a CSI class's (a loop device over a file, see
  node_volumes.block_volumes), never on a shared path. One whose data source is another claim
  is a clone (see `clones`), one whose data source is a VolumeSnapshot in a CSI class a restore
  (see `snapshot_sources`); any other data source is not ours to fill.
- Budgets (`capacity` on a base path, see `paths`): only paths with room for the claim are
  candidates; when the selected node has none, the claim goes back to the scheduler
  (Reschedule), as for a node that is gone. A claim outside the class's minSize/maxSize is
  rejected before any node is chosen.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from provisioner.configuration.class_parameters import CSI_VOLUME_TYPE
from provisioner.configuration.class_rules import ClassRules
from provisioner.configuration.config import ConfigError, ProvisionerConfig
from provisioner.objects.node_handoff import (
    NODE_LABEL,
    SETUP_ANNOTATION,
    VOLUME_PATH_KEY,
    NodeCloneSource,
    NodeRemoval,
    NodeRestoreSource,
    VolumeSetup,
    node_label_value,
)
from provisioner.objects.records import ClaimRecord, NodeRecord, StorageClassRecord
from provisioner.provisioning.annotations import (
    BASE_PATH_ANNOTATION,
    BETA_STORAGE_PROVISIONER,
    NODE_ANNOTATION,
    PROVISIONED_BY,
    STORAGE_PROVISIONER,
    VOLUME_FINALIZER,
)
from provisioner.provisioning.clones import ClaimSources, ClonePlace, CloneSource
from provisioner.provisioning.paths import (
    EVERY_NODE,
    NoRoom,
    PathBook,
    PathPatternError,
    PatternFields,
    pick_base_path,
    render_owner_fields,
    resolve_volume_path,
    with_room,
)
from provisioner.provisioning.removal_gate import RemovalPermit
from provisioner.provisioning.snapshot_sources import (
    RestorePlace,
    RestoreSource,
    SnapshotLookup,
    place_source,
)

BLOCK_REFUSED = "volumeMode Block is not supported: local paths are directories"
"""For every class but a CSI one (whose node plugin serves Block as a loop device)."""
NODE_LOCAL_ACCESS_MODES = frozenset({"ReadWriteOnce", "ReadWriteOncePod"})
SHARED_ACCESS_MODES = NODE_LOCAL_ACCESS_MODES | {"ReadOnlyMany", "ReadWriteMany"}


@dataclass(frozen=True, slots=True)
class ProvisionPlan:
    volume_name: str
    provisioner_name: str
    claim: ClaimRecord
    storage_class: StorageClassRecord
    node_name: str | None
    """Where the helper runs: the selected node (None: shared path, no node selected)."""
    node_affinity: tuple[str, str] | None
    """(label key, value) the PV is pinned to; None for a shared filesystem."""
    base_path: str
    path: str
    volume_type: str
    size_bytes: int
    vol_user: str = ""
    vol_group: str = ""
    vol_perm: str = ""
    record_base_path: bool = False
    """Write base_path on the claim (BASE_PATH_ANNOTATION) before any directory is made: the
    node has several candidates and the claim does not name one yet."""
    reuse_existing_data: bool = False
    """The class lets an existing directory at `path` be handed over with its data."""
    clone_source: CloneSource | None = None
    """The volume whose data the fixed `clone` step copies in (see `clones`)."""
    restore_source: RestoreSource | None = None
    """The snapshot whose data the node plugin copies in (see `snapshot_sources`)."""

    @property
    def volume_mode(self) -> str:
        return self.claim.volume_mode

    @property
    def disk_node(self) -> str:
        """The node whose disk holds the path, as the path book tells paths apart; EVERY_NODE
        for a shared filesystem, whichever node the helper runs on."""
        if self.node_affinity is None or self.node_name is None:
            return EVERY_NODE
        return self.node_name


@dataclass(frozen=True, slots=True)
class Ignore:
    reason: str


@dataclass(frozen=True, slots=True)
class Provision:
    plan: ProvisionPlan


@dataclass(frozen=True, slots=True)
class Reject:
    """Not provisionable as it stands: a Warning event (ProvisioningFailed) on the claim."""

    reason: str


@dataclass(frozen=True, slots=True)
class WaitForPath:
    """Another volume holds (or is being given or torn down at) an overlapping path: a Normal
    event says which; the claim is looked at again once that entry leaves the book."""

    reason: str
    blockers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Reschedule:
    """The selected node is gone, or has no base path with room for the claim: remove the
    selected-node annotation, Warning event."""

    reason: str


ClaimDecision = Ignore | Provision | Reject | Reschedule | WaitForPath


def volume_name_for(claim: ClaimRecord) -> str:
    """The claim's PV name: deterministic, so a retry finds the PV it created before."""
    return f"pvc-{claim.uid}"


def is_our_claim(claim: ClaimRecord, provisioner_name: str) -> bool:
    return provisioner_name in (
        claim.annotations.get(STORAGE_PROVISIONER),
        claim.annotations.get(BETA_STORAGE_PROVISIONER),
    )


def decide_claim_action(
    claim: ClaimRecord,
    rules: ClassRules,
    existing_volume_names: Collection[str],
    nodes: Mapping[str, NodeRecord],
    *,
    provisioner_name: str,
    paths: PathBook | None = None,
    sources: ClaimSources | None = None,
    snapshots: SnapshotLookup | None = None,
) -> ClaimDecision:
    """`rules` are those of the claim's class, read once (`class_rules`). `paths` is the whole
    picture of taken paths (live, Released, in flight); without it no overlap can be seen,
    which only pure tests of other rules may want. `sources` finds a clone's source claim and
    volume (see `clones`); without it no claim can be cloned. `snapshots` is what the I/O
    layer read for a restore (see `snapshot_sources`); without it no claim is restored.

    Read in order: the claim's own checks, the class's (its sizes, its config entry), a
    clone's or restore's source, the node, the class's place on it (`ClassRules.place`) and
    what its volume type cannot give, the budgets, then the path."""
    storage_class = rules.storage_class
    if claim.volume_name:
        return Ignore(f"bound to volume {claim.volume_name}")
    if claim.being_deleted:
        return Ignore("the claim is being deleted")
    if storage_class is None:
        return Ignore(f"storage class {claim.storage_class_name!r} not found")
    if storage_class.provisioner != provisioner_name:
        return Ignore(f"class {storage_class.name} belongs to {storage_class.provisioner}")
    if not is_our_claim(claim, provisioner_name):
        return Ignore("not handed to us (no storage-provisioner annotation naming us)")
    volume_name = volume_name_for(claim)
    if volume_name in existing_volume_names:
        return Ignore(f"volume {volume_name} already exists")
    if paths is not None and volume_name in paths:
        return Ignore(f"volume {volume_name} is being provisioned")
    if claim.has_selector:
        return Reject("claims with spec.selector cannot be provisioned dynamically: remove it")
    # A restore of ours is a claim the I/O layer read a snapshot for (snapshot_reads decides
    # which): the walk of any other claim stays within the files it has always entered
    # (docs/CONTRACTS.md).
    if claim.data_source is not None and not claim.data_source.is_claim and snapshots is None:
        return Ignore(f"data source {claim.data_source.kind} is for another controller to fill")
    if claim.requested_storage is None:
        return Reject("spec.resources.requests.storage is required")
    size = rules.claim_size(claim)
    if isinstance(size, str):
        return Reject(size)
    if not rules.configured:
        return Reject(f"config.json has no storageClassConfigs entry for {storage_class.name}")
    shared = rules.shared_path is not None
    # A claim with no data source never enters the clone and restore rules (docs/CONTRACTS.md).
    pinned = (
        place_source(
            claim,
            rules,
            nodes,
            sources=sources,
            snapshots=snapshots,
            provisioner_name=provisioner_name,
        )
        if claim.data_source is not None
        else None
    )
    if isinstance(pinned, str):
        return Reject(pinned)
    allowed = SHARED_ACCESS_MODES if shared else NODE_LOCAL_ACCESS_MODES
    if not claim.access_modes or not set(claim.access_modes) <= allowed:
        return Reject(
            f"access modes {list(claim.access_modes)} not supported: node-local paths"
            " allow ReadWriteOnce and ReadWriteOncePod; a sharedFileSystemPath allows all"
        )
    node = None
    # A node-local clone goes where its source is, a restore where its snapshot is.
    if pinned is not None and pinned.source.node_name is not None:
        if pinned.wrong_node is not None:
            return Reschedule(pinned.wrong_node)
        if pinned.node_name is None:
            return Ignore("waiting for the scheduler to select a node")
        node = nodes.get(pinned.node_name)
    elif claim.selected_node:
        node = nodes.get(claim.selected_node)
        if node is None:
            return Reschedule(f"selected node {claim.selected_node} no longer exists")
    elif not shared and storage_class.binding_mode == "Immediate":
        return Reject(
            "volumeBindingMode Immediate needs a sharedFileSystemPath: node-local paths"
            " need WaitForFirstConsumer"
        )
    elif not shared:
        return Ignore("waiting for the scheduler to select a node")
    try:
        place = rules.place(claim, node)
    except (ConfigError, PathPatternError, ValueError) as error:
        return Reject(str(error))
    # What the volume type cannot give is refused before any node's room is weighed: another
    # node would not give it either.
    if (
        refused := _volume_type_refusal(claim, place.volume_type, pinned, shared=shared)
    ) is not None:
        return Reject(refused)
    try:
        taken = paths.entries() if paths else []
        # A restore takes only its snapshot's base path (place_restore checked the class has
        # it there): the filesystem holding the snapshot, where a copy shares its extents.
        offered = (
            [pinned.source.base_path] if isinstance(pinned, RestorePlace) else place.candidates
        )
        # Only node-local paths have budgets: a shared one has no capacities.
        candidates = with_room(place.capacities, offered, place.disk_node, size, taken)
        base_path, record = pick_base_path(
            candidates, claim.annotations.get(BASE_PATH_ANNOTATION), paths, place.disk_node
        )
        fields = PatternFields(
            volume_name, claim.namespace, claim.name, claim.labels, claim.annotations
        )
        path = resolve_volume_path(
            base_path, rules.path_pattern, fields, allow_unsafe=rules.allow_unsafe_path_pattern
        )
        owner = render_owner_fields(rules.owner_patterns, fields)
    except NoRoom as error:
        return Reschedule(str(error))
    except (ConfigError, PathPatternError, ValueError) as error:
        return Reject(str(error))
    blockers = paths.overlapping(volume_name, place.disk_node, path) if paths else []
    if blockers:
        return WaitForPath(
            f"path {path} overlaps "
            + "; ".join(entry.describe() for entry in blockers)
            + ": waiting until it is gone",
            tuple(entry.volume_name for entry in blockers),
        )
    return Provision(
        ProvisionPlan(
            volume_name=volume_name,
            provisioner_name=provisioner_name,
            claim=claim,
            storage_class=storage_class,
            node_name=node.name if node else None,
            node_affinity=place.affinity,
            base_path=base_path,
            path=path,
            volume_type=place.volume_type,
            size_bytes=size,
            vol_user=owner["user"],
            vol_group=owner["group"],
            vol_perm=owner["perm"],
            record_base_path=record,
            reuse_existing_data=rules.reuse_existing_data,
            clone_source=pinned.source if isinstance(pinned, ClonePlace) else None,
            restore_source=pinned.source if isinstance(pinned, RestorePlace) else None,
        )
    )


def _volume_type_refusal(
    claim: ClaimRecord,
    volume_type: str,
    pinned: ClonePlace | RestorePlace | None,
    *,
    shared: bool,
) -> str | None:
    """What the claim asks that its volume type cannot give, if anything."""
    class_name = claim.storage_class_name or ""
    clone = pinned if isinstance(pinned, ClonePlace) else None
    if claim.volume_mode == "Block" and (volume_type != CSI_VOLUME_TYPE or shared):
        # Only the CSI node plugin can hand a pod a device (a loop device over one file in
        # the volume's directory); a hostPath or local volume is the directory itself.
        return BLOCK_REFUSED
    if (
        clone is not None
        and volume_type == CSI_VOLUME_TYPE
        and clone.source.volume_mode != claim.volume_mode
    ):
        # A clone copies the directory: a Block source's is one device file, which a
        # Filesystem volume would show as a file, and the other way round no device at all.
        return (
            f"source {clone.source.describe()} is a volumeMode {clone.source.volume_mode}"
            f" volume and the claim asks volumeMode {claim.volume_mode}: a clone keeps its"
            " source's volumeMode"
        )
    if (
        clone is not None
        and volume_type == CSI_VOLUME_TYPE
        and clone.source.volume_type != CSI_VOLUME_TYPE
    ):
        # The node plugin copies a source it set up itself, under that volume's lock (its
        # record and lock exist only for a CSI volume): a source of another type, which a
        # claim's volumeType annotation may give in a class of its own, has neither.
        return (
            f"source {clone.source.describe()} is a {clone.source.volume_type or 'non-CSI'}"
            f" volume, and StorageClass {class_name} gives CSI volumes, whose node plugin copies"
            " only a CSI volume: clone it into a claim of the source's volume type"
        )
    one_pod_held = volume_type in ("local", CSI_VOLUME_TYPE)
    if "ReadWriteOncePod" in claim.access_modes and not one_pod_held:
        return _one_pod_refused(class_name, shared=shared)
    return None


def _one_pod_refused(class_name: str, *, shared: bool) -> str:
    """Why a ReadWriteOncePod claim gets no hostPath volume: the kubelet holds that mode to one
    pod only for a volume plugin that supports it (`local` does, and our CSI node plugin, which
    publishes such a volume to one target at a time; hostPath does not), so a second pod placed
    on the node directly (spec.nodeName, past the scheduler) would run."""
    why = (
        "access mode ReadWriteOncePod is held to one pod only on a volume of volumeType: local"
        " or of a CSI class (the kubelet does not hold it on a hostPath volume)"
    )
    if shared:
        return f"{why}, which a sharedFileSystemPath cannot have: use ReadWriteOnce or another mode"
    return (
        f"{why}: set the claim annotation volumeType: local, or the annotation"
        f" defaultVolumeType: local on StorageClass {class_name}"
    )


def candidate_base_paths(
    config: ProvisionerConfig, storage_class: StorageClassRecord, node_name: str
) -> list[str]:
    """The base paths a volume of the class may use on the node (the class's nodePath
    parameter narrows them to one), before budgets are looked at."""
    candidates = config.paths_for(storage_class.name, node_name) or []
    node_path = storage_class.parameters.get("nodePath")
    if node_path is not None:
        return [node_path] if node_path in candidates else []
    return candidates


# -- the PersistentVolume that answers the claim -------------------------------------------
# The PersistentVolume for a provisioned claim, as a plain manifest.
#
# The PV is the only record of where the data lives, so it carries everything the teardown
# needs later without trusting anything else: the path in hostPath/local, the node both in the
# required node affinity (what the scheduler obeys) and in an annotation (what we check the
# affinity against on delete), and the library's finalizer so that a PV deleted directly by a
# user still gets its directory removed.
#
# Its name is `pvc-<claim uid>`, deterministic, so a retried provisioning finds (AlreadyExists)
# the PV it created before instead of creating a second one; claimRef pre-binds it to the claim.
# A PV found under that name counts as ours only if it is this claim's, by us, at this path
# (`foreign_volume_problem`): anyone may create a PV of any name.


def build_persistent_volume(
    plan: ProvisionPlan, driver: str, clean_up: RemovalPermit | None = None
) -> dict[str, Any]:
    """`driver`: the CSI driver a CSI class's volume names (csi.driver_name); `clean_up`: the
    gate's permit for the clean-up after its setup's failure, which the node plugin gets with
    the setup (a helper pod gets it in its `finish` step)."""
    claim, storage_class = plan.claim, plan.storage_class
    annotations = {PROVISIONED_BY: plan.provisioner_name}
    if plan.node_affinity is not None and plan.node_name is not None:
        annotations[NODE_ANNOTATION] = plan.node_name
    metadata: dict[str, Any] = {"name": plan.volume_name, "annotations": annotations}
    if storage_class.reclaim_policy == "Delete":
        metadata["finalizers"] = [VOLUME_FINALIZER]
    if plan.volume_type == CSI_VOLUME_TYPE and plan.node_name is not None:
        # No helper made the directory: the node plugin that watches its node's PVs (the
        # label) makes it from the setup annotation, before it publishes the volume to a pod.
        annotations[SETUP_ANNOTATION] = volume_setup(plan, clean_up).to_json()
        metadata["labels"] = {NODE_LABEL: node_label_value(plan.node_name)}
        source: dict[str, Any] = {
            "csi": {
                "driver": driver,
                "volumeHandle": plan.volume_name,
                "volumeAttributes": {VOLUME_PATH_KEY: plan.path},
            }
        }
    elif plan.volume_type == "local":
        source = {"local": {"path": plan.path}}
    else:
        # Directory, not DirectoryOrCreate: the setup helper made it, so a missing directory
        # means the disk or share is not mounted, and the pod must fail to start rather than
        # write into the root filesystem underneath the mount point.
        source = {"hostPath": {"path": plan.path, "type": "Directory"}}
    spec: dict[str, Any] = {
        "claimRef": {
            "kind": "PersistentVolumeClaim",
            "apiVersion": "v1",
            "namespace": claim.namespace,
            "name": claim.name,
            "uid": claim.uid,
            "resourceVersion": claim.resource_version,
        },
        "storageClassName": storage_class.name,
        "capacity": {"storage": claim.requested_storage},
        "accessModes": list(claim.access_modes),
        "persistentVolumeReclaimPolicy": storage_class.reclaim_policy,
        # Block only for a CSI class (claims.py refuses it for every other).
        "volumeMode": plan.volume_mode,
        **source,
    }
    if storage_class.mount_options:
        spec["mountOptions"] = list(storage_class.mount_options)
    if plan.node_affinity is not None:
        key, value = plan.node_affinity
        term = {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": metadata, "spec": spec}


def node_removal(permit: RemovalPermit, claim_uid: str) -> NodeRemoval:
    """The gate's permit as the node plugin gets it on the PV (RemovalPermit never leaves this
    process: only the gate makes one)."""
    check = permit.check
    if check is None:
        raise ValueError(f"the permit for {permit.path} is not a volume's")
    return NodeRemoval(
        volume_name=permit.volume_name,
        path=permit.path,
        owner=check.owner,
        made_only=check.made_only,
        absent_ok=check.absent_ok,
        claim_uid=claim_uid,
    )


def volume_setup(plan: ProvisionPlan, clean_up: RemovalPermit | None = None) -> VolumeSetup:
    """What the node plugin makes a CSI volume's directory from (and, for a clone or a
    restore, copies into it)."""
    covers = clean_up is not None and clean_up.covers(plan.volume_name, plan.path)
    source = plan.clone_source
    restore = plan.restore_source
    return VolumeSetup(
        base_path=plan.base_path,
        path=plan.path,
        volume_mode=plan.volume_mode,
        size_bytes=plan.size_bytes,
        vol_user=plan.vol_user,
        vol_group=plan.vol_group,
        vol_perm=plan.vol_perm,
        reuse_existing_data=plan.reuse_existing_data,
        clean_up=node_removal(clean_up, plan.claim.uid) if clean_up and covers else None,
        clone_source=None
        if source is None
        else NodeCloneSource(
            volume_name=source.volume_name,
            path=source.path,
            base_path=source.base_path,
            claim_uid=source.claim_uid,
        ),
        restore_source=None
        if restore is None
        else NodeRestoreSource(
            snapshot_id=restore.snapshot_id,
            snapshot_path=restore.snapshot_path,
            base_path=restore.base_path,
            content_name=restore.content_name,
        ),
    )


def foreign_volume_problem(
    existing: Mapping[str, Any], plan: ProvisionPlan, driver: str
) -> str | None:
    """None when `existing` (a PV's API JSON) is the volume this plan saves, as an earlier
    attempt would have saved it; otherwise what differs."""
    metadata = existing.get("metadata") or {}
    spec = existing.get("spec") or {}
    provisioned_by = (metadata.get("annotations") or {}).get(PROVISIONED_BY)
    if provisioned_by != plan.provisioner_name:
        return f"PV {plan.volume_name} exists, provisioned by {provisioned_by or 'nobody'}"
    claim_uid = (spec.get("claimRef") or {}).get("uid")
    if claim_uid != plan.claim.uid:
        return f"PV {plan.volume_name} exists for claim uid {claim_uid}, not {plan.claim.uid}"
    wanted_spec = build_persistent_volume(plan, driver)["spec"]
    source = spec.get("hostPath") or spec.get("local") or {}
    csi = spec.get("csi") or {}
    path = source.get("path") or (csi.get("volumeAttributes") or {}).get(VOLUME_PATH_KEY)
    if path != plan.path:
        return f"PV {plan.volume_name} exists at {path}, not at {plan.path}"
    if csi.get("driver") != (wanted_spec.get("csi") or {}).get("driver"):
        return f"PV {plan.volume_name} exists for CSI driver {csi.get('driver') or 'none'}"
    wanted = wanted_spec.get("nodeAffinity")
    if spec.get("nodeAffinity") != wanted:
        return f"PV {plan.volume_name} exists with another node affinity"
    return None
