"""Chunk-aligned blocks of time: which samples there are, and reading one.

Samples are contiguous blocks of time: the union of the splits is cut at the
storage chunk boundaries along time and consecutive chunks are grouped up to a
memory budget. Each block also reads the ``max(diff_steps)`` time steps before
its start (inside the splits), so that every pair ``(t - k, t)`` with both
times in a split is counted exactly once, attributed to its later time ``t``.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from wxstats.core.errors import InputError, first_line
from wxstats.sources.xarray.decode import Decoding, decode_into, refuse_unwritten
from wxstats.sources.xarray.layout import Variable
from wxstats.sources.xarray.timeaxis import Split, TimeFile
from wxstats.storage.chunks import CHUNKS_PER_BLOCK


@dataclass(frozen=True)
class TimeBlock:
    """One sample: values of steps ``[start, stop)``, read from ``first`` on."""

    start: int
    stop: int
    first: int  # first step read: start minus the halo the differences need


def chunk_bounds(
    time_files: list[TimeFile], variables: list[Variable], time_dim: str
) -> list[Iterable[int]]:
    """Time indices where a storage chunk (or a file) of any variable starts, as
    sorted sequences (a ``range`` per regularly chunked variable and file, never
    a list of every chunk: a store of a million chunks along time plans in the
    memory of a few)."""
    bounds: set[Any] = set()  # ranges of the same chunks are equal: kept once
    for p in time_files:
        bounds.add((p.start, p.start + p.length))
        for v in variables:
            if not v.has_time:
                continue
            var = p.ds.variables[v.name]
            if var.chunks:  # a dask-backed Dataset given by the caller: its dask chunks
                edges = np.cumsum((0, *var.chunks[var.dims.index(time_dim)]))
                bounds.add(tuple(p.start + int(e) for e in edges))
                continue
            enc = var.encoding
            size = (enc.get("preferred_chunks") or {}).get(time_dim)
            if enc.get("contiguous"):
                size = 1  # any slice reads only what it needs
            elif size is None:
                chunks = enc.get("chunks") or enc.get("chunksizes")
                if chunks is not None:
                    size = chunks[var.dims.index(time_dim)]
            if size:
                bounds.add(range(p.start, p.start + p.length, int(size)))
    return list(bounds)


def chunks_per_step(shape: Sequence[int], chunks: Sequence[int], axis: int) -> float:
    """Chunk objects one index along ``axis`` of an array reads (a chunk of ``c``
    steps counts ``1/c`` for each)."""
    out = 1.0 / max(1, int(chunks[axis]))
    for d, (n, c) in enumerate(zip(shape, chunks, strict=True)):
        if d != axis:
            out *= -(-int(n) // max(1, int(c)))
    return out


def plan_chunks_per_step(
    time_files: list[TimeFile], variables: list[Variable], time_dim: str
) -> float:
    """Chunk objects a time step of every variable with time reads chunk by chunk
    (a storage chunking in its encoding): with :data:`.chunks.CHUNKS_PER_BLOCK`,
    how many steps a block's plan may hold."""
    total = 0.0
    for v in variables:
        var = time_files[0].ds.variables[v.name]
        enc = var.encoding
        chunks = enc.get("chunks") or enc.get("chunksizes")
        if not v.has_time or var.chunks or enc.get("contiguous") or not chunks:
            continue
        if len(chunks) == var.ndim:
            total += chunks_per_step(var.shape, chunks, var.dims.index(time_dim))
    return total


def _inside(bounds: Iterable[Sequence[int]], a: int, b: int) -> Iterator[int]:
    """The points of the sorted sequences ``bounds`` strictly between ``a`` and
    ``b``, in order, each once (a range is cut by arithmetic, not walked)."""
    cut = [s[bisect.bisect_right(s, a) : bisect.bisect_left(s, b)] for s in bounds]
    last = None
    for x in heapq.merge(*cut):
        if x != last:
            yield x
            last = x


