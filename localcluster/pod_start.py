"""How long a kubelet takes to start a pod, for the helper-pod runner.

The runner starts a helper pod's command in about a tenth of a second, where a real kubelet
first creates the pod sandbox (the pause container and the pod network, CNI) and then creates
and starts each container. On a real cluster one pod per volume is therefore far dearer than
here. The benchmark runs every implementation with `KUBELET` so that trade-off is priced as
users pay it; tests keep `FAST` (no added time).

Where the figures come from (docs/benchmarks.md, "Pod start model"): a real kubelet v1.36 with
containerd 2.2, runc and the CNI bridge plugin on a 2-core machine, measured by the local
cluster's real nodes (the same figures are in the real-node notes of the test infrastructure):
- a one-container helper pod, created to Succeeded: 2.0-2.7 s;
- a pod of 12 init containers and one more: 14.5-15.3 s, each container in sequence about
  1.0 s (the kubelet notices an exit at its once-a-second relist of the runtime's state).
So each container costs 1.0 s and the rest of a pod (its sandbox, the pause container and the
pod network, and its status rounds) 1.2 s: 2.2 s for one container, 14.2 s for thirteen.
The benchmark's bursts on real nodes (`python -m bench --scenario real`; docs/benchmarks.md,
"The kubelet model against the real nodes") check it: a pod alone and a pod's containers in
sequence still fit; a node starting ten or more pods at once makes each one slower than this,
which the model does not price.
Earlier published figures (containerd/containerd#6111: ~1.5 s of CNI set-up; the kubelet's
create_container p50 0.36 s in kubernetes/kubernetes#22585) priced a container at 0.3 s, a
third of what a kubelet's relist makes it cost in sequence.
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

KUBELET = PodStartModel(sandbox_seconds=1.2, container_seconds=1.0)
"""A kubelet with containerd and a CNI plugin, fitted to the real-node runs above."""

MODELS = {"fast": FAST, "kubelet": KUBELET}
"""By the name `python -m bench --pod-start` takes."""
