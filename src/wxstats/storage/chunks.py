"""Reading time slabs chunk by chunk, at the speed of the storage.

xarray's lazy indexing reads a slab through outer/vectorized indexing (down to
zarr's coordinate selection), and netCDF4-python decompresses a file's chunks
one at a time under its lock. Here the format gives only the metadata (where
each chunk is, how it is compressed: :mod:`.zarrchunks`, :mod:`.hdf5chunks`);
the chunks of a block are fetched as raw bytes, decompressed in a thread pool
(zlib and numcodecs release the GIL), and each chunk is copied once,
transposed, into its place in a ``(time, grid..., features...)`` slab: the
layout the kernel takes. The values are the stored (raw) ones, exactly what
``xarray.open_dataset(mask_and_scale=False)`` gives; decoding stays in
:mod:`wxstats.sources.xarray.decode`.

Arrays a format module does not decode itself are read with the format
library's own basic slicing. A chunk that is missing (deleted, or never
written) is read as the array's fill value only if that value decodes to
missing (NaN), so the kernel refuses it without ``--skipna`` and counts it in
``nan_count`` with it (with a warning naming the first missing chunk of the
variable); any other missing chunk is an error naming it, never a silent number,
unless the format says a missing chunk is one never written (HDF5).
"""

from __future__ import annotations

import itertools
import math
import threading
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from wxstats.core.errors import InputError, first_line
from wxstats.core.machine import available_cpus
from wxstats.storage.decompress import TooLarge
from wxstats.storage.described import ChunkedArray, ChunkSource
from wxstats.storage.shared import FetchedElsewhere, SharedChunks, fetched_elsewhere
from wxstats.storage.sizes import check_chunks, check_slab, memory_bytes

TASKS_PER_THREAD = 4
"""A block's chunks are read in this many runs per thread (balance against overhead)."""
BLOCKS_AHEAD = 4
"""Blocks of a remote store fetched ahead of the kernel (their chunks decoded as
they arrive, and held), within ``AHEAD_SHARE`` of the memory: enough that the
requests in flight (:class:`.urls.InFlight`) never wait for the kernel to ask
for the next block."""
AHEAD_SHARE = 8
"""The blocks fetched ahead hold at most 1/AHEAD_SHARE of the memory (declared,
decoded sizes: compressed bytes are fewer), beside the blocks being summed."""
PLANS_KEPT = 64
"""Chunk plans of blocks read ahead kept for their reads (which take them)."""
CHUNKS_PER_BLOCK = 32_768
"""Chunk objects a block reads at most, where its budget of bytes would allow more:
its plan and tasks take ~750 bytes per chunk (its key, two tuples of slices, a
task), so a block of a million tiny chunks, a few MiB of values, held ~750 MiB
of plan; cut at this many, the plans of the blocks in flight stay ~25 MiB each."""
SHARED_BYTES = 128 * 2**20
"""Decoded chunks kept for a neighbouring block that has not read them yet."""


@dataclass
class _Ahead:
    """A block requested ahead (:meth:`ChunkReader.will_need`): its requests
    (``fetched``: the objects by key, as they arrive), its decoded bytes, the keys
    of its halo (shared with the next block), the keys its own requests fetch and
    the halo chunks it waits for from a block before (``elsewhere``)."""

    fetched: Future
    nbytes: int
    halo: set[str]
    requested: set[str]
    elsewhere: dict[str, FetchedElsewhere]


def _chunk_bytes(arr: ChunkedArray) -> int:
    """The decoded size of each chunk of ``arr``, as its metadata declares it."""
    return math.prod(arr.chunks) * arr.dtype.itemsize


@dataclass(frozen=True)
class SlabRequest:
    """Raw values of ``name`` at time steps ``[start, stop)`` with the stored axes
    put in ``order`` (``order[0]``, the stored time axis, first: mllam-data-prep
    stores forcing as (feature, time, grid)); a missing chunk reads as the fill
    value only if ``missing_ok``. ``shared``: ranges of steps that a neighbouring
    block reads too (its difference halo), whose chunks are decoded once for both."""

    name: str
    start: int
    stop: int
    order: tuple[int, ...]
    missing_ok: bool
    shared: tuple[tuple[int, int], ...] = ()


