"""docs/benchmarks.png, drawn from the latest published runs (`bench/latest_runs.json`):
`python -m bench.latest_plot`.

Why a file of figures rather than the runs' reports: the page shows the latest run of each
scenario, and those come from different runs (the real nodes need root and a machine of their
own; `make bench` takes most of an hour), whose reports stay under the git-ignored
`bench/results/`. The figures the page quotes are copied into the JSON when a run is written up,
so the plot and the page's tables are read from one place.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes

REPO = Path(__file__).resolve().parents[1]
LATEST_RUNS = REPO / "bench" / "latest_runs.json"
PLOT = REPO / "docs" / "benchmarks.png"

COLOURS = {
    "ours": "#1b9e77",
    "ours-csi": "#e7298a",
    "reference-default": "#d95f02",
    "reference-tuned": "#7570b3",
}
LABELS = {
    "ours": "ours",
    "ours-csi": "ours, CSI volumes",
    "reference-default": "ref default",
    "reference-tuned": "ref tuned",
}
PAIR = ("ours", "reference-tuned")


def _bars(axes: Axes, groups: list[str], values: dict[str, list[float]]) -> None:
    """Ours beside the tuned reference for each group."""
    for offset, key in enumerate(PAIR):
        axes.bar(
            [index + 0.38 * offset for index in range(len(groups))],
            values[key],
            width=0.38,
            color=COLOURS[key],
            label=LABELS[key],
        )
    axes.set_xticks([index + 0.19 for index in range(len(groups))], groups)


def _real_nodes_panel(axes: Axes, real: dict[str, Any]) -> None:
    """Every implementation the real-node run measured (ours with CSI volumes where it ran)."""
    for limit, style in (("default", "-"), ("lifted", "--")):
        for key in real["all_bound_seconds"][limit]:
            axes.plot(
                real["sizes"],
                real["all_bound_seconds"][limit][key],
                style,
                marker="o",
                color=COLOURS[key],
                label=f"{LABELS[key]}, {limit} binder limit",
            )
    axes.set_xticks(real["sizes"])
    axes.set_xlabel("claims in the burst")
    axes.set_ylabel("seconds until all Bound")
    axes.set_title(f"real nodes ({real['nodes']}): burst until all Bound")
    axes.legend(fontsize=7)


def _csi_goals_panel(axes: Axes, csi: dict[str, Any]) -> None:
    """Each CSI goal's judged value as a share of its limit: at or below 1, met."""
    goals = csi["goals"]
    shares = [goal["value"] / goal["limit"] for goal in goals]
    colours = [COLOURS["ours-csi"] if share <= 1 else "#999999" for share in shares]
    positions = range(len(goals))
    axes.barh(positions, shares, color=colours)
    axes.set_yticks(positions, [goal["name"] for goal in goals], fontsize=7)
    axes.invert_yaxis()
    axes.axvline(1.0, color="black", linestyle="--", label="limit")
    axes.set_xlabel("judged value / limit (grey: missed)")
    axes.set_title("CSI volumes on real nodes: issue 38's goals")
    axes.legend(fontsize=7)


def _requests_panel(axes: Axes, real: dict[str, Any], kwok: dict[str, Any]) -> None:
    per_volume = real["requests_per_volume_at_40"]["default"]
    values = {key: [per_volume[key], kwok["burst_requests_per_volume"][key]] for key in PAIR}
    _bars(axes, ["real nodes, 40 claims", f"kwok, {kwok['claims']} claims"], values)
    axes.axhline(3.5, color="black", linestyle="--", label="goal (3.5)")
    axes.set_ylabel("API requests per volume")
    axes.set_title("burst: provisioner API requests")
    axes.legend(fontsize=7)


def _kwok_panel(axes: Axes, kwok: dict[str, Any]) -> None:
    figures = ("burst_all_bound_seconds", "lifted_all_bound_seconds", "release_seconds")
    values = {key: [kwok[figure][key] for figure in figures] for key in PAIR}
    _bars(axes, ["burst: all Bound", "lifted: all Bound", "release"], values)
    axes.axhline(kwok["binder_floor_seconds"], color="black", linestyle="--", label="binder floor")
    axes.set_ylim(0, 1.25 * max(max(row) for row in values.values()))
    axes.set_ylabel("seconds")
    axes.set_title(f"kwok: {kwok['claims']} claims over {kwok['nodes']} nodes")
    axes.legend(fontsize=7, loc="upper center", ncol=3)


def _startup_panel(axes: Axes, startup: dict[str, Any], figure: str, unit: str) -> None:
    for key, values in startup[figure].items():
        axes.plot(startup["volumes"], values, marker="o", color=COLOURS[key], label=LABELS[key])
    axes.set_xscale("log")
    axes.set_xlabel("bound volumes")
    axes.set_ylabel(unit)
    axes.legend(fontsize=7)


def _failover_panel(axes: Axes, failover: dict[str, Any]) -> None:
    times = failover["kill_to_bound_seconds"]
    for index, key in enumerate(PAIR):
        axes.bar(index, statistics.median(times[key]), color=COLOURS[key], width=0.6)
        axes.plot([index] * len(times[key]), times[key], "k.", markersize=6)
    axes.axhline(failover["lease_seconds"] + 2, color="black", linestyle="--", label="goal")
    axes.set_xticks(range(len(PAIR)), [LABELS[key] for key in PAIR])
    axes.set_ylabel("seconds, kill to new claim Bound")
    axes.set_title(f"failover over {failover['volumes']:,} volumes (median, each)")
    axes.legend(fontsize=7)


def write_latest_plot(runs: dict[str, Any], path: Path) -> None:
    figure, axes = plt.subplots(2, 4, figsize=(22, 9))
    _real_nodes_panel(axes[0][0], runs["real_nodes"])
    _real_nodes_panel(axes[0][3], runs["csi_real_nodes"])
    axes[0][3].set_title("real nodes, the CSI run: burst until all Bound")
    _csi_goals_panel(axes[1][3], runs["csi_real_nodes"])
    _requests_panel(axes[0][1], runs["real_nodes"], runs["kwok"])
    _kwok_panel(axes[0][2], runs["kwok"])
    _startup_panel(axes[1][0], runs["startup"], "ready_seconds", "seconds to ready")
    axes[1][0].set_title("start-up: time to ready")
    _startup_panel(axes[1][1], runs["startup"], "steady_rss_mib", "steady RSS (MiB)")
    axes[1][1].set_title("start-up: steady memory")
    _failover_panel(axes[1][2], runs["failover"])
    figure.suptitle(
        "local-path-storage vs rancher local-path-provisioner v0.0.37: the latest runs"
        f" ({runs['machine']})"
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str]) -> int:
    """`python -m bench.latest_plot [PNG]`: the page's plot (default docs/benchmarks.png)."""
    path = Path(argv[0]) if argv else PLOT
    write_latest_plot(json.loads(LATEST_RUNS.read_text(encoding="utf-8")), path)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
