"""Summary statistics for latencies (pure)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile: the smallest value with at least `fraction` of all values at
    or below it (so p99 of 200 values is the 198th smallest). NaN for no values."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = math.ceil(fraction * len(ordered))
    return ordered[max(rank, 1) - 1]


@dataclass(frozen=True)
class Latencies:
    count: int
    p50: float
    p95: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Latencies:
        return cls(
            count=len(values),
            p50=percentile(values, 0.50),
            p95=percentile(values, 0.95),
            p99=percentile(values, 0.99),
            max=max(values) if values else math.nan,
        )


def ratio(ours: float, reference: float) -> float:
    """ours / reference; NaN when either is missing or the reference is zero."""
    if math.isnan(ours) or math.isnan(reference) or reference == 0:
        return math.nan
    return ours / reference
