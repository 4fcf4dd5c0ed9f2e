"""What a batch helper pod (see `batch_pods`) says about each of its volumes, read from the pod
as last seen: each volume container's termination message (`lps-exit CODE` and its output's
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

from provisioner.core.batch_pods import EXIT_PREFIX, TIMED_OUT_EXIT_CODE, volume_container_name
from provisioner.core.helpers import FINISH_CONTAINER, HelperAction

_FINISH_LINE = re.compile(r"(\d+) (ok|skipped|failed (\d+) ?(.*))")


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


def _finish_lines(main: Mapping[str, Any]) -> dict[int, str]:
    """The finish container's lines by volume index (none unless it ran to its end)."""
    terminated = (main.get("state") or {}).get("terminated") or {}
    if terminated.get("exitCode") != 0:
        return {}
    lines: dict[int, str] = {}
    for line in str(terminated.get("message") or "").splitlines():
        match = _FINISH_LINE.fullmatch(line)
        if match:
            lines[int(match.group(1))] = match.group(2)
    return lines


def _finish_outcome(name: str, line: str | None, unfinished: str) -> VolumeOutcome:
    if line == "ok":
        return VolumeOutcome(name, True, FINISH_CONTAINER, 0, "Completed")
    if line is None or line == "skipped":
        why = unfinished if line is None else "the finish step skipped it"
        return VolumeOutcome(name, False, FINISH_CONTAINER, None, "NotRun", why)
    match = _FINISH_LINE.fullmatch(f"0 {line}")
    assert match is not None and match.group(3) is not None
    return VolumeOutcome(
        name, False, FINISH_CONTAINER, int(match.group(3)), "Error", match.group(4) or ""
    )
