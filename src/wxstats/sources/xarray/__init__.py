"""Any dataset xarray opens: a zarr store, a netCDF file, a glob of netCDF files.

The pipeline of this source, one module each: :mod:`.open` (what the user
named, opened lazily without decoding), :mod:`.timeaxis` (files in time order,
sortedness, spacing, splits), :mod:`.layout` (variables, features and grid;
mllam-data-prep stores), :mod:`.decode` (packing and fill values) and
:mod:`.blocks` (chunk-aligned samples, reading them, through :mod:`.chunked`'s
reader if any); :mod:`.record` says what it records (attributes, identity).

The engine sums each time step on its own, with its own reference, before
the exact accumulation, so the block size, the storage format and the number
of ranks never change a bit.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.conventions import stream_name
from wxstats.core.kernel import Block, step_bytes
from wxstats.core.times import fmt_time
from wxstats.sources.base import Capabilities, SampleSteps
from wxstats.sources.kinds import Selection, SourceKind
from wxstats.sources.xarray import record
from wxstats.sources.xarray.blocks import (
    Pieces,
    chunk_bounds,
    finish_slab,
    first_values,
    plan_blocks,
    plan_chunks_per_step,
    read_slab,
    read_static,
    shared_steps,
    slab_pieces,
)
from wxstats.sources.xarray.chunked import chunk_reader, open_reader
from wxstats.sources.xarray.decode import decoding, is_missing
from wxstats.sources.xarray.layout import (
    Variable,
    check_pool,
    is_mdp,
    select_variables,
    stream_specs,
)
from wxstats.sources.xarray.open import (
    GIVEN,
    given_dataset,
    is_zarr,
    open_files,
    remote_zarr,
)
from wxstats.sources.xarray.timeaxis import (
    along_time,
    check_sorted,
    diff_steps,
    mdp_splits,
    resolve_splits,
    restrict_to_period,
    step_seconds,
    time_groups,
    time_values,
    where_in,
)
from wxstats.sources.xarray.weights import weigh, weight_field
from wxstats.storage.chunks import ChunkReader, SlabRequest
from wxstats.storage.urls import is_url
from wxstats.storage.zarropen import Early

__all__ = ["DEFAULT_BLOCK_BYTES", "KIND", "XarraySource"]

LABEL = "xarray"
CAPABILITIES = Capabilities(
    what="a zarr/netCDF dataset", time_splits=True, state="time ranges", workers=True
)
DEFAULT_BLOCK_BYTES = 32 * 2**20
"""Bytes per block (at least one storage chunk along time): its decoded values
and what the kernel holds for each step (:func:`wxstats.core.kernel.step_bytes`)."""


class XarraySource:
    """Time blocks of a zarr/netCDF dataset, for every split (see module doc)."""

    kind = LABEL
    capabilities = CAPABILITIES
    work_unit = "time block"

    def __init__(self, path: str | Path | Any, options: Selection | None = None) -> None:
        """``path``: what the user named (see :mod:`.open`), or an ``xarray.Dataset``
        already open, read through xarray as it is (see :func:`.open.given_dataset`);
        ``options``: what to read of it (every field of the selection)."""
        options = options or Selection()
        if options.block_bytes is None:
            options = replace(options, block_bytes=DEFAULT_BLOCK_BYTES)
        self.options = options
        self.time_dim = self.options.time_dim
        storage = dict(self.options.storage_options)
        given = given_dataset(path)
        self.given = given is not None
        self.path = GIVEN if self.given else str(path)
        # a run from the first step reads the first time chunk of its arrays first:
        # requested with the coordinates (a period or splits need the times to say)
        from_start = not (self.options.period or self.options.splits)
        early = Early(self.options.variables, self.options.block_bytes) if from_start else None
        remote = None if self.given else remote_zarr(self.path, storage, self.time_dim, early)
        opened = [(GIVEN, given)] if self.given else open_files(self.path, storage, remote)
        self.time_files = along_time(opened, self.time_dim, self.path)
        first = self.time_files[0].ds
        self.is_mdp = is_mdp(first)
        if self.is_mdp:
            self.capabilities = replace(CAPABILITIES, mdp_store=True)
        times = [time_values(p.ds, self.time_dim, p.path) for p in self.time_files]
        # one file: its index's own values, not a copy (8 bytes a step: 8 MB at 1M steps)
        self.times = times[0] if len(times) == 1 else np.concatenate(times)
        check_sorted(self.times, self.time_dim, self._where)
        self.n_times = int(self.times.shape[0])
        self.diff_steps = diff_steps(self.options.diff_steps)
        self.splits = resolve_splits(
            self.options.splits,
            mdp_splits(first) if self.is_mdp else {},
            [str(v) for v in first.data_vars],
            self.times,
            self.time_dim,
            self.path,
            self._where,
        )
        if self.options.period:
            self.splits = restrict_to_period(
                self.splits, self.options.period, self.times, self.time_dim, self.path
            )
        self.vars = select_variables(
            self.time_files,
            self.path,
            self.time_dim,
            self.options.variables,
            self.options.feature_dims,
        )
        check_pool(self.vars, self.options.pool, self.time_dim, self.path)
        self._decodings = {
            (i, v.name): decoding(
                p.ds.variables[v.name],
                f"{p.path}: variable {v.name}",
                not self.given and not is_zarr(p.path),
            )
            for i, p in enumerate(self.time_files)
            for v in self.vars
            if v.has_time or i == 0
        }
        for v in self.vars:
            decs = [d for (i, name), d in self._decodings.items() if name == v.name]
            v.out_dtype = max((d.out_dtype for d in decs), key=lambda d: d.itemsize)
            v.raw_itemsize = int(first.variables[v.name].dtype.itemsize)
        per_step = sum(
            v.n_grid * v.n_features * v.out_dtype.itemsize
            + step_bytes(v.n_features, len(self.diff_steps) + 1)
            for v in self.vars
            if v.has_time
        )
        self.blocks = plan_blocks(
            self.splits,
            chunk_bounds(self.time_files, self.vars, self.time_dim),
            per_step,
            self.options.block_bytes,
            max(self.diff_steps),
            plan_chunks_per_step(self.time_files, self.vars, self.time_dim),
        )
        self.groups = time_groups(self.options.by, self.times, self.path, self.splits)
        self.weight_field = None
        self._weights_identity: dict[str, Any] | None = None
        if self.options.weights:
            self.weight_field = weight_field(self.options.weights, first, self.path, storage)
            field, first = self.weight_field, self.time_files[0].ds
            self._weights_identity = weigh(self.vars, field, first, self.path)
        self.streams = stream_specs(
            self.vars,
            self.splits,
            self.diff_steps,
            (self.groups[0], self.groups[1]) if self.groups else None,
            weighted=self.weight_field is not None,
            time_means=self.options.time_means,
            step_seconds={s.name: step_seconds(self.times, s) for s in self.splits},
            pool=self.options.pool,
        )
        self.attrs = record.attributes(self)
        self._chunks, self._recipe = chunk_reader(self, storage, remote)

    def _reader(self) -> ChunkReader | None:
        """The chunk reader; a copy made by :meth:`for_workers` opens its own at first use."""
        if self._chunks is None and self._recipe is not None:
            with _OPENING:
                if self._chunks is None:
                    self._chunks = open_reader(self._recipe, self.options.io_threads)
        return self._chunks

    def _request(self, v: Variable, r0: int, r1: int, shared: tuple = ()) -> SlabRequest:
        return SlabRequest(v.name, r0, r1, self._orders[v.name], self._missing_ok[v.name], shared)

    @cached_property
    def _orders(self) -> dict[str, tuple[int, ...]]:
        """Each variable's stored axes in the order ``(time, grid..., features...)``."""
        out = {}
        for v in (v for v in self.vars if v.has_time):
            dims = tuple(map(str, self.time_files[0].ds.variables[v.name].dims))
            order = (self.time_dim, *v.grid_dims, *v.feature_dims)
            out[v.name] = tuple(dims.index(d) for d in order)
        return out

    @cached_property
    def _missing_ok(self) -> dict[str, bool]:
        """Whether a missing chunk of each variable reads as a missing value (NaN)."""
        out = {}
        for v in self.vars:
            fill = self._chunks.fill_value(v.name) if self._chunks else None
            dtype = self.time_files[0].ds.variables[v.name].dtype
            dec = self._decodings[(0, v.name)]
            out[v.name] = fill is not None and is_missing(fill, dtype, dec)
        return out

    def _where(self, time_index: int) -> str:
        return where_in(self.time_files, time_index, self.path)

    # -- reading ----------------------------------------------------------
    def _read(self, v: Variable, r0: int, r1: int) -> np.ndarray:
        return self._read_all([v], r0, r1)[v.name]

    def _read_all(
        self,
        variables: list[Variable],
        r0: int,
        r1: int,
        shared: tuple = (),
        given: Pieces | None = None,
    ) -> dict[str, np.ndarray]:
        """Decoded ``(time, grid, features)`` values of steps ``[r0, r1)`` (``shared``:
        the steps a neighbouring block reads too, see :class:`.SlabRequest`; ``given``:
        the raw values fetched already, :meth:`worker_inputs`)."""
        reader = self._reader()
        if reader is None:
            return {
                v.name: read_slab(self.time_files, v, r0, r1, self._decodings, self.time_dim, given)
                for v in variables
            }
        raw = reader.read([self._request(v, r0, r1, shared) for v in variables])
        return {
            v.name: finish_slab(raw[v.name], self._decodings[(0, v.name)], v, self.path)
            for v in variables
        }

    def steps(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Decoded ``(time, grid, features)`` values of time steps ``[start, stop)``
        of every variable with time, by variable name: the edges a statistics
        state keeps for the differences across its boundaries."""
        return self._read_all([v for v in self.vars if v.has_time], start, stop)

    @staticmethod
    def _channels(v: Variable) -> np.ndarray:
        return np.arange(v.n_features, dtype=np.int64)

    def read(self, index: int, given: Pieces | None = None) -> dict[str, Block]:
        """The blocks of sample ``index`` (``given``: on a cluster's worker, the raw
        values :meth:`worker_inputs` named, computed there)."""
        block = self.blocks[index]
        b0, b1, r0 = block.start, block.stop, block.first
        shared = shared_steps(self.blocks, index)
        arrays = self._read_all([v for v in self.vars if v.has_time], r0, b1, shared, given)
        out = {}
        for v in self.vars:
            if not v.has_time:
                array = (
                    read_static(self.time_files, v, self._decodings, given)
                    if index == 0
                    else np.empty((0, v.n_grid, v.n_features), dtype=v.out_dtype)
                )
                for split in self.splits:
                    out[stream_name(v.name, split.name)] = Block(
                        array, self._channels(v), (0, array.shape[0]), weights=v.weights
                    )
                continue
            for split in self.splits:
                lo, hi = max(b0, split.start), min(b1, split.stop)
                values = (lo - r0, hi - r0) if lo < hi else (0, 0)
                diffs = {}
                for k in self.diff_steps:
                    d0 = max(b0, split.start + k)
                    diffs[k] = (d0 - r0, hi - r0) if d0 < hi else (0, 0)
                groups = self.groups[2][r0:b1] if self.groups else None
                out[stream_name(v.name, split.name)] = Block(
                    arrays[v.name], self._channels(v), values, diffs, groups, v.weights
                )
        return out

    def covers(self, index: int) -> dict[str, SampleSteps]:
        """The steps of each split in the block (see :meth:`Source.covers`); the
        variables without time are read with the first block only."""
        block = self.blocks[index]
        out = {}
        for split in self.splits:
            lo, hi = max(block.start, split.start), min(block.stop, split.stop)
            for v in self.vars:
                name = stream_name(v.name, split.name)
                if v.has_time:
                    out[name] = SampleSteps(split.name, block.first, lo, max(lo, hi))
                else:
                    out[name] = SampleSteps(f"{split.name} (no time)", 0, 0, int(index == 0))
        return out

    def reference_blocks(self) -> dict[str, Block]:
        """The first steps of each split (see :meth:`Source.reference_blocks`)."""
        reach = max(self.diff_steps)
        out = {}
        static = {
            v.name: read_static(self.time_files, v, self._decodings)
            for v in self.vars
            if not v.has_time
        }
        for split in self.splits:
            stop = min(split.stop, split.start + reach + 1)
            for v in self.vars:
                name = stream_name(v.name, split.name)
                if not v.has_time:
                    out[name] = Block(static[v.name], self._channels(v), (0, 1))
                    continue
                array = self._read(v, split.start, stop)
                n = array.shape[0]
                later = first_values(
                    lambda a, b, v=v: self._read(v, a, b),
                    self._channels(v),
                    array,
                    (split.start + n, split.stop),
                    self.options.block_bytes,
                )
                off = 0
                if later is not None:  # [first step, later steps..., the steps read]
                    off = 1 + later.shape[0]
                    array = np.concatenate([array[:1], later, array])
                diffs = {k: (off + k, off + k + 1) if k < n else (0, 0) for k in self.diff_steps}
                out[name] = Block(array, self._channels(v), (0, max(off, 1)), diffs)
        return out

    # -- on a cluster's workers ---------------------------------------------
    def for_workers(self) -> XarraySource:
        """A copy to send to a cluster's worker processes: the plan (blocks, splits,
        variables, decodings, groups, weights) without the open Datasets or the chunk
        reader's threads. It reads its blocks there with a chunk reader of its own,
        opened from the same store or file (a path, or a given Dataset's untransformed
        variables), or else from the raw values :meth:`worker_inputs` names, which the
        Dataset's dask graph computes on the workers."""
        self._orders, self._missing_ok  # noqa: B018 - computed here, where the data is open
        if self._chunks is not None:
            self._chunks.drop_early()  # the workers read the first block
        out = copy.copy(self)
        out.time_files = [replace(p, ds=None) for p in self.time_files]
        out._chunks = None
        return out

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the chunk reader (threads, open files): a copy opens its own
        at first use. A worker that has read with it may be asked by Dask to send its
        copy to another worker."""
        state = dict(self.__dict__)
        state["_chunks"] = None
        return state

    def worker_inputs(self, index: int) -> dict[tuple[int, str], Any]:
        """What a copy made by :meth:`for_workers` cannot read by itself for sample
        ``index``, as dask arrays (lazy, computed on the workers): every raw piece
        without a chunk reader; with one, only the variables without time (sample 0)."""
        block = self.blocks[index]
        wanted = [
            v
            for v in self.vars
            if (not v.has_time and index == 0) or (v.has_time and self._chunks is None)
        ]
        return slab_pieces(self.time_files, wanted, block.first, block.stop, self.time_dim, _lazy)

    def prefetch(self, index: int) -> None:
        """zarr: read ahead (see :meth:`.ZarrChunkReader.will_need`), so that a cold
        disk or an object store works while the kernel computes."""
        reader = self._reader()
        if reader is None:
            return
        block, shared = self.blocks[index], shared_steps(self.blocks, index)
        # the very requests read() makes: the reader keeps their chunk plans for it
        reqs = [self._request(v, block.first, block.stop, shared) for v in self.vars if v.has_time]
        reader.will_need(reqs)

    def __len__(self) -> int:
        return len(self.blocks)

    def describe(self, index: int) -> str:
        block = self.blocks[index]
        b0, b1 = block.start, block.stop
        files = sorted({self._where(t) for t in (block.first, b1 - 1)})
        return (
            f"{', '.join(files)}: {self.time_dim} {fmt_time(self.times[b0])} to "
            f"{fmt_time(self.times[b1 - 1])} (steps {b0}..{b1 - 1})"
        )

    def nbytes(self, index: int) -> int:
        block = self.blocks[index]
        per_step = sum(v.n_grid * v.n_features * v.raw_itemsize for v in self.vars if v.has_time)
        static = sum(v.n_grid * v.n_features * v.raw_itemsize for v in self.vars if not v.has_time)
        return (block.stop - block.first) * per_step + (static if index == 0 else 0)

    def inputs(self) -> list[str]:
        return [] if self.given else [p.path for p in self.time_files if not is_url(p.path)]

    def identity(self, files: bool = True) -> dict[str, Any]:
        """The source's parts of a run's identity (:func:`.record.identity`)."""
        return record.identity(self, files)

    def weights_identity(self) -> dict[str, Any] | None:
        """What weighted the statistics (None: unweighted): a resume, an update or a
        merge must use the same weights, bit for bit."""
        return self._weights_identity

    def close(self) -> None:
        if self._chunks is not None:
            self._chunks.close()
        if self.given or any(p.ds is None for p in self.time_files):
            return  # the caller's Dataset stays open for the caller
        for p in self.time_files:
            p.ds.close()


_OPENING = threading.Lock()
"""Held while a worker's copy of a source opens its chunk reader (threads share it)."""


def _lazy(variable: Any) -> Any:
    """An ``xarray.Variable``'s values as a dask array: its own, or its lazily
    indexed backend array's (read where the dask array is computed)."""
    return variable.data if variable.chunks is not None else variable.chunk().data


KIND = SourceKind(
    LABEL,
    CAPABILITIES,
    recognises=lambda dataset, given: True,
    opens=XarraySource,
)
"""Any dataset xarray opens (asked last: it takes what the other kinds do not)."""
