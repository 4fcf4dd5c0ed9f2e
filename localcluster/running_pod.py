"""One image-table pod as its kubelet knows it: the manifest, the container's life, the phase,
the signals of its deletion, and the status written from them.

Why apart: the worker (pod_worker.py) moves a pod through its life, and each run of its
container (container_run.py) changes that life and reports it; both read and write this one
state, so it is theirs to share and neither imports the other.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from localcluster import container_status as statuses
from localcluster import image_pod_plan as rules
from localcluster.cluster_dirs import pod_log_path
from localcluster.event_log import EventLog, utc_now
from localcluster.image_table import ImageRuntime
from localcluster.pod_api import PodApi
from localcluster.pod_network import PodNetwork


@dataclass(frozen=True)
class WorkerContext:
    """What a pod's worker needs from the runner."""

    core: client.CoreV1Api
    api: PodApi
    log: EventLog
    cluster_dir: Path
    node_dir: Path
    runtime: ImageRuntime
    backoff: rules.RestartBackoff
    api_port: int
    pod_ip: str
    host_ip: str
    on_process: Callable[[int], None]


class RunningPod:
    """The pod's state: `update` with each new version, `cancel` when it is gone, `report`
    after each change of `life` or `phase`."""

    def __init__(self, pod: dict[str, Any], context: WorkerContext) -> None:
        self.pod = pod
        self.context = context
        metadata = pod["metadata"]
        self.namespace: str = metadata["namespace"]
        self.name: str = metadata["name"]
        self.uid: str = metadata["uid"]
        container = (pod["spec"].get("containers") or [{}])[0]
        self.life = statuses.ContainerLife(container.get("name", ""), container.get("image", ""))
        self.network = PodNetwork(context.pod_ip, context.api_port)
        self.deleting = threading.Event()
        self.gone = threading.Event()
        self.changed = threading.Event()
        self.volumes_changed = threading.Event()
        self.phase = "Pending"
        self.sandbox_ready = False
        self._start_time = utc_now()
        self._lock = threading.Lock()
        self._last_report = ""
        self.log_path = pod_log_path(context.cluster_dir, self.namespace, self.name, self.uid)

    # Signals from the runner.
    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp"):
            self.deleting.set()
        self.changed.set()

    def cancel(self) -> None:
        """The pod is gone (or the harness stops): kill at once, write nothing more."""
        self.gone.set()
        self.changed.set()
        self.volumes_changed.set()

    def stopping(self) -> bool:
        return self.deleting.is_set() or self.gone.is_set()

    def sleep(self, seconds: float) -> bool:
        """Waits `seconds`; False as soon as the pod is being stopped."""
        deadline = time.monotonic() + seconds
        while not self.stopping():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            self.changed.wait(remaining)
            self.changed.clear()
        return False

    # Status.
    def pod_with_ips(self) -> dict[str, Any]:
        """The pod as the downward API sees it: with the IPs it is about to report."""
        status = {**(self.pod.get("status") or {})}
        status.update(podIP=self.context.pod_ip, hostIP=self.context.host_ip)
        status.update(podIPs=[{"ip": self.context.pod_ip}], hostIPs=[{"ip": self.context.host_ip}])
        return {**self.pod, "status": status}

    def waiting(self, reason: str, message: str) -> None:
        self.life.state = {"waiting": {"reason": reason, "message": message}}
        self.life.ready = self.life.started = False
        self.report()

    def report(self) -> None:
        """Writes the whole status unless it says what was written last."""
        with self._lock:
            if self.gone.is_set():
                return
            status = statuses.pod_status(
                self.pod,
                self.life,
                phase=self.phase,
                now=utc_now(),
                start_time=self._start_time,
                pod_ip=self.context.pod_ip,
                host_ip=self.context.host_ip,
                sandbox_ready=self.sandbox_ready,
            )
            key = repr(
                {**status, "conditions": [(c["type"], c["status"]) for c in status["conditions"]]}
            )
            if key == self._last_report:
                return
            self._last_report = key
            self.context.api.patch_status(self.pod, status)

    def log(self, line: str) -> None:
        self.context.log.write(f"{self.namespace}/{self.name}: {line}")
