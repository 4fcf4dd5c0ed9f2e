"""The status a kubelet writes for a long-running pod, built from what the runner knows.

Why: the Deployment controller counts a replica available from the pod's Ready condition,
tests and people read restartCount, lastState and CrashLoopBackOff, and the scheduler's
PodScheduled condition must survive each write. Pure: the runner keeps a `ContainerLife` and
asks for the whole status (written as a merge patch, lists replaced whole).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from localcluster.helper_pod_status import CONTAINER_ID_SCHEME
from localcluster.helper_pods import START_ERROR_EXIT_CODE

OWNED_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")


@dataclass
class ContainerLife:
    """The one container of a pod as the runner knows it."""

    name: str
    image: str
    state: dict[str, Any] = field(
        default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}}
    )
    last_state: dict[str, Any] = field(default_factory=dict)
    ready: bool = False
    started: bool = False
    restart_count: int = 0
    container_id: str = ""
    ever_started: bool = False

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "name": self.name,
            "image": self.image,
            "imageID": "",
            "ready": self.ready,
            "started": self.started,
            "restartCount": self.restart_count,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.container_id:
            status["containerID"] = self.container_id
        return status


def container_id(uid: str, attempt: int) -> str:
    return f"{CONTAINER_ID_SCHEME}{uid}-{attempt}"


def terminated(
    exit_code: int,
    *,
    started_at: str,
    finished_at: str,
    container_id: str,
    message: str = "",
    reason: str | None = None,
) -> dict[str, Any]:
    """A `terminated` state: reason Completed for 0, StartError for 128, else Error."""
    if reason is None:
        reason = {0: "Completed", START_ERROR_EXIT_CODE: "StartError"}.get(exit_code, "Error")
    state: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": started_at,
        "finishedAt": finished_at,
        "containerID": container_id,
    }
    if message:
        state["message"] = message
    return {"terminated": state}


def back_off_message(delay: float, pod: Mapping[str, Any], container: str) -> str:
    metadata = pod["metadata"]
    return (
        f"back-off {delay:g}s restarting failed container={container} "
        f"pod={metadata['name']}_{metadata['namespace']}({metadata['uid']})"
    )


def _conditions(
    pod: Mapping[str, Any], wanted: dict[str, tuple[bool, str]], now: str
) -> list[dict[str, Any]]:
    """Ours as wanted, others (PodScheduled) as they are; a condition keeps its
    lastTransitionTime while its status does not change."""
    previous = {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []}
    conditions = [c for kind, c in previous.items() if kind not in OWNED_CONDITIONS]
    for kind in OWNED_CONDITIONS:
        value, reason = wanted[kind]
        text = "True" if value else "False"
        old = previous.get(kind) or {}
        condition: dict[str, Any] = {
            "type": kind,
            "status": text,
            "lastTransitionTime": old.get("lastTransitionTime", now)
            if old.get("status") == text
            else now,
        }
        if reason and not value:
            condition["reason"] = reason
        conditions.append(condition)
    return conditions


def pod_status(
    pod: Mapping[str, Any],
    life: ContainerLife,
    *,
    phase: str,
    now: str,
    start_time: str,
    pod_ip: str,
    host_ip: str,
    sandbox_ready: bool,
) -> dict[str, Any]:
    """The whole pods/status of a pod whose one container is `life`."""
    not_ready = "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"
    wanted = {
        "PodReadyToStartContainers": (sandbox_ready, ""),
        "Initialized": (True, ""),
        "ContainersReady": (life.ready, not_ready),
        "Ready": (life.ready, not_ready),
    }
    status: dict[str, Any] = {
        "phase": phase,
        "startTime": start_time,
        "conditions": _conditions(pod, wanted, now),
        "containerStatuses": [life.status()],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
    }
    if sandbox_ready and pod_ip:
        status["podIP"] = pod_ip
        status["podIPs"] = [{"ip": pod_ip}]
    return status
