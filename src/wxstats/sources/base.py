"""What every source provides: an ordered list of samples and how to read one.

Sources know nothing of ranks, accumulators or output files: they list
samples, read one into :class:`~wxstats.core.kernel.Block` views (one per
stream, declared by a :class:`~wxstats.core.streams.StreamSpec` with its
layout), and describe a sample for error messages. What a kind of data
supports beyond that, runtime and tools learn from its :class:`Capabilities`
(and then use the sub-protocol they name), never from its ``kind``, which is
a label for messages and the statistics file.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, cast

import numpy as np

from wxstats.core.errors import InputError
from wxstats.core.kernel import Block
from wxstats.core.streams import StreamSpec


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


@dataclass(frozen=True)
class Capabilities:
    """What a kind of data supports, by meaning (see module docstring)."""

    what: str = "this data"
    """The kind of data in words, for messages (``a neural-lam datastore``)."""

    time_splits: bool = False
    """Samples are blocks of one time axis cut into named splits (:class:`TimeAxisSource`)."""
    state: Literal["time ranges", "samples"] | None = None
    """What a statistics state of it covers (:class:`SampleSetSource` for samples); None: none."""
    no_state: str = "it has no statistics state"
    """Why it has no state, for the one line refusing ``--state`` and ``update``."""
    neurallam_files: bool = False
    """A run writes neural-lam's ``static/`` files (:class:`NeuralLamSource`), not a stats file."""
    mdp_store: bool = False
    """An mllam-data-prep zarr store: ``--write-into`` rewrites its statistics arrays."""
    anemoi_statistics: bool = False
    """It holds anemoi's statistics: ``--write-into`` them, ``--format anemoi``: a sidecar store."""
    maps_samples: bool = False
    """``read`` maps a sample's files (checks header and size, reads no value): cheap for all."""
    workers: bool = False
    """Samples are read on a Dask cluster's workers (:class:`WorkerSource`)."""


class Source(Protocol):
    """An ordered list of samples (see module docstring). Every time step of a
    sample is a summation unit of its own (:mod:`wxstats.core.combine`), so how
    time steps are grouped into samples never changes a bit."""

    kind: str
    """A label of the kind of data, for messages and the statistics file only."""
    capabilities: Capabilities
    path: str
    """The dataset read (a store, file, glob or datastore config), for messages."""
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


class TimeSplit(Protocol):
    """A named split of a time axis: its steps ``[start, stop)``."""

    name: str
    start: int
    stop: int


class Field(Protocol):
    """A variable of a :class:`TimeAxisSource`, as the writers of sets of files see it."""

    name: str
    has_time: bool
    grid_dims: tuple[str, ...]
    grid_sizes: dict[str, int]
    feature_dims: tuple[str, ...]
    weights: np.ndarray | None
    """float64 (grid points,): the weight of each (``--weights``), else None."""


class TimeAxisSource(Source, Protocol):
    """A source whose capabilities say ``time_splits``: one time axis, cut into splits."""

    times: np.ndarray
    splits: list[TimeSplit]
    diff_steps: tuple[int, ...]
    vars: list[Field]

    def steps(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Time steps ``[start, stop)`` of every variable with time, read now."""
        ...

    def close(self) -> None: ...


class WorkerSource(Source, Protocol):
    """A source whose capabilities say ``workers``: its samples are read on a Dask
    cluster's worker processes by a copy of it, sent there once."""

    def for_workers(self) -> WorkerSource:
        """A copy to send to other processes (no open file, no thread): it reads
        there by itself, or from the values :meth:`worker_inputs` names."""
        ...

    def worker_inputs(self, index: int) -> dict[Any, Any]:
        """What the copy cannot read by itself for sample ``index``: dask arrays,
        computed on the workers and passed to its :meth:`read` as ``given``."""
        ...

    def read(self, index: int, given: Any = None) -> dict[str, Block]: ...


def on_workers(source: Source) -> WorkerSource | None:
    """``source`` as a :class:`WorkerSource` where its capabilities say so, else None."""
    return cast("WorkerSource", source) if source.capabilities.workers else None


def time_axis(source: Source) -> TimeAxisSource | None:
    """``source`` as a :class:`TimeAxisSource` where its capabilities say so, else None."""
    return cast("TimeAxisSource", source) if source.capabilities.time_splits else None


class SampleSetSource(Source, Protocol):
    """A source whose states cover ``samples``: a split's independent, named samples."""

    split: str
    sample_names: list[str]

    def leave_out(self, names: set[str]) -> None:
        """Drop the samples of these names (counted already)."""
        ...


class NeuralLamSource(Source, Protocol):
    """A source whose capabilities say ``neurallam_files``: a neural-lam datastore."""

    split: str
    step_length: int
    static_dir: Path

    def levels(self) -> list[str]:
        """Vertical level of each variable, for ``parameter_weights.npy``."""
        ...


class AnemoiStatisticsSource(Source, Protocol):
    """A source whose capabilities say ``anemoi_statistics``: an anemoi dataset,
    whose statistics are written into it or into a sidecar store."""

    stream: str
    """The one stream, over every variable, that anemoi's statistics are of."""
    variables: list[str]
    deltas: dict[int, str]
    """The name of each difference step's time span (``6h``): its tendencies' name."""
    missing: list[str]
    """Dates of the window stored as NaN (the dataset's ``missing_dates``)."""
    frequency: Any
    """The dataset's ``frequency`` attribute, as it records it."""
    dtype: np.dtype

    def stored_tendencies(self) -> list[str]:
        """The time spans of the tendency statistics the dataset holds now."""
        ...


def anemoi_statistics(source: Source) -> AnemoiStatisticsSource | None:
    """``source`` as an :class:`AnemoiStatisticsSource` where its capabilities say so."""
    return cast("AnemoiStatisticsSource", source) if source.capabilities.anemoi_statistics else None


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
