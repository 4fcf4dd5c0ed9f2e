"""Which helper pods serve which volume, from the helper-pod informer's events: a volume's own
pods by their volume label, a batch pod by its list of volumes. What the batcher asks before
it runs a volume, so that no second helper runs for it while another may still be running."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from provisioner.core.batch_pods import batch_volume_names
from provisioner.core.helpers import HELPER_VOLUME_LABEL, label_value

FINISHED_PHASES = ("Succeeded", "Failed")


def served_volumes(pod: Mapping[str, Any]) -> set[str]:
    """The volumes (as label values) a helper pod runs setup or teardown code for."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    served = {label_value(name) for name in batch_volume_names(pod)}
    if labels.get(HELPER_VOLUME_LABEL):
        served.add(str(labels[HELPER_VOLUME_LABEL]))
    return served


def may_be_running(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") not in FINISHED_PHASES


class HelperPodIndex:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_volume: dict[str, dict[str, bool]] = {}
        self._volumes_of: dict[str, set[str]] = {}

    def update(self, name: str, pod: Mapping[str, Any] | None) -> bool:
        """The pod as the informer now has it (None: deleted). Whether it went or ended, which
        may free a volume that waits for it."""
        volumes = served_volumes(pod) if pod is not None else set()
        running = pod is not None and may_be_running(pod)
        with self._lock:
            before = self._volumes_of.pop(name, set())
            was_running = any(self._by_volume.get(v, {}).get(name, False) for v in before)
            for volume in before:
                pods = self._by_volume.get(volume, {})
                pods.pop(name, None)
                if not pods:
                    self._by_volume.pop(volume, None)
            if volumes:
                self._volumes_of[name] = volumes
                for volume in volumes:
                    self._by_volume.setdefault(volume, {})[name] = running
        return bool(before) and (pod is None or (was_running and not running))

    def pods_serving(self, volume_name: str) -> dict[str, bool]:
        """The helper pods serving the volume, by name, each with whether it may still run."""
        with self._lock:
            return dict(self._by_volume.get(label_value(volume_name), {}))
