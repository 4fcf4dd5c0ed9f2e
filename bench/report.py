"""The figures, their ratios and the goals, as one JSON-ready report and as printed tables."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from bench.burst import STAGES, BurstResult
from bench.goals import (
    BINDER_FLOOR,
    CSI,
    HOSTPATH_AT_ONCE,
    SIDE_BY_SIDE,
    csi_time_goes,
    judge_all,
    judge_csi_all,
    where_time_goes,
)
from bench.options import BenchOptions
from bench.real_nodes import REAL_NODES, RealResults, pod_start_rows
from bench.runner import RunResults
from bench.scale import ScaleResult
from bench.snapshot_goals import DiskRun, judge_snapshots, report_lines
from bench.stats import ratio
from localcluster.pod_start import KUBELET

IMPLEMENTATIONS = ("ours", "ours-capacity", "reference-default", "reference-tuned")
"""Report columns, in order; ours-capacity is ours with capacity on (burst only). Ours with CSI
volumes runs on real nodes only: it has its columns in the real-node table."""
NAN = math.nan

BurstFigure = Callable[[BurstResult], float]
ScaleFigure = Callable[[ScaleResult], float]


def _stage_figures(scenario: str) -> tuple[tuple[str, str, BurstFigure], ...]:
    """p50 and p99 of each stage, named for the scenario's rows ("  p50 ..." for the burst,
    "  lifted p50 ..." for the lifted one)."""
    return tuple(_stage_figure(scenario, s, p) for s in STAGES for p in ("p50", "p99"))


def _stage_figure(scenario: str, stage: str, percentile: str) -> tuple[str, str, BurstFigure]:
    def get(burst: BurstResult) -> float:
        latencies = burst.stages.get(stage)
        return float(getattr(latencies, percentile)) if latencies else NAN

    prefix = f"{scenario} " if scenario != "burst" else ""
    return (f"  {prefix}{percentile} {stage.replace(' to ', ' -> ')}", "s", get)


LIFTED_FIGURES: tuple[tuple[str, str, BurstFigure], ...] = (
    ("lifted: time until all Bound", "s", lambda b: b.bind_seconds),
    ("lifted: claim latency p50", "s", lambda b: b.latency.p50),
    ("lifted: claim latency p99", "s", lambda b: b.latency.p99),
    *_stage_figures("lifted"),
    ("lifted: API requests per volume", "req", lambda b: b.requests_per_volume),
    ("lifted: provisioner CPU", "s", lambda b: b.cpu_seconds),
    ("lifted: provisioner peak RSS", "MiB", lambda b: b.peak_rss_mib),
)
"""The burst with kube-controller-manager's client limit raised: ours and the tuned reference."""
BURST_FIGURES: tuple[tuple[str, str, BurstFigure], ...] = (
    ("burst: time until all Bound", "s", lambda b: b.bind_seconds),
    ("burst: claim latency p50", "s", lambda b: b.latency.p50),
    ("burst: claim latency p95", "s", lambda b: b.latency.p95),
    ("burst: claim latency p99", "s", lambda b: b.latency.p99),
    ("burst: helper pod run p50", "s", lambda b: b.helper_run.p50),
    ("burst: latency beyond own helper p99", "s", lambda b: b.overhead.p99),
    *_stage_figures("burst"),
    ("burst: API requests per volume", "req", lambda b: b.requests_per_volume),
    ("burst: provisioner CPU", "s", lambda b: b.cpu_seconds),
    ("burst: provisioner peak RSS", "MiB", lambda b: b.peak_rss_mib),
    ("release: time until PVs and dirs gone", "s", lambda b: b.release_seconds),
    ("release: API requests per volume", "req", lambda b: b.release_requests_per_volume),
    (
        "burst: CSIStorageCapacity writes per volume",
        "req",
        lambda b: b.capacity_writes_per_volume,
    ),
    (
        "  same, from ours' writes counter",
        "req",
        lambda b: b.capacity_writes_metric_per_volume,
    ),
    (
        "release: CSIStorageCapacity writes per volume",
        "req",
        lambda b: b.release_capacity_writes_per_volume,
    ),
)
SCALE_FIGURES: tuple[tuple[str, str, ScaleFigure], ...] = (
    ("scale: time to ready", "s", lambda s: s.ready_seconds),
    ("scale: CPU until ready", "s", lambda s: s.ready_cpu_seconds),
    ("scale: steady RSS", "MiB", lambda s: s.steady_rss_mib),
    ("scale: peak RSS", "MiB", lambda s: s.peak_rss_mib),
    ("scale: idle CPU", "s", lambda s: s.idle_cpu_seconds),
    ("scale: API requests at start", "req", lambda s: float(sum(s.requests.values()))),
)


