"""A volume's condition from facts about its directory and disk: pure.

The kubelet exposes it (kubelet_volume_stats_health_status_abnormal, with the CSIVolumeHealth
gate) and records it as an event on the pod; each abnormal message says what to do.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VolumeFacts:
    directory: str
    base_path: str
    directory_present: bool
    base_path_must_be_mount_point: bool
    base_path_is_mount_point: bool
    bytes_available: int
    inodes_total: int
    inodes_available: int


@dataclass(frozen=True)
class VolumeCondition:
    abnormal: bool
    message: str


def condition_of(facts: VolumeFacts) -> VolumeCondition:
    """The first problem found, in the order a user would fix them; else normal."""
    if facts.base_path_must_be_mount_point and not facts.base_path_is_mount_point:
        return VolumeCondition(
            True,
            f"the disk of base path {facts.base_path} is not mounted (config.json says a"
            " filesystem must be mounted there): mount it on the node and restart the pods"
            " using this volume; until then they see an empty directory",
        )
    if not facts.directory_present:
        return VolumeCondition(
            True,
            f"the volume's directory {facts.directory} is missing on the node: its data is"
            " gone; restore it from a backup, or delete the claim and make a new one",
        )
    if facts.bytes_available <= 0:
        return VolumeCondition(
            True,
            f"the filesystem of {facts.base_path} is full: free space on that disk or move"
            " volumes to another base path",
        )
    if facts.inodes_total > 0 and facts.inodes_available <= 0:
        return VolumeCondition(
            True,
            f"the filesystem of {facts.base_path} has no free inodes: remove files on that"
            " disk or move volumes to another base path",
        )
    return VolumeCondition(False, "the volume's directory is present and its disk has room")
