"""The pod status a kubelet would report at each step of a helper pod's life, as patches.

Why: the provisioner under test reads helper-pod outcomes only from the API (phase, exit code,
termination message), so the runner must write what a kubelet writes. Built as plain dicts for
the pods/status subresource, testable without a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from localcluster.helper_pods import termination_message

CONTAINER_ID_SCHEME = "localcluster://"
DEADLINE_EXCEEDED_MESSAGE = "Pod was active on the node longer than the specified deadline"


def _condition(kind: str, status: bool, now: str, reason: str | None = None) -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": kind,
        "status": "True" if status else "False",
        "lastTransitionTime": now,
    }
    if reason:
        condition["reason"] = reason
    return condition


def _container_status(
    pod: Mapping[str, Any], state: dict[str, Any], *, ready: bool, started: bool
) -> dict[str, Any]:
    container = pod["spec"]["containers"][0]
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "",
        "containerID": CONTAINER_ID_SCHEME + pod["metadata"]["uid"],
        "ready": ready,
        "started": started,
        "restartCount": 0,
        "state": state,
    }


def waiting_status(pod: Mapping[str, Any], now: str, reason: str, message: str) -> dict[str, Any]:
    """Pending with the container waiting (e.g. ImagePullBackOff)."""
    status = _container_status(
        pod, {"waiting": {"reason": reason, "message": message}}, ready=False, started=False
    )
    del status["containerID"]
    return {
        "phase": "Pending",
        "startTime": now,
        "conditions": [
            _condition("PodReadyToStartContainers", True, now),
            _condition("Initialized", True, now),
            _condition("ContainersReady", False, now, "ContainersNotReady"),
            _condition("Ready", False, now, "ContainersNotReady"),
        ],
        "containerStatuses": [status],
    }


def running_status(pod: Mapping[str, Any], now: str) -> dict[str, Any]:
    """Running, with the container running since `now`."""
    return {
        "phase": "Running",
        "startTime": now,
        "conditions": [
            _condition("PodReadyToStartContainers", True, now),
            _condition("Initialized", True, now),
            _condition("ContainersReady", True, now),
            _condition("Ready", True, now),
        ],
        "containerStatuses": [
            _container_status(pod, {"running": {"startedAt": now}}, ready=True, started=True)
        ],
    }


def failure_message(container: Mapping[str, Any], exit_code: int, log: bytes) -> str:
    """The termination message: the log tail for a failed container whose policy is
    FallbackToLogsOnError. (The termination-message file itself is not emulated, so the
    default policy `File` reports no message, as a kubelet would for an unwritten file.)"""
    if exit_code == 0 or container.get("terminationMessagePolicy") != "FallbackToLogsOnError":
        return ""
    return termination_message(log)


def terminated_status(
    pod: Mapping[str, Any],
    *,
    exit_code: int,
    reason: str,
    message: str,
    started_at: str,
    finished_at: str,
    pod_reason: str | None = None,
    pod_message: str | None = None,
) -> dict[str, Any]:
    """Succeeded (exit 0) or Failed, with the container terminated."""
    terminated: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": started_at,
        "finishedAt": finished_at,
        "containerID": CONTAINER_ID_SCHEME + pod["metadata"]["uid"],
    }
    if message:
        terminated["message"] = message
    succeeded = exit_code == 0 and pod_reason is None
    status: dict[str, Any] = {
        "phase": "Succeeded" if succeeded else "Failed",
        "conditions": [
            _condition("PodReadyToStartContainers", False, finished_at),
            _condition("ContainersReady", False, finished_at, "PodCompleted"),
            _condition("Ready", False, finished_at, "PodCompleted"),
        ],
        "containerStatuses": [
            _container_status(pod, {"terminated": terminated}, ready=False, started=False)
        ],
    }
    if pod_reason:
        status["reason"] = pod_reason
        status["message"] = pod_message or ""
    return status


def exit_reason(exit_code: int) -> str:
    return "Completed" if exit_code == 0 else "Error"
