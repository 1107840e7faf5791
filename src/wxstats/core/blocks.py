"""A block: a sample's view of one stream (an array ``a[t, g, c]``: time, grid
point, channel) and what of it counts: the channels, the time rows whose values
count, for each lag the rows whose differences count, a climatology's group of
each row, the grid points' weights.

Its operations cut it by time steps without changing a bit, because every time
step is a summation unit of its own (:mod:`wxstats.core.unit_reference`):
:meth:`Block.within` one range of rows, :func:`restrict` several (the steps a
checkpoint lacks), :func:`group_runs` a climatology's runs of one group (for the
per-grid-point sums: the kernel, :mod:`wxstats.core.kernel`, takes the groups
itself).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np


@dataclass(frozen=True)
class Block:
    """A view of the data and what of it counts (see the module docstring)."""

    array: np.ndarray  # (T, G, C)
    channels: np.ndarray  # int64 (F,) indices into C
    value_range: tuple[int, int]
    diff_ranges: dict[int, tuple[int, int]] = field(default_factory=dict)
    groups: np.ndarray | None = None
    """Group of each time row (a climatology, ``--by``): a row's values and the
    differences ending at it go to the features of its group (group ``g`` of
    ``C`` channels: features ``g*C .. g*C + C``)."""
    weights: np.ndarray | None = None
    """float64 (G,): the weight of each grid point (``--weights``, an area weighting):
    sums of ``w * y``, ``w * y * y`` and of the weights themselves instead of ``y``,
    ``y * y`` and the count."""
    origin: str | None = None
    """Where these values are stored (a file), when it is not the sample the
    source describes: bad-value messages name it."""

    def within(self, t0: int, t1: int) -> Block:
        """The same block counting only rows ``[t0, t1)``: their values and the
        differences ending at them (a difference counts at its later time), so
        blocks of disjoint row ranges count disjoint sets of summation units."""

        def cut(r: tuple[int, int]) -> tuple[int, int]:
            a, b = max(r[0], t0), min(r[1], t1)
            return (a, b) if a < b else (0, 0)

        return replace(
            self,
            value_range=cut(self.value_range),
            diff_ranges={k: cut(r) for k, r in self.diff_ranges.items()},
        )


def restrict(block: Block, rows: list[tuple[int, int]]) -> list[Block]:
    """``block`` counting only the rows in ``rows`` (disjoint ``[t0, t1)``
    ranges): one block per range, as each step is summed on its own (with its
    own reference), the pieces give the bytes of those steps in any run."""
    return [block.within(a, b) for a, b in rows if a < b]


def group_runs(block: Block) -> list[tuple[Block, int]]:
    """A block as (block, first feature) pieces: itself, or for a climatology
    (``block.groups``) one piece per run of time rows of one group, each
    counting its rows' values and the differences ending at them. Every time
    step is summed on its own either way (the zarr/netCDF summation unit), so
    cutting changes no bit."""
    if block.groups is None:
        return [(block, 0)]
    ranges = [r for r in (block.value_range, *block.diff_ranges.values()) if r[0] < r[1]]
    lo = min((a for a, _ in ranges), default=0)
    hi = max((b for _, b in ranges), default=0)
    width = len(block.channels)
    out = []
    t = lo
    while t < hi:
        g = block.groups[t]
        end = t + 1
        while end < hi and block.groups[end] == g:
            end += 1
        piece = replace(block.within(t, end), groups=None)
        out.append((piece, int(g) * width))
        t = end
    return out
