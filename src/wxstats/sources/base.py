"""What every source provides: an ordered list of samples and how to read one.

Sources know nothing of ranks, accumulators or output files: they list
samples, read one into :class:`~wxstats.core.kernels.Block` views (one per
stream, declared by a :class:`~wxstats.core.stats.StreamSpec` with its
layout), and describe a sample for error messages.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass
from typing import Any, Protocol

from wxstats.core.errors import InputError
from wxstats.core.kernels import Block
from wxstats.core.stats import StreamSpec


@dataclass(frozen=True)
class SampleSteps:
    """The time steps one stream's block of a sample counts: the values of the
    absolute steps ``[start, stop)`` of ``unit`` and the differences ending at
    them; the block's array row 0 is step ``first``. ``unit`` names what the
    steps are steps of: a split (a zarr/netCDF or anemoi dataset; the values of
    its variables without time are the one step 0 of ``<split> (no time)``), or
    a sample file (a MEPS datastore, whose samples do not depend on the block
    size). A checkpoint records done steps by unit (:mod:`wxstats.runtime.checkpoint`)."""

    unit: str
    first: int
    start: int
    stop: int


class Source(Protocol):
    """An ordered list of samples (see module docstring). Every time step of a
    sample is a summation unit of its own (:mod:`wxstats.core.combine`), so how
    time steps are grouped into samples never changes a bit."""

    kind: str
    work_unit: str
    """What one sample is, in words for people (``sample``, ``time block``)."""
    streams: list[StreamSpec]
    attrs: dict[str, Any]

    def __len__(self) -> int: ...

    def read(self, index: int) -> dict[str, Block]:
        """The blocks of sample ``index``, keyed by stream name."""
        ...

    def reference_blocks(self) -> dict[str, Block]:
        """The first time steps of each stream: the fixed point of per grid point
        time sums comes from them, the same on every rank and in every run."""
        ...

    def describe(self, index: int) -> str:
        """Where sample ``index`` comes from, for messages (a file name...)."""
        ...

    def nbytes(self, index: int) -> int:
        """Bytes read for sample ``index`` (progress and estimates)."""
        ...

    def prefetch(self, index: int) -> None:
        """Start reading sample ``index`` in the background (a hint: errors are
        left to :meth:`read`; the engine calls it a few samples ahead)."""
        ...

    def covers(self, index: int) -> dict[str, SampleSteps]:
        """Which time steps sample ``index`` counts, by stream name: what a
        checkpoint records as done, so that a resume with other samples (another
        block size) sums only the steps no earlier run summed."""
        ...

    def identity(self, files: bool = True) -> dict[str, Any]:
        """What the data is, as parts of a run's identity (``data``: what changes
        a sum whatever the time steps; ``run``: which steps or samples;
        ``files``: where and when written, left out unless ``files``, as it may
        stat every chunk): see :mod:`wxstats.runtime.identity`."""
        ...

    def inputs(self) -> list[str]:
        """The local files and folders the source reads (outputs must not be one)."""
        ...


def parse_period(text: str) -> tuple[str, str]:
    """``START/END`` of ``--period`` (an inclusive ISO 8601 interval, selected as
    xarray selects ``slice(START, END)``: ``2015`` or ``2015-12`` end with
    their last time; an empty side is open)."""
    start, slash, end = text.partition("/")
    if not slash or not (start.strip() or end.strip()):
        raise InputError(
            f"--period {text!r}: expected START/END, an inclusive ISO 8601 interval such as "
            "1979-01-01/2015-12-31 (START/ or /END: open on that side)"
        )
    return start.strip(), end.strip()


_SIZES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def sample_sizes(source: Source) -> list[int]:
    """``source.nbytes(i)`` of every sample, asked once per source.

    A MEPS source answers by stat-ing two files per sample; progress, the run
    record, the checkpoint fingerprint and the ranks' layout check all need
    the sizes, so they share this one list instead of stat-ing again.
    """
    try:
        return _SIZES[source]
    except (KeyError, TypeError):
        sizes = [int(source.nbytes(i)) for i in range(len(source))]
    with contextlib.suppress(TypeError):  # a source that cannot be weakly referenced
        _SIZES[source] = sizes
    return sizes