class ChunkReader:
    """Time slabs of the arrays of one dataset (see module docstring); a format
    module gives the chunk source and :meth:`_describe`."""

    def __init__(self, path: str, store: ChunkSource, threads: int) -> None:
        self.path = path
        self.store = store
        self.threads = max(1, threads or available_cpus())
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="wxstats-chunks")
        self._arrays: dict[str, ChunkedArray] = {}
        self._plans: dict[SlabRequest, list] = {}
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._ahead: dict[tuple[str, ...], _Ahead] = {}  # by the block's chunk keys
        self._ahead_bytes = 0
        self._fetcher = ThreadPoolExecutor(2, thread_name_prefix="wxstats-fetch")  # local
        self._shared = SharedChunks(SHARED_BYTES)

    def _describe(self, name: str) -> ChunkedArray:
        raise NotImplementedError

    def _array(self, name: str) -> ChunkedArray:
        if name not in self._arrays:
            arr = self._describe(name)
            if arr.codec is not None:  # one decoded chunk per thread, before any is read
                where = f"{self.path}: variable {name}"
                check_chunks(where, arr.shape, arr.chunks, arr.dtype.itemsize, arr.dtype,
                             self.threads)  # fmt: skip
            self._arrays[name] = arr
        return self._arrays[name]

    def _check(self, req: SlabRequest) -> None:
        """Refuse a request whose slab or chunk objects exceed what memory holds
        (declared sizes are someone else's metadata: :mod:`.sizes`)."""
        arr = self._array(req.name)
        check_slab(
            f"{self.path}: variable {req.name}",
            arr.shape,
            arr.chunks if arr.codec is not None else None,
            arr.dtype.itemsize,
            arr.dtype,
            req.order[0],
            req.stop - req.start,
        )

    def fill_value(self, name: str) -> Any:
        """What a missing chunk of ``name`` would read as."""
        return self._array(name).fill_value

    def _chunks(self, req: SlabRequest, keep: bool = True) -> list[tuple[str, tuple, tuple, bool]]:
        """(key, where in the slab, where in the chunk, whether a neighbouring block
        reads it too) of every chunk of ``req``, in stored axis order: one block's,
        made when it is first asked for. Kept (``keep``) from a block's read-ahead
        for its read, which takes it: the plans held are those of the blocks read
        ahead, never one per block of the store."""
        with self._lock:
            plan = self._plans.get(req) if keep else self._plans.pop(req, None)
        if plan is None:
            self._check(req)
            plan = list(self._plan(req))
            if keep:
                with self._lock:
                    if len(self._plans) >= PLANS_KEPT:
                        self._plans.clear()
                    self._plans[req] = plan
        return plan

    def _plan(self, req: SlabRequest):
        """The entries of :meth:`_chunks`, made lazily: each axis's chunks (index,
        where in the slab, where in the chunk) listed once, then combined, so that
        a chunk costs its key and three tuples of slices shared with its neighbours
        (a million tiny chunks: 2x faster and half the memory of slicing each)."""
        arr = self._array(req.name)
        t = req.order[0]
        axes = []
        for d, (n, c) in enumerate(zip(arr.shape, arr.chunks, strict=True)):
            if d != t:
                spans = ((i, i * c, min(i * c + c, n)) for i in range(-(-n // c)))
                axes.append([(i, slice(lo, hi), slice(0, hi - lo), False) for i, lo, hi in spans])
                continue
            along = []
            for i in range(req.start // c, (req.stop - 1) // c + 1):
                lo, hi = max(i * c, req.start), min(i * c + c, n, req.stop)
                shared = any(a < hi and lo < b for a, b in req.shared)
                dst, src = slice(lo - req.start, hi - req.start), slice(lo - i * c, hi - i * c)
                along.append((i, dst, src, shared))
            axes.append(along)
        key = arr.key
        for combo in itertools.product(*axes):
            coords, dst, src, shared = zip(*combo, strict=True)
            yield key(coords), dst, src, shared[t]

    def keys(self, req: SlabRequest) -> list[str]:
        return [key for key, *_ in self._chunks(req)]

    def _keys(self, reqs: list[SlabRequest]) -> tuple[str, ...]:
        """The chunk objects this module fetches for ``reqs`` (not zarr's own)."""
        return tuple(k for r in reqs if self._array(r.name).codec for k in self.keys(r))

    def will_need(self, reqs: list[SlabRequest]) -> None:
        """Read-ahead of a coming block: local files are announced to the kernel;
        remote objects are requested now, behind the blocks requested before (at
        most ``BLOCKS_AHEAD`` blocks held, within the memory: ``AHEAD_SHARE``), so
        the network works while the kernel computes, and each is decoded as it
        arrives (none waits for a block's last object). Local files are announced
        in the fetch thread: 5000 chunk files announced on the caller's thread
        delayed the first read by 0.15 s (``benchmarks/bench_startup.py``)."""
        keys = self._keys(reqs)
        if self.store.local:
            self._fetcher.submit(self.store.will_need, list(keys), self._plain_spans(reqs))
            return
        nbytes = sum(self._slab_bytes(r) for r in reqs)
        plans = [(r, self._chunks(r)) for r in reqs if self._array(r.name).codec]
        owner = [(r, shared) for r, plan in plans for _, _, _, shared in plan]
        sizes = [_chunk_bytes(self._array(r.name)) for r, _ in owner]
        halo = {key for key, (_, shared) in zip(keys, owner, strict=True) if shared}

        def arrived(index: int, data: Any) -> Any:
            """Decoded as it arrives, in the pool; a chunk the next block reads
            too is left to :class:`SharedChunks` (decoded once for both)."""
            req, shared = owner[index]
            if shared:
                return data
            return self.pool.submit(self._decoded, {keys[index]: data}, req, keys[index])

        with self._lock:
            if keys in self._ahead or len(self._ahead) >= BLOCKS_AHEAD:
                return
            if (self._ahead_bytes + nbytes) * AHEAD_SHARE > memory_bytes() and self._ahead:
                return  # the memory plan: a block is read when asked for, not before
            # the halo a block before fetches (or decoded already) is not fetched twice:
            # its values come from SharedChunks (a few steps a block: 1/6 more requests),
            # or its bytes from the requests of the block that fetches it where this
            # block decodes it first (with a lag beyond a block's steps, a chunk is the
            # halo of several blocks: only one of them requested it, the others wait)
            requested: dict[str, tuple[str, ...]] = {}
            chained: dict[str, FetchedElsewhere] = {}
            for block, other in self._ahead.items() if halo else ():
                for k in other.halo:
                    if k in other.requested:
                        requested[k] = block
                    elif k in other.elsewhere:
                        chained[k] = other.elsewhere[k]
            wanted = [
                i
                for i, k in enumerate(keys)
                if k not in requested and k not in chained and not self._shared.holds(k)
            ]
            elsewhere = {k: chained[k] for k in keys if k in chained and k not in requested}
            for block in {requested[k] for k in keys if k in requested}:
                left = [k for k in keys if requested.get(k) == block]
                elsewhere.update(fetched_elsewhere(self._ahead[block].fetched, left))
            fetched = self.store.fetch(
                [keys[i] for i in wanted],
                [sizes[i] for i in wanted],
                lambda j, data: arrived(wanted[j], data),
            )
            requested = {keys[i] for i in wanted}
            self._ahead[keys] = _Ahead(fetched, nbytes, halo, requested, elsewhere)
            self._ahead_bytes += nbytes

    def _slab_bytes(self, req: SlabRequest) -> int:
        """The decoded bytes of ``req``'s slab (its chunk objects are fewer)."""
        arr = self._array(req.name)
        others = math.prod(n for d, n in enumerate(arr.shape) if d != req.order[0])
        return (req.stop - req.start) * others * arr.dtype.itemsize

    def _plain_spans(self, reqs: list[SlabRequest]) -> list[tuple[int, int]]:
        """(offset, length) in the file of the steps of ``reqs`` that are read from
        a contiguous array whose time axis is the first stored one (a netCDF4
        variable memory-mapped): the kernel would otherwise fault them in page
        by page, a few MiB of read-ahead at a time."""
        spans = []
        for req in reqs:
            arr = self._array(req.name)
            if arr.codec is not None or arr.plain_offset is None or req.order[0] != 0:
                continue
            row = int(np.prod(arr.shape[1:])) * arr.dtype.itemsize
            spans.append((arr.plain_offset + req.start * row, (req.stop - req.start) * row))
        return spans

    def read(self, reqs: list[SlabRequest]) -> dict[str, np.ndarray]:
        """The raw slabs of ``reqs`` (one block), keyed by variable name."""
        out, tasks = {}, []
        for req in reqs:
            self._check(req)
        for req in reqs:
            arr = self._array(req.name)
            codec = arr.codec
            shape = list(arr.shape)
            shape[req.order[0]] = req.stop - req.start
            dtype = arr.dtype.newbyteorder("=")
            slab = np.empty([shape[a] for a in req.order], dtype=dtype)
            out[req.name] = slab
            stored = slab.transpose(np.argsort(req.order))  # a view in stored axis order
            if codec is None:
                tasks.append((req, None, stored, None, None, False))
                continue
            for key, dst, src, shared in self._chunks(req, keep=False):
                tasks.append((req, key, stored, dst, src, shared))
        fetched = None
        if not self.store.local:
            mine = [task for task in tasks if task[1] is not None]
            keys = tuple(task[1] for task in mine)  # as _keys(reqs)
            with self._lock:
                ahead = self._ahead.pop(keys, None)
                self._ahead_bytes -= 0 if ahead is None else ahead.nbytes
            if ahead is not None:
                fetched = {**ahead.elsewhere, **ahead.fetched.result()}
            else:
                sizes = [_chunk_bytes(self._array(task[0].name)) for task in mine]
                fetched = self.store.get_many(list(keys), sizes)
        # a few runs of chunks per thread, not a future per chunk: for small chunks the
        # future cost more than the chunk (5000 chunks of 80 bytes: 0.41 s, 0.24 s so)
        size = max(1, -(-len(tasks) // (TASKS_PER_THREAD * self.threads)))
        runs = [tasks[i : i + size] for i in range(0, len(tasks), size)]
        futures = [self.pool.submit(self._fill_all, fetched, run) for run in runs]
        for fut in futures:
            fut.result()
        return out

    def _fill_all(self, fetched, tasks: list[tuple]) -> None:
        for task in tasks:
            self._fill(fetched, *task)

    def _fill(self, fetched, req, key, stored, dst, src, shared) -> None:
        arr = self._array(req.name)
        if key is None:  # the format library's own (basic) slicing
            try:
                where_t = [slice(None)] * len(arr.shape)
                where_t[req.order[0]] = slice(req.start, req.stop)
                stored[...] = arr.read_plain(tuple(where_t))
            except Exception as exc:  # storage errors of any backend
                where = f"{self.path}: variable {req.name}"
                raise InputError(f"{where}: cannot read: {first_line(exc)}") from None
            return
        if shared:
            values = self._shared.take(key, lambda: self._decoded(fetched, req, key))
        else:
            values = self._decoded(fetched, req, key)
        if values is None:
            stored[dst] = arr.fill_value
        else:
            stored[dst] = values[src]

    def _decoded(self, fetched, req: SlabRequest, key: str) -> np.ndarray | None:
        """The values of chunk object ``key`` (``None``: missing, read as the fill
        value; a future where it was decoded as it arrived: :meth:`will_need`)."""
        arr = self._array(req.name)
        codec = arr.codec
        where = f"{self.path}: variable {req.name}"
        nbytes = _chunk_bytes(arr)
        try:
            if fetched is None:
                data = self.store.get(key, nbytes)
            elif key in fetched:
                data = fetched[key]
                if isinstance(data, FetchedElsewhere):  # decoded here first: its bytes
                    data = data.get(lambda: self.store.get_many([key], [nbytes])[key])
            else:  # a halo chunk of a block decoded already, whose values were not kept
                data = self.store.get_many([key], [nbytes])[key]
        except OSError as exc:
            raise InputError(f"{where}: cannot read object {key}: {first_line(exc)}") from None
        except TooLarge as exc:  # stored too large, or a format's own filters inflated it
            raise InputError(f"{where}: chunk object {key} {exc}") from None
        except ValueError as exc:  # a format's own filters, undone while reading, failed
            raise InputError(
                f"{where}: chunk object {key}: cannot decode: {first_line(exc)}"
            ) from None
        if isinstance(data, Future):
            return data.result()
        if data is None:
            if req.missing_ok:
                self._warn_missing(req.name, key)
            elif not arr.never_written:
                raise InputError(
                    f"{where}: chunk object {key} is missing from the store (it would read "
                    f"as the fill value {arr.fill_value!r}: silently wrong numbers)"
                )
            return None
        try:
            raw = codec.bounded_decode(data, nbytes) if codec.bounded_decode else data
        except TooLarge as exc:  # a decompression bomb, or metadata that lies
            raise InputError(f"{where}: chunk object {key} {exc}") from None
        except Exception as exc:  # corrupt or truncated objects
            msg = f"{where}: chunk object {key}: cannot decode: {first_line(exc)}"
            raise InputError(msg) from None
        try:
            return np.frombuffer(raw, dtype=codec.dtype).reshape(arr.chunks)
        except Exception as exc:  # an uncompressed object of another size
            msg = f"{where}: chunk object {key}: cannot decode: {first_line(exc)}"
            raise InputError(msg) from None

    def _warn_missing(self, name: str, key: str) -> None:
        """Say so (once per variable) when a missing chunk is read as missing values."""
        with self._lock:
            if name in self._warned:
                return
            self._warned.add(name)
        warnings.warn(
            f"{self.path}: variable {name}: chunk object {key} is missing from the store; "
            "its values are read as missing (NaN, counted in nan_count); further missing "
            f"chunks of {name} are not listed",
            UserWarning,
            stacklevel=2,
        )

    def drop_early(self) -> None:
        """Cancel the store's requests made before any block asked (a copy sent to a
        cluster's workers reads its blocks there)."""
        self.store.drop_early()

    def close(self) -> None:
        self._fetcher.shutdown(wait=True, cancel_futures=True)
        for ahead in self._ahead.values():
            ahead.fetched.cancel()
        self._ahead.clear()
        self.pool.shutdown(wait=True)
