"""The local-path kinds of the loop's keys (`controller.Key`): what `local_path_watches` queues
and the local-path provisioner wakes."""

from provisioner.loop.controller import Key

__all__ = ["CLAIM", "EXPANSION", "HELPER_POD", "SNAPSHOT", "VOLUME", "Key"]

CLAIM = "claim"
EXPANSION = "expansion"
VOLUME = "volume"
HELPER_POD = "helper-pod"
SNAPSHOT = "snapshot"
"""A `Key` is (CLAIM, claim uid) for a claim's way to its PV, (EXPANSION, claim uid) for a bound
claim that asks to grow (a key of its own, as external-resizer is a controller of its own),
(VOLUME, volume name), (HELPER_POD, its informer key) or (SNAPSHOT, a
VolumeSnapshotContent's name)."""
