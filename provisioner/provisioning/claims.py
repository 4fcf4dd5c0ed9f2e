"""Which claims are ours, and the one action each needs now: the first step of a claim's
journey.

Pure functions over the compact records: the provisioner looks the objects up in its caches,
calls `decide_claim_action`, and carries out what comes back. Each outcome carries its reason,
which becomes the event or log line. What a PV of ours says is in `volume_facts`; what it needs
now, in `volume_decisions`.

Decisions where we differ from rancher and the library (documented here, tested in
tests/provisioner/provisioning/test_claims.py):
- A claim with a selector or volumeMode Block is rejected for shared paths too. One whose data
  source is another claim is a clone (see `clones`); any other data source is not ours to fill.
- Budgets (`capacity` on a base path, see `budgets`): only paths with room for the claim are
  candidates; when the selected node has none, the claim goes back to the scheduler
  (Reschedule), as for a node that is gone. A claim outside the class's minSize/maxSize is
  rejected before any node is chosen.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from provisioner.capacity.budgets import (
    committed_bytes,
    no_room_reason,
    path_rooms,
    paths_with_room,
)
from provisioner.configuration.class_parameters import (
    allow_unsafe_path_pattern,
    check_perm,
    reuse_existing_data,
    size_range,
    validate_storage_class_parameters,
    volume_type_of,
)
from provisioner.configuration.config import (
    DEFAULT_NODE_AFFINITY_KEY,
    ConfigError,
    ProvisionerConfig,
)
from provisioner.objects.quantities import QuantityTooLarge, format_bytes
from provisioner.objects.records import (
    ClaimRecord,
    NodeRecord,
    StorageClassRecord,
    quantity_to_bytes,
)
from provisioner.provisioning.annotations import (
    BASE_PATH_ANNOTATION,
    BETA_STORAGE_PROVISIONER,
    STORAGE_PROVISIONER,
)
from provisioner.provisioning.clones import (
    ClaimSources,
    CloneSource,
    clone_node,
    find_clone_source,
    is_served_source,
    wrong_node_reason,
)
from provisioner.provisioning.paths import (
    EVERY_NODE,
    PathBook,
    PathPatternError,
    PatternFields,
    choose_base_path,
    render_pattern,
    resolve_volume_path,
)
from provisioner.provisioning.volume_facts import (
    volume_name_for,
)

NODE_LOCAL_ACCESS_MODES = frozenset({"ReadWriteOnce", "ReadWriteOncePod"})


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
    storage_class: StorageClassRecord | None,
    config: ProvisionerConfig,
    existing_volume_names: Collection[str],
    nodes: Mapping[str, NodeRecord],
    *,
    provisioner_name: str,
    paths: PathBook | None = None,
    sources: ClaimSources | None = None,
) -> ClaimDecision:
    """`paths` is the whole picture of taken paths (live, Released, in flight); without it no
    overlap can be seen, which only pure tests of other rules may want. `sources` finds a
    clone's source claim and volume (see `clones`); without it no claim can be cloned."""
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
    if volume_name_for(claim) in existing_volume_names:
        return Ignore(f"volume {volume_name_for(claim)} already exists")
    if paths is not None and volume_name_for(claim) in paths:
        return Ignore(f"volume {volume_name_for(claim)} is being provisioned")
    if claim.has_selector:
        return Reject("claims with spec.selector cannot be provisioned dynamically: remove it")
    if claim.data_source is not None and not is_served_source(claim.data_source):
        return Ignore(f"data source {claim.data_source.kind} is for another controller to fill")
    if claim.volume_mode == "Block":
        return Reject("volumeMode Block is not supported: local paths are directories")
    if claim.requested_storage is None:
        return Reject("spec.resources.requests.storage is required")
    outside = _outside_size_range(claim, claim.requested_storage, storage_class)
    if outside is not None:
        return Reject(outside)
    storage = config.storage_for(storage_class.name)
    if storage is None:
        return Reject(f"config.json has no storageClassConfigs entry for {storage_class.name}")
    shared = storage.shared_filesystem_path is not None
    clone: CloneSource | None = None
    if claim.data_source is not None:
        found = find_clone_source(
            claim,
            claim.data_source,
            storage_class=storage_class,
            config=config,
            sources=sources,
            nodes=nodes,
            provisioner_name=provisioner_name,
        )
        if isinstance(found, str):
            return Reject(found)
        clone = found
    allowed = {"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"}
    allowed = allowed if shared else set(NODE_LOCAL_ACCESS_MODES)
    if not claim.access_modes or not set(claim.access_modes) <= allowed:
        return Reject(
            f"access modes {list(claim.access_modes)} not supported: node-local paths"
            " allow ReadWriteOnce and ReadWriteOncePod; a sharedFileSystemPath allows all"
        )
    node = None
    if clone is not None and clone.node_name is not None:
        wrong_node = wrong_node_reason(claim, clone)
        if wrong_node is not None:
            return Reschedule(wrong_node)
        node_name = clone_node(claim, clone, storage_class.binding_mode)
        if node_name is None:
            return Ignore("waiting for the scheduler to select a node")
        node = nodes.get(node_name)
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
        plan = _plan(
            claim,
            storage_class,
            config,
            node=node,
            shared=shared,
            provisioner_name=provisioner_name,
            paths=paths,
        )
    except NoRoom as error:
        return Reschedule(str(error))
    except (ConfigError, PathPatternError, ValueError) as error:
        return Reject(str(error))
    if "ReadWriteOncePod" in claim.access_modes and plan.volume_type != "local":
        return Reject(_one_pod_refused(storage_class.name, shared=shared))
    if clone is not None:
        plan = replace(plan, clone_source=clone)
    blockers = paths.overlapping(plan.volume_name, plan.disk_node, plan.path) if paths else []
    if blockers:
        return WaitForPath(
            f"path {plan.path} overlaps "
            + "; ".join(entry.describe() for entry in blockers)
            + ": waiting until it is gone",
            tuple(entry.volume_name for entry in blockers),
        )
    return Provision(plan)


