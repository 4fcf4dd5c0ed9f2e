"""Which claims are ours, and the one action each needs now: the first step of a claim's
journey.

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
- Budgets (`capacity` on a base path, see `budgets`): only paths with room for the claim are
  candidates; when the selected node has none, the claim goes back to the scheduler
  (Reschedule), as for a node that is gone. A claim outside the class's minSize/maxSize is
  rejected before any node is chosen.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from provisioner.capacity.budgets import NoRoom, with_room
from provisioner.configuration.class_parameters import CSI_VOLUME_TYPE
from provisioner.configuration.class_rules import ClassRules
from provisioner.configuration.config import ConfigError, ProvisionerConfig
from provisioner.objects.records import ClaimRecord, NodeRecord, StorageClassRecord
from provisioner.provisioning.annotations import (
    BASE_PATH_ANNOTATION,
    BETA_STORAGE_PROVISIONER,
    STORAGE_PROVISIONER,
)
from provisioner.provisioning.clones import ClaimSources, ClonePlace, CloneSource
from provisioner.provisioning.paths import (
    EVERY_NODE,
    PathBook,
    PathPatternError,
    PatternFields,
    pick_base_path,
    render_owner_fields,
    resolve_volume_path,
)
from provisioner.provisioning.snapshot_sources import (
    RestorePlace,
    RestoreSource,
    SnapshotLookup,
    place_source,
)
from provisioner.provisioning.volume_facts import (
    volume_name_for,
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
    clone's source, the node, the class's place on it (`ClassRules.place`), the budgets, then
    the path."""
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
    size = rules.claim_size(claim, claim.requested_storage)
    if isinstance(size, str):
        return Reject(size)
    if not rules.configured:
        return Reject(f"config.json has no storageClassConfigs entry for {storage_class.name}")
    shared = rules.shared_path is not None
    pinned = place_source(
        claim,
        rules,
        nodes,
        sources=sources,
        snapshots=snapshots,
        provisioner_name=provisioner_name,
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
    if (
        refused := _volume_type_refusal(claim, place.volume_type, pinned, shared=shared)
    ) is not None:
        return Reject(refused)
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
