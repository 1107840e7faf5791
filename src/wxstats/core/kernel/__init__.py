"""One-pass per-step sums of a block: values, differences for every step, extremes.

A :class:`~wxstats.core.blocks.Block` is an array ``a[t, g, c]`` (time, grid
point, channel) with the channels to use, the time range whose values count
and, for each lag ``k``, the range of *later* times ``t`` whose pairs
``(t - k, t)`` count.

:func:`block_sums` runs the compiled kernel (numba, no per-element Python,
no float64 temporaries of the sample's size), or its numpy twin for a small
block (:mod:`wxstats.core.kernel.choice`); what it accumulates is declared in
:mod:`wxstats.core.reduction`.

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
sample. Then lanes fold into channels (in lane order) and chunk sums into the
time step's sum (in chunk order): the kernel returns one row of sums per time
step, and the combiner adds the rows of a sample in time order (or each row
exactly on its own): rounding error grows with ``512/m + m + G/512 + T``, not
with the number of values.

The kernel is compute-bound (about ten float64 operations per value), so two
operations are saved where that leaves the bits unchanged: for an input of at
most 32 bits the shifted, scaled value ``(v - p) * q`` is one fused
multiply-add ``fma(v, q, -p*q)`` (exact products; proof and the check at
:func:`fused_scaling_is_exact`), and the extremes of the values are compared in
float32 lanes (half the vector width; widening keeps order and value).

NaN and Inf are handled without a branch per value: a chunk is first summed
as if it were all finite; NaN/Inf (or an overflow) make its sums non-finite,
and only then is the chunk summed again with per-value checks that count and
skip them. Both paths add the same numbers in the same order.

All channels of the array are summed (the array rows are contiguous) and the
requested ones picked afterwards; a non-contiguous array is copied once in
its own dtype (never widened to float64).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wxstats.core import reduction, unit_reference
from wxstats.core.blocks import Block
from wxstats.core.kernel.choice import run_kernel
from wxstats.core.kernel.record import KernelArgs

GRID_CHUNK = 512
"""Grid points summed together (in lanes, see the module docstring) before
joining the time step's sum: rounding error grows with 512/m + m + G/512 + T,
not with the number of values. A chunk of the MEPS state (18 channels,
float32) is 36 KiB, so the chunks a difference needs stay in L2 cache."""


@dataclass
class BlockSums:
    """Float64 sums of one block, per feature: the quantities of
    :mod:`wxstats.core.reduction`, per time step (rows, each step a summation
    unit with its own reference) for the counts and sums, totals for the extremes
    and NaN/Inf counts; part 0 the values, part ``1 + i`` the differences of
    ``lags[i]``. Rows outside a range are at their identity (zero).

    ``arrays`` are the kernel's outputs with the block's features picked (see
    :func:`wxstats.core.reduction.kernel_arrays`); :meth:`of` reads one quantity,
    and the attributes ``step_<name>``/``<name>`` (values) and
    ``diff_step_<name>``/``diff_<name>`` (by lag) are views of them. The rows and
    their references are what the exact combiner takes
    (:mod:`wxstats.core.combine`); ``sum1``/``sum2`` are totals in time order of
    the rows, for checks and tests.
    """

    lags: tuple[int, ...]
    arrays: dict[str, np.ndarray]
    refs: StepReferences
    """The shift and scale each step's sums were taken with."""
    weighted: bool = False
    """Whether the weights were summed (``--weights``); else ``step_weight`` is None."""
    groups: np.ndarray | None = None
    """int64 (T,): a climatology's group of each step (``Block.groups``); the totals
    are then per group, (parts, groups, F), and a step's rows belong to its group."""

    @staticmethod
    def empty(
        n_t: int, n_f: int, lags: list[int], weighted: bool, refs: StepReferences
    ) -> BlockSums:
        """Every quantity at its identity (filled in place through the views)."""
        arrays = reduction.kernel_arrays(1 + len(lags), n_t, n_f)
        return BlockSums(tuple(sorted(lags)), arrays, refs, weighted)

    def of(self, name: str) -> np.ndarray | None:
        """Quantity ``name`` of every part: (parts, T, F) per step, else (parts, F),
        or (parts, groups, F) for a block with groups; None where the reduction's
        order has no slot for it (the third and fourth powers without ``--moments 4``)."""
        array, i = reduction.slot(name)
        if i >= self.arrays[array].shape[1]:
            return None
        values = self.arrays[array][:, i]
        if self.groups is None and not reduction.BY_NAME[name].per_step:
            return values[:, 0]
        return values

    @property
    def count(self) -> np.ndarray:
        return self.step_count.sum(axis=0)

    @property
    def diff_count(self) -> dict[int, np.ndarray]:
        return {k: v.sum(axis=0) for k, v in self.diff_step_count.items()}

    @property
    def sum1(self) -> np.ndarray:
        return in_time_order(self.step_sum1)

    @property
    def sum2(self) -> np.ndarray:
        return in_time_order(self.step_sum2)

    @property
    def diff_sum1(self) -> dict[int, np.ndarray]:
        return {k: in_time_order(v) for k, v in self.diff_step_sum1.items()}

    @property
    def diff_sum2(self) -> dict[int, np.ndarray]:
        return {k: in_time_order(v) for k, v in self.diff_step_sum2.items()}


