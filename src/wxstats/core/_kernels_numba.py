"""The compiled loops behind :func:`wxstats.core.kernels.block_sums` (numba).

Kept apart so that ``import wxstats`` does not import numba, and at module
level so that numba's on-disk cache (``cache=True``) is reused between runs:
functions defined in a closure get a new cache key in every process.
See the :mod:`wxstats.core.kernels` docstring for the summation structure.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_OPTS = {"nogil": True, "cache": True, "error_model": "numpy"}


# Row views (x[o:o+L]) keep indices provably non-negative, which lets
# LLVM vectorize the lane loops (no negative-index wraparound code).
@njit(**_OPTS)
def values_fast(x, base, n, lanes, sh, iv, s1, s2, mn, mx):
    nrow = n // lanes
    r = 0
    while r + 4 <= nrow:
        o = base + r * lanes
        x0 = x[o : o + lanes]
        x1 = x[o + lanes : o + 2 * lanes]
        x2 = x[o + 2 * lanes : o + 3 * lanes]
        x3 = x[o + 3 * lanes : o + 4 * lanes]
        for j in range(lanes):
            v0 = np.float64(x0[j])
            v1 = np.float64(x1[j])
            v2 = np.float64(x2[j])
            v3 = np.float64(x3[j])
            p = sh[j]
            q = iv[j]
            y0 = (v0 - p) * q
            y1 = (v1 - p) * q
            y2 = (v2 - p) * q
            y3 = (v3 - p) * q
            s1[j] = (((s1[j] + y0) + y1) + y2) + y3
            s2[j] = (((s2[j] + y0 * y0) + y1 * y1) + y2 * y2) + y3 * y3
            m = mn[j]
            m = v0 if v0 < m else m
            m = v1 if v1 < m else m
            m = v2 if v2 < m else m
            m = v3 if v3 < m else m
            mn[j] = m
            m = mx[j]
            m = v0 if v0 > m else m
            m = v1 if v1 > m else m
            m = v2 if v2 > m else m
            m = v3 if v3 > m else m
            mx[j] = m
        r += 4
    while r < nrow:
        o = base + r * lanes
        x0 = x[o : o + lanes]
        for j in range(lanes):
            v0 = np.float64(x0[j])
            y0 = (v0 - sh[j]) * iv[j]
            s1[j] += y0
            s2[j] += y0 * y0
            mn[j] = v0 if v0 < mn[j] else mn[j]
            mx[j] = v0 if v0 > mx[j] else mx[j]
        r += 1
    o = base + nrow * lanes
    x0 = x[o : base + n]
    for j in range(x0.shape[0]):
        v0 = np.float64(x0[j])
        y0 = (v0 - sh[j]) * iv[j]
        s1[j] += y0
        s2[j] += y0 * y0
        mn[j] = v0 if v0 < mn[j] else mn[j]
        mx[j] = v0 if v0 > mx[j] else mx[j]


@njit(**_OPTS)
def values_checked(x, base, n, lanes, sh, iv, s1, s2, mn, mx, cnt, nans, infs):
    # the same sums in the same order as values_fast, skipping NaN/Inf
    for i in range(n):
        j = i % lanes
        v = np.float64(x[base + i])
        if np.isnan(v):
            nans[j] += 1
        elif np.isinf(v):
            infs[j] += 1
        else:
            y = (v - sh[j]) * iv[j]
            s1[j] += y
            s2[j] += y * y
            cnt[j] += 1
            mn[j] = v if v < mn[j] else mn[j]
            mx[j] = v if v > mx[j] else mx[j]


@njit(**_OPTS)
def diffs_fast(x, xk, base, n, lanes, sh, iv, s1, s2, mn, mx):
    nrow = n // lanes
    r = 0
    while r + 4 <= nrow:
        o = base + r * lanes
        x0 = x[o : o + lanes]
        x1 = x[o + lanes : o + 2 * lanes]
        x2 = x[o + 2 * lanes : o + 3 * lanes]
        x3 = x[o + 3 * lanes : o + 4 * lanes]
        k0 = xk[o : o + lanes]
        k1 = xk[o + lanes : o + 2 * lanes]
        k2 = xk[o + 2 * lanes : o + 3 * lanes]
        k3 = xk[o + 3 * lanes : o + 4 * lanes]
        for j in range(lanes):
            p = sh[j]
            q = iv[j]
            d0 = np.float64(x0[j]) - np.float64(k0[j])
            d1 = np.float64(x1[j]) - np.float64(k1[j])
            d2 = np.float64(x2[j]) - np.float64(k2[j])
            d3 = np.float64(x3[j]) - np.float64(k3[j])
            y0 = (d0 - p) * q
            y1 = (d1 - p) * q
            y2 = (d2 - p) * q
            y3 = (d3 - p) * q
            s1[j] = (((s1[j] + y0) + y1) + y2) + y3
            s2[j] = (((s2[j] + y0 * y0) + y1 * y1) + y2 * y2) + y3 * y3
            m = mn[j]
            m = d0 if d0 < m else m
            m = d1 if d1 < m else m
            m = d2 if d2 < m else m
            m = d3 if d3 < m else m
            mn[j] = m
            m = mx[j]
            m = d0 if d0 > m else m
            m = d1 if d1 > m else m
            m = d2 if d2 > m else m
            m = d3 if d3 > m else m
            mx[j] = m
        r += 4
    while r < nrow:
        o = base + r * lanes
        x0 = x[o : o + lanes]
        k0 = xk[o : o + lanes]
        for j in range(lanes):
            d0 = np.float64(x0[j]) - np.float64(k0[j])
            y0 = (d0 - sh[j]) * iv[j]
            s1[j] += y0
            s2[j] += y0 * y0
            mn[j] = d0 if d0 < mn[j] else mn[j]
            mx[j] = d0 if d0 > mx[j] else mx[j]
        r += 1
    o = base + nrow * lanes
    x0 = x[o : base + n]
    k0 = xk[o : base + n]
    for j in range(x0.shape[0]):
        d0 = np.float64(x0[j]) - np.float64(k0[j])
        y0 = (d0 - sh[j]) * iv[j]
        s1[j] += y0
        s2[j] += y0 * y0
        mn[j] = d0 if d0 < mn[j] else mn[j]
        mx[j] = d0 if d0 > mx[j] else mx[j]


@njit(**_OPTS)
def diffs_checked(x, xk, base, n, lanes, sh, iv, s1, s2, mn, mx, cnt):
    for i in range(n):
        j = i % lanes
        d = np.float64(x[base + i]) - np.float64(xk[base + i])
        if np.isfinite(d):
            y = (d - sh[j]) * iv[j]
            s1[j] += y
            s2[j] += y * y
            cnt[j] += 1
            mn[j] = d if d < mn[j] else mn[j]
            mx[j] = d if d > mx[j] else mx[j]


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
def kernel(
    a, n_c, m, chunk, t0, t1, lags, d0, d1, sh, iv, dsh, div,
    count, tv1, tv2, mn, mx, nans, infs, dcount, td1, td2, dmn, dmx,
):  # fmt: skip
    # per-step sums out: tv1/tv2 (n_t, n_c), td1/td2 (n_s, n_t, n_c), zeroed by the caller;
    # extremes of the differences out: dmn/dmx (n_s, n_c), +inf/-inf from the caller
    n_t = a.shape[0]
    n_g = a.shape[1] // n_c
    lanes = m * n_c
    n_s = lags.shape[0]
    l1 = np.empty(lanes)
    l2 = np.empty(lanes)
    lmn = np.empty(lanes)
    lmx = np.empty(lanes)
    lcnt = np.empty(lanes, dtype=np.int64)
    lnan = np.empty(lanes, dtype=np.int64)
    linf = np.empty(lanes, dtype=np.int64)
    c1 = np.empty(n_c)
    c2 = np.empty(n_c)
    for gs in range(0, n_g, chunk):
        n_here = min(chunk, n_g - gs)
        base = gs * n_c
        n = n_here * n_c
        for t in range(n_t):
            x = a[t]
            if t0 <= t < t1:
                l1[:] = 0.0
                l2[:] = 0.0
                lmn[:] = np.inf
                lmx[:] = -np.inf
                values_fast(x, base, n, lanes, sh, iv, l1, l2, lmn, lmx)
                ok = fold(l1, n_c, c1)
                ok = fold(l2, n_c, c2) and ok
                if ok:
                    for c in range(n_c):
                        count[c] += n_here
                else:
                    l1[:] = 0.0
                    l2[:] = 0.0
                    lmn[:] = np.inf
                    lmx[:] = -np.inf
                    lcnt[:] = 0
                    lnan[:] = 0
                    linf[:] = 0
                    values_checked(x, base, n, lanes, sh, iv, l1, l2, lmn, lmx, lcnt, lnan, linf)
                    fold(l1, n_c, c1)
                    fold(l2, n_c, c2)
                    for j in range(lanes):
                        c = j % n_c
                        count[c] += lcnt[j]
                        nans[c] += lnan[j]
                        infs[c] += linf[j]
                for c in range(n_c):
                    tv1[t, c] += c1[c]
                    tv2[t, c] += c2[c]
                for j in range(lanes):
                    c = j % n_c
                    mn[c] = lmn[j] if lmn[j] < mn[c] else mn[c]
                    mx[c] = lmx[j] if lmx[j] > mx[c] else mx[c]
            for s in range(n_s):
                if t < d0[s] or t >= d1[s]:
                    continue
                xk = a[t - lags[s]]
                l1[:] = 0.0
                l2[:] = 0.0
                lmn[:] = np.inf
                lmx[:] = -np.inf
                diffs_fast(x, xk, base, n, lanes, dsh[s], div[s], l1, l2, lmn, lmx)
                ok = fold(l1, n_c, c1)
                ok = fold(l2, n_c, c2) and ok
                if ok:
                    for c in range(n_c):
                        dcount[s, c] += n_here
                else:
                    l1[:] = 0.0
                    l2[:] = 0.0
                    lmn[:] = np.inf
                    lmx[:] = -np.inf
                    lcnt[:] = 0
                    diffs_checked(x, xk, base, n, lanes, dsh[s], div[s], l1, l2, lmn, lmx, lcnt)
                    fold(l1, n_c, c1)
                    fold(l2, n_c, c2)
                    for j in range(lanes):
                        dcount[s, j % n_c] += lcnt[j]
                for c in range(n_c):
                    td1[s, t, c] += c1[c]
                    td2[s, t, c] += c2[c]
                for j in range(lanes):
                    c = j % n_c
                    dmn[s, c] = lmn[j] if lmn[j] < dmn[s, c] else dmn[s, c]
                    dmx[s, c] = lmx[j] if lmx[j] > dmx[s, c] else dmx[s, c]
