"""Volume expansion: whether a bound claim of ours that asks for more gets it (pure).

A directory needs no node-side step, so the provisioner resizes its own volumes, as the
external-resizer does for a CSI driver whose volumes need none: the claim's
status.allocatedResources set to the new size with allocatedResourceStatuses saying
ControllerResizeInProgress, then the PV's spec.capacity, then the claim's status.capacity with
that status entry cleared (Kubernetes 1.34 and later read allocatedResources: quota, and the
recovery from a failed resize). kube-controller-manager's expand controller leaves these
claims alone: no in-tree plugin can expand a hostPath or local PV, so it only records that an
external controller is expected (event ExternalExpanding) and never writes either object.

A bound claim whose status lacks allocatedResources (bound, or grown by an earlier version,
before this one set them) has them set to its volume's size: nothing tells a claim grown by
that version from one never grown (the PV and the claim read the same), and for a volume that
has what it was asked for that is what the field says.

Granted only when the class has allowVolumeExpansion, the claim is still inside the class's
maxSize, and the volume's base path has room for the difference in its budget.

A CSI volume's size is the node's to apply (a btrfs subvolume's limit; a plain directory has
none, a block volume's file grows): the provisioner grows its PV, the node plugin applies the
new size and says so on the PV (NODE_SIZE_ANNOTATION), and only then is the claim's resize
finished. A helper pod's volume is as before: its quota is raised before the PV grows.
"""

from __future__ import annotations

from dataclasses import dataclass

from provisioner.configuration.class_parameters import CSI_VOLUME_TYPE
from provisioner.configuration.class_rules import ClassRules
from provisioner.objects.node_handoff import NODE_SIZE_ANNOTATION
from provisioner.objects.quantities import QuantityTooLarge, format_bytes, quantity_to_bytes
from provisioner.objects.records import ClaimRecord, VolumeRecord
from provisioner.provisioning.annotations import PROVISIONED_BY
from provisioner.provisioning.paths import (
    PathBook,
    committed_bytes,
    is_strictly_inside,
    no_room_reason,
    path_rooms,
)
from provisioner.provisioning.volume_facts import volume_node_name, volume_size_bytes


@dataclass(frozen=True, slots=True)
class Expand:
    """Grow the volume; also the target of the helper that raises its quota (`HelperTarget`)."""

    volume_name: str
    capacity: str
    """The new size, as the claim requested it."""
    size_bytes: int
    node_name: str
    path: str
    base_path: str = ""
    """The configured base path holding the volume ("" when none holds it any more: no quota
    can be raised then)."""
    volume_mode: str = "Filesystem"
    vol_user: str = ""
    vol_group: str = ""
    vol_perm: str = ""


@dataclass(frozen=True, slots=True)
class FinishExpansion:
    """The PV has grown but the claim's status has not caught up: a crash in between, or an
    earlier version that never set allocatedResources."""

    capacity: str
    """The PV's capacity: what the claim's status is told it has and was allocated."""
    resized: bool = True
    """Whether the claim's status.capacity is behind (the end of a resize, worth an event);
    False: only its allocatedResources (or a resize status left set) is."""


@dataclass(frozen=True, slots=True)
class RefuseExpansion:
    reason: str
    waits_for_room: bool = False
    """Refused only for want of room in the path's budget: worth another look when a volume
    there goes (other refusals change only with the claim or its class)."""


@dataclass(frozen=True, slots=True)
class NoExpansion:
    reason: str


ExpansionDecision = Expand | FinishExpansion | RefuseExpansion | NoExpansion


