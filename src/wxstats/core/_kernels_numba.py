"""The compiled loops behind :func:`wxstats.core.kernels.block_sums` (numba).

Kept apart so that ``import wxstats`` does not import numba, and at module
level so that numba's on-disk cache (``cache=True``) is reused between runs:
functions defined in a closure get a new cache key in every process.
See the :mod:`wxstats.core.kernels` docstring for the summation structure.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from wxstats.core._lanes_numba import (
    diffs_checked,
    diffs_checked_w,
    diffs_fast,
    diffs_fast_w,
    extreme_lanes,
    values_checked,
    values_checked_w,
    values_fast,
    values_fast_w,
)

_OPTS = {"nogil": True, "cache": True, "error_model": "numpy"}


@njit(**_OPTS)
def fold(lane_sum, n_c, out):
    # lanes -> channels, in lane order; returns False if any is non-finite
    ok = True
    for c in range(n_c):
        total = lane_sum[c]
        for j in range(c + n_c, lane_sum.shape[0], n_c):
            total += lane_sum[j]
        out[c] = total
        ok = ok and np.isfinite(total)
    return ok


@njit(**_OPTS)
def fold_extremes(lmn, lmx, n_c, mn, mx):
    # lanes -> channels (lane j is channel j % n_c), row by row: no division per lane
    for r in range(0, lmn.shape[0], n_c):
        for c in range(n_c):
            mn[c] = lmn[r + c] if lmn[r + c] < mn[c] else mn[c]
            mx[c] = lmx[r + c] if lmx[r + c] > mx[c] else mx[c]


@njit(**_OPTS)
def _reset(l1, l2, lmn, lmx):
    l1[:] = 0.0
    l2[:] = 0.0
    lmn[:] = np.inf
    lmx[:] = -np.inf


@njit(**_OPTS)
def _chunk_values(x, wl, base, n, lanes, sh, iv, pq, l0, l1, l2, lmn, lmx, lcnt, lnan, linf,
                  checked):  # fmt: skip
    # one chunk of one time step, weighted when wl is not empty; lanes zeroed here
    _reset(l1, l2, lmn, lmx)
    l0[:] = 0.0
    if checked:
        lcnt[:] = 0
        lnan[:] = 0
        linf[:] = 0
        if wl.shape[0] > 0:
            values_checked_w(x, wl, base, n, lanes, sh, iv, pq, l0, l1, l2, lmn, lmx, lcnt, lnan,
                             linf)  # fmt: skip
        else:
            values_checked(x, base, n, lanes, sh, iv, pq, l1, l2, lmn, lmx, lcnt, lnan, linf)
    elif wl.shape[0] > 0:
        values_fast_w(x, wl, base, n, lanes, sh, iv, pq, l0, l1, l2, lmn, lmx)
    else:
        values_fast(x, base, n, lanes, sh, iv, pq, l1, l2, lmn, lmx)


@njit(**_OPTS)
def _chunk_diffs(x, xk, wl, base, n, lanes, sh, iv, pq, l0, l1, l2, lmn, lmx, lcnt, checked):
    _reset(l1, l2, lmn, lmx)
    l0[:] = 0.0
    if checked:
        lcnt[:] = 0
        if wl.shape[0] > 0:
            diffs_checked_w(x, xk, wl, base, n, lanes, sh, iv, pq, l0, l1, l2, lmn, lmx, lcnt)
        else:
            diffs_checked(x, xk, base, n, lanes, sh, iv, pq, l1, l2, lmn, lmx, lcnt)
    elif wl.shape[0] > 0:
        diffs_fast_w(x, xk, wl, base, n, lanes, sh, iv, pq, l0, l1, l2, lmn, lmx)
    else:
        diffs_fast(x, xk, base, n, lanes, sh, iv, pq, l1, l2, lmn, lmx)


@njit(**_OPTS)
def kernel(
    a, n_c, m, chunk, t0, t1, lags, d0, d1, sh, iv, pq, dsh, div, dpq, w,
    count, tv0, tv1, tv2, mn, mx, nans, infs, dcount, td0, td1, td2, dmn, dmx,
):  # fmt: skip
    # per-step sums and counts out: tv0/tv1/tv2, count (n_t, n_c), td0/td1/td2, dcount
    # (n_s, n_t, n_c), zeroed by the caller (tv0/td0: the weights summed, only when w, the
    # weight per grid point, is not empty); extremes of the differences out: dmn/dmx
    # (n_s, n_c), +inf/-inf from the caller; per step t (each its own reference): sh, iv,
    # pq (n_t, lanes) and dsh, div, dpq (n_s, n_t, lanes), pq = -shift/scale per lane (see
    # _lanes_numba.scaled)
    n_t = a.shape[0]
    n_g = a.shape[1] // n_c
    lanes = m * n_c
    n_s = lags.shape[0]
    weighted = w.shape[0] > 0
    l0 = np.empty(lanes)
    l1 = np.empty(lanes)
    l2 = np.empty(lanes)
    lmn = np.empty(lanes)
    lmx = np.empty(lanes)
    vmn = extreme_lanes(a, lanes)
    vmx = extreme_lanes(a, lanes)
    lcnt = np.empty(lanes, dtype=np.int64)
    lnan = np.empty(lanes, dtype=np.int64)
    linf = np.empty(lanes, dtype=np.int64)
    c0 = np.empty(n_c)
    c1 = np.empty(n_c)
    c2 = np.empty(n_c)
    wl_all = np.empty(chunk * n_c if weighted else 0)
    for gs in range(0, n_g, chunk):
        n_here = min(chunk, n_g - gs)
        base = gs * n_c
        n = n_here * n_c
        wl = wl_all[:n]
        if weighted:
            for i in range(n):
                wl[i] = w[gs + i // n_c]
        for t in range(n_t):
            x = a[t]
            if t0 <= t < t1:
                _chunk_values(x, wl, base, n, lanes, sh[t], iv[t], pq[t], l0, l1, l2, vmn, vmx,
                              lcnt, lnan, linf, False)  # fmt: skip
                ok = fold(l1, n_c, c1)
                ok = fold(l2, n_c, c2) and ok
                if ok:
                    for c in range(n_c):
                        count[t, c] += n_here
                else:
                    _chunk_values(x, wl, base, n, lanes, sh[t], iv[t], pq[t], l0, l1, l2, vmn,
                                  vmx, lcnt, lnan, linf, True)  # fmt: skip
                    fold(l1, n_c, c1)
                    fold(l2, n_c, c2)
                    for j in range(lanes):
                        c = j % n_c
                        count[t, c] += lcnt[j]
                        nans[c] += lnan[j]
                        infs[c] += linf[j]
                if weighted:
                    fold(l0, n_c, c0)
                    for c in range(n_c):
                        tv0[t, c] += c0[c]
                for c in range(n_c):
                    tv1[t, c] += c1[c]
                    tv2[t, c] += c2[c]
                fold_extremes(vmn, vmx, n_c, mn, mx)
            for s in range(n_s):
                if t < d0[s] or t >= d1[s]:
                    continue
                xk = a[t - lags[s]]
                _chunk_diffs(x, xk, wl, base, n, lanes, dsh[s, t], div[s, t], dpq[s, t], l0, l1,
                             l2, lmn, lmx, lcnt, False)  # fmt: skip
                ok = fold(l1, n_c, c1)
                ok = fold(l2, n_c, c2) and ok
                if ok:
                    for c in range(n_c):
                        dcount[s, t, c] += n_here
                else:
                    _chunk_diffs(x, xk, wl, base, n, lanes, dsh[s, t], div[s, t], dpq[s, t], l0,
                                 l1, l2, lmn, lmx, lcnt, True)  # fmt: skip
                    fold(l1, n_c, c1)
                    fold(l2, n_c, c2)
                    for j in range(lanes):
                        dcount[s, t, j % n_c] += lcnt[j]
                if weighted:
                    fold(l0, n_c, c0)
                    for c in range(n_c):
                        td0[s, t, c] += c0[c]
                for c in range(n_c):
                    td1[s, t, c] += c1[c]
                    td2[s, t, c] += c2[c]
                fold_extremes(lmn, lmx, n_c, dmn[s], dmx[s])
