"""Issue 20's goals, issue 31's failover goal and issue 30's goals on real nodes, judged on one
run's results, and where the time goes when a burst misses.

Each goal carries ours, the tuned and the default reference (where they ran), ours / tuned, its
limit and whether it was met, so one run reports the goals side by side with both references.
Start-up goals are judged at the largest data-set size measured: cost that grows with the
volumes shows there first. A missed burst or lifted goal comes with the per-stage p50/p99 of
every implementation that ran it, and (with the default binder limit) the floor and ours'
distance to it, so the report says where the time went, not only that it was missed. The
failover goal is ours' own time against the lease duration plus 2 s; its phases (lease wait,
sync, provisioning, binding) are reported for ours and the tuned reference whether met or not.
The real-node goals are judged under each binder limit, each at its burst size, and a miss
comes with the stages of that size's bursts. Issue 38's goals on CSI volumes (`CSI_GOALS`) hold
ours-csi's real-node bursts against the tuned reference's, ours' helper-pod class's or its own
PV binder's floor in the same run; a miss comes with the stages of ours-csi, ours and the tuned
reference and the consumers' start.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.burst import RELEASE_STAGES, STAGES, BurstResult
from bench.failover import FAILOVER_GOAL_SECONDS
from bench.real_nodes import RealResults
from bench.runner import RunResults
from bench.scale import ScaleResult
from bench.stats import ratio

REFERENCES = ("reference-tuned", "reference-default")
SIDE_BY_SIDE = ("ours", *REFERENCES)


@dataclass(frozen=True)
class Goal:
    name: str
    scenario: str
    """"burst", "lifted", "scale" or "failover": which of RunResults' runs the figure is read
    from."""
    unit: str
    figure: Callable[[Any], float]
    limit: float
    relative: bool = True
    """True: the limit is on ours / the tuned reference; False: on ours' own figure."""
    claims: int | None = None
    """Real-node goals: the burst size the figure is read at (None: the largest measured)."""


GOALS = (
    Goal("burst: time until all Bound", "burst", "s", lambda b: b.bind_seconds, 0.8),
    Goal(
        "burst: API requests per volume",
        "burst",
        "req",
        lambda b: b.requests_per_volume,
        3.5,
        relative=False,
    ),
    Goal("burst: claim latency p99", "burst", "s", lambda b: b.latency.p99, 1.0),
    Goal("lifted: time until all Bound", "lifted", "s", lambda b: b.bind_seconds, 0.4),
    Goal("lifted: claim latency p99", "lifted", "s", lambda b: b.latency.p99, 1.0),
    Goal("time to ready", "scale", "s", lambda s: s.ready_seconds, 1.0),
    Goal("CPU until ready", "scale", "s", lambda s: s.ready_cpu_seconds, 1.0),
    Goal("steady RSS", "scale", "MiB", lambda s: s.steady_rss_mib, 0.4),
    Goal(
        "kill to new claim Bound",
        "failover",
        "s",
        lambda f: f.failover_seconds,
        FAILOVER_GOAL_SECONDS,
        relative=False,
    ),
)
"""Issue 20's goals, in its order, then issue 31's; "burst" is kube-controller-manager's
default client limit, "lifted" the same burst with it raised (--lifted-qps); "failover" is at
the largest scale size, its limit the lease duration plus 2 s."""

REAL_SCENARIOS = {"real": "default", "real-lifted": "lifted"}
"""The real-node goals' scenarios, by the binder limit of the bursts they read."""
REAL_GOALS = tuple(
    goal
    for scenario in REAL_SCENARIOS
    for goal in (
        Goal("claim created to Bound", scenario, "s", lambda b: b.latency.max, 1.0, claims=1),
        Goal("time until all Bound", scenario, "s", lambda b: b.bind_seconds, 0.8, claims=20),
        Goal(
            "API requests per volume",
            scenario,
            "req",
            lambda b: b.requests_per_volume,
            3.5,
            relative=False,
        ),
        Goal("claim latency p99", scenario, "s", lambda b: b.latency.p99, 1.0),
    )
)
"""Issue 30's goals on real nodes, under each binder limit: a single claim and the 20-claim
burst against the tuned reference, requests per volume and p99 at the largest burst."""


