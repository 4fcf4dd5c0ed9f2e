"""What a batch helper pod (see `batch_pod_shapes`) says about each of its volumes, read from the
pod as last seen: each volume container's termination message (`lps-exit CODE` and its output's
tail) and, for a teardown, the finish container's line for that volume.

A volume succeeded only when its own step said so: a setup whose wrapper reported exit code 0;
a teardown whose wrapper reported 0 and whose `finish` then reported `ok`. Anything else fails
that volume alone, with what is known (its exit code and tail, the container's own end when the
wrapper did not report, or why the pod ended before it got there), and is retried on its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provisioner.helper_pods.batch_pod_shapes import (
    EXIT_PREFIX,
    FINISH_PREFIX,
    TIMED_OUT_EXIT_CODE,
    volume_container_name,
)
from provisioner.helper_pods.pod_shapes import FINISH_CONTAINER, HelperAction

_FAILURE_LINE = re.compile(r"(\d+) (\d+) ?(.*)")
_FINISHED, _SKIPPED = "o", "s"


@dataclass(frozen=True)
class _FinishLine:
    """What the finish container says of one volume: its outcome character and, for a
    failure whose line fitted in the message, its exit code and output's tail."""

    outcome: str
    exit_code: int | None = None
    tail: str = ""


@dataclass(frozen=True)
class VolumeOutcome:
    """One volume's result in a batch pod. `container` is where it was decided."""

    volume_name: str
    succeeded: bool
    container: str
    exit_code: int | None = None
    reason: str = ""
    message: str = ""


def batch_outcomes(
    action: HelperAction,
    pod: Mapping[str, Any],
    volume_names: Sequence[str],
    *,
    unfinished: str,
) -> list[VolumeOutcome]:
    """Each volume's outcome, in order. `unfinished` says why a volume without an outcome has
    none (the pod failed, timed out, or could not start before reaching it)."""
    status = pod.get("status") or {}
    inits = {s.get("name"): s for s in status.get("initContainerStatuses") or ()}
    mains = status.get("containerStatuses") or ()
    finish_lines = _finish_lines(mains[0] if mains else {})
    outcomes = []
    for index, name in enumerate(volume_names):
        container = volume_container_name(action, index)
        state = (inits.get(container) or {}).get("state") or {}
        outcome = _volume_outcome(name, container, state.get("terminated"), unfinished)
        if action == "delete" and outcome.succeeded:
            outcome = _finish_outcome(name, finish_lines.get(index), unfinished)
        outcomes.append(outcome)
    return outcomes


def settled_before_the_end(
    action: HelperAction, pod: Mapping[str, Any], volume_names: Sequence[str]
) -> list[VolumeOutcome]:
    """The outcomes a running batch pod has already settled: each setup whose own container
    reported exit code 0. Nothing else in the pod touches such a volume again (the finish step
    runs only after a failed setup, and a kubelet never runs an ended init container again in
    a pod that is never restarted), so its PV may be made now, not when the pod's last volume
    is done. A failed setup waits for the finish step that removes what it made, and a
    teardown is done only when finish removed the directory: both settle at the pod's end."""
    if action != "create":
        return []
    status = pod.get("status") or {}
    inits = {s.get("name"): s for s in status.get("initContainerStatuses") or ()}
    settled = []
    for index, name in enumerate(volume_names):
        container = volume_container_name(action, index)
        terminated = ((inits.get(container) or {}).get("state") or {}).get("terminated")
        if terminated:
            outcome = _volume_outcome(name, container, terminated, "")
            if outcome.succeeded:
                settled.append(outcome)
    return settled


def _volume_outcome(
    name: str, container: str, terminated: Mapping[str, Any] | None, unfinished: str
) -> VolumeOutcome:
    if not terminated:
        return VolumeOutcome(name, False, container, None, "NotRun", unfinished)
    code = terminated.get("exitCode")
    message = str(terminated.get("message") or "")
    reason = str(terminated.get("reason") or "")
    if code != 0:
        # The wrapper itself did not get to report: the container could not start, or was
        # killed (the pod's deadline, its deletion).
        return VolumeOutcome(name, False, container, code, reason or "Error", message)
    first, _, tail = message.partition("\n")
    if not first.startswith(EXIT_PREFIX) or not first[len(EXIT_PREFIX) :].isdigit():
        return VolumeOutcome(name, False, container, None, "NoOutcome", "it reported no outcome")
    exit_code = int(first[len(EXIT_PREFIX) :])
    if exit_code == 0:
        return VolumeOutcome(name, True, container, 0, "Completed", tail)
    timed_out = exit_code == TIMED_OUT_EXIT_CODE
    return VolumeOutcome(
        name, False, container, exit_code, "DeadlineExceeded" if timed_out else "Error", tail
    )


def _finish_lines(main: Mapping[str, Any]) -> dict[int, _FinishLine]:
    """What the finish container says of each volume, by index (nothing unless it ran to its
    end): its outcome line first, then the failures' lines that fitted."""
    terminated = (main.get("state") or {}).get("terminated") or {}
    if terminated.get("exitCode") != 0:
        return {}
    first, _, rest = str(terminated.get("message") or "").partition("\n")
    if not first.startswith(FINISH_PREFIX):
        return {}
    lines = {index: _FinishLine(c) for index, c in enumerate(first[len(FINISH_PREFIX) :])}
    for line in rest.splitlines():
        match = _FAILURE_LINE.fullmatch(line)
        if match and int(match.group(1)) in lines:
            index = int(match.group(1))
            lines[index] = _FinishLine(lines[index].outcome, int(match.group(2)), match.group(3))
    return lines


def _finish_outcome(name: str, line: _FinishLine | None, unfinished: str) -> VolumeOutcome:
    if line is not None and line.outcome == _FINISHED:
        return VolumeOutcome(name, True, FINISH_CONTAINER, 0, "Completed")
    if line is None or line.outcome == _SKIPPED:
        why = unfinished if line is None else "the finish step skipped it"
        return VolumeOutcome(name, False, FINISH_CONTAINER, None, "NotRun", why)
    return VolumeOutcome(
        name,
        False,
        FINISH_CONTAINER,
        line.exit_code,
        "Error",
        line.tail if line.exit_code is not None else "its output did not fit in the message",
    )
