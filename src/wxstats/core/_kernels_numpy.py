"""The compiled kernel's loops in plain numpy, bit for bit, for blocks too small
to be worth loading numba.

Loading numba and the cached kernel costs about 0.3 s of every process, more
than summing a few hundred kilobytes takes in numpy; a small dataset (a test,
an example, a quick look) would spend most of its run on it. This module adds
the same numbers in the same order as :mod:`wxstats.core._kernels_numba` (see
the :mod:`wxstats.core.kernels` docstring): each lane a sequential float64 sum
over rows of ``m * C`` values, lanes folded into channels in lane order,
chunks into the step in chunk order, extremes kept with the kernel's strict
comparisons. It is the kernel's checked path throughout: a skipped value is
an added ``0.0``, which changes no sum (a lane sum starts at ``+0.0`` and so is
never ``-0.0``), and on finite data the fast path adds the very same values.
Its signature is the compiled kernel's, so :func:`wxstats.core.kernels.block_sums`
chooses by size alone; tests assert identical bits on every path.
"""

from __future__ import annotations

import numpy as np


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


def _lane_sums(v: np.ndarray, wl: np.ndarray | None, lanes: int, sh, iv):
    """Lane sums of the values (or differences) ``v`` of one chunk, checked path."""
    l0, l1, l2 = np.zeros(lanes), np.zeros(lanes), np.zeros(lanes)
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
            l0[:k] = l0[:k] + np.where(ok, w, 0.0)
            l1[:k] = l1[:k] + np.where(ok, z, 0.0)
            l2[:k] = l2[:k] + np.where(ok, z * y, 0.0)
        else:
            l1[:k] = l1[:k] + np.where(ok, y, 0.0)
            l2[:k] = l2[:k] + np.where(ok, y * y, 0.0)
        lmn[:k] = np.where(ok & (seg < lmn[:k]), seg, lmn[:k])
        lmx[:k] = np.where(ok & (seg > lmx[:k]), seg, lmx[:k])
        lcnt[:k] += ok
        lnan[:k] += np.isnan(seg)
        linf[:k] += np.isinf(seg)
    return l0, l1, l2, lmn, lmx, lcnt, lnan, linf


def _per_channel(counts: np.ndarray, n_c: int) -> np.ndarray:
    return counts.reshape(-1, n_c).sum(axis=0)


def kernel(
    a, n_c, m, chunk, t0, t1, lags, d0, d1, sh, iv, pq, dsh, div, dpq, w,
    count, tv0, tv1, tv2, mn, mx, nans, infs, dcount, td0, td1, td2, dmn, dmx,
):  # fmt: skip
    """:func:`wxstats.core._kernels_numba.kernel`, in numpy (see module docstring);
    ``pq``/``dpq`` (the compiled kernel's fused form of the scaling) are not needed:
    ``(v - p) * q`` here gives the same bits."""
    with np.errstate(over="ignore", invalid="ignore"):  # overflow: the caller's to handle
        _kernel(a, n_c, m, chunk, t0, t1, lags, d0, d1, sh, iv, dsh, div, w, count,
                tv0, tv1, tv2, mn, mx, nans, infs, dcount, td0, td1, td2, dmn, dmx)  # fmt: skip


def _kernel(
    a, n_c, m, chunk, t0, t1, lags, d0, d1, sh, iv, dsh, div, w,
    count, tv0, tv1, tv2, mn, mx, nans, infs, dcount, td0, td1, td2, dmn, dmx,
):  # fmt: skip
    n_t = a.shape[0]
    n_g = a.shape[1] // n_c
    lanes = m * n_c
    weighted = w.shape[0] > 0
    for gs in range(0, n_g, chunk):
        n_here = min(chunk, n_g - gs)
        base, n = gs * n_c, n_here * n_c
        wl = np.repeat(np.asarray(w[gs : gs + n_here], np.float64), n_c) if weighted else None
        rows = np.asarray(a[:, base : base + n], dtype=np.float64)
        for t in range(n_t):
            if t0 <= t < t1:
                l0, l1, l2, lmn, lmx, lcnt, lnan, linf = _lane_sums(
                    rows[t], wl, lanes, sh[t], iv[t]
                )
                count[t] += _per_channel(lcnt, n_c)
                nans += _per_channel(lnan, n_c)
                infs += _per_channel(linf, n_c)
                if weighted:
                    tv0[t] += _fold(l0, n_c)
                tv1[t] += _fold(l1, n_c)
                tv2[t] += _fold(l2, n_c)
                _fold_extreme(lmn, n_c, mn, True)
                _fold_extreme(lmx, n_c, mx, False)
            for s in range(lags.shape[0]):
                if t < d0[s] or t >= d1[s]:
                    continue
                d = rows[t] - rows[t - lags[s]]
                l0, l1, l2, lmn, lmx, lcnt, _, _ = _lane_sums(d, wl, lanes, dsh[s, t], div[s, t])
                dcount[s, t] += _per_channel(lcnt, n_c)
                if weighted:
                    td0[s, t] += _fold(l0, n_c)
                td1[s, t] += _fold(l1, n_c)
                td2[s, t] += _fold(l2, n_c)
                _fold_extreme(lmn, n_c, dmn[s], True)
                _fold_extreme(lmx, n_c, dmx[s], False)
