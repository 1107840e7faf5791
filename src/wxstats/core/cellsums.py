"""Per-grid-point sums over time (time means, makani's ``time_means.npy``), exact.

A time mean is a statistic per grid point and channel: millions of them on a
global grid, too many for the exact rational sums of the global statistics.
Each value is instead put on a fixed-point grid of its channel's reference,
``q = rint((x - shift) / scale * 2**32)``, and the integers are summed. The
rounding happens per value (the same bits whoever reads it), integer sums are
associative, so the result is independent of blocks, threads, ranks and
resumption; it deviates from the true mean by at most ``2**-33`` of the
channel's spread scale, far below the float32 these means are written in.

``q`` travels as two signed 32-bit limbs in int64 (like :mod:`wxstats.core.exact`'s),
so sums of up to ``2**31`` time steps never overflow and an ``all_reduce`` with SUM
adds them. ``|x - shift|`` must stay below ``2**20`` spreads (ample headroom
over the first time step; beyond it :class:`CellRangeError`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from wxstats.core.blocks import Block
from wxstats.core.streams import StreamSpec
from wxstats.core.unit_reference import power_of_two

FRACTION_BITS = 32
LIMIT_BITS = 20
"""|(x - shift) / scale| below 2**20: |q| < 2**52, exact in float64 and in two limbs."""
_HALF = 1 << 32


class CellRangeError(ArithmeticError):
    """Values too far from the reference for the fixed-point time sums."""


def cell_reference(rows: np.ndarray, n_features: int) -> tuple[np.ndarray, np.ndarray]:
    """(shift, scale) of ``n_features`` (the channels of ``rows`` (T, G, C), repeated
    for each group of a climatology) from the first step with a finite value of
    each channel: its mean (without overflow) and the power of two at its spread."""
    n_c = rows.shape[2]
    shift, scale = np.zeros(n_c), np.ones(n_c)
    for c in range(n_c):
        for row in rows[:, :, c]:
            v = np.asarray(row, dtype=np.float64)
            finite = v[np.isfinite(v)]
            if finite.size:
                big = float(np.max(np.abs(finite)))
                k = float(np.mean(finite / big) * big) if big > 0 else 0.0
                shift[c] = k if np.isfinite(k) else float(finite[0])
                spread = float(np.max(np.abs(finite - shift[c])))
                scale[c] = float(power_of_two(np.array(spread if spread > 0 else abs(k))))
                break
    reps = n_features // max(n_c, 1)
    return np.tile(shift, reps), np.tile(scale, reps)


def cell_references(
    specs: Sequence[StreamSpec], blocks: Mapping[str, Block]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The fixed point of each stream that sums per grid point (time means): shift
    and scale from the first time step of its reference block (``blocks``), the
    same on every rank, in every run over the same data."""
    out = {}
    for spec in specs:
        if not spec.cell_grid_points:
            continue
        block = blocks[spec.name]
        rows = np.asarray(block.array[block.value_range[0] : block.value_range[1]])
        out[spec.name] = cell_reference(rows[:, :, block.channels], len(spec.features))
    return out


def add_steps(cells: np.ndarray, rows: np.ndarray, shift: np.ndarray, scale: np.ndarray) -> None:
    """Add the values ``rows`` (T, G, F) into ``cells`` (2, G, F) int64 limbs."""
    inverse = 1.0 / np.asarray(scale, dtype=np.float64)  # powers of two: exact
    shift = np.asarray(shift, dtype=np.float64)
    for row in rows:
        y = (np.asarray(row, dtype=np.float64) - shift) * inverse
        if not (np.abs(y) < 2.0**LIMIT_BITS).all():
            raise CellRangeError("values more than 2**20 spreads from the reference")
        q = np.rint(np.ldexp(y, FRACTION_BITS)).astype(np.int64)
        magnitude = np.abs(q)
        sign = np.sign(q)
        cells[0] += sign * (magnitude & (_HALF - 1))
        cells[1] += sign * (magnitude >> 32)


def add_block(
    cells: np.ndarray, block: Block, shift: np.ndarray, scale: np.ndarray, at: int = 0
) -> None:
    """Add the values ``block`` counts into ``cells``; its channels are the
    features from ``at`` on (a climatology's group, :func:`~wxstats.core.blocks.group_runs`)
    of the stream's reference ``shift`` and ``scale``."""
    t0, t1 = block.value_range
    part = slice(at, at + len(block.channels))
    add_steps(cells, block.array[t0:t1][:, :, block.channels], shift[part], scale[part])


def cell_means(cells: np.ndarray, steps: int, shift: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """float64 (G, F): the mean over ``steps`` time steps of every grid point, from the
    summed limbs (the same integers give the same bits)."""
    total = cells[1].astype(np.float64) * float(_HALF) + cells[0].astype(np.float64)
    mean_y = np.ldexp(total, -FRACTION_BITS) / steps
    return np.asarray(shift, dtype=np.float64) + np.asarray(scale, dtype=np.float64) * mean_y