def decide_expansion(
    claim: ClaimRecord,
    volume: VolumeRecord | None,
    rules: ClassRules,
    *,
    provisioner_name: str,
    paths: PathBook | None = None,
) -> ExpansionDecision:
    """`rules`: those of the claim's class, read once (`class_rules`)."""
    if volume is None or volume.annotations.get(PROVISIONED_BY) != provisioner_name:
        return NoExpansion("not bound to a volume of ours")
    if volume.claim_ref is None or volume.claim_ref.uid != claim.uid:
        return NoExpansion(f"volume {volume.name} is not this claim's")
    if claim.being_deleted:
        # Neither grown nor caught up: its status goes with it (and a release of many claims
        # would spend a write each on it).
        return NoExpansion("the claim is being deleted")
    try:
        requested = quantity_to_bytes(claim.requested_storage or "0")
    except QuantityTooLarge as error:
        return RefuseExpansion(
            f"claim {claim.namespace}/{claim.name} requests {error}: request a smaller size"
        )
    except ValueError as error:
        return NoExpansion(str(error))
    current = volume_size_bytes(volume)
    if requested <= current:
        # No status capacity yet: the PV controller is still binding the claim (it sets the
        # capacity with the Bound phase), which is not ours to finish.
        if claim.status_capacity is None:
            return NoExpansion("the claim is still being bound")
        status = _bytes_or_zero(claim.status_capacity)
        if status < current and volume.capacity:
            if node_behind(volume, current):
                return NoExpansion(
                    f"volume {volume.name} grew to {format_bytes(current)}: its node has not"
                    " applied that size yet"
                )
            return FinishExpansion(volume.capacity)
        if allocation_behind(claim, current) and volume.capacity:
            return FinishExpansion(volume.capacity, resized=False)
        return NoExpansion("the volume is as large as the claim asks")
    refused = _refusal(claim, volume, rules, requested=requested, current=current, paths=paths)
    if refused is not None:
        return refused
    assert volume.path is not None and claim.requested_storage is not None
    node = volume_node_name(volume)
    bases = rules.capacities_on(node)
    base = next((b for b in bases if is_strictly_inside(volume.path, b)), "")
    return Expand(volume.name, claim.requested_storage, requested, node, volume.path, base)


def node_behind(volume: VolumeRecord, size_bytes: int) -> bool:
    """Whether a CSI volume's node has not said it holds `size_bytes` yet (the PV's
    NODE_SIZE_ANNOTATION, written by the node plugin once it applied the size)."""
    if volume.volume_type != CSI_VOLUME_TYPE:
        return False
    return _bytes_or_zero(volume.annotations.get(NODE_SIZE_ANNOTATION)) < size_bytes


def allocation_behind(claim: ClaimRecord, volume_bytes: int) -> bool:
    """Whether a bound claim's status does not say what its volume of `volume_bytes` has, as
    the resize path leaves it when done: allocatedResources that size, no resize status."""
    return claim.resize_status is not None or (
        claim.allocated_storage is None or _bytes_or_zero(claim.allocated_storage) != volume_bytes
    )


def _refusal(
    claim: ClaimRecord,
    volume: VolumeRecord,
    rules: ClassRules,
    *,
    requested: int,
    current: int,
    paths: PathBook | None,
) -> RefuseExpansion | None:
    wanted = f"growing {volume.name} from {format_bytes(current)} to {format_bytes(requested)}"
    if rules.storage_class is None or not rules.storage_class.allow_volume_expansion:
        return RefuseExpansion(
            f"{wanted}: StorageClass {claim.storage_class_name} does not allowVolumeExpansion"
        )
    if rules.size_problem is not None:
        return RefuseExpansion(f"{wanted}: StorageClass {rules.name}: {rules.size_problem}")
    high = rules.max_size
    if high is not None and requested > high:
        return RefuseExpansion(
            f"{wanted}: above maxSize {format_bytes(high)} of StorageClass {rules.name}"
        )
    if volume.path is None:
        return RefuseExpansion(f"{wanted}: the PV has no path")
    node = volume_node_name(volume)
    capacities = rules.capacities_on(node)
    base = next((b for b in capacities if is_strictly_inside(volume.path, b)), None)
    if base is None or capacities[base] is None:
        return None  # no budget on this path: any size fits
    # The volume's own entry may count an earlier, failed resize (see `PathBook.start_resize`):
    # what it takes is its current size plus the growth asked for, never both on top.
    others = [
        e for e in (paths.entries() if paths is not None else []) if e.volume_name != volume.name
    ]
    committed = committed_bytes(others, node, [base])
    committed[base] += current
    rooms = path_rooms(capacities, [base], committed)
    if not rooms[0].fits(requested - current):
        reason = f"{wanted}: " + no_room_reason(node, requested - current, rooms)
        return RefuseExpansion(reason, waits_for_room=True)
    return None


def _bytes_or_zero(quantity: str | None) -> int:
    try:
        return quantity_to_bytes(quantity or "0")
    except ValueError:
        return 0
