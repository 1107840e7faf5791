"""The inner loop of the compiled kernel (numba): one chunk of one time step.

:func:`lane_sums` adds a chunk's values (or differences) into lanes (see the
:mod:`wxstats.core.kernel` docstring). It is one template, specialized at
compile time for the values or the differences, for the fast path (as if every
value were finite) or the checked one (NaN/Inf skipped: a skipped value adds
``0.0``, which changes no lane sum, so both paths give the same bits), and for
weighted sums (``--weights``) or not, and for the third and fourth powers
(``--moments 4``) or not: the flags are literal constants of the caller, so
each of the sixteen loops is compiled with its dead branches removed
(the fast unweighted one is the plain sum it was written as before). Kept
apart from :mod:`wxstats.core.kernel.compiled`, which walks the chunks and steps.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

from wxstats.core.kernel.cache import numba_may_cache

# numba's cache only where no one else can write it (its index files are pickles)
_OPTS = {"nogil": True, "cache": numba_may_cache(), "error_model": "numpy"}


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
    # v * q exact, and block_sums checks that p * q is (pq = -p * q), so one
    # fused multiply-add gives the very bits of (v - p) * q with one operation less
    # (see the proof at fused_scaling_is_exact); wider inputs keep the two.
    if isinstance(raw, (types.Float, types.Integer)) and raw.bitwidth <= 32:
        return lambda raw, v, p, q, pq: _fused_multiply_add(v, q, pq)
    return lambda raw, v, p, q, pq: (v - p) * q


def lane_sums(x, xk, wl, base, n, lanes, ref, acc, diffs, checked, weighted, higher):
    """Add the chunk ``x[base : base + n]`` (or its differences ``x - xk``) into
    the lane accumulators ``acc`` (a :data:`wxstats.core.kernel.record.Lanes`,
    lane ``j = i % lanes``): ``sum1 += y``, ``sum2 += y*y`` with ``y = (v - p) *
    q``, ``ref`` holding ``p``, ``q`` and ``-p*q`` per lane (weighted: ``weight +=
    w``, ``sum1 += w*y``, ``sum2 += (w*y)*y``, ``wl`` holding each value's weight),
    the extremes ``minimum``/``maximum``, and when ``checked`` the finite values
    ``count`` and (values) ``nan_count``/``inf_count``; when ``higher``
    (``--moments 4``) also ``sum3 += y2*y``, ``sum4 += y2*y2`` (``y2 = y*y``;
    weighted ``z2 = z*y``, ``sum3 += z2*y``, ``sum4 += (z2*y)*y``). ``diffs``,
    ``checked``, ``weighted`` and ``higher`` are literal constants (see the module
    docstring)."""
    raise NotImplementedError("compiled only: see the overload below")


def _flag(value) -> bool | None:
    return bool(value.literal_value) if isinstance(value, types.BooleanLiteral) else None


@overload(lane_sums, prefer_literal=True, jit_options=_OPTS)
def _lane_sums(x, xk, wl, base, n, lanes, ref, acc, diffs, checked, weighted, higher):
    # The template: DIFFS, CHECKED, WEIGHTED, HIGHER are constants here, so numba prunes
    # the branches on them before typing and each specialization is compiled on its own.
    DIFFS, CHECKED, WEIGHTED = _flag(diffs), _flag(checked), _flag(weighted)
    HIGHER = _flag(higher)
    if DIFFS is None or CHECKED is None or WEIGHTED is None or HIGHER is None:
        return None  # literal flags only (numba tries the literal types first)
    VALUES = not DIFFS

    @njit(inline="always")
    def one(xr, kr, wr, j, p, q, c, t0, t1, t2, t3, t4, lo, hi, cnt, nans, infs):
        # one value (or difference) into lane j's running sums and extremes; a
        # skipped one (checked: NaN/Inf) adds 0.0, no change (a lane sum starts at
        # +0.0 and so is never -0.0), and keeps the extremes
        raw = xr[j]
        v = np.float64(raw) - np.float64(kr[j]) if DIFFS else np.float64(raw)
        e = v if DIFFS else raw  # values: compared in the input's own type
        ok = np.isfinite(v) if CHECKED else True
        y = scaled(raw, v, p, q, c)
        if WEIGHTED:
            w = wr[j]
            z = w * y
            z2 = z * y
            t0 = t0 + (w if ok else 0.0)
            t1 = t1 + (z if ok else 0.0)
            t2 = t2 + (z2 if ok else 0.0)
            if HIGHER:
                z3 = z2 * y
                t3 = t3 + (z3 if ok else 0.0)
                t4 = t4 + (z3 * y if ok else 0.0)
        else:
            y2 = y * y
            t1 = t1 + (y if ok else 0.0)
            t2 = t2 + (y2 if ok else 0.0)
            if HIGHER:
                t3 = t3 + (y2 * y if ok else 0.0)
                t4 = t4 + (y2 * y2 if ok else 0.0)
        if CHECKED:
            lo = e if ok and e < lo else lo
            hi = e if ok and e > hi else hi
            cnt[j] += ok
            if VALUES:
                nans[j] += np.isnan(v)
                infs[j] += np.isinf(v)
        else:
            lo = e if e < lo else lo
            hi = e if e > hi else hi
        return t0, t1, t2, t3, t4, lo, hi

    def impl(x, xk, wl, base, n, lanes, ref, acc, diffs, checked, weighted, higher):
        sh, iv, pq = ref
        s0, s1, s2, s3, s4 = acc.weight, acc.sum1, acc.sum2, acc.sum3, acc.sum4
        mn, mx = acc.minimum, acc.maximum
        cnt, nans, infs = acc.count, acc.nan_count, acc.inf_count
        # Row views (x[o:o+L]) keep indices provably non-negative, which lets LLVM
        # vectorize the lane loops (no negative-index wraparound code). Four rows at a
        # time (their sums kept in registers), then the rows left, the last one maybe
        # partial: every lane adds its values in row order either way.
        nrow = n // lanes
        r = 0
        while r + 4 <= nrow:
            o = base + r * lanes
            ow = r * lanes
            x0 = x[o : o + lanes]
            x1 = x[o + lanes : o + 2 * lanes]
            x2 = x[o + 2 * lanes : o + 3 * lanes]
            x3 = x[o + 3 * lanes : o + 4 * lanes]
            # views only where used (each costs a reference count, per four rows)
            k0 = xk[o : o + lanes] if DIFFS else x0
            k1 = xk[o + lanes : o + 2 * lanes] if DIFFS else x0
            k2 = xk[o + 2 * lanes : o + 3 * lanes] if DIFFS else x0
            k3 = xk[o + 3 * lanes : o + 4 * lanes] if DIFFS else x0
            w0 = wl[ow : ow + lanes] if WEIGHTED else sh
            w1 = wl[ow + lanes : ow + 2 * lanes] if WEIGHTED else sh
            w2 = wl[ow + 2 * lanes : ow + 3 * lanes] if WEIGHTED else sh
            w3 = wl[ow + 3 * lanes : ow + 4 * lanes] if WEIGHTED else sh
            for j in range(lanes):
                p = sh[j]
                q = iv[j]
                c = pq[j]
                t0 = s0[j] if WEIGHTED else 0.0
                t3 = s3[j] if HIGHER else 0.0
                t4 = s4[j] if HIGHER else 0.0
                t1, t2, lo, hi = s1[j], s2[j], mn[j], mx[j]
                t0, t1, t2, t3, t4, lo, hi = one(
                    x0, k0, w0, j, p, q, c, t0, t1, t2, t3, t4, lo, hi, cnt, nans, infs
                )
                t0, t1, t2, t3, t4, lo, hi = one(
                    x1, k1, w1, j, p, q, c, t0, t1, t2, t3, t4, lo, hi, cnt, nans, infs
                )
                t0, t1, t2, t3, t4, lo, hi = one(
                    x2, k2, w2, j, p, q, c, t0, t1, t2, t3, t4, lo, hi, cnt, nans, infs
                )
                t0, t1, t2, t3, t4, lo, hi = one(
                    x3, k3, w3, j, p, q, c, t0, t1, t2, t3, t4, lo, hi, cnt, nans, infs
                )
                if WEIGHTED:
                    s0[j] = t0
                if HIGHER:
                    s3[j], s4[j] = t3, t4
                s1[j], s2[j], mn[j], mx[j] = t1, t2, lo, hi
            r += 4
        while r * lanes < n:
            o = base + r * lanes
            ow = r * lanes
            width = min(lanes, n - ow)
            xr = x[o : o + width]
            kr = xk[o : o + width] if DIFFS else xr
            wr = wl[ow : ow + width] if WEIGHTED else sh
            for j in range(width):
                t0 = s0[j] if WEIGHTED else 0.0
                t3 = s3[j] if HIGHER else 0.0
                t4 = s4[j] if HIGHER else 0.0
                t0, t1, t2, t3, t4, lo, hi = one(xr, kr, wr, j, sh[j], iv[j], pq[j], t0, s1[j],
                                                 s2[j], t3, t4, mn[j], mx[j], cnt, nans,
                                                 infs)  # fmt: skip
                if WEIGHTED:
                    s0[j] = t0
                if HIGHER:
                    s3[j], s4[j] = t3, t4
                s1[j], s2[j], mn[j], mx[j] = t1, t2, lo, hi
            r += 1

    return impl
