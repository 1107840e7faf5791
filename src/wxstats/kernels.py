"""One-pass per-sample partial sums: values, differences for every step, extremes.

A :class:`Block` is an array ``a[t, g, c]`` (time, grid point, channel) with
the channels to use, the time range whose values count and, for each lag
``k``, the range of *later* times ``t`` whose pairs ``(t - k, t)`` count.

:func:`block_partials` runs the compiled kernel (numba, no per-element Python,
no float64 temporaries of the sample's size). :func:`block_partials_numpy` is a
plain numpy version of the same definitions, kept to test the kernel.

How the kernel is fast and still exact
--------------------------------------
The sample is walked in chunks of :data:`GRID_CHUNK` grid points (outer) and
time steps (inner), so the chunk at ``t - k`` that a difference needs was read
``k`` steps ago and is still in the CPU cache: every value comes from memory
once. Within a chunk the ``(grid point, channel)`` values are contiguous; they
are summed into ``L = m * C`` *lanes* (lane ``l`` takes the values at flat
positions ``l, l + L, l + 2L, ...``, i.e. channel ``l % C`` of every ``m``-th
grid point), four rows per step. Each lane is a plain sequential float64 sum,
so the loop over lanes vectorizes without ``fastmath`` and without any
reassociation: the bits depend only on the data and its shape (``m`` comes
from ``C``), never on the CPU's vector width, thread count or who reads the
sample. Then lanes fold into channels (in lane order), chunk sums into the
time step's sum (in chunk order) and time steps into the total (in time
order): rounding error grows with ``512/m + m + G/512 + T``, not with the
number of values.

NaN and Inf are handled without a branch per value: a chunk is first summed
as if it were all finite; NaN/Inf (or an overflow) make its sums non-finite,
and only then is the chunk summed again with per-value checks that count and
skip them. Both paths add the same numbers in the same order.

All channels of the array are summed (the array rows are contiguous) and the
requested ones picked afterwards; a non-contiguous array is copied once in
its own dtype (never widened to float64).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GRID_CHUNK = 512
"""Grid points summed together (in lanes, see the module docstring) before
joining the time step's sum: rounding error grows with 512/m + m + G/512 + T,
not with the number of values. A chunk of the MEPS state (18 channels,
float32) is 36 KiB, so the chunks a difference needs stay in L2 cache."""


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


def _kernel():
    from wxstats._kernels_numba import kernel

    return kernel


def lanes_per_channel(n_channels: int) -> int:
    """Grid points per lane row: a power of two giving at least 64 lanes."""
    m = 1
    while m * n_channels < 64 and m < GRID_CHUNK:
        m *= 2
    return m


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


def _per_channel(values: np.ndarray, channels: np.ndarray, n_c: int, fill: float) -> np.ndarray:
    """Per-feature parameters spread over all ``n_c`` channels of the array."""
    out = np.full(n_c, fill)
    out[channels] = values
    if not np.array_equal(out[channels], values):
        raise ValueError("a channel is used twice with different shifts or scales")
    return out


def block_partials(
    block: Block,
    shift: np.ndarray,
    scale: np.ndarray,
    diff_shift: dict[int, np.ndarray],
    diff_scale: dict[int, np.ndarray],
) -> Partials:
    """Partial sums of ``(x - shift) / scale`` and of the differences, compiled."""
    lags = sorted(block.diff_ranges)
    channels = np.asarray(block.channels, dtype=np.int64)
    n_f = int(channels.shape[0])
    out = _empty_partials(n_f, lags)
    array = block.array
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)  # rare: copied in its own dtype
    n_t, n_g, n_c = array.shape
    m = lanes_per_channel(n_c)
    lanes = m * n_c

    def lane(values, fill: float) -> np.ndarray:
        v = np.asarray(values, dtype=np.float64).reshape(n_f)
        return np.tile(_per_channel(v, channels, n_c, fill), m)

    t0 = max(0, int(block.value_range[0]))
    t1 = min(n_t, int(block.value_range[1]))
    d0 = [max(int(block.diff_ranges[k][0]), k) for k in lags]
    d1 = [min(int(block.diff_ranges[k][1]), n_t) for k in lags]
    n_s = len(lags)
    sums = {
        name: np.zeros(n_c, dtype=np.int64 if name in ("count", "nans", "infs") else None)
        for name in ("count", "s1", "s2", "nans", "infs")
    }
    mn, mx = np.full(n_c, np.inf), np.full(n_c, -np.inf)
    dcount = np.zeros((n_s, n_c), dtype=np.int64)
    ds1 = np.zeros((n_s, n_c))
    ds2 = np.zeros((n_s, n_c))
    _kernel()(
        array.reshape(n_t, n_g * n_c),
        n_c,
        m,
        GRID_CHUNK,
        t0,
        t1,
        np.array(lags, dtype=np.int64),
        np.array(d0, dtype=np.int64),
        np.array(d1, dtype=np.int64),
        lane(shift, 0.0),
        lane(1.0 / np.asarray(scale, dtype=np.float64), 1.0),
        np.array([lane(diff_shift[k], 0.0) for k in lags]).reshape(n_s, lanes),
        np.array(
            [lane(1.0 / np.asarray(diff_scale[k], dtype=np.float64), 1.0) for k in lags]
        ).reshape(n_s, lanes),
        sums["count"],
        sums["s1"],
        sums["s2"],
        mn,
        mx,
        sums["nans"],
        sums["infs"],
        dcount,
        ds1,
        ds2,
    )
    out.count = sums["count"][channels]
    out.sum1 = sums["s1"][channels]
    out.sum2 = sums["s2"][channels]
    out.minimum = mn[channels]
    out.maximum = mx[channels]
    out.nan_count = sums["nans"][channels]
    out.inf_count = sums["infs"][channels]
    for i, k in enumerate(lags):
        out.diff_count[k] = dcount[i][channels]
        out.diff_sum1[k] = ds1[i][channels]
        out.diff_sum2[k] = ds2[i][channels]
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
