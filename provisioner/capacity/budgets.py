"""Path budgets: how much of each base path's `capacity` our volumes take, and which paths
have room for a claim.

What counts against a budget is every entry of the PathBook under that base path on that
node: live PVs, Released ones (Retain volumes count until their PV is deleted), teardowns in
flight and provisions in flight (their reservation carries the claim's request). So two
workers deciding at once both see the other's reservation and cannot overcommit a path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from provisioner.objects.quantities import format_bytes
from provisioner.provisioning.paths import PathEntry, is_strictly_inside

UNLIMITED_BYTES = 1024**6
"""What a path without a capacity publishes to the scheduler (1Ei): the scheduler treats a
node with no CSIStorageCapacity as having no room at all, so "no budget" must be a number."""


@dataclass(frozen=True, slots=True)
class PathRoom:
    base_path: str
    capacity: int | None
    """The budget in bytes; None: no budget."""
    committed: int

    @property
    def free(self) -> int:
        if self.capacity is None:
            return UNLIMITED_BYTES
        return max(0, self.capacity - self.committed)

    def fits(self, size: int) -> bool:
        return self.capacity is None or self.committed + size <= self.capacity

    def describe(self) -> str:
        if self.capacity is None:
            return f"{self.base_path} (no capacity set)"
        return (
            f"{self.base_path} has {format_bytes(self.free)} free of"
            f" {format_bytes(self.capacity)} ({format_bytes(self.committed)} committed)"
        )


def committed_bytes(
    entries: Iterable[PathEntry], node: str, base_paths: Iterable[str]
) -> dict[str, int]:
    """Bytes committed under each base path on the node, by every entry the book holds."""
    totals = dict.fromkeys(base_paths, 0)
    for entry in entries:
        if entry.node != node:
            continue
        for base in totals:
            if is_strictly_inside(entry.path, base):
                totals[base] += entry.counted_bytes
                break
    return totals


def path_rooms(
    capacities: Mapping[str, int | None], candidates: Iterable[str], committed: Mapping[str, int]
) -> list[PathRoom]:
    return [
        PathRoom(path, capacities.get(path), committed.get(path, 0)) for path in sorted(candidates)
    ]


def paths_with_room(rooms: Iterable[PathRoom], size: int) -> list[str]:
    return [room.base_path for room in rooms if room.fits(size)]


def no_room_reason(node: str, size: int, rooms: Iterable[PathRoom]) -> str:
    """The Event text for a claim no path of its node can take: sizes and budgets."""
    return f"node {node} has no base path with room for {format_bytes(size)}: " + "; ".join(
        room.describe() for room in rooms
    )


def best_free_bytes(rooms: Iterable[PathRoom]) -> int:
    """The most a single new volume can get on the node: its best path's free budget."""
    return max((room.free for room in rooms), default=0)


class NoRoom(Exception):  # noqa: N818 (reads as a sentence at the raise site)
    """No base path of the selected node has room for the claim: the text says sizes and
    budgets."""


def with_room(
    capacities: Mapping[str, int | None],
    candidates: list[str],
    node_name: str,
    size: int,
    entries: Iterable[PathEntry],
) -> list[str]:
    """The candidate base paths of the node with room for `size` beside `entries` (every
    candidate when none has a budget); NoRoom when none has."""
    if all(capacities.get(path) is None for path in candidates):
        return candidates
    rooms = path_rooms(capacities, candidates, committed_bytes(entries, node_name, candidates))
    roomy = paths_with_room(rooms, size)
    if not roomy:
        raise NoRoom(no_room_reason(node_name, size, rooms))
    return roomy
