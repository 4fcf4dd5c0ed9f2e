"""What a PV of ours says: its name for a claim, its node (the one recorded on it, else the one
its affinity label finds), its size and its path's entry in the path book.

The volume's node is found by its label value (custom nodeAffinityKey included), checked against
the node name we record on the PV; rancher treats the label value as a node name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from provisioner.configuration.class_rules import ClassRules
from provisioner.configuration.config import DEFAULT_NODE_AFFINITY_KEY
from provisioner.objects.records import (
    NodeRecord,
    VolumeRecord,
    quantity_to_bytes,
)
from provisioner.provisioning.annotations import (
    NODE_ANNOTATION,
    RANCHER_NODE_ANNOTATION,
)
from provisioner.provisioning.paths import (
    EVERY_NODE,
    LIVE,
    RELEASED,
    PathBook,
    PathState,
)

Location = tuple[str, str]
"""The (label key, value) a PV's node affinity names, or ("", "") when it names none."""


class NodeListing(Protocol):
    """The nodes by name: a dict, or the node informer's cache."""

    def items(self) -> Iterable[tuple[str, NodeRecord]]: ...


def volume_location(volume: VolumeRecord) -> Location:
    for key, values in volume.affinity:
        if len(values) == 1:
            return (key, values[0])
    return ("", "")


def volume_path_state(volume: VolumeRecord) -> PathState:
    return RELEASED if volume.phase == "Released" else LIVE


def volume_node_name(volume: VolumeRecord) -> str:
    """The node we recorded on the PV; for older PVs, the hostname affinity's value."""
    recorded = volume.annotations.get(NODE_ANNOTATION) or volume.annotations.get(
        RANCHER_NODE_ANNOTATION
    )
    if recorded:
        return recorded
    key, value = volume_location(volume)
    return value if key == DEFAULT_NODE_AFFINITY_KEY else ""


def volume_disk_node(volume: VolumeRecord, nodes: NodeListing | None) -> str:
    """The node whose disk holds the volume's path, for the path book: the node recorded on the
    PV, else the one node carrying its affinity label (as `resolve_volume_node` finds it; the
    hostname label names it); EVERY_NODE for a PV without a single-valued affinity (a shared
    path) and for one whose node cannot be told, so that it overlaps every node's paths."""
    key, value = volume_location(volume)
    if not key:
        return EVERY_NODE
    if recorded := volume_node_name(volume):
        return recorded
    if nodes is None:
        return EVERY_NODE
    matches = [name for name, node in nodes.items() if _label(node, key) == value]
    return matches[0] if len(matches) == 1 else EVERY_NODE


def volume_size_bytes(volume: VolumeRecord) -> int:
    try:
        return quantity_to_bytes(volume.capacity or "0")
    except ValueError:
        return 0


def record_volume(book: PathBook, volume: VolumeRecord, nodes: NodeListing | None = None) -> None:
    """Puts one of our PVs into the book (one with no path holds no directory); `nodes` tell
    the node of a PV that does not name it (see `volume_disk_node`)."""
    if volume.path is not None:
        book.record_volume(
            volume.name,
            volume_disk_node(volume, nodes),
            volume.path,
            volume_path_state(volume),
            size_bytes=volume_size_bytes(volume),
        )


def volume_book(volumes: Iterable[VolumeRecord] = (), nodes: NodeListing | None = None) -> PathBook:
    book = PathBook()
    for volume in volumes:
        record_volume(book, volume, nodes)
    return book


def resolve_volume_node(
    volume: VolumeRecord, nodes: Mapping[str, NodeRecord]
) -> tuple[str | None, str | None]:
    """(node name, None) or (None, why not); the why begins "gone:" when the node is missing."""
    key, value = volume_location(volume)
    if not key:
        return None, "its node affinity has no single-valued In expression naming its node"
    recorded = volume.annotations.get(NODE_ANNOTATION) or volume.annotations.get(
        RANCHER_NODE_ANNOTATION
    )
    if recorded:
        node = nodes.get(recorded)
        if node is None:
            return None, f"gone: node {recorded} no longer exists"
        if _label(node, key) != value:
            return None, f"node {recorded} no longer carries {key}={value}"
        return recorded, None
    matches = [name for name, node in nodes.items() if _label(node, key) == value]
    if len(matches) == 1:
        return matches[0], None
    if not matches:
        return None, f"gone: no node carries {key}={value}"
    return None, f"{len(matches)} nodes carry {key}={value}: cannot tell which holds the data"


def volume_base_paths(
    volume: VolumeRecord, rules: ClassRules, nodes: Mapping[str, NodeRecord]
) -> tuple[str | None, list[str]] | str:
    """Where a volume's directory may lie: (its node, None on a shared filesystem, and the base
    paths its class (`rules`) has there), or why its node cannot be told (`resolve_volume_node`:
    it begins "gone:" when the node is missing). Removal and cloning both hold a volume's path
    to these base paths before they touch it."""
    if rules.shared_path is not None:
        return None, [rules.shared_path]
    node_name, problem = resolve_volume_node(volume, nodes)
    if node_name is None:
        return str(problem)
    return node_name, rules.base_paths_on(node_name)


def _label(node: NodeRecord, key: str) -> str | None:
    return node.labels.get(key, node.name if key == DEFAULT_NODE_AFFINITY_KEY else None)
