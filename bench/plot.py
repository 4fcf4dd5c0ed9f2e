"""One run's plot (`bench/results/latest.png`): claim latency distribution, burst and release
times against the floor, API requests per volume by kind, and the scale figures."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

from bench.report import IMPLEMENTATIONS

COLOURS = {"ours": "#1b9e77", "reference-default": "#d95f02", "reference-tuned": "#7570b3"}


def _figure(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next((row for row in report["figures"] if row["figure"] == name), {})


def _value(row: dict[str, Any], key: str) -> float:
    value = row.get(key)
    return float(value) if isinstance(value, int | float) else math.nan


def _latency_panel(latency: Axes, report: dict[str, Any], present: list[str]) -> None:
    for key in present:
        burst = report["burst"][key]
        for index, percentile in enumerate(("p50", "p95", "p99")):
            latency.bar(
                index + 0.27 * present.index(key),
                burst["latency"][percentile] or 0,
                width=0.27,
                color=COLOURS[key],
                label=key if index == 0 else None,
            )
    latency.set_xticks([0.27, 1.27, 2.27], ["p50", "p95", "p99"])
    latency.set_ylabel("seconds")
    latency.set_title("burst: claim creation to Bound")
    latency.legend()


def _times_panel(times: Axes, report: dict[str, Any], present: list[str]) -> None:
    labels = ["bind all", "release all"]
    for offset, key in enumerate(present):
        burst = report["burst"][key]
        times.bar(
            [x + 0.27 * offset for x in range(2)],
            [burst["bind_seconds"], burst["release_seconds"]],
            width=0.27,
            color=COLOURS[key],
            label=key,
        )
    if report.get("floor"):
        times.axhline(report["floor"]["seconds"], color="black", linestyle="--", label="floor")
    times.set_xticks([0.27, 1.27], labels)
    times.set_ylabel("seconds")
    times.set_title(f"burst of {report['options']['claims']} claims")
    times.legend()


def _requests_panel(requests: Axes, report: dict[str, Any], present: list[str]) -> None:
    kinds: list[str] = []
    for key in present:
        kinds += [kind for kind in report["burst"][key]["requests"] if kind not in kinds]
    bottoms = [0.0] * len(present)
    colours = plt.get_cmap("tab20")
    for number, kind in enumerate(kinds):
        heights = [
            report["burst"][key]["requests"].get(kind, 0) / report["burst"][key]["claims"]
            for key in present
        ]
        requests.bar(present, heights, bottom=bottoms, label=kind, color=colours(number % 20))
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    requests.axhline(5, color="black", linestyle="--")
    requests.set_ylabel("requests per volume")
    requests.set_title("burst: provisioner API requests (audit log)")
    requests.legend(fontsize=6, ncol=2)


def _scale_panel(scale: Axes, report: dict[str, Any]) -> None:
    ready = _figure(report, "scale: time to ready")
    rss = _figure(report, "scale: steady RSS")
    keys = [key for key in IMPLEMENTATIONS if key in report["scale"]]
    positions = range(len(keys))
    scale.bar(
        [p - 0.2 for p in positions],
        [_value(ready, key) for key in keys],
        width=0.4,
        color="#66a61e",
        label="ready (s)",
    )
    memory = scale.twinx()
    memory.bar(
        [p + 0.2 for p in positions],
        [_value(rss, key) for key in keys],
        width=0.4,
        color="#e6ab02",
        label="steady RSS (MiB)",
    )
    # Headroom above the bars for the two legends.
    scale.set_ylim(0, 1.35 * max([_value(ready, key) for key in keys] + [0.1]))
    memory.set_ylim(0, 1.35 * max([_value(rss, key) for key in keys] + [1.0]))
    scale.set_xticks(list(positions), keys)
    scale.set_ylabel("seconds to ready")
    memory.set_ylabel("MiB")
    scale.set_title(f"scale: start over {report['options']['scale_volumes']} bound volumes")
    scale.legend(loc="upper left")
    memory.legend(loc="upper right")


def write_plot(report: dict[str, Any], path: Path) -> None:
    figure, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    # The plot keeps to ours against the reference; capacity on is in the tables and JSON.
    present = [key for key in IMPLEMENTATIONS if key in report["burst"] and key in COLOURS]
    _latency_panel(axes[0][0], report, present)
    _times_panel(axes[0][1], report, present)
    _requests_panel(axes[1][0], report, present)
    _scale_panel(axes[1][1], report)
    figure.suptitle(f"local-path-storage vs rancher local-path-provisioner ({report['generated']})")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
