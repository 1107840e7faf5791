"""One-pass per-sample partial sums: values, differences for every step, extremes.

A :class:`Block` is an array ``a[t, g, c]`` (time, grid point, channel) with
the channels to use, the time range whose values count and, for each lag
``k``, the range of *later* times ``t`` whose pairs ``(t - k, t)`` count.

:func:`block_partials` runs the compiled kernel (numba, no per-element Python,
no float64 temporaries of the sample's size). :func:`block_partials_numpy` is a
plain numpy version of the same definitions, kept to test the kernel.
Summation order inside a block is fixed (blocks of grid points, then time
steps, then the total), so a sample gives the same bits whoever reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GRID_CHUNK = 512
"""Grid points summed together before joining the time step's sum: a
three-level summation whose rounding error grows with 512 + G/512 + T, not
with the number of values."""


@dataclass(frozen=True)
class Block:
    """A view of the data and what of it counts (see module docstring)."""

    array: np.ndarray  # (T, G, C)
    channels: np.ndarray  # int64 (F,) indices into C
    value_range: tuple[int, int]
    diff_ranges: dict[int, tuple[int, int]] = field(default_factory=dict)


@dataclass
class Partials:
    """Float64 partial sums of one block, per feature (diffs per lag)."""

    count: np.ndarray
    sum1: np.ndarray
    sum2: np.ndarray
    minimum: np.ndarray
    maximum: np.ndarray
    nan_count: np.ndarray
    inf_count: np.ndarray
    diff_count: dict[int, np.ndarray]
    diff_sum1: dict[int, np.ndarray]
    diff_sum2: dict[int, np.ndarray]


def _compile():
    from numba import njit

    @njit(nogil=True, cache=True)
    def kernel(
        a,
        channels,
        shift,
        inv_scale,
        t0,
        t1,
        lags,
        d0,
        d1,
        dshift,
        dinv,
        count,
        s1,
        s2,
        mn,
        mx,
        nans,
        infs,
        dcount,
        ds1,
        ds2,
    ):
        n_t, n_g = a.shape[0], a.shape[1]
        n_f = channels.shape[0]
        n_s = lags.shape[0]
        t_acc1 = np.zeros(n_f)
        t_acc2 = np.zeros(n_f)
        g_acc1 = np.zeros(n_f)
        g_acc2 = np.zeros(n_f)
        for t in range(n_t):
            if t0 <= t < t1:
                t_acc1[:] = 0.0
                t_acc2[:] = 0.0
                for g_start in range(0, n_g, GRID_CHUNK):
                    g_acc1[:] = 0.0
                    g_acc2[:] = 0.0
                    for g in range(g_start, min(g_start + GRID_CHUNK, n_g)):
                        for j in range(n_f):
                            x = np.float64(a[t, g, channels[j]])
                            if np.isnan(x):
                                nans[j] += 1
                                continue
                            if np.isinf(x):
                                infs[j] += 1
                                continue
                            y = (x - shift[j]) * inv_scale[j]
                            g_acc1[j] += y
                            g_acc2[j] += y * y
                            count[j] += 1
                            if x < mn[j]:
                                mn[j] = x
                            if x > mx[j]:
                                mx[j] = x
                    for j in range(n_f):
                        t_acc1[j] += g_acc1[j]
                        t_acc2[j] += g_acc2[j]
                for j in range(n_f):
                    s1[j] += t_acc1[j]
                    s2[j] += t_acc2[j]
            for s in range(n_s):
                k = lags[s]
                if t < d0[s] or t >= d1[s] or t - k < 0:
                    continue
                t_acc1[:] = 0.0
                t_acc2[:] = 0.0
                for g_start in range(0, n_g, GRID_CHUNK):
                    g_acc1[:] = 0.0
                    g_acc2[:] = 0.0
                    for g in range(g_start, min(g_start + GRID_CHUNK, n_g)):
                        for j in range(n_f):
                            c = channels[j]
                            d = np.float64(a[t, g, c]) - np.float64(a[t - k, g, c])
                            if not np.isfinite(d):
                                continue
                            y = (d - dshift[s, j]) * dinv[s, j]
                            g_acc1[j] += y
                            g_acc2[j] += y * y
                            dcount[s, j] += 1
                    for j in range(n_f):
                        t_acc1[j] += g_acc1[j]
                        t_acc2[j] += g_acc2[j]
                for j in range(n_f):
                    ds1[s, j] += t_acc1[j]
                    ds2[s, j] += t_acc2[j]

    return kernel


_KERNEL = None


def _kernel():
    global _KERNEL
    if _KERNEL is None:
        _KERNEL = _compile()
    return _KERNEL


def _empty_partials(n_f: int, lags: list[int]) -> Partials:
    return Partials(
        count=np.zeros(n_f, dtype=np.int64),
        sum1=np.zeros(n_f),
        sum2=np.zeros(n_f),
        minimum=np.full(n_f, np.inf),
        maximum=np.full(n_f, -np.inf),
        nan_count=np.zeros(n_f, dtype=np.int64),
        inf_count=np.zeros(n_f, dtype=np.int64),
        diff_count={k: np.zeros(n_f, dtype=np.int64) for k in lags},
        diff_sum1={k: np.zeros(n_f) for k in lags},
        diff_sum2={k: np.zeros(n_f) for k in lags},
    )


def block_partials(
    block: Block,
    shift: np.ndarray,
    scale: np.ndarray,
    diff_shift: dict[int, np.ndarray],
    diff_scale: dict[int, np.ndarray],
) -> Partials:
    """Partial sums of ``(x - shift) / scale`` and of the differences, compiled."""
    lags = sorted(block.diff_ranges)
    n_f = int(block.channels.shape[0])
    out = _empty_partials(n_f, lags)
    n_s = len(lags)
    dcount = np.zeros((n_s, n_f), dtype=np.int64)
    ds1 = np.zeros((n_s, n_f))
    ds2 = np.zeros((n_s, n_f))
    _kernel()(
        block.array,
        np.ascontiguousarray(block.channels, dtype=np.int64),
        np.ascontiguousarray(shift, dtype=np.float64),
        1.0 / np.ascontiguousarray(scale, dtype=np.float64),
        int(block.value_range[0]),
        int(block.value_range[1]),
        np.array(lags, dtype=np.int64),
        np.array([block.diff_ranges[k][0] for k in lags], dtype=np.int64),
        np.array([block.diff_ranges[k][1] for k in lags], dtype=np.int64),
        np.array([diff_shift[k] for k in lags], dtype=np.float64).reshape(n_s, n_f),
        1.0 / np.array([diff_scale[k] for k in lags], dtype=np.float64).reshape(n_s, n_f),
        out.count,
        out.sum1,
        out.sum2,
        out.minimum,
        out.maximum,
        out.nan_count,
        out.inf_count,
        dcount,
        ds1,
        ds2,
    )
    for i, k in enumerate(lags):
        out.diff_count[k] = dcount[i]
        out.diff_sum1[k] = ds1[i]
        out.diff_sum2[k] = ds2[i]
    return out


def block_partials_numpy(
    block: Block,
    shift: np.ndarray,
    scale: np.ndarray,
    diff_shift: dict[int, np.ndarray],
    diff_scale: dict[int, np.ndarray],
) -> Partials:
    """The same definitions as :func:`block_partials` in plain numpy (for tests)."""
    lags = sorted(block.diff_ranges)
    a = np.asarray(block.array)[:, :, block.channels].astype(np.float64)
    out = _empty_partials(a.shape[2], lags)
    t0, t1 = block.value_range
    values = a[t0:t1]
    nan = np.isnan(values)
    inf = np.isinf(values)
    finite = ~(nan | inf)
    y = np.where(finite, (values - shift) / scale, 0.0)
    out.count = finite.sum(axis=(0, 1)).astype(np.int64)
    out.sum1 = y.sum(axis=(0, 1))
    out.sum2 = (y * y).sum(axis=(0, 1))
    out.nan_count = nan.sum(axis=(0, 1)).astype(np.int64)
    out.inf_count = inf.sum(axis=(0, 1)).astype(np.int64)
    if finite.any():
        out.minimum = np.where(finite, values, np.inf).min(axis=(0, 1))
        out.maximum = np.where(finite, values, -np.inf).max(axis=(0, 1))
    for k in lags:
        d0, d1 = block.diff_ranges[k]
        d0 = max(d0, k)
        if d1 <= d0:
            continue
        d = a[d0:d1] - a[d0 - k : d1 - k]
        ok = np.isfinite(d)
        yd = np.where(ok, (d - diff_shift[k]) / diff_scale[k], 0.0)
        out.diff_count[k] = ok.sum(axis=(0, 1)).astype(np.int64)
        out.diff_sum1[k] = yd.sum(axis=(0, 1))
        out.diff_sum2[k] = (yd * yd).sum(axis=(0, 1))
    return out