def plan_blocks(
    splits: list[Split],
    bounds: Iterable[Sequence[int]] | set[int],
    bytes_per_step: int,
    budget: int,
    reach: int,
    chunks_per_step: float = 0.0,
) -> list[TimeBlock]:
    """Blocks of whole chunks covering the splits, each within ``budget`` bytes
    and :data:`.chunks.CHUNKS_PER_BLOCK` chunk objects (``chunks_per_step`` each)
    or one chunk, with a halo of ``reach`` steps inside the splits. ``bounds``:
    where chunks start, as sorted sequences (:func:`chunk_bounds`) or a set."""
    budget = max(1, int(budget))
    if isinstance(bounds, (set, frozenset)):
        bounds = [sorted(bounds)]
    intervals: list[list[int]] = []
    for s in sorted(splits, key=lambda s: s.start):
        if intervals and s.start <= intervals[-1][1]:
            intervals[-1][1] = max(intervals[-1][1], s.stop)
        else:
            intervals.append([s.start, s.stop])
    spans = []
    for a, b in intervals:
        points = itertools.chain(_inside(bounds, a, b), [b])
        start, cut = a, next(points)
        for nxt in points:  # a block grows while the next chunk fits its budget
            steps = nxt - start
            if steps * bytes_per_step > budget or steps * chunks_per_step > CHUNKS_PER_BLOCK:
                spans.append((start, cut))
                start = cut
            cut = nxt
        spans.append((start, cut))
    out = []
    for b0, b1 in spans:
        inside = [s.start for s in splits if s.start < b1 and s.stop > b0]
        out.append(TimeBlock(b0, b1, max(b0 - reach, min(inside))))
    return out


def shared_steps(blocks: list[TimeBlock], index: int) -> tuple[tuple[int, int], ...]:
    """The steps block ``index`` reads that a neighbour reads too: its halo (the
    previous block's last steps) and its own last steps (the next block's halo)."""
    block = blocks[index]
    out = []
    if block.first < block.start:
        out.append((block.first, block.start))
    if index + 1 < len(blocks) and blocks[index + 1].first < block.stop:
        out.append((max(blocks[index + 1].first, block.start), block.stop))
    return tuple(out)


Pieces = Mapping[tuple[int, str], Any]
"""Raw values already fetched (by a cluster's worker, :func:`slab_pieces`), by
(file, variable), in ``(time, grid..., features...)`` order."""


def slab_pieces(
    time_files: list[TimeFile],
    variables: list[Variable],
    r0: int,
    r1: int,
    time_dim: str,
    lazy: Callable,
) -> dict[tuple[int, str], Any]:
    """``lazy(variable)`` (a dask array) of each file's piece of steps ``[r0, r1)``
    of ``variables`` (without time: the whole variable), in the order
    :func:`read_slab` and :func:`read_static` take them as ``given``."""
    out = {}
    for i, p in enumerate(time_files):
        a, b = max(r0, p.start), min(r1, p.start + p.length)
        for v in variables:
            var = p.ds.variables[v.name]
            if not v.has_time:
                if i == 0:
                    order = [var.dims.index(d) for d in (*v.grid_dims, *v.feature_dims)]
                    out[(0, v.name)] = lazy(var).transpose(order)
                continue
            if a >= b:
                continue
            order = [var.dims.index(d) for d in (time_dim, *v.grid_dims, *v.feature_dims)]
            piece = var.isel({time_dim: slice(a - p.start, b - p.start)})
            out[(i, v.name)] = lazy(piece).transpose(order)
    return out


