"""The statistics, declared once: each one's name in files, its result field, and
how it comes from the exact moments.

A :class:`Statistic` is either a kept quantity of :mod:`wxstats.core.reduction`
read as it is (a count, an extreme) or a ``finalize`` from the feature's exact
raw moments (:class:`Raw`: the divisor and the exact sums of ``x``, ``x²``, ...),
rounded once. :meth:`wxstats.core.combine.Moments.statistics` applies them (the
one place the exact sums are rounded, per feature or pooled over features); the
result fields of :class:`~wxstats.core.stats.StreamStats` and
:class:`~wxstats.core.stats.DiffStats`, the names files give them
(``VALUE_OPS``, ``DIFF_OPS``), the JSON summary's keys and the readers all
derive from :data:`STATISTICS`, and ``tests/test_statistics.py`` iterates over it
(a float64 two-pass reference per statistic, merges, layouts, the kernels).
A statistic needing powers above 2 is computed only by a run of that order
(``--moments 4``), whose kernel sums them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from wxstats.core.exact import sqrt_correctly_rounded
from wxstats.core.reduction import BY_NAME


@dataclass(frozen=True)
class Raw:
    """A feature's exact raw moments: the divisor (its count, or weighted the exact
    sum of its weights) and ``sums[p - 1]``, the exact sum of ``x**p`` (weighted:
    ``w x**p``) for every power the moments hold."""

    n: int | Fraction
    sums: tuple[Fraction, ...]

    def __add__(self, other: Raw) -> Raw:
        sums = zip(self.sums, other.sums, strict=True)
        return Raw(self.n + other.n, tuple(a + b for a, b in sums))

    def central(self, p: int) -> Fraction:
        """The ``p``-th central moment (population, divided by ``n``), exactly."""
        n = self.n
        mean = self.sums[0] / n
        total = Fraction(0)
        binomial = 1
        for j in range(p + 1):  # sum_j C(p, j) (-mean)^(p-j) E[x^j]
            raw = Fraction(1) if j == 0 else self.sums[j - 1] / n
            total += binomial * raw * (-mean) ** (p - j)
            binomial = binomial * (p - j) // (j + 1)
        return total


def _mean(raw: Raw) -> float:
    return float(raw.sums[0] / raw.n)


def _std(raw: Raw) -> float:
    # per-unit float sums can break Cauchy-Schwarz by an ulp when the true variance
    # is ~0: such a variance is zero
    n, sx, sxx = raw.n, raw.sums[0], raw.sums[1]
    return sqrt_correctly_rounded(max((sxx * n - sx * sx) / (n * n), Fraction(0)))


def _skewness(raw: Raw) -> float:
    # m3 / m2**1.5 = sign(m3) sqrt(m3² / m2³): a rational under the root, rounded once
    m2, m3 = raw.central(2), raw.central(3)
    if m2 <= 0:
        return math.nan
    root = sqrt_correctly_rounded(m3 * m3 / (m2 * m2 * m2))
    return -root if m3 < 0 else root


def _excess_kurtosis(raw: Raw) -> float:
    m2 = raw.central(2)
    return float(raw.central(4) / (m2 * m2) - 3) if m2 > 0 else math.nan


@dataclass(frozen=True)
class Statistic:
    """One statistic of a feature, declared once: what files and the JSON summary
    call it, the result field holding it (of :class:`wxstats.core.stats.StreamStats`
    and, unless ``values_only``, :class:`~wxstats.core.stats.DiffStats`), and how it
    comes from the exact moments: a kept quantity as it is (``quantity``: a count or
    an extreme, NaN without a finite value) or ``finalize``, rounded once from the
    exact raw moments of ``order`` powers (NaN where the divisor is 0)."""

    name: str
    field: str
    order: int = 0
    """The highest power sum ``finalize`` needs (a run's moments hold the powers up
    to their own order: a statistic above it is absent)."""
    quantity: str | None = None
    finalize: Callable[[Raw], float] | None = None
    values_only: bool = False
    optional: bool = False
    """Written (JSON summary) only where present, never as null."""

    @property
    def integer(self) -> bool:
        """An integer statistic (a count), written as such."""
        return self.quantity is not None and BY_NAME[self.quantity].merge == "count"


STATISTICS: tuple[Statistic, ...] = (
    Statistic("count", "count", quantity="count"),
    Statistic("mean", "mean", order=1, finalize=_mean),
    Statistic("std", "std", order=2, finalize=_std),
    Statistic("min", "minimum", quantity="minimum"),
    Statistic("max", "maximum", quantity="maximum"),
    Statistic("nan_count", "nan_count", quantity="nan_count", values_only=True, optional=True),
    Statistic("skewness", "skewness", order=3, finalize=_skewness, optional=True),
    Statistic(
        "excess_kurtosis", "excess_kurtosis", order=4, finalize=_excess_kurtosis, optional=True
    ),
)
"""The order is the order of the statistics in files (the statistics file's
variables, the JSON summary's keys): a new one goes at the end."""

STATISTIC = {s.name: s for s in STATISTICS}
DIFF_STATISTICS = tuple(s for s in STATISTICS if not s.values_only)


def statistics_of(order: int, diffs: bool = False) -> tuple[Statistic, ...]:
    """The statistics moments holding the power sums up to ``order`` give (of the
    differences: those not ``values_only``)."""
    return tuple(s for s in (DIFF_STATISTICS if diffs else STATISTICS) if s.order <= order)
