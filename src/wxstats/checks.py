"""Sanity checks on a statistics set: what a user should look at before training.

Each check names the variable and says why it matters. The thresholds are
deliberately loose: a warning here is a hint to look, not a verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wxstats.readers import StatsSet, StreamSet

FLOAT32_EPS = 2.0**-24
RESOLUTION_LIMIT = 1e-3
"""Warn when float32 storage resolves a variable's spread worse than 0.1 %."""
OUTLIER_SIGMAS = 30.0
"""Warn when min or max lie further than this many std from the mean."""
UNCORRELATED_RATIO = 1.5
"""diff_std/std of independent steps is sqrt(2); above 1.5 the steps look like noise."""
POSITIVE_UNITS = {"K": "temperature in kelvin", "Pa": "pressure", "hPa": "pressure"}


@dataclass(frozen=True)
class Finding:
    category: str
    variable: str
    message: str


def _value(stream: StreamSet, op: str, i: int) -> float | None:
    values = stream.values.get(op)
    return float(values[i]) if values is not None else None


def _stream_findings(stream: StreamSet) -> list[Finding]:
    found: list[Finding] = []
    labels = stream.labels()
    for i, name in enumerate(labels):

        def add(message: str, name: str = name) -> None:
            found.append(Finding(stream.category, name, message))

        count, nan = _value(stream, "count", i), _value(stream, "nan_count", i)
        mean, std = _value(stream, "mean", i), _value(stream, "std", i)
        lo, hi = _value(stream, "min", i), _value(stream, "max", i)
        unit = stream.unit(i)
        if count is not None and count == 0:
            add("no values at all")
            continue
        if nan:
            total = nan + (count or 0)
            add(f"{int(nan)} NaN values ({100 * nan / total:.3g} %), left out of the statistics")
        if std is not None and (std == 0 or (lo is not None and lo == hi)):
            add("constant field (std 0, min == max): standardizing divides by zero")
        elif std is not None and mean is not None and std > 0:
            resolution = abs(mean) * FLOAT32_EPS / std
            if resolution > RESOLUTION_LIMIT:
                add(
                    f"std is only {std / abs(mean):.2g} of |mean|: float32 data resolve "
                    f"its variation to {100 * resolution:.2g} %"
                )
            for bound, label in ((hi, "max"), (lo, "min")):
                if bound is not None and abs(bound - mean) / std > OUTLIER_SIGMAS:
                    side = "above" if bound > mean else "below"
                    add(
                        f"{label} {bound:.6g} is {abs(bound - mean) / std:.0f} std {side} the "
                        "mean: outliers or fill values?"
                    )
        if unit in POSITIVE_UNITS:
            lowest = lo if lo is not None else mean
            if lowest is not None and lowest < 0:
                add(
                    f"negative {'minimum' if lo is not None else 'mean'} {lowest:.6g} {unit}: "
                    f"impossible for a {POSITIVE_UNITS[unit]}"
                )
        for step, ops in sorted(stream.diff.items(), key=lambda kv: str(kv[0])):
            ratio = ops.get("std_standardized")
            if ratio is None or std is None or std == 0 or not math.isfinite(ratio[i]):
                continue
            tag = f"step {step}" if step is not None else "one step"
            if ratio[i] == 0:
                add(f"never changes over {tag} (diff_std 0): a static field in the state?")
            elif ratio[i] > UNCORRELATED_RATIO:
                add(
                    f"diff_std/std = {ratio[i]:.3g} over {tag}: consecutive steps look "
                    "uncorrelated (noise, or shuffled time?)"
                )
    return found


def findings(stats: StatsSet) -> list[Finding]:
    """Every finding of every stream, in variable order."""
    out: list[Finding] = []
    for stream in stats.streams.values():
        out.extend(_stream_findings(stream))
    return out


def standardized_range(stream: StreamSet) -> tuple[np.ndarray, np.ndarray] | None:
    """((min - mean) / std, (max - mean) / std): how far the extremes reach, in std."""
    need = ("mean", "std", "min", "max")
    if not all(op in stream.values for op in need):
        return None
    mean, std = stream.values["mean"], stream.values["std"]
    safe = np.where(std > 0, std, np.nan)
    return (stream.values["min"] - mean) / safe, (stream.values["max"] - mean) / safe
