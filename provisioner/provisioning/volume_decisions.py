"""What a PV of ours needs now: a teardown, our finalizer added or removed, nothing, or a
refusal that leaves the data alone.

Pure functions over the compact records: the provisioner looks the PV up in its caches, calls
`decide_volume_action`, and carries out what comes back; each outcome carries its reason, which
becomes the event or log line. Decisions where we differ from rancher and the library
(documented here, tested in tests/provisioner/provisioning/test_claims.py):
- Deletion only removes a path written clean and strictly inside a base path configured for
  the volume's node (or the shared path), and never one that another of our volumes also uses
  (a recreated claim under a `{{.PVC.Namespace}}/{{.PVC.Name}}` pattern gets the same directory).
- Node gone: a Released volume keeps its PV (Warning, data untouched) so the admin sees it and
  the teardown resumes if the node returns; a PV the admin deletes while its node is gone has
  our finalizer removed without cleanup, as nothing can be cleaned.
- A teardown whose directory was removed already (DIRECTORY_REMOVED_ANNOTATION) deletes the PV
  without a helper pod.
- Node loss, for a class that opts in (`nodeLossGracePeriod`): once the volume's node has been
  gone that long, its bound claim is released (deleted, so that a StatefulSet makes a new one
  elsewhere; Kubernetes keeps a claim that a scheduled pod still uses until that pod goes), and
  the PV then goes without a helper pod, its data left on that node; a node back within the
  period keeps its volumes untouched. Without the parameter, as above. Only a release whose
  DELETE of the claim was carried out lets the PV go (its mark names that claim's UID): one
  refused or lost, followed by the node's return, leaves an ordinary volume, torn down when
  its claim is deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from provisioner.configuration.class_parameters import CSI_VOLUME_TYPE
from provisioner.configuration.class_rules import ClassRules
from provisioner.csi.driver_name import driver_name_for
from provisioner.objects.records import (
    ClaimReference,
    NodeRecord,
    VolumeRecord,
)
from provisioner.provisioning.annotations import (
    DIRECTORY_REMOVED_ANNOTATION,
    PROVISIONED_BY,
    RELEASED_FOR_NODE_LOSS_ANNOTATION,
    VOLUME_FINALIZER,
    node_loss_release_mark,
)
from provisioner.provisioning.claims import Ignore
from provisioner.provisioning.paths import (
    EVERY_NODE,
    TEARING_DOWN,
    TORN_DOWN,
    PathBook,
    is_deletable_path,
    is_strictly_inside,
)
from provisioner.provisioning.volume_facts import (
    volume_base_paths,
    volume_node_name,
    volume_size_bytes,
)


@dataclass(frozen=True, slots=True)
class TeardownPlan:
    """Run the teardown helper; once it succeeded, remove our finalizer (if remove_finalizer)
    and then delete the PV object (if delete_volume), in the library's order, so that a
    deleted PV never comes back to be torn down twice."""

    volume_name: str
    path: str
    node_name: str | None
    volume_mode: str
    size_bytes: int
    delete_volume: bool
    """Then delete the PV object (it was Released); False when the user already deleted it."""
    remove_finalizer: bool
    vol_user: str = ""
    vol_group: str = ""
    vol_perm: str = ""
    base_path: str = ""
    """The configured base path holding `path`: what the helper pod mounts."""

    @property
    def disk_node(self) -> str:
        """The node whose disk holds the path, as the path book tells paths apart; EVERY_NODE
        on a shared filesystem (no node of its own)."""
        return self.node_name or EVERY_NODE


@dataclass(frozen=True, slots=True)
class Teardown:
    plan: TeardownPlan


@dataclass(frozen=True, slots=True)
class RefuseUnsafePath:
    """Never run the teardown: Warning event (VolumeFailedDelete) on the PV."""

    reason: str


@dataclass(frozen=True, slots=True)
class AddFinalizer:
    reason: str = "Delete policy: the finalizer makes a directly deleted PV still get cleaned"


@dataclass(frozen=True, slots=True)
class RemoveFinalizer:
    reason: str


@dataclass(frozen=True, slots=True)
class NodeGone:
    """Warning event, data untouched; remove_finalizer lets a user-deleted PV go."""

    reason: str
    remove_finalizer: bool


@dataclass(frozen=True, slots=True)
class DeleteRemovedVolume:
    """A teardown already removed the directory (DIRECTORY_REMOVED_ANNOTATION): the PV goes
    (delete_volume) and our finalizer with it, without a helper pod."""

    volume_name: str
    delete_volume: bool
    remove_finalizer: bool


@dataclass(frozen=True, slots=True)
class NodeLoss:
    """What the provisioner knows of a volume's node having gone, for a class that opts in."""

    grace_seconds: int
    """The class's `nodeLossGracePeriod`."""
    gone_for_seconds: float
    """How long the volume's node has been seen gone (0 while it is there)."""


