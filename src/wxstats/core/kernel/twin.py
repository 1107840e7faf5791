"""The compiled kernel's loops in plain numpy, bit for bit, for blocks too small
to be worth loading the compiled kernel.

Loading the compiled kernel costs 0.03-0.05 s of a process (its stored machine
code, :mod:`wxstats.core.kernel.stored`; 0.3 s through numba, seconds where it
must first be compiled), more than summing a few kilobytes takes in numpy; a
tiny dataset (a test, an example, a quick look) would spend most of its run on it. This module adds
the same numbers in the same order as :mod:`wxstats.core.kernel.compiled` (see
the :mod:`wxstats.core.kernel` docstring): each lane a sequential float64 sum
over rows of ``m * C`` values, lanes folded into channels in lane order,
chunks into the step in chunk order, extremes kept with the kernel's strict
comparisons. It is the kernel's checked path throughout: a skipped value is
an added ``0.0``, which changes no sum (a lane sum starts at ``+0.0`` and so is
never ``-0.0``), and on finite data the fast path adds the very same values.
It takes the compiled kernel's record (:mod:`wxstats.core.kernel.record`), so
:func:`wxstats.core.kernel.block_sums` chooses by time alone; tests assert
identical bits on every path.
"""

from __future__ import annotations

import numpy as np

from wxstats.core.kernel.record import KernelArgs
from wxstats.core.reduction import slot

_COUNT = slot("count")[1]
_SUM1, _SUM2, _WEIGHT = slot("sum1")[1], slot("sum2")[1], slot("weight")[1]
_SUM3, _SUM4 = slot("sum3")[1], slot("sum4")[1]
_MIN, _MAX = slot("minimum")[1], slot("maximum")[1]
_NAN, _INF = slot("nan_count")[1], slot("inf_count")[1]


def _fold(lane_sum: np.ndarray, n_c: int) -> np.ndarray:
    """Lanes into channels in lane order (lane ``j`` is channel ``j % n_c``)."""
    rows = lane_sum.reshape(-1, n_c)
    total = rows[0].copy()
    for row in rows[1:]:
        total = total + row
    return total


def _fold_extreme(lane: np.ndarray, n_c: int, out: np.ndarray, smaller: bool) -> None:
    for row in lane.reshape(-1, n_c):
        better = row < out if smaller else row > out
        out[:] = np.where(better, row, out)


def _lane_sums(v: np.ndarray, wl: np.ndarray | None, lanes: int, sh, iv, higher: bool):
    """Lane sums of the values (or differences) ``v`` of one chunk, checked path;
    ``higher``: also of the third and fourth powers (``--moments 4``)."""
    l0, l1, l2 = np.zeros(lanes), np.zeros(lanes), np.zeros(lanes)
    l3, l4 = np.zeros(lanes), np.zeros(lanes)
    lmn, lmx = np.full(lanes, np.inf), np.full(lanes, -np.inf)
    lcnt, lnan, linf = (np.zeros(lanes, dtype=np.int64) for _ in range(3))
    for start in range(0, v.shape[0], lanes):
        seg = v[start : start + lanes]
        k = seg.shape[0]
        ok = np.isfinite(seg)
        y = (seg - sh[:k]) * iv[:k]
        if wl is not None:
            w = wl[start : start + k]
            z = w * y
            z2 = z * y
            l0[:k] = l0[:k] + np.where(ok, w, 0.0)
            l1[:k] = l1[:k] + np.where(ok, z, 0.0)
            l2[:k] = l2[:k] + np.where(ok, z2, 0.0)
            if higher:
                z3 = z2 * y
                l3[:k] = l3[:k] + np.where(ok, z3, 0.0)
                l4[:k] = l4[:k] + np.where(ok, z3 * y, 0.0)
        else:
            y2 = y * y
            l1[:k] = l1[:k] + np.where(ok, y, 0.0)
            l2[:k] = l2[:k] + np.where(ok, y2, 0.0)
            if higher:
                l3[:k] = l3[:k] + np.where(ok, y2 * y, 0.0)
                l4[:k] = l4[:k] + np.where(ok, y2 * y2, 0.0)
        lmn[:k] = np.where(ok & (seg < lmn[:k]), seg, lmn[:k])
        lmx[:k] = np.where(ok & (seg > lmx[:k]), seg, lmx[:k])
        lcnt[:k] += ok
        lnan[:k] += np.isnan(seg)
        linf[:k] += np.isinf(seg)
    return l0, l1, l2, l3, l4, lmn, lmx, lcnt, lnan, linf


def _per_channel(counts: np.ndarray, n_c: int) -> np.ndarray:
    return counts.reshape(-1, n_c).sum(axis=0)


def kernel(args: KernelArgs) -> None:
    """:func:`wxstats.core.kernel.compiled.kernel`, in numpy (see module docstring);
    ``refs[:, 2]`` (the compiled kernel's fused form of the scaling) is not needed:
    ``(v - p) * q`` here gives the same bits."""
    with np.errstate(over="ignore", invalid="ignore"):  # overflow: the caller's to handle
        _kernel(args)


def _kernel(args: KernelArgs) -> None:
    a, lags, ranges, refs, w, by = (
        args.values,
        args.lags,
        args.ranges,
        args.refs,
        args.weights,
        args.by,
    )
    steps_float, steps_int = args.steps_float, args.steps_int
    totals_float, totals_int = args.totals_float, args.totals_int
    n_c, m, chunk = args.n_c, args.m, args.chunk
    n_t = a.shape[0]
    n_g = a.shape[1] // n_c
    lanes = m * n_c
    weighted = w.shape[0] > 0
    higher = steps_float.shape[1] > _SUM3  # the array has the slots of --moments 4
    for gs in range(0, n_g, chunk):
        n_here = min(chunk, n_g - gs)
        base, n = gs * n_c, n_here * n_c
        wl = np.repeat(np.asarray(w[gs : gs + n_here], np.float64), n_c) if weighted else None
        rows = np.asarray(a[:, base : base + n], dtype=np.float64)
        for t in range(n_t):
            for p in range(ranges.shape[0]):
                if t < ranges[p, 0] or t >= ranges[p, 1]:
                    continue
                v = rows[t] - rows[t - lags[p - 1]] if p else rows[t]
                l0, l1, l2, l3, l4, lmn, lmx, lcnt, lnan, linf = _lane_sums(
                    v, wl, lanes, refs[p, 0, t], refs[p, 1, t], higher
                )
                g = by[t]
                steps_int[p, _COUNT, t] += _per_channel(lcnt, n_c)
                if p == 0:  # NaN and Inf are told apart for the values only
                    totals_int[p, _NAN, g] += _per_channel(lnan, n_c)
                    totals_int[p, _INF, g] += _per_channel(linf, n_c)
                if weighted:
                    steps_float[p, _WEIGHT, t] += _fold(l0, n_c)
                steps_float[p, _SUM1, t] += _fold(l1, n_c)
                steps_float[p, _SUM2, t] += _fold(l2, n_c)
                if higher:
                    steps_float[p, _SUM3, t] += _fold(l3, n_c)
                    steps_float[p, _SUM4, t] += _fold(l4, n_c)
                _fold_extreme(lmn, n_c, totals_float[p, _MIN, g], True)
                _fold_extreme(lmx, n_c, totals_float[p, _MAX, g], False)