REAL_FIGURES: tuple[tuple[str, str, BurstFigure], ...] = (
    ("time until all Bound", "s", lambda b: b.bind_seconds),
    ("time until PVs and dirs gone (release)", "s", lambda b: b.release_seconds),
    ("claim latency p50", "s", lambda b: b.latency.p50),
    ("claim latency p99", "s", lambda b: b.latency.p99),
    ("helper pod run p50", "s", lambda b: b.helper_run.p50),
    ("API requests per volume", "req", lambda b: b.requests_per_volume),
    ("release: API requests per volume", "req", lambda b: b.release_requests_per_volume),
    ("consumer start p50 (bound to node -> Running)", "s", lambda b: b.consumer_start.p50),
    ("consumer start p99", "s", lambda b: b.consumer_start.p99),
    (
        "hostPath consumers at once, start p50 (CSI runs)",
        "s",
        lambda b: b.hostpath_consumer_start.p50,
    ),
)
"""The figures of each burst on real nodes, per binder limit and size."""
REAL_COLUMNS = ("ours", "reference-tuned", "reference-default", CSI)


def real_figures(real: RealResults) -> list[dict[str, Any]]:
    """A row per binder limit, size and figure: each implementation's value and ours' ratios."""
    rows = []
    for limit, by_size in real.items():
        for claims, runs in sorted(by_size.items()):
            for name, unit, get in REAL_FIGURES:
                values = {key: get(runs[key]) if key in runs else NAN for key in REAL_COLUMNS}
                rows.append(
                    {
                        "binder_limit": limit,
                        "claims": claims,
                        "figure": name,
                        "unit": unit,
                        **values,
                        "ours/tuned": ratio(values["ours"], values["reference-tuned"]),
                        "ours/default": ratio(values["ours"], values["reference-default"]),
                        "csi/tuned": ratio(values[CSI], values["reference-tuned"]),
                        "csi/ours": ratio(values[CSI], values["ours"]),
                    }
                )
    return rows


def machine() -> dict[str, Any]:
    model = "unknown"
    with Path("/proc/cpuinfo").open() as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "cpu_model": model,
        "kernel": platform.release(),
        "python": sys.version.split()[0],
    }


def _figure_row(name: str, unit: str, values: dict[str, float]) -> dict[str, Any]:
    ours = values.get("ours", NAN)
    return {
        "figure": name,
        "unit": unit,
        **{key: values.get(key, NAN) for key in IMPLEMENTATIONS},
        "ours/default": ratio(ours, values.get("reference-default", NAN)),
        "ours/tuned": ratio(ours, values.get("reference-tuned", NAN)),
        "capacity/ours": ratio(values.get("ours-capacity", NAN), ours),
    }


