"""The local-path kinds of the loop's keys (`controller.Key`): what `local_path_watches` queues
and the local-path provisioner wakes."""

from provisioner.loop.controller import Key

__all__ = ["CLAIM", "HELPER_POD", "VOLUME", "Key"]

CLAIM = "claim"
VOLUME = "volume"
HELPER_POD = "helper-pod"
"""A `Key` is (CLAIM, claim uid), (VOLUME, volume name) or (HELPER_POD, its informer key)."""
