"""How long a kubelet takes to start a pod, for the helper-pod runner.

The runner starts a helper pod's command in about a tenth of a second, where a real kubelet
first creates the pod sandbox (the pause container and the pod network, CNI) and then creates
and starts each container. On a real cluster one pod per volume is therefore far dearer than
here. The benchmark runs every implementation with `KUBELET` so that trade-off is priced as
users pay it; tests keep `FAST` (no added time).

Where the figures come from (docs/benchmarks.md, "Pod start model"):
- sandbox, 1.0 s: containerd's CRI metrics pull request (containerd/containerd#6111) measured
  the default CNI setup inside RunPodSandbox at about 1.5 s on a developer machine; Kubernetes'
  scalability jobs report a pod start-up (created to running, no image pull) p50 of about 1 s
  (the SLO, sig-scalability's pod_startup_latency, allows 5 s at p99).
- each container, 0.3 s: the kubelet's create_container latency, p50 0.36 s, in
  kubernetes/kubernetes#22585; containerd is somewhat faster than the Docker of that report.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class PodStartModel:
    """Time added before a pod's first container (the sandbox) and before each container."""

    sandbox_seconds: float = 0.0
    container_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.sandbox_seconds < 0 or self.container_seconds < 0:
            raise ValueError(f"pod start times cannot be negative: {self}")

    def wait_sandbox(self, cancelled: threading.Event) -> bool:
        """Waits out the sandbox's creation; False when the pod was cancelled meanwhile."""
        return not (self.sandbox_seconds and cancelled.wait(self.sandbox_seconds))

    def wait_container(self, cancelled: threading.Event) -> bool:
        """Waits out one container's creation and start; False when cancelled meanwhile."""
        return not (self.container_seconds and cancelled.wait(self.container_seconds))


FAST = PodStartModel()
"""No added time: the tests' default."""

KUBELET = PodStartModel(sandbox_seconds=1.0, container_seconds=0.3)
"""A kubelet with containerd and a CNI plugin, from the published figures above."""

MODELS = {"fast": FAST, "kubelet": KUBELET}
"""By the name `python -m bench --pod-start` takes."""