def build_report(
    options: BenchOptions, results: RunResults, command: str, wall_seconds: float
) -> dict[str, Any]:
    figures = [
        _figure_row(name, unit, {key: get(b) for key, b in results.burst.items()})
        for name, unit, get in (BURST_FIGURES if results.burst or not results.real else ())
    ]
    if results.lifted:
        figures += [
            _figure_row(name, unit, {key: get(b) for key, b in results.lifted.items()})
            for name, unit, get in LIFTED_FIGURES
        ]
    figures += [
        _figure_row(name, unit, {key: get(s) for key, s in results.scale.items()})
        for name, unit, get in (SCALE_FIGURES if results.scale or not results.real else ())
    ]
    if results.floor and "ours" in results.burst:
        figures.append(
            {
                "figure": "floor: same writes, tight loop",
                "unit": "s",
                "ours": results.floor.seconds,
                "ours/default": NAN,
                "ours/tuned": NAN,
                "capacity/ours": NAN,
            }
        )
    goals = judge_all(results)
    csi_goals = judge_csi_all(results.real)
    return {
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": command,
        "wall_seconds": wall_seconds,
        "machine": machine(),
        "options": {
            "claims": options.claims,
            "nodes": options.nodes,
            "scale_volumes": options.scale_volumes,
            "scale_sizes": list(options.scale_sizes),
            "scale_starts": options.scale_starts,
            "concurrency": options.concurrency,
            "idle_seconds": options.idle_seconds,
            "quick": options.quick,
            "controller_manager_qps": options.controller_manager_qps,
            "lifted_qps": options.lifted_qps,
            "pod_start": options.pod_start,
            "real_sizes": list(options.real_sizes),
        },
        "figures": figures,
        "goals": goals,
        "time_goes": where_time_goes(results, goals) + csi_time_goes(results.real, csi_goals),
        "csi_goals": csi_goals,
        "burst": {key: asdict(value) for key, value in results.burst.items()},
        "lifted": {key: asdict(value) for key, value in results.lifted.items()},
        "floor": asdict(results.floor) if results.floor else None,
        "scale_dataset": asdict(results.dataset) if results.dataset else None,
        "scale": {key: asdict(value) for key, value in results.scale.items()},
        "scaling": {
            str(volumes): {key: asdict(value) for key, value in runs.items()}
            for volumes, runs in results.scaling.items()
        },
        "failover": {key: asdict(value) for key, value in results.failover.items()},
        "real_figures": real_figures(results.real),
        "real_pod_starts": pod_start_rows(results.real, KUBELET),
        "real": {
            limit: {
                str(claims): {key: asdict(value) for key, value in runs.items()}
                for claims, runs in by_size.items()
            }
            for limit, by_size in results.real.items()
        },
        "snapshots": [asdict(run) for run in results.snapshots],
        "snapshot_goals": judge_snapshots(results.snapshots),
    }


