"""The inner loops of the compiled kernel (numba): one chunk of one time step.

Each adds a chunk's values (or differences) into lanes (see the
:mod:`wxstats.core.kernels` docstring): ``*_fast`` as if every value were
finite, ``*_checked`` skipping NaN/Inf in the same order, ``*_w`` weighted
(``--weights``). Kept apart from :mod:`wxstats.core._kernels_numba`, which
walks the chunks and steps, so that each module stays readable.
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


# Weighted sums (``--weights``): ``wl`` holds the weight of each value of the chunk
# (its grid point's weight, repeated over the channels), in the order of ``x``. One row
# of lanes at a time, the same sums in the same order in the fast and checked versions:
# s0 += w, s1 += w*y, s2 += (w*y)*y.
@njit(**_OPTS)
def values_fast_w(x, wl, base, n, lanes, sh, iv, s0, s1, s2, mn, mx):
    for i0 in range(0, n, lanes):
        width = min(lanes, n - i0)
        xr = x[base + i0 : base + i0 + width]
        wr = wl[i0 : i0 + width]
        for j in range(width):
            v = np.float64(xr[j])
            w = wr[j]
            y = (v - sh[j]) * iv[j]
            z = w * y
            s0[j] += w
            s1[j] += z
            s2[j] += z * y
            mn[j] = v if v < mn[j] else mn[j]
            mx[j] = v if v > mx[j] else mx[j]


@njit(**_OPTS)
def values_checked_w(x, wl, base, n, lanes, sh, iv, s0, s1, s2, mn, mx, cnt, nans, infs):
    for i in range(n):
        j = i % lanes
        v = np.float64(x[base + i])
        if np.isnan(v):
            nans[j] += 1
        elif np.isinf(v):
            infs[j] += 1
        else:
            w = wl[i]
            y = (v - sh[j]) * iv[j]
            z = w * y
            s0[j] += w
            s1[j] += z
            s2[j] += z * y
            cnt[j] += 1
            mn[j] = v if v < mn[j] else mn[j]
            mx[j] = v if v > mx[j] else mx[j]


@njit(**_OPTS)
def diffs_fast_w(x, xk, wl, base, n, lanes, sh, iv, s0, s1, s2, mn, mx):
    for i0 in range(0, n, lanes):
        width = min(lanes, n - i0)
        xr = x[base + i0 : base + i0 + width]
        kr = xk[base + i0 : base + i0 + width]
        wr = wl[i0 : i0 + width]
        for j in range(width):
            d = np.float64(xr[j]) - np.float64(kr[j])
            w = wr[j]
            y = (d - sh[j]) * iv[j]
            z = w * y
            s0[j] += w
            s1[j] += z
            s2[j] += z * y
            mn[j] = d if d < mn[j] else mn[j]
            mx[j] = d if d > mx[j] else mx[j]


@njit(**_OPTS)
def diffs_checked_w(x, xk, wl, base, n, lanes, sh, iv, s0, s1, s2, mn, mx, cnt):
    for i in range(n):
        j = i % lanes
        d = np.float64(x[base + i]) - np.float64(xk[base + i])
        if np.isfinite(d):
            w = wl[i]
            y = (d - sh[j]) * iv[j]
            z = w * y
            s0[j] += w
            s1[j] += z
            s2[j] += z * y
            cnt[j] += 1
            mn[j] = d if d < mn[j] else mn[j]
            mx[j] = d if d > mx[j] else mx[j]
