"""How long a kubelet takes to start a pod, for the helper-pod runner.

The runner starts a helper pod's command in about a tenth of a second, where a real kubelet
first creates the pod sandbox (the pause container and the pod network, CNI) and then creates
and starts each container. On a real cluster one pod per volume is therefore far dearer than
here. The benchmark runs every implementation with `KUBELET` so that trade-off is priced as
users pay it; tests keep `FAST` (no added time).

Where the figures come from (docs/benchmarks-method.md, "Pod start model"): a real kubelet
v1.36 with containerd 2.2, runc and the CNI bridge plugin on a 2-core machine, measured by the
local cluster's real nodes (the same figures are in the real-node notes of the test infrastructure):
- a one-container helper pod, created to Succeeded: 2.0-2.7 s;
- a pod of 12 init containers and one more: 14.5-15.3 s, each container in sequence about
  1.0 s (the kubelet notices an exit at its once-a-second relist of the runtime's state).
So each container costs 1.0 s and the rest of a pod (its sandbox, the pause container and the
pod network, and its status rounds) 1.2 s: 2.2 s for one container, 14.2 s for thirteen.
The benchmark's bursts on real nodes (`python -m bench --scenario real`; docs/benchmarks-method.md,
"The kubelet model against the real nodes") check it: a pod alone and a pod's containers in
sequence still fit; a node starting ten or more pods at once makes each one slower, up to two
or three times a pod alone, and later pods more than earlier ones. So each node has a start
lane: of a pod's 1.2 s sandbox, 0.43 s hold its node's lane, one pod after another in the order
they ask; the rest of its start runs in parallel, and pods on other nodes never wait. A node
starting k pods at once finishes the i-th (from 0) i x 0.43 s after a pod alone. 0.43 s is the
least-squares fit to ours' two-container teardown pods of that run, which start all at once
(created to Succeeded, p50 / p90 / max, nearest rank):
| pods a node at once | real | model without lane | with the lane |
| 10 (20 claims)      | 5.32 / 6.15 / 6.78 s | 3.2 s | 4.92 / 6.64 / 7.07 s |
| 12 (40 claims)      | 6.59 / 7.30 / 7.98 s | 3.2 s | 5.35 / 7.50 / 7.93 s |
The model is a little steep (p90 and max near or above the real, p50 below): on the real node
the first pods are slowed too, which a lane does not price.
Earlier published figures (containerd/containerd#6111: ~1.5 s of CNI set-up; the kubelet's
create_container p50 0.36 s in kubernetes/kubernetes#22585) priced a container at 0.3 s, a
third of what a kubelet's relist makes it cost in sequence.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class PodStartModel:
    """Time added before a pod's first container (the sandbox) and before each container; of
    the sandbox's time, `lane_seconds` hold the pod's node (one pod at a time a node)."""

    sandbox_seconds: float = 0.0
    container_seconds: float = 0.0
    lane_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.sandbox_seconds < 0 or self.container_seconds < 0 or self.lane_seconds < 0:
            raise ValueError(f"pod start times cannot be negative: {self}")
        if self.lane_seconds > self.sandbox_seconds:
            raise ValueError(f"the node's lane is part of the sandbox's time: {self}")

    def alone_seconds(self, containers: int) -> float:
        """What a pod of `containers` containers adds on a node that starts no other pod."""
        return self.sandbox_seconds + containers * self.container_seconds

    def wait_container(self, cancelled: threading.Event) -> bool:
        """Waits out one container's creation and start; False when cancelled meanwhile."""
        return not (self.container_seconds and cancelled.wait(self.container_seconds))


class NodeLanes:
    """The sandboxes of one cluster's pods under `model`, node by node: a pod's sandbox takes
    the node's lane at the first moment it is free after the pod asks (in the order pods ask)
    for `lane_seconds`, then the rest of its `sandbox_seconds`; pods on other nodes never wait
    for it. A pod deleted while it waits keeps its turn (its slot is not given back)."""

    def __init__(self, model: PodStartModel, clock: Callable[[], float] = time.monotonic) -> None:
        self.model = model
        self._clock = clock
        self._lock = threading.Lock()
        self._free_at: dict[str, float] = {}
        """When each node's lane is free again."""

    def sandbox_seconds(self, node: str) -> float:
        """Takes the next turn in `node`'s lane for a pod asking now; the seconds until its
        sandbox is ready."""
        if not self.model.lane_seconds:
            return self.model.sandbox_seconds
        with self._lock:
            now = self._clock()
            turn = max(now, self._free_at.get(node, now))
            self._free_at[node] = turn + self.model.lane_seconds
        return turn - now + self.model.sandbox_seconds

    def wait_sandbox(self, node: str, cancelled: threading.Event) -> bool:
        """Waits out the sandbox of a pod on `node`; False when the pod was cancelled
        meanwhile."""
        seconds = self.sandbox_seconds(node)
        return not (seconds and cancelled.wait(seconds))


FAST = PodStartModel()
"""No added time: the tests' default."""

KUBELET = PodStartModel(sandbox_seconds=1.2, container_seconds=1.0, lane_seconds=0.43)
"""A kubelet with containerd and a CNI plugin on a 2-core node, fitted to the real-node runs
above: 1.2 s a sandbox (0.43 s of it in the node's lane), 1.0 s a container."""

MODELS = {"fast": FAST, "kubelet": KUBELET}
"""By the name `python -m bench --pod-start` takes."""
