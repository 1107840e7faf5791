"""The reduction, declared once: what summing a block accumulates, per feature.

Each :class:`Quantity` is one number per feature (and, for a per-step one, per
time step: the summation unit) with its dtype, its zero (what an empty block
holds: the neutral element of its merge) and how two of them merge. This table
drives the allocation of a block's sums (:class:`wxstats.core.kernel.BlockSums`),
the kernel's output arrays (:func:`kernel_arrays`, :func:`slot`: the compiled kernel and its numpy
twin index them by these slots) and the exact moments' fields and packing
(:class:`wxstats.core.combine.Moments`). Adding a quantity is one row here plus
the line of the lane template that computes it. What the statistics make of
them is declared in :mod:`wxstats.core.finalize` (not here: this file is part of
the kernel's sources, and a statistic changes no machine code).

The compiled kernel freezes the slots (:func:`slot`) at compile time: its
stored machine code is named by a digest of this file
(:mod:`wxstats.core.kernel.stored`), and numba's cache, which watches only the
kernel's own file, is dropped when compiled from another table
(:func:`wxstats.core.kernel.compiled.refresh_stale_cache`).

A block's sums come in *parts*: part 0 is the values, part ``1 + i`` the
differences of the ``i``-th lag (sorted); a quantity with ``diffs=False`` is
left at its zero in the differences' parts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from wxstats.core.exact import FRACTION_BITS, NUM_LIMBS

Merge = Literal["sum", "count", "min", "max"]


@dataclass(frozen=True)
class Quantity:
    """One accumulated number per feature (see the module docstring)."""

    name: str
    dtype: type[np.generic]
    zero: float
    merge: Merge
    """``sum``: float64 sums per step, made exact (fixed-point limbs) when kept;
    ``count``: int64, added; ``min``/``max``: float64 extremes."""
    per_step: bool
    """A row per time step (each with its own reference), else one total per block."""
    diffs: bool = True
    """Also accumulated for the differences (else only for the values)."""
    weighted_only: bool = False
    """Present only in a weighted reduction (``--weights``)."""
    kept: bool = True
    """Held by the exact moments (else only checked per block: ``inf_count``
    is refused, never accumulated)."""
    power: int = 0
    """A sum's power of ``x`` (``sum2``: ``Σx²``); 0 for the others."""
    order: int = 0
    """Accumulated only by a reduction of this order or above (``--moments``: the
    highest power summed; the default 2 keeps the sums, kernel and files as they
    were), 0 always."""
    fraction_bits: int = FRACTION_BITS
    """The fixed point of its exact sum (a unit's ``Σx**p`` is a sum of products of
    ``p + 1`` float64: a multiple of ``2**-(1074 (p + 1))``; 3222 for ``p <= 2``)."""
    limbs: int = NUM_LIMBS
    """32-bit limbs of its exact sum when packed (its largest value in that fixed
    point, a count of 2**63 and 2**31 contributors of headroom)."""


QUANTITIES: tuple[Quantity, ...] = (
    Quantity("count", np.int64, 0, "count", per_step=True),
    Quantity("nan_count", np.int64, 0, "count", per_step=False, diffs=False),
    Quantity("sum1", np.float64, 0.0, "sum", per_step=True, power=1),
    Quantity("sum2", np.float64, 0.0, "sum", per_step=True, power=2),
    Quantity("weight", np.float64, 0.0, "sum", per_step=True, weighted_only=True),
    Quantity("sum3", np.float64, 0.0, "sum", True, power=3, order=4, fraction_bits=4296, limbs=270),
    Quantity("sum4", np.float64, 0.0, "sum", True, power=4, order=4, fraction_bits=5370, limbs=340),
    Quantity("minimum", np.float64, np.inf, "min", per_step=False),
    Quantity("maximum", np.float64, -np.inf, "max", per_step=False),
    Quantity("inf_count", np.int64, 0, "count", per_step=False, diffs=False, kept=False),
)
"""The order is the packing order of the exact moments (counts, then the sums'
limbs, then the extremes): changing it changes the bytes of checkpoints and
state files."""

BY_NAME = {q.name: q for q in QUANTITIES}
KEPT = tuple(q for q in QUANTITIES if q.kept)
ORDERS = (2, 4)
"""The orders a reduction may have (``--moments``)."""
POWERS = tuple(sorted((q for q in QUANTITIES if q.power), key=lambda q: q.power))
"""The sums of powers of ``x``, by power: what :class:`Raw` holds."""


def present(q: Quantity, weighted: bool, order: int) -> bool:
    """Whether a reduction (``weighted``, of ``order``) accumulates ``q``."""
    return (weighted or not q.weighted_only) and q.order <= order


def _array_of(q: Quantity) -> str:
    kind = "int" if np.issubdtype(q.dtype, np.integer) else "float"
    return f"{'steps' if q.per_step else 'totals'}_{kind}"


ARRAYS: dict[str, tuple[str, ...]] = {}
"""The kernel's output arrays, by name, each holding these quantities in
stacked slots (see :func:`kernel_arrays`)."""
for _q in QUANTITIES:
    ARRAYS.setdefault(_array_of(_q), ())
    ARRAYS[_array_of(_q)] += (_q.name,)


def slot(name: str) -> tuple[str, int]:
    """The kernel array holding quantity ``name`` and its slot there."""
    array = _array_of(BY_NAME[name])
    return array, ARRAYS[array].index(name)


def kernel_arrays(
    n_parts: int, n_t: int, n_c: int, n_groups: int = 1, order: int = 2
) -> dict[str, np.ndarray]:
    """The kernel's outputs, each slot at its quantity's zero: ``steps_*``
    (parts, slots, T, C), ``totals_*`` (parts, slots, groups, C), a total per group
    of time steps (a climatology's month or hour; one group without). The slots of a
    higher ``order`` come last, so an array of order 2 lacks them (the kernel sums
    the higher powers when its array has their slots)."""
    out = {}
    for array, every in ARRAYS.items():
        names = tuple(name for name in every if BY_NAME[name].order <= order)
        first = BY_NAME[names[0]]
        n = len(names)
        shape = (n_parts, n, n_t, n_c) if first.per_step else (n_parts, n, n_groups, n_c)
        out[array] = np.empty(shape, dtype=first.dtype)
        for i, name in enumerate(names):
            out[array][:, i] = BY_NAME[name].zero
    return out
