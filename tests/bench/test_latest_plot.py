"""docs/benchmarks.png is drawn from bench/latest_runs.json, and that file holds the figures the
benchmark page quotes: each of its measured values is on the page, so a run published on the
page without its figures (or the other way round) fails here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.latest_plot import LATEST_RUNS, write_latest_plot

PAGE = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


def measured(value: Any) -> list[float]:
    """Every float in the runs' figures (counts such as sizes and volumes are ints)."""
    if isinstance(value, float):
        return [value]
    if isinstance(value, dict):
        return [found for item in value.values() for found in measured(item)]
    if isinstance(value, list):
        return [found for item in value for found in measured(item)]
    return []


def test_the_plot_is_drawn_from_the_latest_runs(tmp_path: Path) -> None:
    plot = tmp_path / "benchmarks.png"
    write_latest_plot(json.loads(LATEST_RUNS.read_text(encoding="utf-8")), plot)
    assert plot.read_bytes().startswith(b"\x89PNG")


def test_every_figure_of_the_latest_runs_is_on_the_page() -> None:
    runs = json.loads(LATEST_RUNS.read_text(encoding="utf-8"))
    page = PAGE.read_text(encoding="utf-8")
    figures = measured(runs)
    assert len(figures) > 50
    assert [figure for figure in figures if str(figure) not in page] == []
