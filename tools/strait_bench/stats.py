"""Pure arithmetic of the report: percentiles, medians over repeats, ratios."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks (NumPy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: Iterable[float | None]) -> float | None:
    """The median of the known values, or None when there is none."""
    known = [v for v in values if v is not None]
    return percentile(known, 50) if known else None


def latency_summary(latencies_ms: Sequence[float]) -> dict[str, float]:
    """p50, p99 and max of a latency sample, in milliseconds."""
    return {"p50_ms": round(percentile(latencies_ms, 50), 2),
            "p99_ms": round(percentile(latencies_ms, 99), 2),
            "max_ms": round(max(latencies_ms), 2), "count": len(latencies_ms)}


def flatten(run: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested run result, keyed by dotted path (``latency.5000.p99_ms``)."""
    flat: dict[str, float] = {}
    for key, value in run.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{path}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[path] = float(value)
    return flat


def medians(runs: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Per metric (dotted path), the median over the runs that have it."""
    flat = [flatten(run) for run in runs]
    keys = sorted({key for run in flat for key in run})
    result = {}
    for key in keys:
        value = median(run.get(key) for run in flat)
        if value is not None:
            result[key] = round(value, 3)
    return result


def ratios(numerator: Mapping[str, float], denominator: Mapping[str, float]) -> dict[str, float]:
    """numerator/denominator for every metric both have (skipping zero denominators)."""
    return {key: round(numerator[key] / denominator[key], 3)
            for key in sorted(set(numerator) & set(denominator)) if denominator[key]}
