"""Sanity checks on a statistics set: what a user should look at before training.

Each check names the variable and says why it matters. The thresholds are
deliberately loose: a warning here is a hint to look, not a verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from wxstats.core.stats import Stats, StreamStats

FLOAT32_EPS = 2.0**-24
RESOLUTION_LIMIT = 1e-3
"""Warn when float32 storage resolves a variable's spread worse than 0.1 %."""
OUTLIER_SIGMAS = 30.0
"""Warn when min or max lie further than this many std from the mean."""
UNCORRELATED_RATIO = 1.5
"""diff_std/std of independent steps is sqrt(2); above 1.5 the steps look like noise."""
SKEW_LIMIT = 1.0
"""|skewness| above 1: "highly skewed" by the usual rule of thumb (Bulmer); a
standardized variable then keeps most of its spread on one side."""
KURTOSIS_LIMIT = 3.0
"""Excess kurtosis above 3: tails heavier than a Laplace distribution's (a normal
has 0): after standardizing, values of 10 std or more are not rare."""
POSITIVE_UNITS = {"K": "temperature in kelvin", "Pa": "pressure", "hPa": "pressure"}


@dataclass(frozen=True)
class Finding:
    category: str
    variable: str
    message: str


def _value(stream: StreamStats, op: str, i: int) -> float | None:
    values = stream.op(op)
    return float(values[i]) if values is not None else None


def transform_advice(
    skewness: float, kurtosis: float, mean: float, lo: float, hi: float
) -> str | None:
    """The transform that would bring a heavy-tailed variable closer to normal, from
    its statistics alone (None: not heavy-tailed). A skewed variable's longer side
    is folded: ``sqrt`` for tails like a gamma distribution's (whose excess kurtosis
    is 1.5 skewness²), ``log1p(x / s)`` for heavier ones (a lognormal's, above 2
    skewness²; ``s`` near the mean, where the logarithm bends); a left-skewed one
    (humidity near saturation) from its maximum down."""
    if not (abs(skewness) > SKEW_LIMIT or kurtosis > KURTOSIS_LIMIT):
        return None
    if abs(skewness) <= SKEW_LIMIT:
        return "symmetric heavy tails: asinh(x / s) or clipping the extremes, not a power"
    if skewness > 0:
        base, scale = ("x", mean) if lo >= 0 else (f"(x - {lo:.6g})", mean - lo)
    else:
        base, scale = f"({hi:.6g} - x)", hi - mean
    if kurtosis > 2 * skewness * skewness:
        return f"log1p({base} / {scale:.3g})"
    return f"sqrt({base})"


def _stream_findings(category: str, stream: StreamStats) -> list[Finding]:
    found: list[Finding] = []
    for i, name in enumerate(stream.features):

        def add(message: str, name: str = name) -> None:
            found.append(Finding(category, name, message))

        count, nan = _value(stream, "count", i), _value(stream, "nan_count", i)
        mean, std = _value(stream, "mean", i), _value(stream, "std", i)
        lo, hi = _value(stream, "min", i), _value(stream, "max", i)
        unit = stream.units[i]
        if count is not None and count == 0:
            add("no values at all")
            continue
        if nan:
            total = nan + (count or 0)
            add(f"{int(nan)} NaN values ({100 * nan / total:.3g} %), left out of the statistics")
        if std is not None and not 0 <= std < math.inf:
            add(f"std is {std:.6g}: not a standard deviation (NaN, infinite or negative)")
        elif std is not None and (std == 0 or (lo is not None and lo == hi)):
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
        skew, kurt = _value(stream, "skewness", i), _value(stream, "excess_kurtosis", i)
        if None not in (skew, kurt, mean, lo, hi) and math.isfinite(skew) and math.isfinite(kurt):
            advice = transform_advice(skew, kurt, mean, lo, hi)
            if advice is not None:
                add(
                    f"heavy-tailed (skewness {skew:.3g}, excess kurtosis {kurt:.3g}; normal: "
                    f"0, 0): standardized, it keeps long tails; {advice} would be closer "
                    "to normal"
                )
        if unit in POSITIVE_UNITS:
            lowest = lo if lo is not None else mean
            if lowest is not None and lowest < 0:
                add(
                    f"negative {'minimum' if lo is not None else 'mean'} {lowest:.6g} {unit}: "
                    f"impossible for a {POSITIVE_UNITS[unit]}"
                )
        for step in sorted(stream.diff, key=str):
            ratio = stream.standardized_diff(step)[1]
            if std is None or not 0 < std < math.inf:
                continue
            tag = stream.step_text(step) or "one step"
            pairs = stream.diff[step].count
            if not 0 <= ratio[i] < math.inf:
                if pairs is None or pairs[i] > 0:  # no pairs: nothing to standardize
                    add(f"diff_std/std over {tag} is {ratio[i]:.6g}: not a ratio of two std")
            elif ratio[i] == 0:
                add(f"never changes over {tag} (diff_std 0): a static field in the state?")
            elif ratio[i] > UNCORRELATED_RATIO:
                add(
                    f"diff_std/std = {ratio[i]:.3g} over {tag}: consecutive steps look "
                    "uncorrelated (noise, or shuffled time?)"
                )
    return found


def findings(stats: Stats, split: str | None = None) -> list[Finding]:
    """Every finding of every category of ``split``, in variable order."""
    out: list[Finding] = []
    for category, stream in stats.by_category(split).items():
        out.extend(_stream_findings(category, stream))
    return out


def standardized_range(stream: StreamStats) -> tuple[np.ndarray, np.ndarray] | None:
    """((min - mean) / std, (max - mean) / std): how far the extremes reach, in std."""
    if stream.minimum is None or stream.maximum is None:
        return None
    safe = np.where(stream.std > 0, stream.std, np.nan)
    return (stream.minimum - stream.mean) / safe, (stream.maximum - stream.mean) / safe