def largest_scale(results: RunResults) -> tuple[int, dict[str, ScaleResult]]:
    """The largest data-set size measured and its runs by implementation (0 and none when the
    scale scenario did not run)."""
    if results.scaling:
        volumes = max(results.scaling)
        return volumes, results.scaling[volumes]
    if results.scale:
        return next(iter(results.scale.values())).volumes, results.scale
    return 0, {}


def claims_text(claims: int) -> str:
    return f"{claims} claim" if claims == 1 else f"{claims} claims"


def real_size(goal: Goal, results: RunResults) -> int:
    """The burst size a real-node goal reads: its own, else the largest measured (0: none)."""
    by_size = results.real.get(REAL_SCENARIOS[goal.scenario], {})
    return goal.claims if goal.claims is not None else max(by_size, default=0)


def _runs(results: RunResults, goal: Goal) -> dict[str, Any]:
    scenario = goal.scenario
    if scenario in REAL_SCENARIOS:
        by_size = results.real.get(REAL_SCENARIOS[scenario], {})
        return by_size.get(real_size(goal, results), {})
    if scenario == "scale":
        return largest_scale(results)[1]
    if scenario == "failover":
        return results.failover
    return results.lifted if scenario == "lifted" else results.burst


def judge(goal: Goal, results: RunResults) -> dict[str, Any]:
    """The goal's row: each implementation's figure, ours / tuned, the value held against the
    limit, and met (None when a figure it needs was not measured)."""
    runs = _runs(results, goal)
    values = {key: goal.figure(runs[key]) if key in runs else math.nan for key in SIDE_BY_SIDE}
    to_tuned = ratio(values["ours"], values["reference-tuned"])
    value = to_tuned if goal.relative else values["ours"]
    name = goal.name
    if goal.scenario == "scale":
        volumes = largest_scale(results)[0]
        name = f"scale at {volumes} volumes: {name}" if volumes else f"scale: {name}"
    if goal.scenario == "failover":
        volumes = next((run.volumes for run in runs.values()), 0)
        name = f"failover at {volumes} volumes: {name}" if volumes else f"failover: {name}"
    extra: dict[str, Any] = {}
    if goal.scenario in REAL_SCENARIOS:
        claims = real_size(goal, results)
        limit = REAL_SCENARIOS[goal.scenario]
        name = f"real nodes, {limit} binder limit, {claims_text(claims)}: {name}"
        extra = {"claims": claims, "binder_limit": limit}
    return {
        "goal": name,
        "scenario": goal.scenario,
        "unit": goal.unit,
        **values,
        "ours/tuned": to_tuned,
        "value": value,
        "limit": goal.limit,
        "relative": goal.relative,
        "met": None if math.isnan(value) else value <= goal.limit,
        **extra,
    }


def judge_all(results: RunResults) -> list[dict[str, Any]]:
    """Every goal; the real-node ones only when the real scenario ran."""
    return [judge(goal, results) for goal in (*GOALS, *(REAL_GOALS if results.real else ()))]


def _stage_row(stage: str, runs: dict[str, BurstResult]) -> dict[str, Any]:
    def percentiles(burst: BurstResult | None) -> list[float]:
        latencies = burst.stages.get(stage) if burst else None
        return [latencies.p50, latencies.p99] if latencies else [math.nan, math.nan]

    return {"stage": stage, **{key: percentiles(runs.get(key)) for key in SIDE_BY_SIDE}}


def _floor(results: RunResults) -> dict[str, Any] | None:
    """The floor (bench/floor.py: the writes of ours' burst from a tight loop) and ours' time
    until all Bound as a multiple of it and in seconds beyond it."""
    if results.floor is None:
        return None
    seconds = results.floor.seconds
    ours = results.burst.get("ours")
    bind = ours.bind_seconds if ours else math.nan
    return {
        "seconds": seconds,
        "writes": results.floor.writes,
        "multiple": ratio(bind, seconds),
        "beyond": bind - seconds,
    }


