"""The compiled loops behind :func:`wxstats.core.kernel.block_sums` (numba).

Kept apart so that ``import wxstats`` does not import numba, and at module
level so that numba's on-disk cache (``cache=True``) is reused between runs:
functions defined in a closure get a new cache key in every process.
See the :mod:`wxstats.core.kernel` docstring for the summation structure.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numba import carray, cfunc, njit, types
from numba.extending import overload

from wxstats.core.kernel import cache, record
from wxstats.core.kernel.lanes import lane_sums
from wxstats.core.kernel.sources import CORE, KERNEL_SOURCES, sources_digest
from wxstats.core.reduction import slot

# the slots of the kernel's output arrays (wxstats.core.reduction): compile-time constants
_COUNT = slot("count")[1]
_SUM1, _SUM2, _WEIGHT = slot("sum1")[1], slot("sum2")[1], slot("weight")[1]
_SUM3, _SUM4 = slot("sum3")[1], slot("sum4")[1]
_MIN, _MAX = slot("minimum")[1], slot("maximum")[1]
_NAN, _INF = slot("nan_count")[1], slot("inf_count")[1]


CACHE = cache.numba_may_cache()
"""Whether numba's cache is read and written for this file's functions: only in
a folder private to this user (its index files are pickles, code run when
read), and only where numba finds a writable one (a read-only installation and
``$HOME`` have none: numba's decorator would raise). Otherwise the kernel is
compiled in each process, with one warning line."""

_OPTS = {"nogil": True, "cache": CACHE, "error_model": "numpy"}


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
def fold_extremes(lmn, lmx, n_c, totals, p, g):
    # lanes -> channels (lane j is channel j % n_c), row by row: no division per lane;
    # into part p's minimum and maximum of group g (indexed here: no views per chunk)
    for r in range(0, lmn.shape[0], n_c):
        for c in range(n_c):
            mn = totals[p, _MIN, g, c]
            mx = totals[p, _MAX, g, c]
            totals[p, _MIN, g, c] = lmn[r + c] if lmn[r + c] < mn else mn
            totals[p, _MAX, g, c] = lmx[r + c] if lmx[r + c] > mx else mx


@njit(**_OPTS)
def _reset(acc, higher):
    # the lanes' sums and extremes at their identities (the counts are reset by the
    # checked path only: the fast one never writes them)
    acc.weight[:] = 0.0
    acc.sum1[:] = 0.0
    acc.sum2[:] = 0.0
    if higher:
        acc.sum3[:] = 0.0
        acc.sum4[:] = 0.0
    acc.minimum[:] = np.inf
    acc.maximum[:] = -np.inf


def chunk_sums(x, xk, wl, base, n, lanes, ref, acc, folded, n_c, diffs, higher):
    """One chunk of one time step (its values, or with ``diffs`` its differences
    ``x - xk``) into the lanes ``acc`` (a :data:`wxstats.core.kernel.record.Lanes`),
    zeroed here, and their sums folded into channels, ``folded`` (a
    :data:`wxstats.core.kernel.record.Powers`; ``higher``: the third and fourth
    powers too): the fast path, and the checked one when a sum is not finite;
    returns whether it was checked. ``diffs`` and ``higher`` are literal constants
    (a specialization each)."""
    raise NotImplementedError("compiled only: see the overload below")


@overload(chunk_sums, prefer_literal=True, jit_options=_OPTS)
def _chunk_sums(x, xk, wl, base, n, lanes, ref, acc, folded, n_c, diffs, higher):
    if not isinstance(diffs, types.BooleanLiteral) or not isinstance(higher, types.BooleanLiteral):
        return None
    DIFFS = bool(diffs.literal_value)
    HIGHER = bool(higher.literal_value)

    def impl(x, xk, wl, base, n, lanes, ref, acc, folded, n_c, diffs, higher):
        _reset(acc, HIGHER)
        if wl.shape[0] > 0:
            lane_sums(x, xk, wl, base, n, lanes, ref, acc, DIFFS, False, True, HIGHER)
        else:
            lane_sums(x, xk, wl, base, n, lanes, ref, acc, DIFFS, False, False, HIGHER)
        ok = fold(acc.sum1, n_c, folded.sum1)
        ok = fold(acc.sum2, n_c, folded.sum2) and ok
        if HIGHER:
            ok = fold(acc.sum3, n_c, folded.sum3) and ok
            ok = fold(acc.sum4, n_c, folded.sum4) and ok
        if ok:
            return False
        _reset(acc, HIGHER)
        acc.count[:] = 0
        acc.nan_count[:] = 0
        acc.inf_count[:] = 0
        if wl.shape[0] > 0:
            lane_sums(x, xk, wl, base, n, lanes, ref, acc, DIFFS, True, True, HIGHER)
        else:
            lane_sums(x, xk, wl, base, n, lanes, ref, acc, DIFFS, True, False, HIGHER)
        fold(acc.sum1, n_c, folded.sum1)
        fold(acc.sum2, n_c, folded.sum2)
        if HIGHER:
            fold(acc.sum3, n_c, folded.sum3)
            fold(acc.sum4, n_c, folded.sum4)
        return True

    return impl


@njit(**_OPTS)
def _step(x, xk, wl, base, n, lanes, ref, values, diffs, folded, n_c, p, higher_slots,
          totals_float, g):  # fmt: skip
    # one chunk of one step of part p (0: the values, into the lanes ``values`` whose
    # extremes are in the input's type), in the specialization its flags pick; returns
    # whether it was checked
    if p == 0:
        if higher_slots:
            checked = chunk_sums(x, x, wl, base, n, lanes, ref, values, folded, n_c, False, True)
        else:
            checked = chunk_sums(x, x, wl, base, n, lanes, ref, values, folded, n_c, False, False)
        fold_extremes(values.minimum, values.maximum, n_c, totals_float, p, g)
    else:
        if higher_slots:
            checked = chunk_sums(x, xk, wl, base, n, lanes, ref, diffs, folded, n_c, True, True)
        else:
            checked = chunk_sums(x, xk, wl, base, n, lanes, ref, diffs, folded, n_c, True, False)
        fold_extremes(diffs.minimum, diffs.maximum, n_c, totals_float, p, g)
    return checked


@njit(**_OPTS)
def kernel(args, fs, ints, xs):
    # args: a KernelArgs (wxstats.core.kernel.record, which declares each field).
    # Parts p: 0 the values, 1 + s the differences of lag lags[s]; ranges (parts, 2): the
    # steps t counted [t0, t1); refs (parts, 3, n_t, lanes): per step t (each its own
    # reference) the shift, 1/scale and -shift/scale per lane (see lanes.scaled).
    # Outputs (wxstats.core.reduction.kernel_arrays, at their identities): steps_* (parts,
    # slots, n_t, n_c), totals_* (parts, slots, groups, n_c), step t's totals going to its
    # group by[t] (flox's "by": a climatology's month or hour); the weights are summed only
    # when w, the weight per grid point, is not empty, and the third and fourth powers
    # when steps_float has their slots (--moments 4). Scratch (the caller's, so that the
    # machine code allocates nothing and loads without numba's runtime, see
    # wxstats.core.kernel.stored.scratch_sizes): fs float64 (7 lanes, 5 n_c, then a chunk's
    # weights), ints int64 (3 lanes), xs the values' extremes (2 lanes, float32 for float32
    # values: compared in half the vector width, widening keeps order and value).
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
    n_p = ranges.shape[0]
    weighted = w.shape[0] > 0
    higher = steps_float.shape[1] > _SUM3
    l0 = fs[:lanes]
    l1 = fs[lanes : 2 * lanes]
    l2 = fs[2 * lanes : 3 * lanes]
    l3 = fs[3 * lanes : 4 * lanes]
    l4 = fs[4 * lanes : 5 * lanes]
    lmn = fs[5 * lanes : 6 * lanes]
    lmx = fs[6 * lanes : 7 * lanes]
    at = 7 * lanes
    c0 = fs[at : at + n_c]
    folded = record.Powers(
        fs[at + n_c : at + 2 * n_c],
        fs[at + 2 * n_c : at + 3 * n_c],
        fs[at + 3 * n_c : at + 4 * n_c],
        fs[at + 4 * n_c : at + 5 * n_c],
    )
    wl_all = fs[at + 5 * n_c :]
    lcnt = ints[:lanes]
    lnan = ints[lanes : 2 * lanes]
    linf = ints[2 * lanes : 3 * lanes]
    # the lanes of the differences, and of the values (their extremes in xs)
    lanes_diffs = record.Lanes(count=lcnt, nan_count=lnan, sum1=l1, sum2=l2, weight=l0, sum3=l3,
                               sum4=l4, minimum=lmn, maximum=lmx, inf_count=linf)  # fmt: skip
    lanes_values = record.Lanes(count=lcnt, nan_count=lnan, sum1=l1, sum2=l2, weight=l0, sum3=l3,
                                sum4=l4, minimum=xs[:lanes], maximum=xs[lanes:],
                                inf_count=linf)  # fmt: skip
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
            for p in range(n_p):
                if t < ranges[p, 0] or t >= ranges[p, 1]:
                    continue
                ref = (refs[p, 0, t], refs[p, 1, t], refs[p, 2, t])
                g = by[t]
                xk = a[t - lags[p - 1]] if p > 0 else x
                checked = _step(x, xk, wl, base, n, lanes, ref, lanes_values, lanes_diffs, folded,
                                n_c, p, higher, totals_float, g)  # fmt: skip
                if checked:
                    for j in range(lanes):
                        c = j % n_c
                        steps_int[p, _COUNT, t, c] += lcnt[j]
                        if p == 0:
                            totals_int[p, _NAN, g, c] += lnan[j]
                            totals_int[p, _INF, g, c] += linf[j]
                else:
                    for c in range(n_c):
                        steps_int[p, _COUNT, t, c] += n_here
                if weighted:
                    fold(l0, n_c, c0)
                    for c in range(n_c):
                        steps_float[p, _WEIGHT, t, c] += c0[c]
                for c in range(n_c):
                    steps_float[p, _SUM1, t, c] += folded.sum1[c]
                    steps_float[p, _SUM2, t, c] += folded.sum2[c]
                if higher:
                    for c in range(n_c):
                        steps_float[p, _SUM3, t, c] += folded.sum3[c]
                        steps_float[p, _SUM4, t, c] += folded.sum4[c]


def entry(dtype: np.dtype, extremes: np.dtype):
    """The kernel for values of ``dtype`` (extremes kept in ``extremes``) as a C
    function ``void (void **pointers, int64 *dims)``, generated from the record's
    declaration (:func:`wxstats.core.kernel.record.c_entry_source`; numba's
    ``cfunc``, the functions it calls from numba's cache): its machine code is what
    :mod:`wxstats.core.kernel.stored` keeps on disk and loads without numba, so
    numba's cache of this wrapper would never be read."""
    names = {"carray": carray, "np": np, "kernel": kernel, "KernelArgs": record.KernelArgs}
    names |= {"VALUES": np.dtype(dtype).type, "EXTREMES": np.dtype(extremes).type}
    exec(record.c_entry_source(), names)  # noqa: S102 (our own declaration's code)
    sig = types.void(types.CPointer(types.voidptr), types.CPointer(types.int64))
    return cfunc(sig, error_model="numpy")(names["_entry"])


SOURCES_DIGEST = int.from_bytes(
    sources_digest(tuple(n for n in KERNEL_SOURCES if CORE / n != Path(__file__)))[:7], "little"
)
"""A digest of what the cached machine code is compiled from beyond this file (which
numba's cache watches itself): the lane template and the reduction table's slots,
frozen in at compile time."""


@njit(cache=CACHE)
def compiled_from():
    # SOURCES_DIGEST as it was when this cache entry was compiled (a global is a constant)
    return SOURCES_DIGEST


def refresh_stale_cache(expected: int = SOURCES_DIGEST) -> bool:
    """Drop the cached kernel when it was compiled from another lane template or
    reduction table: numba's cache watches only this file, so a change there
    would otherwise run stale machine code (wrong slots, wrong numbers). True
    when the cache was stale and is now compiled afresh."""
    if compiled_from() == expected:
        return False
    for dispatcher in (fold, fold_extremes, _reset, _step, kernel, compiled_from):
        dispatcher._cache.flush()
    compiled_from.recompile()
    return True


refresh_stale_cache()