def _views(q: reduction.Quantity) -> None:
    """BlockSums' attributes of quantity ``q``: the values' part and the
    differences' parts by lag (absent: None and {} for the weights of an
    unweighted block)."""
    prefix = "step_" if q.per_step else ""

    def values(self: BlockSums) -> np.ndarray | None:
        part = self.of(q.name)
        return None if part is None or (q.weighted_only and not self.weighted) else part[0]

    def diffs(self: BlockSums) -> dict[int, np.ndarray]:
        part = self.of(q.name)
        if part is None or (q.weighted_only and not self.weighted):
            return {}
        return {k: part[1 + i] for i, k in enumerate(self.lags)}

    setattr(BlockSums, prefix + q.name, property(values))
    if q.diffs:
        setattr(BlockSums, "diff_" + prefix + q.name, property(diffs))


for _q in reduction.QUANTITIES:
    _views(_q)


@dataclass
class StepReferences:
    """Shift and scale (T, F) of each time step of a block: of its values and of
    the differences ending at it, per lag (see :mod:`wxstats.core.unit_reference`);
    0 and 1 where a step does not count."""

    shift: np.ndarray
    scale: np.ndarray
    diff_shift: dict[int, np.ndarray]
    diff_scale: dict[int, np.ndarray]


def step_references(block: Block) -> StepReferences:
    """Each counted step's reference, from its own values (or differences) alone;
    the values and every lag's differences are sampled first and their references
    taken in one call (a block holds few steps: per-call costs dominate)."""
    a = block.array
    n_t, n_g = a.shape[0], a.shape[1]
    channels = np.asarray(block.channels, dtype=np.int64)
    at = unit_reference.sample_positions(n_g)
    n_f = channels.shape[0]
    ranges = {0: (max(0, block.value_range[0]), min(n_t, block.value_range[1]))}
    ranges |= {k: (max(d0, k), min(d1, n_t)) for k, (d0, d1) in block.diff_ranges.items()}
    pieces = [(k, t0, t1) for k, (t0, t1) in ranges.items() if t0 < t1]
    out = {k: (np.zeros((n_t, n_f)), np.ones((n_t, n_f))) for k in ranges}
    if pieces:
        sampled = []
        for k, t0, t1 in pieces:
            later = np.asarray(a[t0:t1][:, at][:, :, channels], dtype=np.float64)
            if k:
                later = later - np.asarray(a[t0 - k : t1 - k][:, at][:, :, channels], np.float64)
            sampled.append(later)
        with np.errstate(invalid="ignore", over="ignore"):
            shift, scale = unit_reference.references(
                np.concatenate(sampled), _Rows(a, channels, pieces)
            )
        u = 0
        for k, t0, t1 in pieces:
            out[k][0][t0:t1], out[k][1][t0:t1] = shift[u : u + t1 - t0], scale[u : u + t1 - t0]
            u += t1 - t0
    return StepReferences(
        *out[0], {k: v[0] for k, v in out.items() if k}, {k: v[1] for k, v in out.items() if k}
    )


class _Rows:
    """``rows[u, :, f]``: the whole row of unit ``u`` (the values of a step, or a
    lag's differences ending at it, in the order of ``pieces``), read only for
    the rare unit without a finite sampled value."""

    def __init__(self, a: np.ndarray, channels: np.ndarray, pieces: list) -> None:
        self.a, self.channels, self.pieces = a, channels, pieces

    def __getitem__(self, key: tuple[int, slice, int]) -> np.ndarray:
        u, _, f = key
        for k, t0, t1 in self.pieces:
            if u < t1 - t0:
                return unit_rows(self.a, self.channels[f : f + 1], t0 + u, k)[:, 0]
            u -= t1 - t0
        raise IndexError(u)


def unit_rows(a: np.ndarray, channels: np.ndarray, t: int, lag: int) -> np.ndarray:
    """float64 (G, F): the whole row of one summation unit: the values of step
    ``t`` (``lag`` 0), or the differences ``x[t] - x[t - lag]`` ending at it."""
    later = np.asarray(a[t][:, channels], dtype=np.float64)
    return later - np.asarray(a[t - lag][:, channels], dtype=np.float64) if lag else later