@dataclass(frozen=True, slots=True)
class AwaitNode:
    """The volume's node is gone, for less than its class's grace period: Warning events on the
    PV and its claim; looked at again once the period is over (`remaining_seconds`)."""

    volume_name: str
    node_name: str
    reason: str
    remaining_seconds: float
    claim: ClaimReference | None


@dataclass(frozen=True, slots=True)
class ReleaseClaim:
    """The volume's node has been gone for its class's grace period: delete its claim (that
    very claim: its UID), then mark the PV with it, with Warning events on both."""

    volume_name: str
    node_name: str
    claim: ClaimReference
    reason: str


@dataclass(frozen=True, slots=True)
class LetGoOfVolume:
    """A PV released for its node's loss: our finalizer removed and the PV deleted (when
    `delete_volume`) without a helper pod; its data stays where it was."""

    volume_name: str
    reason: str
    delete_volume: bool
    remove_finalizer: bool


VolumeDecision = (
    Ignore
    | Teardown
    | RefuseUnsafePath
    | AddFinalizer
    | RemoveFinalizer
    | NodeGone
    | DeleteRemovedVolume
    | AwaitNode
    | ReleaseClaim
    | LetGoOfVolume
)


def decide_volume_action(
    volume: VolumeRecord,
    rules: ClassRules,
    nodes: Mapping[str, NodeRecord],
    *,
    provisioner_name: str,
    paths: PathBook | None = None,
    directory_removed: bool = False,
    node_loss: NodeLoss | None = None,
) -> VolumeDecision:
    """`directory_removed`: this process saw the volume's teardown pod succeed (the PV may not
    show DIRECTORY_REMOVED_ANNOTATION yet: the informer lags, or the PATCH failed).
    `node_loss`: the class releases claims whose node is gone (None: it never does). `rules`:
    those of the volume's class, read once (`class_rules`)."""
    if volume.annotations.get(PROVISIONED_BY) != provisioner_name:
        return Ignore("not provisioned by us")
    entry = paths.get(volume.name) if paths is not None else None
    if entry is not None and entry.state in (TEARING_DOWN, TORN_DOWN):
        return Ignore(f"{entry.describe()}: nothing more to do")
    has_finalizer = VOLUME_FINALIZER in volume.finalizers
    if volume.reclaim_policy != "Delete":
        if has_finalizer:
            return RemoveFinalizer(f"reclaim policy {volume.reclaim_policy}: the data is kept")
        return Ignore(f"reclaim policy {volume.reclaim_policy}: the data is kept")
    removed = directory_removed or volume.annotations.get(DIRECTORY_REMOVED_ANNOTATION) == "true"
    if volume.volume_type == CSI_VOLUME_TYPE and (
        volume.being_deleted or volume.phase == "Released"
    ):
        driver = driver_name_for(provisioner_name)
        if volume.csi_driver != driver and has_finalizer:
            return RefuseUnsafePath(
                f"the PV names CSI driver {volume.csi_driver}, not {driver}, whose node plugin"
                " alone removes our CSI volumes: remove the data and the PV (and its"
                " finalizer) by hand once it is safe"
            )
    lost_node = _released_for_node_loss(volume)
    if lost_node and (volume.being_deleted or volume.phase == "Released"):
        return LetGoOfVolume(
            volume.name,
            f"its claim was released when node {lost_node} had gone: the PV goes, and its data"
            f" stays on {lost_node} (the orphan report lists it should the node come back)",
            delete_volume=not volume.being_deleted,
            remove_finalizer=has_finalizer,
        )
    if volume.being_deleted:
        if not has_finalizer:
            return Ignore("being deleted without our finalizer")
        if volume.phase == "Bound":
            return Ignore("deleted while bound: waiting until the claim lets go of it")
        if removed:
            return DeleteRemovedVolume(volume.name, delete_volume=False, remove_finalizer=True)
        return _teardown(volume, rules, nodes, paths, delete_volume=False)
    if volume.phase == "Released":
        if removed:
            return DeleteRemovedVolume(
                volume.name, delete_volume=True, remove_finalizer=has_finalizer
            )
        return _teardown(volume, rules, nodes, paths, delete_volume=True)
    if volume.phase == "Bound" and node_loss is not None and volume.claim_ref is not None:
        lost = _node_loss(volume, nodes, node_loss, volume.claim_ref)
        if lost is not None:
            return lost
    if not has_finalizer and volume.phase != "Failed":
        return AddFinalizer()
    return Ignore(f"phase {volume.phase or 'unknown'}: nothing to do")


