"""The pod status a kubelet would report at each step of a helper pod's life, as patches.

Why: the provisioner under test reads helper-pod outcomes only from the API (phase, exit code,
termination message), so the runner must write what a kubelet writes. Built as plain dicts for
the pods/status subresource, testable without a cluster.

Init containers run one after another before the main container, as a kubelet runs them for a
pod with restartPolicy Never: while one runs or waits the pod is Pending and the main
container waits with reason PodInitializing; the first that fails fails the pod (phase Failed,
its own terminated state in initContainerStatuses, the main container never started).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from localcluster.helper_pods import pod_message_share, termination_message

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
    pod: Mapping[str, Any],
    state: dict[str, Any],
    *,
    ready: bool,
    started: bool,
    container: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    container = container if container is not None else pod["spec"]["containers"][0]
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


def init_containers(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(pod["spec"].get("initContainers") or [])


def _initializing(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The main container while init containers have not all succeeded."""
    status = _container_status(
        pod, {"waiting": {"reason": "PodInitializing"}}, ready=False, started=False
    )
    del status["containerID"]
    return status


def _init_statuses(
    pod: Mapping[str, Any], done: list[dict[str, Any]], current: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """Every init container's status: `done` (terminated states, in order), then `current`
    (the state of the one after them), then the rest waiting to initialize."""
    statuses = []
    for index, container in enumerate(init_containers(pod)):
        if index < len(done):
            state, ready, started = {"terminated": done[index]}, done[index]["exitCode"] == 0, False
        elif index == len(done) and current is not None:
            state, ready, started = current, False, "running" in current
        else:
            state, ready, started = {"waiting": {"reason": "PodInitializing"}}, False, False
        status = _container_status(pod, state, ready=ready, started=started, container=container)
        if "waiting" in state:
            del status["containerID"]
        statuses.append(status)
    return statuses


def waiting_status(
    pod: Mapping[str, Any],
    now: str,
    reason: str,
    message: str,
    *,
    init_done: list[dict[str, Any]] | None = None,
    init_index: int | None = None,
) -> dict[str, Any]:
    """Pending with a container waiting (e.g. ImagePullBackOff): the main container, or with
    `init_index` that init container (after the `init_done` ones succeeded)."""
    # A kubelet leaves out an empty message (ContainerCreating has none).
    waiting = {"waiting": {"reason": reason, "message": message} if message else {"reason": reason}}
    if init_index is None:
        status = _container_status(pod, waiting, ready=False, started=False)
        del status["containerID"]
    else:
        status = _initializing(pod)
    result: dict[str, Any] = {
        "phase": "Pending",
        "startTime": now,
        "conditions": [
            _condition("PodReadyToStartContainers", True, now),
            _condition("Initialized", init_index is None, now, _not_initialized(init_index)),
            _condition("ContainersReady", False, now, "ContainersNotReady"),
            _condition("Ready", False, now, "ContainersNotReady"),
        ],
        "containerStatuses": [status],
    }
    if init_containers(pod):
        current = waiting if init_index is not None else None
        result["initContainerStatuses"] = _init_statuses(pod, init_done or [], current)
    return result


def _not_initialized(init_index: int | None) -> str | None:
    return None if init_index is None else "ContainersNotInitialized"


def init_running_status(
    pod: Mapping[str, Any], now: str, init_done: list[dict[str, Any]]
) -> dict[str, Any]:
    """Pending, with the init container after the `init_done` ones running since `now`."""
    return {
        "phase": "Pending",
        "startTime": now,
        "conditions": [
            _condition("PodReadyToStartContainers", True, now),
            _condition("Initialized", False, now, "ContainersNotInitialized"),
            _condition("ContainersReady", False, now, "ContainersNotReady"),
            _condition("Ready", False, now, "ContainersNotReady"),
        ],
        "initContainerStatuses": _init_statuses(pod, init_done, {"running": {"startedAt": now}}),
        "containerStatuses": [_initializing(pod)],
    }


def running_status(
    pod: Mapping[str, Any], now: str, init_done: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Running, with the container running since `now` (after the `init_done` ones)."""
    status: dict[str, Any] = {
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
    if init_containers(pod):
        status["initContainerStatuses"] = _init_statuses(pod, init_done or [], None)
    return status


def terminated_state(
    pod: Mapping[str, Any],
    *,
    exit_code: int,
    reason: str,
    message: str,
    started_at: str,
    finished_at: str,
) -> dict[str, Any]:
    """A container's `terminated` state."""
    terminated: dict[str, Any] = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": started_at,
        "finishedAt": finished_at,
        "containerID": CONTAINER_ID_SCHEME + pod["metadata"]["uid"],
    }
    if message:
        terminated["message"] = pod_message_share(pod, message)
    return terminated


def init_failed_status(
    pod: Mapping[str, Any],
    init_done: list[dict[str, Any]],
    failed: dict[str, Any],
    *,
    pod_reason: str | None = None,
    pod_message: str | None = None,
) -> dict[str, Any]:
    """Failed in an init container (the one after the `init_done` ones): with restartPolicy
    Never the pod fails there and its main container never starts."""
    now = failed["finishedAt"]
    status: dict[str, Any] = {
        "phase": "Failed",
        "conditions": [
            _condition("PodReadyToStartContainers", False, now),
            _condition("Initialized", False, now, "PodFailed"),
            _condition("ContainersReady", False, now, "PodFailed"),
            _condition("Ready", False, now, "PodFailed"),
        ],
        "initContainerStatuses": _init_statuses(pod, [*init_done, failed], None),
        "containerStatuses": [_initializing(pod)],
    }
    if pod_reason:
        status["reason"] = pod_reason
        status["message"] = pod_message or ""
    return status


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
    init_done: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Succeeded (exit 0) or Failed, with the container terminated (after the `init_done`
    init containers succeeded)."""
    terminated = terminated_state(
        pod,
        exit_code=exit_code,
        reason=reason,
        message=message,
        started_at=started_at,
        finished_at=finished_at,
    )
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
    if init_containers(pod):
        status["initContainerStatuses"] = _init_statuses(pod, init_done or [], None)
    if pod_reason:
        status["reason"] = pod_reason
        status["message"] = pod_message or ""
    return status


def exit_reason(exit_code: int) -> str:
    return "Completed" if exit_code == 0 else "Error"
