"""What the node plugin reads of a CSI volume's PV, and what it is to do with it: pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from provisioner.objects.node_handoff import (
    NODE_SIZE_ANNOTATION,
    REMOVAL_PERMIT_ANNOTATION,
    SETUP_ANNOTATION,
    VOLUME_PATH_KEY,
)
from provisioner.objects.quantities import quantity_to_bytes
from provisioner.provisioning.annotations import DIRECTORY_REMOVED_ANNOTATION

VolumeWork = Literal["set-up", "tear-down", "none"]


@dataclass(frozen=True)
class VolumeFacts:
    """A PV as the node plugin's watch keeps it (the informer's record)."""

    name: str
    uid: str
    driver: str
    handle: str
    path: str
    setup: str
    """The SETUP_ANNOTATION's text ("" when none)."""
    permit: str
    """The REMOVAL_PERMIT_ANNOTATION's text ("" when none)."""
    phase: str
    claim_uid: str
    claim_namespace: str
    claim_name: str
    removed: bool
    """The node marked it DIRECTORY_REMOVED_ANNOTATION already."""
    capacity_bytes: int = 0
    """spec.capacity's storage in bytes (0: none, or not a quantity): the size wanted."""
    node_size: int = 0
    """The NODE_SIZE_ANNOTATION's bytes (0: none yet): the size this node said it applied."""


def volume_facts(volume: Mapping[str, Any]) -> VolumeFacts:
    metadata = volume.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    spec = volume.get("spec") or {}
    csi = spec.get("csi") or {}
    claim = spec.get("claimRef") or {}
    return VolumeFacts(
        name=str(metadata.get("name", "")),
        uid=str(metadata.get("uid", "")),
        driver=str(csi.get("driver", "")),
        handle=str(csi.get("volumeHandle", "")),
        path=str((csi.get("volumeAttributes") or {}).get(VOLUME_PATH_KEY, "")),
        setup=str(annotations.get(SETUP_ANNOTATION, "")),
        permit=str(annotations.get(REMOVAL_PERMIT_ANNOTATION, "")),
        phase=str((volume.get("status") or {}).get("phase", "")),
        claim_uid=str(claim.get("uid", "")),
        claim_namespace=str(claim.get("namespace", "")),
        claim_name=str(claim.get("name", "")),
        removed=annotations.get(DIRECTORY_REMOVED_ANNOTATION) == "true",
        capacity_bytes=_bytes(str((spec.get("capacity") or {}).get("storage", "0"))),
        node_size=_bytes(str(annotations.get(NODE_SIZE_ANNOTATION, "0"))),
    )


def _bytes(quantity: str) -> int:
    try:
        return quantity_to_bytes(quantity)
    except ValueError:
        return 0


def size_to_apply(facts: VolumeFacts, setup_bytes: int) -> int | None:
    """The size the node is to apply to a set-up volume and then say on its PV: its capacity,
    when the controller grew it past the setup's size and the node has not said it holds it
    yet; None when nothing is to be done (a volume never grown costs no write)."""
    wanted = facts.capacity_bytes
    if wanted <= setup_bytes or facts.node_size >= wanted:
        return None
    return wanted


def volume_work(facts: VolumeFacts, driver: str) -> VolumeWork:
    """A PV of another driver, marked removed, or without its hand-off needs nothing; a
    Released one with the gate's permit is torn down; any other that is not released yet is set
    up (a Released one without a permit waits for the controller's gate)."""
    if facts.driver != driver or facts.removed or not facts.setup or not facts.path:
        return "none"
    if facts.phase == "Released":
        return "tear-down" if facts.permit else "none"
    if facts.phase == "Failed":
        return "none"
    return "set-up"


def permit_staleness(removal_text: str, uid: str, current: VolumeFacts | None) -> str | None:
    """Why the permit the watch showed is no longer the PV's, from a fresh read (`current`,
    None: the PV is gone); None when it still is. The rest (Released, from that claim) is
    `removal_refusal`'s, asked with the fresh facts."""
    if current is None:
        return "the PV is gone"
    if current.uid != uid:
        return "the PV was replaced by another of the same name"
    if current.removed:
        return "the PV is marked removed already"
    if current.permit != removal_text:
        return "the PV's permit changed"
    return None
