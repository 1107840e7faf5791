"""The inner loops of the compiled kernel (numba): one chunk of one time step.

Each adds a chunk's values (or differences) into lanes (see the
:mod:`wxstats.core.kernels` docstring): ``*_fast`` as if every value were
finite, ``*_checked`` skipping NaN/Inf in the same order, ``*_w`` weighted
(``--weights``). Kept apart from :mod:`wxstats.core._kernels_numba`, which
walks the chunks and steps, so that each module stays readable.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

_OPTS = {"nogil": True, "cache": True, "error_model": "numpy"}


@intrinsic
def _fused_multiply_add(typingctx, a, b, c):
    """``a * b + c`` rounded once (LLVM's ``fma``: the instruction where the CPU
    has it, a correctly rounded library call where it has not)."""
    sig = types.float64(types.float64, types.float64, types.float64)

    def codegen(context, builder, signature, args):
        double = ir.DoubleType()
        fma = builder.module.declare_intrinsic(
            "llvm.fma", [double], ir.FunctionType(double, [double, double, double])
        )
        return builder.call(fma, args)

    return sig, codegen


def scaled(raw, v, p, q, pq):
    """``y = (v - p) * q``: the shifted, scaled value (or difference) the sums take;
    ``raw`` is an element of the input, whose type picks the formula."""
    return (v - p) * q


@overload(scaled, inline="always")
def _scaled(raw, v, p, q, pq):
    # An input of at most 32 bits (float32 and narrower, integers to 32 bits) makes
    # v * q exact, and kernels.block_sums checks that p * q is (pq = -p * q), so one
    # fused multiply-add gives the very bits of (v - p) * q with one operation less
    # (see the proof at kernels.fused_scaling_is_exact); wider inputs keep the two.
    if isinstance(raw, (types.Float, types.Integer)) and raw.bitwidth <= 32:
        return lambda raw, v, p, q, pq: _fused_multiply_add(v, q, pq)
    return lambda raw, v, p, q, pq: (v - p) * q


def extreme_lanes(a, lanes):
    """Lanes for the extremes of the values of ``a``: in its own dtype when that is
    float32 (compared there, half the vector width of float64; widening is exact
    and keeps the order), float64 otherwise."""
    return np.empty(lanes)


@overload(extreme_lanes)
def _extreme_lanes(a, lanes):
    if a.dtype == types.float32:
        return lambda a, lanes: np.empty(lanes, dtype=np.float32)
    return lambda a, lanes: np.empty(lanes, dtype=np.float64)


# Row views (x[o:o+L]) keep indices provably non-negative, which lets
# LLVM vectorize the lane loops (no negative-index wraparound code).
# sh, iv, pq: per lane p, q = 1/scale and -p*q (see ``scaled``); the extremes of the
# values are compared in the input's own type (``extreme_lanes``).
@njit(**_OPTS)
def values_fast(x, base, n, lanes, sh, iv, pq, s1, s2, mn, mx):
    nrow = n // lanes
    r = 0
    while r + 4 <= nrow:
        o = base + r * lanes
        x0 = x[o : o + lanes]
        x1 = x[o + lanes : o + 2 * lanes]
        x2 = x[o + 2 * lanes : o + 3 * lanes]
        x3 = x[o + 3 * lanes : o + 4 * lanes]
        for j in range(lanes):
            a0 = x0[j]
            a1 = x1[j]
            a2 = x2[j]
            a3 = x3[j]
            p = sh[j]
            q = iv[j]
            c = pq[j]
            y0 = scaled(a0, np.float64(a0), p, q, c)
            y1 = scaled(a1, np.float64(a1), p, q, c)
            y2 = scaled(a2, np.float64(a2), p, q, c)
            y3 = scaled(a3, np.float64(a3), p, q, c)
            s1[j] = (((s1[j] + y0) + y1) + y2) + y3
            s2[j] = (((s2[j] + y0 * y0) + y1 * y1) + y2 * y2) + y3 * y3
            m = mn[j]
            m = a0 if a0 < m else m
            m = a1 if a1 < m else m
            m = a2 if a2 < m else m
            m = a3 if a3 < m else m
            mn[j] = m
            m = mx[j]
            m = a0 if a0 > m else m
            m = a1 if a1 > m else m
            m = a2 if a2 > m else m
            m = a3 if a3 > m else m
            mx[j] = m
        r += 4
    while r < nrow:
        o = base + r * lanes
        x0 = x[o : o + lanes]
        for j in range(lanes):
            a0 = x0[j]
            y0 = scaled(a0, np.float64(a0), sh[j], iv[j], pq[j])
            s1[j] += y0
            s2[j] += y0 * y0
            mn[j] = a0 if a0 < mn[j] else mn[j]
            mx[j] = a0 if a0 > mx[j] else mx[j]
        r += 1
    o = base + nrow * lanes
    x0 = x[o : base + n]
    for j in range(x0.shape[0]):
        a0 = x0[j]
        y0 = scaled(a0, np.float64(a0), sh[j], iv[j], pq[j])
        s1[j] += y0
        s2[j] += y0 * y0
        mn[j] = a0 if a0 < mn[j] else mn[j]
        mx[j] = a0 if a0 > mx[j] else mx[j]


@njit(**_OPTS)
def values_checked(x, base, n, lanes, sh, iv, pq, s1, s2, mn, mx, cnt, nans, infs):
    # the same sums in the same order as values_fast, skipping NaN/Inf
    for i in range(n):
        j = i % lanes
        a = x[base + i]
        v = np.float64(a)
        if np.isnan(v):
            nans[j] += 1
        elif np.isinf(v):
            infs[j] += 1
        else:
            y = scaled(a, v, sh[j], iv[j], pq[j])
            s1[j] += y
            s2[j] += y * y
            cnt[j] += 1
            mn[j] = a if a < mn[j] else mn[j]
            mx[j] = a if a > mx[j] else mx[j]


@njit(**_OPTS)
def diffs_fast(x, xk, base, n, lanes, sh, iv, pq, s1, s2, mn, mx):
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
            c = pq[j]
            a0 = x0[j]
            d0 = np.float64(a0) - np.float64(k0[j])
            d1 = np.float64(x1[j]) - np.float64(k1[j])
            d2 = np.float64(x2[j]) - np.float64(k2[j])
            d3 = np.float64(x3[j]) - np.float64(k3[j])
            y0 = scaled(a0, d0, p, q, c)
            y1 = scaled(a0, d1, p, q, c)
            y2 = scaled(a0, d2, p, q, c)
            y3 = scaled(a0, d3, p, q, c)
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
            y0 = scaled(x0[j], d0, sh[j], iv[j], pq[j])
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
        y0 = scaled(x0[j], d0, sh[j], iv[j], pq[j])
        s1[j] += y0
        s2[j] += y0 * y0
        mn[j] = d0 if d0 < mn[j] else mn[j]
        mx[j] = d0 if d0 > mx[j] else mx[j]


@njit(**_OPTS)
def diffs_checked(x, xk, base, n, lanes, sh, iv, pq, s1, s2, mn, mx, cnt):
    for i in range(n):
        j = i % lanes
        d = np.float64(x[base + i]) - np.float64(xk[base + i])
        if np.isfinite(d):
            y = scaled(x[base + i], d, sh[j], iv[j], pq[j])
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
def values_fast_w(x, wl, base, n, lanes, sh, iv, pq, s0, s1, s2, mn, mx):
    for i0 in range(0, n, lanes):
        width = min(lanes, n - i0)
        xr = x[base + i0 : base + i0 + width]
        wr = wl[i0 : i0 + width]
        for j in range(width):
            a = xr[j]
            w = wr[j]
            y = scaled(a, np.float64(a), sh[j], iv[j], pq[j])
            z = w * y
            s0[j] += w
            s1[j] += z
            s2[j] += z * y
            mn[j] = a if a < mn[j] else mn[j]
            mx[j] = a if a > mx[j] else mx[j]


@njit(**_OPTS)
def values_checked_w(x, wl, base, n, lanes, sh, iv, pq, s0, s1, s2, mn, mx, cnt, nans, infs):
    for i in range(n):
        j = i % lanes
        a = x[base + i]
        v = np.float64(a)
        if np.isnan(v):
            nans[j] += 1
        elif np.isinf(v):
            infs[j] += 1
        else:
            w = wl[i]
            y = scaled(a, v, sh[j], iv[j], pq[j])
            z = w * y
            s0[j] += w
            s1[j] += z
            s2[j] += z * y
            cnt[j] += 1
            mn[j] = a if a < mn[j] else mn[j]
            mx[j] = a if a > mx[j] else mx[j]


@njit(**_OPTS)
def diffs_fast_w(x, xk, wl, base, n, lanes, sh, iv, pq, s0, s1, s2, mn, mx):
    for i0 in range(0, n, lanes):
        width = min(lanes, n - i0)
        xr = x[base + i0 : base + i0 + width]
        kr = xk[base + i0 : base + i0 + width]
        wr = wl[i0 : i0 + width]
        for j in range(width):
            d = np.float64(xr[j]) - np.float64(kr[j])
            w = wr[j]
            y = scaled(xr[j], d, sh[j], iv[j], pq[j])
            z = w * y
            s0[j] += w
            s1[j] += z
            s2[j] += z * y
            mn[j] = d if d < mn[j] else mn[j]
            mx[j] = d if d > mx[j] else mx[j]


@njit(**_OPTS)
def diffs_checked_w(x, xk, wl, base, n, lanes, sh, iv, pq, s0, s1, s2, mn, mx, cnt):
    for i in range(n):
        j = i % lanes
        d = np.float64(x[base + i]) - np.float64(xk[base + i])
        if np.isfinite(d):
            w = wl[i]
            y = scaled(x[base + i], d, sh[j], iv[j], pq[j])
            z = w * y
            s0[j] += w
            s1[j] += z
            s2[j] += z * y
            cnt[j] += 1
            mn[j] = d if d < mn[j] else mn[j]
            mx[j] = d if d > mx[j] else mx[j]