def _one_pod_refused(class_name: str, *, shared: bool) -> str:
    """Why a ReadWriteOncePod claim gets no hostPath volume: the kubelet holds that mode to one
    pod only for a volume plugin that supports it (`local` does, hostPath does not), so a
    second pod placed on the node directly (spec.nodeName, past the scheduler) would run."""
    why = (
        "access mode ReadWriteOncePod is held to one pod only on a volume of volumeType: local"
        " (the kubelet does not hold it on a hostPath volume)"
    )
    if shared:
        return f"{why}, which a sharedFileSystemPath cannot have: use ReadWriteOnce or another mode"
    return (
        f"{why}: set the claim annotation volumeType: local, or the annotation"
        f" defaultVolumeType: local on StorageClass {class_name}"
    )


class NoRoom(Exception):  # noqa: N818 (reads as a sentence at the raise site)
    """No base path of the selected node has room for the claim: the text says sizes and
    budgets."""


def _outside_size_range(
    claim: ClaimRecord, requested: str, storage_class: StorageClassRecord
) -> str | None:
    """Why the request is not a size we accept or is outside the class's minSize/maxSize, or
    None when it is inside."""
    try:
        low, high = size_range(storage_class.parameters)
    except ConfigError as error:
        return f"StorageClass {storage_class.name}: {error}"
    try:
        size = quantity_to_bytes(requested)
    except QuantityTooLarge as error:
        return (
            f"claim {claim.namespace}/{claim.name} requests {error}:"
            " request a smaller spec.resources.requests.storage"
        )
    except ValueError as error:
        return str(error)
    if (low is not None and size < low) or (high is not None and size > high):
        shown = f"{format_bytes(low) if low is not None else '0'} .. " + (
            format_bytes(high) if high is not None else "unlimited"
        )
        return (
            f"requested {requested} is outside the size range of StorageClass"
            f" {storage_class.name} (minSize .. maxSize: {shown}): request a size in that range"
        )
    return None


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


