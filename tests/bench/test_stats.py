"""The benchmark's pure pieces: percentiles, ratios, audit counting, table formatting."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench.audit import AuditLog
from bench.report import format_table
from bench.stats import Latencies, percentile, ratio


def test_nearest_rank_percentiles() -> None:
    values = [float(v) for v in range(1, 201)]
    assert percentile(values, 0.5) == 100
    assert percentile(values, 0.95) == 190
    assert percentile(values, 0.99) == 198
    assert percentile(values, 1.0) == 200
    assert percentile([3.0], 0.99) == 3.0


def test_percentile_of_nothing_is_nan_and_fraction_is_checked() -> None:
    assert math.isnan(percentile([], 0.5))
    with pytest.raises(ValueError, match="fraction"):
        percentile([1.0], 0)


def test_latencies_summary_is_order_independent() -> None:
    summary = Latencies.of([0.4, 0.1, 0.3, 0.2])
    assert summary == Latencies(count=4, p50=0.2, p95=0.4, p99=0.4, max=0.4)


def test_ratio_handles_missing_and_zero() -> None:
    assert ratio(1.0, 4.0) == 0.25
    assert math.isnan(ratio(1.0, 0.0))
    assert math.isnan(ratio(math.nan, 1.0))


def _event(agent: str, verb: str, resource: str, at: str, subresource: str = "") -> str:
    reference = {"resource": resource, **({"subresource": subresource} if subresource else {})}
    return json.dumps(
        {
            "verb": verb,
            "userAgent": agent,
            "objectRef": reference,
            "requestReceivedTimestamp": at,
            "requestURI": f"/api/v1/{resource}",
        }
    )


def test_audit_counts_by_user_agent_and_window(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    lines = [
        _event("ours/1", "create", "pods", "2026-01-01T00:00:01.000000Z"),
        _event("ours/1", "patch", "pods", "2026-01-01T00:00:02.000000Z", "status"),
        _event("ours/1", "get", "pods", "2026-01-01T00:00:09.000000Z"),
        _event("other/1", "create", "pods", "2026-01-01T00:00:02.000000Z"),
    ]
    log.write_text("\n".join(lines) + "\n")
    start = 1767225600.0  # 2026-01-01T00:00:00Z
    counts = AuditLog(log).count(start, start + 5, "ours/")
    assert dict(counts.by_kind) == {"create pods": 1, "patch pods/status": 1}
    assert counts.total == 2
    assert counts.writes == 2
    assert AuditLog(log).count(start, start + 5).total == 3
    assert counts.per(2) == {"create pods": 0.5, "patch pods/status": 0.5}


def test_table_columns_line_up() -> None:
    table = format_table(["a", "long header"], [["value", "1"], ["x", "22"]])
    lines = table.splitlines()
    assert len({line.index("|") for line in lines if "|" in line}) == 1
    assert lines[0].startswith("a    ")
