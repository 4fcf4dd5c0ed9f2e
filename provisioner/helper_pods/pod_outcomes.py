"""What a helper pod's status means: the outcomes a run reports and how each observed state of
the pod is judged. Pure: the runner in pod_runner.py feeds it the pod objects it watches."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from provisioner.kube.clock import Clock

# Waiting reasons that mean the container will not start without someone fixing something.
START_FAILURE_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


NEVER_CREATED_REASON = "ContainerStatusUnknown"
"""A terminated container's reason when its kubelet never found it (it was never created)."""


class HelperPodError(Exception):
    """A helper pod did not succeed. `duration` is set when the run ends (for metrics)."""

    def __init__(self, pod: str, message: str) -> None:
        super().__init__(f"helper pod {pod}: {message}")
        self.pod = pod
        self.duration: float | None = None
        self.last_seen: dict[str, Any] | None = None
        """The pod as last seen before the run ended this way (a batch pod's volumes that
        finished before it are read from it)."""


class HelperPodFailed(HelperPodError):  # noqa: N818 (the contract's name)
    def __init__(
        self, pod: str, exit_code: int | None, reason: str, log_tail: str, container: str = ""
    ) -> None:
        code = "no exit code" if exit_code is None else f"exit code {exit_code}"
        detail = f": {log_tail.strip()}" if log_tail.strip() else ""
        super().__init__(pod, f"failed ({reason}, {code}){detail}")
        self.exit_code = exit_code
        self.reason = reason
        self.log_tail = log_tail
        self.container = container
        """The container whose end failed the pod ("" when not known): which step failed."""


class HelperPodTimeout(HelperPodError):  # noqa: N818 (the contract's name)
    def __init__(self, pod: str, timeout: float, last_state: str) -> None:
        super().__init__(pod, f"did not finish within {timeout:g}s (last seen: {last_state})")
        self.timeout = timeout
        self.last_state = last_state


class HelperPodNotStarted(HelperPodError):  # noqa: N818 (the contract's name)
    def __init__(self, pod: str, reason: str) -> None:
        super().__init__(pod, f"could not start: {reason}")
        self.reason = reason


class DirectoryUnknown(HelperPodError):  # noqa: N818 (a helper pod's outcome, as its peers)
    """A teardown pod that never ran, and the look at whether its directory is gone (asked
    then) that proved nothing: it refused, say, a base path declared a mount point with no
    filesystem mounted there, whose directory only seems gone. The teardown is retried, and
    its Warning says what the look said (the helper's own words: what to do)."""

    def __init__(self, teardown: HelperPodError, look: HelperPodError) -> None:
        said = look.log_tail.strip() if isinstance(look, HelperPodFailed) else ""
        teardown_said = str(teardown).removeprefix(f"helper pod {teardown.pod}: ")
        super().__init__(
            teardown.pod,
            f"{teardown_said}; whether its directory is gone is not known: {said or look}",
        )


def never_ran(error: HelperPodError) -> bool:
    """Whether the helper's code never ran: its pod did not start, did not finish in time, or
    was ended by its kubelet at its deadline before any container ran. A kubelet keeps a pod
    whose hostPath cannot be mounted (a base path that must exist and does not) in
    ContainerCreating for its mount wait (about two minutes), then fails it DeadlineExceeded,
    its container never created (no exit code, see `PodState.of`): with a long
    cmdTimeoutSeconds that comes before the run's own timeout."""
    if isinstance(error, (HelperPodTimeout, HelperPodNotStarted)):
        return True
    return (
        isinstance(error, HelperPodFailed)
        and error.exit_code is None
        and error.reason == "DeadlineExceeded"
    )


@dataclass(frozen=True)
class PodState:
    """What matters of a pod's status, read from the raw object."""

    phase: str
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    waiting_reason: str = ""
    waiting_message: str = ""
    container: str = ""
    """The container the state is read from (see `_current_container`)."""

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> PodState:
        status = pod.get("status") or {}
        phase = str(status.get("phase") or "Pending")
        current = _current_container(status)
        state = current.get("state") or {}
        container = str(current.get("name") or "")
        terminated = state.get("terminated")
        waiting = state.get("waiting") or {}
        if terminated:
            # A pod-level reason (the kubelet's DeadlineExceeded, Evicted) says why the pod's
            # container was ended; the container's own reason then is only "Error". A
            # container the kubelet never created (its pod failed while still waiting for its
            # volumes) is reported ContainerStatusUnknown with a made-up exit code 137.
            never_created = terminated.get("reason") == NEVER_CREATED_REASON
            return cls(
                phase=phase,
                exit_code=None if never_created else terminated.get("exitCode"),
                reason=str(status.get("reason") or terminated.get("reason") or ""),
                message=str(terminated.get("message") or ""),
                container=container,
            )
        return cls(
            phase=phase,
            reason=str(status.get("reason") or ""),
            message=str(status.get("message") or ""),
            waiting_reason=str(waiting.get("reason") or ""),
            waiting_message=str(waiting.get("message") or ""),
            container=container,
        )

    def describe(self) -> str:
        if self.waiting_reason:
            return f"{self.phase}, waiting: {self.waiting_reason}"
        return self.phase


def _current_container(status: Mapping[str, Any]) -> Mapping[str, Any]:
    """The status of the container the pod is at: the first init container that has not
    succeeded (running, waiting, or the one whose failure failed the pod), else the main one.
    A teardown pod runs the user's code in an init container, a setup pod `prepare`, so their
    failures are read there."""
    for init in status.get("initContainerStatuses") or ():
        state = init.get("state") or {}
        if (state.get("terminated") or {}).get("exitCode") != 0:
            return dict(init)
    statuses = status.get("containerStatuses") or []
    return dict(statuses[0]) if statuses else {}


class PodProgress:
    """Judges each observed state of a running helper pod: done, failed, or when to look again
    (the overall deadline, or sooner when a start failure's grace runs out)."""

    def __init__(
        self, label: str, deadline: float, timeout: float, grace: float, clock: Clock
    ) -> None:
        self._label = label
        self._deadline = deadline
        self._timeout = timeout
        self._grace = grace
        self._clock = clock
        self._bad_since: float | None = None

    def next_look(self, pod: Mapping[str, Any]) -> float | None:
        """None once the pod succeeded; raises a HelperPodError for any other outcome."""
        state = PodState.of(pod)
        if state.phase == "Succeeded":
            return None
        if state.phase == "Failed":
            raise HelperPodFailed(
                self._label,
                state.exit_code,
                state.reason or "Failed",
                state.message,
                container=state.container,
            )
        now = self._clock.monotonic()
        if state.waiting_reason in START_FAILURE_REASONS:
            if self._bad_since is None:
                self._bad_since = now
            if now - self._bad_since >= self._grace:
                detail = f": {state.waiting_message}" if state.waiting_message else ""
                raise HelperPodNotStarted(self._label, f"{state.waiting_reason}{detail}")
        else:
            self._bad_since = None
        if now >= self._deadline:
            raise HelperPodTimeout(self._label, self._timeout, state.describe())
        if self._bad_since is None:
            return self._deadline
        return min(self._deadline, self._bad_since + self._grace)