def _plan(
    claim: ClaimRecord,
    storage_class: StorageClassRecord,
    config: ProvisionerConfig,
    *,
    node: NodeRecord | None,
    shared: bool,
    provisioner_name: str,
    paths: PathBook | None,
) -> ProvisionPlan:
    """Raises ConfigError/PathPatternError/ValueError with the reason to reject."""
    parameters, annotations = storage_class.parameters, storage_class.annotations
    validate_storage_class_parameters(storage_class.name, parameters, annotations, config)
    volume_type = volume_type_of(
        claim.annotations.get("volumeType", annotations.get("defaultVolumeType", "hostPath")),
        "volumeType annotation",
    )
    if shared and volume_type == "local":
        raise ValueError("volumeType local needs node affinity, which a shared path has not")
    affinity: tuple[str, str] | None = None
    if shared:
        candidates = config.paths_for(storage_class.name, node.name if node else "")
        disk_node = EVERY_NODE
    else:
        assert node is not None  # decide_claim_action waits for a selected node
        candidates = config.paths_for(storage_class.name, node.name)
        key = parameters.get("nodeAffinityKey", DEFAULT_NODE_AFFINITY_KEY)
        value = node.labels.get(key, node.name if key == DEFAULT_NODE_AFFINITY_KEY else None)
        if value is None:
            raise ValueError(f"node {node.name} has no label {key} (the class's nodeAffinityKey)")
        affinity, disk_node = (key, value), node.name
    if not candidates:
        raise ValueError(
            f"config.json serves no path on node {node.name if node else '?'}"
            f" for class {storage_class.name}"
        )
    if "nodePath" in parameters:
        if parameters["nodePath"] not in candidates:
            raise ValueError(
                f"nodePath {parameters['nodePath']} is not configured for node"
                f" {node.name if node else '?'}"
            )
        candidates = [parameters["nodePath"]]
    assert claim.requested_storage is not None
    size = quantity_to_bytes(claim.requested_storage)
    if node is not None and not shared:
        capacities = config.capacities_for(storage_class.name, node.name)
        if any(capacities.get(path) is not None for path in candidates):
            entries = paths.entries() if paths else []
            rooms = path_rooms(
                capacities, candidates, committed_bytes(entries, node.name, candidates)
            )
            roomy = paths_with_room(rooms, size)
            if not roomy:
                raise NoRoom(no_room_reason(node.name, size, rooms))
            candidates = roomy
    recorded = claim.annotations.get(BASE_PATH_ANNOTATION)
    if recorded in candidates:
        base_path, record = recorded, False
    else:
        counts = {p: paths.count_inside(disk_node, p) for p in candidates} if paths else {}
        base_path = choose_base_path(sorted(candidates), counts)
        # A recorded path that has lost its room is replaced on the claim, so a retry after
        # the room comes back cannot go back to it while a directory exists on the new one.
        record = len(candidates) > 1 or recorded is not None
    fields = PatternFields(
        volume_name_for(claim), claim.namespace, claim.name, claim.labels, claim.annotations
    )
    path = resolve_volume_path(
        base_path,
        parameters.get("pathPattern"),
        fields,
        allow_unsafe=allow_unsafe_path_pattern(parameters, annotations),
    )
    rendered = {
        k: render_pattern(parameters.get(f"{k}Pattern", ""), fields)
        for k in ("user", "group", "perm")
    }
    for key, value in rendered.items():
        if "\x00" in value or "\n" in value:
            raise ValueError(f"{key}Pattern renders a NUL or line break")
    if rendered["perm"]:
        check_perm(rendered["perm"], "permPattern")
    return ProvisionPlan(
        volume_name=volume_name_for(claim),
        provisioner_name=provisioner_name,
        claim=claim,
        storage_class=storage_class,
        node_name=node.name if node else None,
        node_affinity=affinity,
        base_path=base_path,
        path=path,
        volume_type=volume_type,
        size_bytes=size,
        vol_user=rendered["user"],
        vol_group=rendered["group"],
        vol_perm=rendered["perm"],
        record_base_path=record,
        reuse_existing_data=reuse_existing_data(parameters),
    )