def in_time_order(rows: np.ndarray) -> np.ndarray:
    """The sequential float64 sum of the rows, first to last (a fixed order)."""
    total = np.zeros(rows.shape[1:])
    for row in rows:
        total += row
    return total


def fused_scaling_is_exact(shift: np.ndarray, inverse_scale: np.ndarray) -> bool:
    """Whether the compiled kernel may compute ``y = (v - p) * q`` as one fused
    multiply-add ``fma(v, q, -p * q)`` for an input of at most 32 bits, with the
    very same bits: true for every reference derived from such data.

    Such a ``v`` (a value, or the float64 difference of two) is 0 or a multiple of
    2**-149 with ``|v| <= 2**129``. When ``q`` is a power of two in
    ``[2**-200, 2**200]`` and ``p`` is 0 or ``|p|`` in ``[2**-400, 2**200]``, the
    products ``v * q`` and ``p * q`` are exact (normal range), so the fma rounds
    ``q * (v - p)`` once; and ``v - p`` is 0 or a multiple of 2**-452 of at most
    2**201, so it and ``q`` times it are normal and rounding commutes with the
    power-of-two scaling: ``round(v - p) * q == round(q * (v - p))``.
    """
    p = np.abs(np.asarray(shift, dtype=np.float64))
    q = np.asarray(inverse_scale, dtype=np.float64)
    mantissa, exponent = np.frexp(q)
    return bool(
        np.all(mantissa == 0.5)
        and np.all((exponent - 1 >= -200) & (exponent - 1 <= 200))
        and np.all((p == 0) | ((p >= 2.0**-400) & (p <= 2.0**200)))
    )


def lanes_per_channel(n_channels: int) -> int:
    """Grid points per lane row: a power of two giving at least 64 lanes."""
    m = 1
    while m * n_channels < 64 and m < GRID_CHUNK:
        m *= 2
    return m


KERNEL_LANE_ROWS = 6
"""Arrays of one float64 per lane that :func:`block_sums` makes per time step and
part (values, each lag's differences) beside the block's values: the scaling the
kernel takes (shift, 1/scale, -shift/scale) and the per-channel rows they are
tiled from (``memray`` at 300,000 steps of 20 grid points, one feature: ~5 KiB a
step for 2 parts of 64 lanes, 80 bytes of values)."""
KERNEL_CHANNEL_BYTES = 512
"""Bytes per time step, part and feature held while a block is summed beside
the lanes: its references, the kernel's per-step sums, their exact sums."""


def step_bytes(n_features: int, n_parts: int) -> int:
    """Bytes a block's time step of an array of ``n_features`` channels costs
    :func:`block_sums` and the exact sums beside its values (``n_parts``: 1 + the
    lags), for a source's block budget: a grid of a few points has steps of ~100
    bytes that cost ~6 KiB here, so a block counted by its values alone (32,768
    steps: ~200 MiB of these rows, two summed at once) does not hold its budget."""
    lanes = lanes_per_channel(max(1, n_features)) * max(1, n_features)
    return n_parts * (KERNEL_LANE_ROWS * lanes * 8 + KERNEL_CHANNEL_BYTES * n_features)


def _per_channel(values: np.ndarray, channels: np.ndarray, n_c: int, fill: float) -> np.ndarray:
    """Per-feature parameters (T, F) spread over all ``n_c`` channels of the array."""
    out = np.full((values.shape[0], n_c), fill)
    out[:, channels] = values
    if not np.array_equal(out[:, channels], values):
        raise ValueError("a channel is used twice with different shifts or scales")
    return out


def _overflowed(sums: BlockSums) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """Masks (T, F) of the steps whose float64 sums are not finite."""

    def bad(*rows: np.ndarray | None) -> np.ndarray:
        return ~np.logical_and.reduce([np.isfinite(r) for r in rows if r is not None])

    summed = [q.name for q in reduction.QUANTITIES if q.merge == "sum" and q.per_step]
    values = bad(*(getattr(sums, f"step_{name}") for name in summed))
    diffs = {
        k: bad(*(getattr(sums, f"diff_step_{name}").get(k) for name in summed))
        for k in sums.diff_step_sum1
    }
    return values, diffs