def _number(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def format_table(headers: list[str], rows: list[list[str]], markdown: bool = False) -> str:
    """Aligned columns; with `markdown`, a GitHub table."""
    widths = [max(len(row[i]) for row in [headers, *rows]) for i in range(len(headers))]

    def line(cells: list[str]) -> str:
        text = " | ".join(cell.ljust(widths[i]) for i, cell in enumerate(cells))
        return f"| {text} |" if markdown else text

    rule = (
        ("|-" + "-|-".join("-" * w for w in widths) + "-|")
        if markdown
        else "-+-".join("-" * w for w in widths)
    )
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


def figures_table(report: dict[str, Any], markdown: bool = False) -> str:
    headers = [
        "figure", "unit", "ours", "ours cap on", "ref default", "ref tuned",
        "ours/default", "ours/tuned", "cap on/off",
    ]  # fmt: skip
    ratios = ("ours/default", "ours/tuned", "capacity/ours")
    rows = [
        [
            row["figure"],
            row["unit"],
            *(_number(row.get(key)) for key in (*IMPLEMENTATIONS, *ratios)),
        ]
        for row in report["figures"]
    ]
    return format_table(headers, rows, markdown)


def goals_table(report: dict[str, Any], markdown: bool = False) -> str:
    """Issue 20's goals: ours beside the tuned and the default reference, ours / tuned, the
    limit (on that ratio, or on ours' own figure) and the result."""
    rows = []
    for goal in report["goals"]:
        met = {True: "met", False: "MISSED", None: "not measured"}[goal["met"]]
        limit = f"<= {goal['limit']:g}" + ("x tuned" if goal["relative"] else f" {goal['unit']}")
        rows.append(
            [
                goal["goal"],
                goal["unit"],
                *(_number(goal[key]) for key in (*SIDE_BY_SIDE, "ours/tuned")),
                limit,
                met,
            ]
        )
    headers = ["goal", "unit", "ours", "ref tuned", "ref default", "ours/tuned", "limit", "result"]
    return format_table(headers, rows, markdown)


COLUMN_LABELS = {
    "ours": "ours",
    "reference-tuned": "ref tuned",
    "reference-default": "ref default",
    CSI: "ours CSI",
    BINDER_FLOOR: "its PV binder's floor",
    HOSTPATH_AT_ONCE: "hostPath consumers at once",
}


def csi_goals_table(report: dict[str, Any], markdown: bool = False) -> str:
    """Issue 38's goals on CSI volumes: ours-csi's figure, what it is held against and there,
    the value held against the limit, and the result."""
    rows = []
    for goal in report.get("csi_goals") or []:
        met = {True: "met", False: "MISSED", None: "not measured"}[goal["met"]]
        against = goal["against"]
        label = COLUMN_LABELS.get(against, against) if against else ""
        unit = "" if against else f" {goal['unit']}"
        limit = f"<= {goal['limit']:g}" + (f"x {label}" if against else unit)
        rows.append(
            [
                goal["goal"],
                goal["unit"],
                _number(goal[CSI]),
                label,
                _number(goal["against_value"]),
                _number(goal["value"]) if against else "",
                limit,
                met,
            ]
        )
    if not rows:
        return ""
    headers = ["goal", "unit", "ours CSI", "against", "its figure", "ratio", "limit", "result"]
    return format_table(headers, rows, markdown)


def _pair(values: list[float | None]) -> str:
    return " / ".join(_number(value) for value in values)


def _binder_rows(
    binder: dict[str, dict[str, float]], columns: tuple[str, ...] = SIDE_BY_SIDE
) -> list[list[str]]:
    """The PV binder's floor of each implementation (bench/goals.py `_binder_floor`)."""
    if not binder:
        return []
    return [
        [label, *(_number(binder.get(key, {}).get(figure)) for key in columns)]
        for label, figure in (
            ("PV binder's requests, first claim to last Bound", "requests"),
            ("  of them needed (no repeated events)", "needed"),
            ("binder floor: the needed through its client limit (s)", "seconds"),
            ("time until all Bound / binder floor", "multiple"),
            ("every request it made through its client limit (s)", "all_seconds"),
            ("time until all Bound / that", "all_multiple"),
        )
    ]


def time_goes_tables(report: dict[str, Any], markdown: bool = False) -> str:
    """For each scenario with a missed goal: its stages (p50 / p99 of ours and both
    references) and, with the default binder limit, the floor and ours' distance to it."""
    parts = []
    for section in report.get("time_goes") or []:
        scenario, floor = section["scenario"], section["floor"]
        columns = tuple(section.get("columns") or SIDE_BY_SIDE)
        parts.append(f"{scenario}: where the time goes (missed: {'; '.join(section['missed'])})")
        rows = [
            [
                f"{row['stage'].replace(' to ', ' -> ')} (p50 / p99, s)",
                *(_pair(row[key]) for key in columns),
            ]
            for row in section["stages"]
        ]
        rows += _binder_rows(section.get("binder_floor") or {}, columns)
        if floor is not None:
            rows += [
                [label, _number(value), "", ""]
                for label, value in (
                    (
                        f"floor: {floor['writes']} writes of ours' burst, tight loop (s)",
                        floor["seconds"],
                    ),
                    ("ours' time until all Bound / floor", floor["multiple"]),
                    ("ours' time until all Bound beyond the floor (s)", floor["beyond"]),
                )
            ]
        elif scenario == "burst":
            rows.append(["floor: not measured (it runs after ours' burst)", "", "", ""])
        headers = [COLUMN_LABELS.get(key, key) for key in columns]
        parts.append(format_table([scenario, *headers], rows, markdown))
    return "\n\n".join(parts)


def requests_table(report: dict[str, Any], markdown: bool = False) -> str:
    rows = []
    kinds: list[str]
    for phase, field_name in (("burst", "requests"), ("release", "release_requests")):
        kinds = []
        for burst in report["burst"].values():
            kinds += [kind for kind in burst[field_name] if kind not in kinds]
        for kind in kinds:
            cells = []
            for key in IMPLEMENTATIONS:
                burst = report["burst"].get(key)
                count = burst[field_name].get(kind, 0) / burst["claims"] if burst else NAN
                cells.append(_number(count))
            rows.append([f"{phase}: {kind}", *cells])
    return format_table(["requests per volume", *IMPLEMENTATIONS], rows, markdown)


SCALING_FIGURES = (
    ("ready", "s", "ready_seconds"),
    ("CPU until ready", "s", "ready_cpu_seconds"),
    ("steady RSS", "MiB", "steady_rss_mib"),
    ("peak RSS", "MiB", "peak_rss_mib"),
)


def scaling_table(report: dict[str, Any], markdown: bool = False) -> str:
    """Start-up time and memory by data-set size: how each implementation's cost grows."""
    runs: dict[str, dict[str, Any]] = report.get("scaling") or {}
    keys = [key for key in IMPLEMENTATIONS if any(key in by_key for by_key in runs.values())]
    headers = ["volumes"]
    for name, unit, _ in SCALING_FIGURES:
        headers += [f"{name} ({unit}): {key}" for key in keys]
        if "ours" in keys and "reference-tuned" in keys:
            headers.append(f"{name}: ours/tuned")
    rows = []
    for volumes, by_key in sorted(runs.items(), key=lambda item: int(item[0])):
        row = [volumes]
        for _, _, field_name in SCALING_FIGURES:
            values = {key: by_key.get(key, {}).get(field_name, NAN) for key in keys}
            row += [_number(values[key]) for key in keys]
            if "ours" in keys and "reference-tuned" in keys:
                row.append(_number(ratio(values["ours"], values["reference-tuned"])))
        rows.append(row)
    return format_table(headers, rows, markdown)


def scale_starts_table(report: dict[str, Any], markdown: bool = False) -> str:
    """Every start at the sizes that took several (their medians are the figures above)."""
    rows = []
    for volumes, by_key in sorted((report.get("scaling") or {}).items(), key=lambda i: int(i[0])):
        for key in IMPLEMENTATIONS:
            starts = (by_key.get(key) or {}).get("starts") or []
            if starts:
                rows.append(
                    [
                        volumes,
                        key,
                        ", ".join(_number(ready) for ready, _ in starts),
                        ", ".join(_number(cpu) for _, cpu in starts),
                    ]
                )
    if not rows:
        return ""
    headers = ["volumes", "implementation", "ready (s), each start", "CPU until ready (s)"]
    return format_table(headers, rows, markdown)


FAILOVER_ROWS = (
    ("kill to new claim Bound (s)", "failover_seconds"),
    ("lease duration (s)", "lease_duration_seconds"),
    ("  lease wait: kill -> leading (s)", "lease_wait_seconds"),
    ("    kill -> lease expired (s)", "expiry_seconds"),
    ("    lease expired -> leading (s)", "takeover_seconds"),
    ("  sync: leading -> caches synced (s)", "sync_seconds"),
    ("  provisioning: synced -> PV created (s)", "provisioning_seconds"),
    ("  binding: PV created -> Bound (s)", "binding_seconds"),
    ("standby steady RSS (MiB)", "standby_steady_rss_mib"),
    ("standby idle CPU (s)", "standby_idle_cpu_seconds"),
    ("leader steady RSS (MiB)", "leader_steady_rss_mib"),
)


def failover_table(report: dict[str, Any], markdown: bool = False) -> str:
    """The failover of ours and the tuned reference, phase by phase: where the time goes."""
    runs: dict[str, dict[str, Any]] = report.get("failover") or {}
    keys = [key for key in ("ours", "reference-tuned") if key in runs]
    if not keys:
        return ""
    volumes = runs[keys[0]]["volumes"]
    how = {
        key: "warm standby" if runs[key]["warm"] else "cold start after the lease" for key in keys
    }
    rows = [["takes over as", *(how[key] for key in keys)]]
    rows += [
        [label, *(_number(runs[key].get(name)) for key in keys)] for label, name in FAILOVER_ROWS
    ]
    if any(len(runs[key].get("failovers") or []) > 1 for key in keys):
        rows.append(
            [
                "kill to Bound, each failover (s)",
                *(", ".join(map(_number, runs[key].get("failovers") or [])) for key in keys),
            ]
        )
    return format_table([f"failover at {volumes} volumes", *keys], rows, markdown)


def real_table(report: dict[str, Any], markdown: bool = False) -> str:
    """The bursts on real nodes: each figure of ours and both references per binder limit and
    size, with ours' ratios."""
    rows = [
        [
            row["binder_limit"],
            str(row["claims"]),
            row["figure"],
            row["unit"],
            *(
                _number(row.get(key))
                for key in (*REAL_COLUMNS, "ours/tuned", "ours/default", "csi/tuned", "csi/ours")
            ),
        ]
        for row in report.get("real_figures") or []
    ]
    if not rows:
        return ""
    headers = [
        "binder limit", "claims", "figure", "unit", "ours", "ref tuned", "ref default",
        "ours CSI", "ours/tuned", "ours/default", "CSI/tuned", "CSI/ours",
    ]  # fmt: skip
    return format_table(headers, rows, markdown)


def pod_starts_table(report: dict[str, Any], markdown: bool = False) -> str:
    """The helper pods the real nodes ran, created to Succeeded, beside the kubelet model."""
    rows = [
        [
            str(row["claims"]),
            str(row["containers"]),
            str(row["pods"]),
            *(_number(row[key]) for key in ("p50", "p90", "max", "model", "p50/model")),
        ]
        for row in report.get("real_pod_starts") or []
    ]
    if not rows:
        return ""
    headers = [
        "claims in burst", "containers", "helper pods", "p50 (s)", "p90 (s)", "max (s)",
        "model alone (s)", "p50/model",
    ]  # fmt: skip
    return format_table(headers, rows, markdown)


def snapshot_lines(report: dict[str, Any]) -> list[str]:
    """The snapshot scenario's stages and goals (`bench.snapshot_goals.report_lines`)."""
    runs = [DiskRun.from_dict(run) for run in report.get("snapshots") or []]
    return report_lines(runs, report.get("snapshot_goals") or []) if runs else []


def print_report(report: dict[str, Any]) -> None:
    options = report["options"]
    if report.get("snapshots") and not report["figures"] and not report.get("real_figures"):
        print(f"\nsnapshots; wall time {report['wall_seconds']:.0f}s")
        print("\n".join(snapshot_lines(report)))
        return
    if report["figures"]:
        print(
            f"\n{options['claims']} claims over {options['nodes']} nodes; "
            f"{options['scale_volumes']} volumes for scale; helper pods start as "
            f"{options.get('pod_start', 'fast')} (--pod-start); "
            f"wall time {report['wall_seconds']:.0f}s"
        )
        print(figures_table(report))
        print()
        print(requests_table(report))
    else:
        sizes = ", ".join(map(str, options.get("real_sizes") or []))
        print(
            f"\nbursts of {sizes} claims on {REAL_NODES} real nodes; "
            f"wall time {report['wall_seconds']:.0f}s"
        )
    print()
    print(goals_table(report))
    if csi := csi_goals_table(report):
        print()
        print(csi)
    if report.get("time_goes"):
        print()
        print(time_goes_tables(report))
    if report.get("scaling"):
        print()
        print(scaling_table(report))
        if starts := scale_starts_table(report):
            print()
            print(starts)
    if failover := failover_table(report):
        print()
        print(failover)
    if real := real_table(report):
        print()
        print("bursts on real nodes")
        print(real)
        print()
        print("helper pods on real nodes, created -> Succeeded, and the kubelet model")
        print(pod_starts_table(report))


def markdown(report: dict[str, Any]) -> str:
    """The tables for docs/benchmarks.md."""
    return "\n\n".join(
        [
            figures_table(report, markdown=True),
            requests_table(report, markdown=True),
            goals_table(report, markdown=True),
            *filter(None, [csi_goals_table(report, markdown=True)]),
            *([time_goes_tables(report, markdown=True)] if report.get("time_goes") else []),
            *([scaling_table(report, markdown=True)] if report.get("scaling") else []),
            *filter(None, [scale_starts_table(report, markdown=True)]),
            *filter(None, [failover_table(report, markdown=True)]),
            *filter(None, [real_table(report, markdown=True)]),
            *filter(None, [pod_starts_table(report, markdown=True)]),
            *(
                ["```\n" + "\n".join(snapshot_lines(report)) + "\n```"]
                if report.get("snapshots")
                else []
            ),
        ]
    )


def _plain(value: Any) -> Any:
    """NaN is not JSON: it becomes null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def write_json(report: dict[str, Any], path: Path) -> None:
    """The report as JSON, and its tables as Markdown beside it (same name, .md)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_plain(report), indent=2, allow_nan=False) + "\n")
    path.with_suffix(".md").write_text(markdown(report) + "\n")