def _released_for_node_loss(volume: VolumeRecord) -> str | None:
    """The lost node's name when the PV's mark proves that the node-loss release deleted the
    very claim the PV was bound to (the mark names that claim's UID, written once the API
    server answered its DELETE); None for no mark, an older bare mark (the node's name alone,
    written before the DELETE was sent, which may have failed) or a mark for another claim:
    the volume is then an ordinary one, torn down when its node is there."""
    mark = volume.annotations.get(RELEASED_FOR_NODE_LOSS_ANNOTATION, "")
    node, _, claim_uid = mark.partition("/")
    if not node or not claim_uid or volume.claim_ref is None:
        return None
    if mark != node_loss_release_mark(node, volume.claim_ref.uid):
        return None
    return node


def _node_loss(
    volume: VolumeRecord,
    nodes: Mapping[str, NodeRecord],
    node_loss: NodeLoss,
    claim: ClaimReference,
) -> AwaitNode | ReleaseClaim | None:
    """For a bound volume of a class that opts in: None while its node is there (or cannot be
    named); else wait out the grace period, then release the claim."""
    node = volume_node_name(volume)
    if not node or node in nodes:
        return None
    grace = node_loss.grace_seconds
    remaining = grace - node_loss.gone_for_seconds
    if remaining > 0:
        return AwaitNode(
            volume.name,
            node,
            f"node {node} is gone: claim {claim.namespace}/{claim.name} is released in"
            f" {remaining:.0f}s (nodeLossGracePeriod {grace}s) unless the node comes back",
            remaining,
            claim,
        )
    return ReleaseClaim(
        volume.name,
        node,
        claim,
        f"node {node} has been gone for {grace}s (nodeLossGracePeriod): releasing claim"
        f" {claim.namespace}/{claim.name} so that its workload gets a new volume; the data"
        f" stays on {node}",
    )


def _teardown(
    volume: VolumeRecord,
    rules: ClassRules,
    nodes: Mapping[str, NodeRecord],
    paths: PathBook | None,
    *,
    delete_volume: bool,
) -> VolumeDecision:
    fix = "; remove the data and the PV (and its finalizer) by hand once it is safe"
    if volume.path is None:
        return RefuseUnsafePath(f"the PV has neither a hostPath nor a local path{fix}")
    if not rules.configured:
        return RefuseUnsafePath(
            f"config.json has no entry for class {volume.storage_class_name}"
            " (add it back to clean up)"
        )
    place = volume_base_paths(volume, rules, nodes)
    if isinstance(place, str):
        if place.startswith("gone: "):
            return NodeGone(
                f"{place[6:]}: the data of {volume.name} was not removed; delete the"
                " PV to let it go without cleanup",
                remove_finalizer=volume.being_deleted,
            )
        return RefuseUnsafePath(f"cannot find the volume's node: {place}{fix}")
    node_name, base_paths = place
    if not is_deletable_path(volume.path, base_paths):
        return RefuseUnsafePath(
            f"path {volume.path} is not clean and strictly inside a base path"
            f" configured for this volume ({', '.join(base_paths) or 'none'}){fix}"
        )
    if paths is not None:
        others = paths.overlapping(volume.name, node_name or EVERY_NODE, volume.path)
        if others:
            names = ", ".join(entry.volume_name for entry in others)
            return RefuseUnsafePath(f"path {volume.path} is also used by {names}{fix}")
    size = volume_size_bytes(volume)
    return Teardown(
        TeardownPlan(
            volume_name=volume.name,
            path=volume.path,
            node_name=node_name,
            volume_mode=volume.volume_mode,
            size_bytes=size,
            delete_volume=delete_volume,
            remove_finalizer=VOLUME_FINALIZER in volume.finalizers,
            base_path=next(base for base in base_paths if is_strictly_inside(volume.path, base)),
        )
    )
