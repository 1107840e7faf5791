"""The kernel's arguments, declared once: one record (:data:`KernelArgs`) that
the block's sums build, the numpy twin and the compiled kernel take whole, and
the stored machine code's C entry receives as pointers and sizes generated from
this declaration (:func:`c_layout`, :func:`c_entry_source`).

Its output arrays are :data:`wxstats.core.reduction.ARRAYS`, each holding its
quantities in stacked slots: a new quantity is a new slot of an existing array,
and so changes no argument here, in the twin or in the compiled kernel.
"""

from __future__ import annotations

from collections import namedtuple
from typing import NamedTuple

import numpy as np

from wxstats.core.reduction import ARRAYS, BY_NAME, POWERS, QUANTITIES


class Field(NamedTuple):
    """One argument: an array of ``ndim`` dimensions of ``dtype`` (None: the
    block's own dtype), or with ``ndim`` 0 an integer size."""

    name: str
    dtype: type[np.generic] | None
    ndim: int
    doc: str


INPUTS: tuple[Field, ...] = (
    Field("values", None, 2, "(steps, points x channels): the block, C-contiguous"),
    Field("lags", np.int64, 1, "the lags of the differences' parts, sorted"),
    Field("ranges", np.int64, 2, "(parts, 2): the steps [t0, t1) each part counts"),
    Field("refs", np.float64, 4, "(parts, 3, steps, lanes): shift, 1/scale, -shift/scale"),
    Field("weights", np.float64, 1, "a weight per grid point; empty: unweighted"),
    Field("by", np.int64, 1, "(steps,): each step's group (a climatology's month or hour)"),
)
OUTPUTS: tuple[Field, ...] = tuple(
    Field(name, BY_NAME[names[0]].dtype, 4, "(parts, slots, steps or groups, channels)")
    for name, names in ARRAYS.items()
)
"""The kernel's output arrays (:func:`wxstats.core.reduction.kernel_arrays`)."""
SIZES: tuple[Field, ...] = (
    Field("n_c", np.int64, 0, "channels of the block (all summed, picked afterwards)"),
    Field("m", np.int64, 0, "grid points per lane row (lanes = m * n_c)"),
    Field("chunk", np.int64, 0, "grid points summed together before joining the step's sum"),
)
FIELDS = INPUTS + OUTPUTS + SIZES

KernelArgs = namedtuple("KernelArgs", [f.name for f in FIELDS])  # noqa: PYI024
"""The kernel's arguments, one field per :data:`FIELDS` (numba takes a named tuple
of arrays as one argument)."""

Lanes = namedtuple("Lanes", [q.name for q in QUANTITIES])  # noqa: PYI024
"""The compiled kernel's lane accumulators of one chunk, an array (lanes,) per
quantity (:mod:`wxstats.core.kernel.lanes`; the values' extremes in the input's
type, the rest float64 or int64)."""
Powers = namedtuple("Powers", [q.name for q in POWERS])  # noqa: PYI024
"""A chunk's sums of the powers of ``x`` folded into channels, an array (n_c,) each."""

SCRATCH = ("fs", "ints", "xs")
"""The compiled kernel's scratch arrays, after the record (see
:func:`wxstats.core.kernel.stored.scratch_sizes`)."""


_N_ARRAYS = len(INPUTS + OUTPUTS)  # the record's arrays come first, then its sizes
_DTYPES = tuple(None if f.dtype is None else np.dtype(f.dtype) for f in INPUTS + OUTPUTS)
_NDIMS = tuple(f.ndim for f in INPUTS + OUTPUTS)


def check(args: KernelArgs) -> None:
    """ValueError unless every array of ``args`` has its declared dtype, rank and
    C order (the compiled entry reads raw pointers)."""
    values = args.values.dtype
    for i, x in enumerate(args[:_N_ARRAYS]):
        want = _DTYPES[i] or values
        if x.dtype != want or x.ndim != _NDIMS[i] or not x.flags.c_contiguous:
            name = FIELDS[i].name
            raise ValueError(f"kernel argument {name} of {x.dtype} {x.shape}: not C {want}")


def c_layout(args: KernelArgs, scratch: tuple[np.ndarray, ...]) -> tuple[list, np.ndarray]:
    """The C entry's arguments: the arrays of the record in declaration order, then
    the scratch (:data:`SCRATCH`; their pointers), and ``dims``: each array's shape
    in that order, the sizes, then the scratch's lengths."""
    arrays = [*args[:_N_ARRAYS], *scratch]
    dims = [d for x in args[:_N_ARRAYS] for d in x.shape]
    dims += [*args[_N_ARRAYS:], *(x.shape[0] for x in scratch)]
    return arrays, np.array(dims, dtype=np.int64)


def c_entry_source() -> str:
    """Python source of the C entry ``_entry(pointers, dims)`` (:func:`c_layout`):
    each array rebuilt from its pointer and its shape in ``dims``, then
    ``kernel(KernelArgs(...), fs, ints, xs)``. The names it uses: ``carray``,
    ``np``, ``kernel``, ``KernelArgs``, ``VALUES`` (the block's dtype) and
    ``EXTREMES`` (the extremes' scratch dtype)."""
    lines, fields, d = [], [], 0
    for i, f in enumerate(INPUTS + OUTPUTS):
        shape = ", ".join(f"dims[{d + k}]" for k in range(f.ndim))
        dtype = "VALUES" if f.dtype is None else f"np.{np.dtype(f.dtype).name}"
        lines.append(f"    {f.name} = carray(pointers[{i}], ({shape},), {dtype})")
        fields.append(f.name)
        d += f.ndim
    fields += [f"dims[{d + k}]" for k in range(len(SIZES))]
    d += len(SIZES)
    n = len(INPUTS + OUTPUTS)
    for k, (name, dtype) in enumerate(
        zip(SCRATCH, ("np.float64", "np.int64", "EXTREMES"), strict=True)
    ):
        lines.append(f"    {name} = carray(pointers[{n + k}], (dims[{d + k}],), {dtype})")
    lines.append(f"    kernel(KernelArgs({', '.join(fields)}), {', '.join(SCRATCH)})")
    return "def _entry(pointers, dims):\n" + "\n".join(lines) + "\n"