def _binder_floor(
    runs: dict[str, BurstResult], keys: tuple[str, ...] = SIDE_BY_SIDE
) -> dict[str, dict[str, float]]:
    """By implementation: kube-controller-manager's PV binder requests until all Bound (all,
    and those each claim needs once), the least time its client limit takes to let the needed
    ones through, and the time until all Bound as a multiple of that."""
    return {
        key: {
            "requests": burst.binder_requests,
            "needed": burst.binder_needed,
            "seconds": burst.binder_floor_seconds,
            "multiple": ratio(burst.bind_seconds, burst.binder_floor_seconds),
            "all_seconds": burst.binder_all_floor_seconds,
            "all_multiple": ratio(burst.bind_seconds, burst.binder_all_floor_seconds),
        }
        for key, burst in runs.items()
        if key in keys and burst.binder_requests
    }


def where_time_goes(results: RunResults, goals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For the burst and the lifted burst, when one of its goals was missed: the missed goals,
    the per-stage p50/p99 of ours and both references, the PV binder's floor of each, and
    (burst only) the cluster's floor."""
    sections = []
    for scenario in ("burst", "lifted"):
        missed = [g["goal"] for g in goals if g["scenario"] == scenario and g["met"] is False]
        if not missed:
            continue
        runs = results.lifted if scenario == "lifted" else results.burst
        sections.append(
            {
                "scenario": scenario,
                "missed": missed,
                "stages": [_stage_row(stage, runs) for stage in STAGES],
                "floor": _floor(results) if scenario == "burst" else None,
                "binder_floor": _binder_floor(runs),
            }
        )
    for scenario, limit in REAL_SCENARIOS.items():
        by_size = results.real.get(limit, {})
        missed_at: dict[int, list[str]] = {}
        for g in goals:
            if g["scenario"] == scenario and g["met"] is False:
                missed_at.setdefault(g["claims"], []).append(g["goal"])
        for claims, missed in sorted(missed_at.items()):
            runs = by_size.get(claims, {})
            sections.append(
                {
                    "scenario": f"real nodes, {limit} binder limit, {claims_text(claims)}",
                    "missed": missed,
                    "stages": [_stage_row(stage, runs) for stage in STAGES],
                    "floor": None,
                    "binder_floor": _binder_floor(runs),
                }
            )
    return sections


CSI = "ours-csi"
BINDER_FLOOR = "binder floor"
HOSTPATH_AT_ONCE = "hostPath consumers at once"
"""The control of a CSI consumer's start (`hostpath_control`): as many consumers with a hostPath
volume, created at once on the same nodes right after the CSI burst."""
"""A CSI goal held against the PV binder's floor of ours-csi's own burst."""
CSI_SIDE_BY_SIDE = (CSI, "ours", "reference-tuned")
"""The columns of a missed CSI goal's stages: CSI volumes, ours' helper-pod class, the tuned
reference."""
CONSUMER_START = "consumer bound to its node to Running"


@dataclass(frozen=True)
class CsiGoal:
    """Issue 38's goal on ours' CSI volumes: ours-csi's figure in a real-node burst, as a ratio
    to `against`'s in the same run (same binder limit and size), or its own figure."""

    name: str
    binder_limit: str
    """"default" or "lifted"."""
    unit: str
    figure: Callable[[BurstResult], float]
    against: str | None
    """An implementation's key, BINDER_FLOOR, HOSTPATH_AT_ONCE, or None (the limit is on
    ours-csi's figure)."""
    limit: float
    claims: int | None = None
    """The burst size (None: the largest measured)."""


def _both_limits(make: Callable[[str], CsiGoal]) -> tuple[CsiGoal, ...]:
    return tuple(make(limit) for limit in ("default", "lifted"))


CSI_GOALS = (
    *_both_limits(
        lambda limit: CsiGoal(
            "claim created to Bound",
            limit,
            "s",
            lambda b: b.latency.max,
            "reference-tuned",
            0.35,
            claims=1,
        )
    ),
    CsiGoal(
        "all Bound / the PV binder's floor",
        "default",
        "s",
        lambda b: b.bind_seconds,
        BINDER_FLOOR,
        1.05,
    ),
    CsiGoal(
        "time until all Bound", "lifted", "s", lambda b: b.bind_seconds, "reference-tuned", 0.25
    ),
    *_both_limits(
        lambda limit: CsiGoal(
            "API requests per volume (Lease included)",
            limit,
            "req",
            lambda b: b.requests_per_volume,
            None,
            3.2,
        )
    ),
    *_both_limits(
        lambda limit: CsiGoal(
            "consumer start p50 (bound to its node -> Running), CSI / hostPath at once",
            limit,
            "s",
            lambda b: b.consumer_start.p50,
            HOSTPATH_AT_ONCE,
            1.1,
        )
    ),
    *_both_limits(
        lambda limit: CsiGoal(
            "release: time until PVs and dirs gone",
            limit,
            "s",
            lambda b: b.release_seconds,
            "reference-tuned",
            0.3,
        )
    ),
)
"""Issue 38's goals on CSI volumes (item 6), on the real nodes, in the run that measured the
helper-pod class and the tuned reference beside them."""


def _against(goal: CsiGoal, runs: dict[str, BurstResult]) -> float:
    if goal.against is None:
        return math.nan
    if goal.against == BINDER_FLOOR:
        return runs[CSI].binder_floor_seconds if CSI in runs else math.nan
    if goal.against == HOSTPATH_AT_ONCE:
        return runs[CSI].hostpath_consumer_start.p50 if CSI in runs else math.nan
    return goal.figure(runs[goal.against]) if goal.against in runs else math.nan


def judge_csi(goal: CsiGoal, real: RealResults) -> dict[str, Any]:
    """The CSI goal's row: ours-csi's figure, what it is held against and its value there, the
    ratio, the value held against the limit, and met (None when a figure was not measured)."""
    by_size = real.get(goal.binder_limit, {})
    claims = goal.claims if goal.claims is not None else max(by_size, default=0)
    runs = by_size.get(claims, {})
    value = goal.figure(runs[CSI]) if CSI in runs else math.nan
    against = _against(goal, runs)
    judged = value if goal.against is None else ratio(value, against)
    return {
        "goal": f"CSI, {goal.binder_limit} binder limit, {claims_text(claims)}: {goal.name}",
        "binder_limit": goal.binder_limit,
        "claims": claims,
        "unit": goal.unit,
        CSI: value,
        "against": goal.against,
        "against_value": against,
        "value": judged,
        "limit": goal.limit,
        "met": None if math.isnan(judged) else judged <= goal.limit,
    }


def judge_csi_all(real: RealResults) -> list[dict[str, Any]]:
    """Every CSI goal, when ours-csi ran on the real nodes (else none)."""
    ran = any(CSI in runs for by_size in real.values() for runs in by_size.values())
    return [judge_csi(goal, real) for goal in CSI_GOALS] if ran else []


def _csi_stage_rows(runs: dict[str, BurstResult]) -> list[dict[str, Any]]:
    def percentiles(burst: BurstResult | None, stage: str) -> list[float]:
        if burst is None:
            return [math.nan, math.nan]
        latencies = (
            burst.consumer_start
            if stage == CONSUMER_START
            else burst.stages.get(stage) or burst.release_stages.get(stage)
        )
        return [latencies.p50, latencies.p99] if latencies else [math.nan, math.nan]

    return [
        {"stage": stage, **{key: percentiles(runs.get(key), stage) for key in CSI_SIDE_BY_SIDE}}
        for stage in (*STAGES, CONSUMER_START, *RELEASE_STAGES)
    ]


def csi_time_goes(real: RealResults, goals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each binder limit and size with a missed CSI goal: the per-stage p50/p99 of ours-csi,
    ours and the tuned reference, the consumers' start, and each one's PV binder floor."""
    missed_at: dict[tuple[str, int], list[str]] = {}
    for g in goals:
        if g["met"] is False:
            missed_at.setdefault((g["binder_limit"], g["claims"]), []).append(g["goal"])
    sections = []
    for (limit, claims), missed in sorted(missed_at.items()):
        runs = real.get(limit, {}).get(claims, {})
        sections.append(
            {
                "scenario": f"CSI, real nodes, {limit} binder limit, {claims_text(claims)}",
                "missed": missed,
                "columns": list(CSI_SIDE_BY_SIDE),
                "stages": _csi_stage_rows(runs),
                "floor": None,
                "binder_floor": _binder_floor(runs, CSI_SIDE_BY_SIDE),
            }
        )
    return sections