def read_slab(
    time_files: list[TimeFile],
    v: Variable,
    r0: int,
    r1: int,
    decodings: dict[tuple[int, str], Decoding],
    time_dim: str,
    given: Pieces | None = None,
) -> np.ndarray:
    """Decoded values of steps ``[r0, r1)`` of ``v`` as ``(time, grid, features)``
    (``given``: the raw pieces fetched already, see :data:`Pieces`)."""
    shape = (r1 - r0, v.n_grid, v.n_features)
    order = (time_dim, *v.grid_dims, *v.feature_dims)
    out = None
    for i, p in enumerate(time_files):
        a, b = max(r0, p.start), min(r1, p.start + p.length)
        if a >= b:
            continue
        try:
            if given is not None:
                raw = np.asarray(given[(i, v.name)])
            else:
                # basic indexing only, then numpy's transpose: xarray's transpose of a
                # lazily indexed backend array reads through vectorized indexing, 10x slower
                var = p.ds.variables[v.name]
                piece = var.isel({time_dim: slice(a - p.start, b - p.start)})
                raw = np.asarray(piece.values).transpose([var.dims.index(d) for d in order])
        except Exception as exc:  # storage errors of any backend
            raise InputError(
                f"{p.path}: variable {v.name}: cannot read {time_dim} steps "
                f"{a - p.start}..{b - p.start - 1}: {first_line(exc)}"
            ) from None
        raw = raw.reshape(b - a, v.n_grid, v.n_features)
        dec = decodings[(i, v.name)]
        if dec.plain and raw.dtype == v.out_dtype and (a, b) == (r0, r1):
            refuse_unwritten(raw, dec, f"{p.path}: variable {v.name}")
            return np.ascontiguousarray(raw)  # nothing to decode: usually no copy
        if out is None:
            out = np.empty(shape, dtype=v.out_dtype)
        decode_into(raw, dec, out[a - r0 : b - r0], f"{p.path}: variable {v.name}")
    return out


def finish_slab(raw: np.ndarray, dec: Decoding, v: Variable, path: str) -> np.ndarray:
    """Raw values in ``(time, grid..., features...)`` order, decoded as
    ``(time, grid, features)`` (no copy when there is nothing to decode)."""
    raw = raw.reshape(raw.shape[0], v.n_grid, v.n_features)
    if dec.plain and raw.dtype == v.out_dtype:
        refuse_unwritten(raw, dec, f"{path}: variable {v.name}")
        return np.ascontiguousarray(raw)
    out = np.empty(raw.shape, dtype=v.out_dtype)
    decode_into(raw, dec, out, f"{path}: variable {v.name}")
    return out


def read_static(
    time_files: list[TimeFile],
    v: Variable,
    decodings: dict[tuple[int, str], Decoding],
    given: Pieces | None = None,
):
    """Decoded values of a variable without time, as ``(1, grid, features)``."""
    out = np.empty((1, v.n_grid, v.n_features), dtype=v.out_dtype)
    try:
        if given is not None:
            raw = np.asarray(given[(0, v.name)])
        else:
            var = time_files[0].ds.variables[v.name]
            order = [var.dims.index(d) for d in (*v.grid_dims, *v.feature_dims)]
            raw = np.asarray(var.values).transpose(order)  # as in read_slab
    except Exception as exc:  # storage errors of any backend
        raise InputError(
            f"{time_files[0].path}: variable {v.name}: cannot read: {first_line(exc)}"
        ) from None
    where = f"{time_files[0].path}: variable {v.name}"
    decode_into(raw.reshape(1, v.n_grid, v.n_features), decodings[(0, v.name)], out, where)
    return out


def first_values(
    read: Callable[[int, int], np.ndarray],
    channels: np.ndarray,
    array: np.ndarray,
    steps: tuple[int, int],
    block_bytes: int,
) -> np.ndarray | None:
    """For each channel without a value (all NaN) in ``array``'s first step, the
    first later step where it has one: ``array``'s own, then steps ``[a, stop)``
    read by ``read(a, b)`` in windows of at most a block, keeping only those
    (``None``: none needed). The reference is taken from them, as a shift of 0
    far from the data leaves ``sqrt(eps)`` of spurious spread (std 2e-6 for a
    constant 273.15 whose first step is NaN)."""
    a, stop = steps
    missing = ~np.isfinite(array[0][:, channels]).any(axis=0)
    rows, found = [], array[1:]
    window = max(1, block_bytes // max(1, array[0].nbytes))
    while missing.any():
        hit = np.isfinite(found[..., channels]).any(axis=1) & missing  # (steps, channels)
        for t in np.flatnonzero(hit.any(axis=1)):
            rows.append(found[t : t + 1])
            missing &= ~hit[t]
        if not missing.any() or a >= stop:
            break
        b = min(stop, a + window)
        found, a = read(a, b), b
    return np.concatenate(rows) if rows else None
