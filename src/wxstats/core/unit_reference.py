"""Each summation unit's own shift and scale, from that unit's data alone.

The float64 sums of a unit (one time step of one feature, or the differences
ending at it) are taken of ``y = (x - K) / S``: shifting by a value inside the
data removes the cancellation of ``E[x²] - E[x]²``, and a power-of-two ``S``
near the spread keeps squares of huge (1e160) or tiny (denormal) values in
range. Because ``K`` and ``S`` come from the unit itself, its sums depend on
nothing outside it: two runs over different ranges, on different machines,
in any order, sum every shared unit to the same bits, and their exact raw sums
(:func:`wxstats.core.exact.unit_raw_sums`) merge to the full run's.

``K`` is the lower median of the finite values at (at most) :data:`SAMPLE_POINTS`
evenly spaced grid points: a value of the data itself (no arithmetic, so the
same bits on every machine), robust to an outlier where a first value is not.
A unit with no finite value there takes its first finite value. ``S`` is the
power of two at the largest distance of those values from ``K`` (of ``|K|``
when they are all equal). When a unit's values spread far beyond the sampled
ones and its float64 sums overflow, the kernel is run again for it with ``S``
from its whole row (:func:`widened`): still a function of the unit alone.
"""

from __future__ import annotations

import numpy as np

SAMPLE_POINTS = 64
"""Grid points of a unit its shift and scale are taken from."""

_EXPONENT_LIMIT = 1020
"""Scales stay in [2**-1020, 2**1020]: ``1/S`` is then a normal float64, so
multiplying by it is exact, and the exact fixed point holds ``S Σy``."""


def sample_positions(n_grid: int) -> np.ndarray:
    """The evenly spaced grid points a unit's reference is taken from."""
    if n_grid <= SAMPLE_POINTS:
        return np.arange(n_grid)
    return np.unique(np.linspace(0, n_grid - 1, SAMPLE_POINTS).round().astype(np.int64))


def power_of_two(magnitude: np.ndarray) -> np.ndarray:
    """``2**e`` with ``e`` the binary exponent of each magnitude (1 for 0, inf, NaN),
    kept in [2**-1020, 2**1020]."""
    m = np.asarray(magnitude, dtype=np.float64)
    ok = np.isfinite(m) & (m > 0)
    exponent = np.frexp(np.where(ok, m, 1.0))[1]
    exponent = np.clip(exponent, -_EXPONENT_LIMIT, _EXPONENT_LIMIT)
    return np.where(ok, np.ldexp(1.0, exponent), 1.0)


def references(sampled: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Shift and scale (U, F) of U units from their sampled values ``sampled``
    (U, P, F, float64) and, for a unit without a finite sampled value, from its
    whole row in ``rows`` (U, G, F, any dtype; indexed only then)."""
    v = np.where(np.isfinite(sampled), sampled, np.nan)
    finite = np.isfinite(v).sum(axis=1)  # (U, F)
    ordered = np.ascontiguousarray(v.transpose(0, 2, 1))  # (U, F, P): sorted in place, NaN last
    ordered.sort(axis=-1)
    pick = np.maximum(finite - 1, 0) // 2
    shift = np.take_along_axis(ordered, pick[:, :, None], axis=-1)[:, :, 0]
    for u, f in zip(*np.nonzero(finite == 0), strict=True):
        row = np.asarray(rows[u, :, f], dtype=np.float64)
        ok = np.flatnonzero(np.isfinite(row))
        shift[u, f] = row[ok[0]] if ok.size else 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        spread = np.nanmax(np.abs(v - shift[:, None, :]), axis=1, initial=0.0)
    spread = np.where(np.isfinite(spread), spread, np.nanmax(np.abs(v), axis=1, initial=0.0))
    magnitude = np.where(spread > 0, spread, np.abs(shift))
    return shift, power_of_two(magnitude)


def widened(rows: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """The scale of units (U, G, F) from their whole rows: the power of two at the
    largest distance of a finite value from ``shift`` (U, F), so that every
    ``|y| < 2`` and no float64 sum of a unit can overflow."""
    r = np.asarray(rows, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        d = np.abs(r - shift[:, None, :])
        spread = np.max(np.where(np.isfinite(d), d, 0.0), axis=1)
        big = np.max(np.where(np.isfinite(r), np.abs(r), 0.0), axis=1)
    # a distance beyond float64 (1e308 - -1e308) is at most twice the largest value
    spread = np.where(np.isfinite(spread), spread, big)
    return power_of_two(np.where(spread > 0, spread, np.abs(shift)))