def block_sums(block: Block, refs: StepReferences | None = None, order: int = 2) -> BlockSums:
    """Per-step sums of ``(x - shift) / scale`` and of the differences, compiled
    (weighted by ``block.weights`` when it has them), of its powers up to ``order``
    (``--moments``), each step with its own reference (:func:`step_references`, or
    ``refs``). A step whose sums overflow is summed again with its scale from its
    whole row (still its own data)."""
    refs = refs if refs is not None else step_references(block)
    sums = _block_sums(block, refs, order)
    values, diffs = _overflowed(sums)
    if not (values.any() or any(m.any() for m in diffs.values())):
        return sums
    channels = np.asarray(block.channels, dtype=np.int64)
    a = block.array
    n_t = a.shape[0]
    wide = StepReferences(
        refs.shift.copy(), refs.scale.copy(), dict(refs.diff_shift), dict(refs.diff_scale)
    )
    for t in np.flatnonzero(values.any(axis=1)):
        rows = unit_rows(a, channels, t, 0)[None]
        wide.scale[t] = np.where(
            values[t], unit_reference.widened(rows, wide.shift[t][None])[0], wide.scale[t]
        )
    for k, mask in diffs.items():
        wide.diff_scale[k] = wide.diff_scale[k].copy()
        for t in np.flatnonzero(mask.any(axis=1)):
            if t - k < 0 or t >= n_t:
                continue
            rows = unit_rows(a, channels, t, k)[None]
            widened = unit_reference.widened(rows, wide.diff_shift[k][t][None])[0]
            wide.diff_scale[k][t] = np.where(mask[t], widened, wide.diff_scale[k][t])
    return _block_sums(block, wide, order)


def _block_sums(block: Block, refs: StepReferences, order: int) -> BlockSums:
    lags = sorted(block.diff_ranges)
    channels = np.asarray(block.channels, dtype=np.int64)
    array = block.array
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)  # rare: copied in its own dtype
    n_t, n_g, n_c = array.shape
    m = lanes_per_channel(n_c)
    lanes = m * n_c

    def lane(values, fill: float) -> np.ndarray:
        v = np.asarray(values, dtype=np.float64).reshape(n_t, channels.shape[0])
        return np.tile(_per_channel(v, channels, n_c, fill), (1, m))

    sh = lane(refs.shift, 0.0)
    iv = lane(1.0 / np.asarray(refs.scale, dtype=np.float64), 1.0)
    dsh = np.array([lane(refs.diff_shift[k], 0.0) for k in lags]).reshape(len(lags), n_t, lanes)
    div = np.array(
        [lane(1.0 / np.asarray(refs.diff_scale[k], dtype=np.float64), 1.0) for k in lags]
    ).reshape(len(lags), n_t, lanes)
    if array.dtype.itemsize <= 4 and not (
        fused_scaling_is_exact(sh, iv) and fused_scaling_is_exact(dsh, div)
    ):
        array = array.astype(np.float64)  # never for a reference from such data

    t0 = max(0, int(block.value_range[0]))
    t1 = min(n_t, int(block.value_range[1]))
    ranges = [(t0, t1)] + [
        (max(int(block.diff_ranges[k][0]), k), min(int(block.diff_ranges[k][1]), n_t)) for k in lags
    ]
    weighted = block.weights is not None
    if weighted and np.shape(block.weights) != (n_g,):
        raise ValueError(f"{np.shape(block.weights)} weights for {n_g} grid points")
    weights = np.asarray(block.weights if weighted else (), dtype=np.float64)
    by = np.zeros(n_t, dtype=np.int64)
    if block.groups is not None:
        by = np.asarray(block.groups, dtype=np.int64).reshape(n_t)
        if any((by[a:b] < 0).any() for a, b in ranges):
            raise ValueError("a counted time step without a group")
    n_groups = max(int(by.max(initial=0)) + 1, 1)
    n_p = 1 + len(lags)
    scaling = np.empty((n_p, 3, n_t, lanes))  # per part: shift, 1/scale, -shift/scale
    scaling[0] = sh, iv, -(sh * iv)
    scaling[1:, 0], scaling[1:, 1], scaling[1:, 2] = dsh, div, -(dsh * div)
    out = reduction.kernel_arrays(n_p, n_t, n_c, n_groups, order)
    args = KernelArgs(
        values=array.reshape(n_t, n_g * n_c),
        lags=np.array(lags, dtype=np.int64),
        ranges=np.array(ranges, dtype=np.int64).reshape(n_p, 2),
        refs=scaling,
        weights=weights,
        by=np.maximum(by, 0),  # a row without a group (-1) is never counted
        n_c=n_c,
        m=m,
        chunk=GRID_CHUNK,
        **out,
    )
    run_kernel(array.nbytes, args)
    picked = {name: values[..., channels] for name, values in out.items()}
    groups = None if block.groups is None else by
    return BlockSums(tuple(lags), picked, refs, weighted, groups)
