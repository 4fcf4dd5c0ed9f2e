"""Which helper pods serve which volume, from the helper-pod informer's events: a volume's own
pods by their volume label, a batch pod by its list of volumes. What the batcher asks before
it runs a volume, so that no second helper runs for it while another may still be running."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from provisioner.helper_pods.batch_pod_shapes import batch_volume_names
from provisioner.helper_pods.pod_shapes import HELPER_VOLUME_LABEL, label_value

FINISHED_PHASES = ("Succeeded", "Failed")


def served_volumes(pod: Mapping[str, Any]) -> set[str]:
    """The volumes (as label values) a helper pod runs setup or teardown code for."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    served = {label_value(name) for name in batch_volume_names(pod)}
    if labels.get(HELPER_VOLUME_LABEL):
        served.add(str(labels[HELPER_VOLUME_LABEL]))
    return served


def may_be_running(pod: Mapping[str, Any]) -> bool:
    return not is_finished(pod)


def is_finished(pod: Mapping[str, Any]) -> bool:
    """Succeeded or Failed: its containers run no more."""
    return (pod.get("status") or {}).get("phase") in FINISHED_PHASES


@dataclass(frozen=True)
class ServingPod:
    """A helper pod serving a volume, as the informer last saw it."""

    running: bool
    """Whether it may still be running (not Succeeded or Failed)."""
    node: str = ""
    state: str = ""
    """Its phase, and whether it is being deleted: what a volume waiting for it is told."""

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> ServingPod:
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        deleting = (pod.get("metadata") or {}).get("deletionTimestamp")
        state = f"{phase}, being deleted since {deleting}" if deleting else phase
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        return cls(may_be_running(pod), node, state)


class HelperPodIndex:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_volume: dict[str, dict[str, ServingPod]] = {}
        self._volumes_of: dict[str, set[str]] = {}

    def update(self, name: str, pod: Mapping[str, Any] | None) -> bool:
        """The pod as the informer now has it (None: deleted). Whether it went or ended, which
        may free a volume that waits for it."""
        volumes = served_volumes(pod) if pod is not None else set()
        serving = ServingPod.of(pod) if pod is not None else ServingPod(False)
        running = serving.running
        with self._lock:
            before = self._volumes_of.pop(name, set())
            was_running = any(
                self._by_volume.get(v, {}).get(name, ServingPod(False)).running for v in before
            )
            for volume in before:
                pods = self._by_volume.get(volume, {})
                pods.pop(name, None)
                if not pods:
                    self._by_volume.pop(volume, None)
            if volumes:
                self._volumes_of[name] = volumes
                for volume in volumes:
                    self._by_volume.setdefault(volume, {})[name] = serving
        return bool(before) and (pod is None or (was_running and not running))

    def pods_serving(self, volume_name: str) -> dict[str, ServingPod]:
        """The helper pods serving the volume, by name."""
        with self._lock:
            return dict(self._by_volume.get(label_value(volume_name), {}))
