"""Reading zarr time slabs chunk by chunk, at the speed of the store.

xarray's lazy indexing reads a slab through outer/vectorized indexing down to
zarr's coordinate selection, at about a tenth of what the store delivers. Here
zarr (or xarray) gives only the metadata; the chunk objects of a block are
fetched as raw bytes (local files read in a thread pool, remote objects with
one batched fsspec ``cat`` of every key, many requests in flight), decompressed
by numcodecs in the pool (it releases the GIL), and each chunk is copied once,
transposed, into its place in a ``(time, grid..., features...)`` slab: the
layout the kernel takes. The values are the stored (raw) ones, exactly what
``xarray.open_dataset(mask_and_scale=False)`` gives; decoding stays in
:mod:`.decode`.

Arrays this module does not decode itself (sharding, filters, checksums,
``F`` order, codecs other than zstd/blosc/gzip) are read with zarr's own basic
slicing. A chunk object that is missing (deleted, or never written) is read as
the array's fill value only if that value decodes to missing (NaN), so the
kernel refuses it without ``--skipna`` and counts it in ``nan_count`` with it
(with a warning naming the first missing key of the variable); any other
missing chunk is an error naming its key, never a silent number.
"""

from __future__ import annotations

import itertools
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from wxstats.core.errors import InputError
from wxstats.core.machine import available_cpus
from wxstats.sources.xarray.open import first_line, is_url

REQUESTS_IN_FLIGHT = 64
"""Connections to an object store: a block's chunk objects are requested at once."""
BLOCKS_AHEAD = 2
"""Blocks of a remote store fetched ahead of the kernel (compressed bytes held)."""
PLANS_KEPT = 256
"""Chunk plans of requests kept between a block's read-ahead and its read."""
SHARED_BYTES = 128 * 2**20
"""Decoded chunks kept for a neighbouring block that has not read them yet."""
_COMPRESSORS = {"ZstdCodec": "Zstd", "BloscCodec": "Blosc", "GzipCodec": "GZip"}


@dataclass(frozen=True)
class ChunkCodec:
    """How the bytes of one chunk object become values: decompress, then view."""

    decompress: Callable[[bytes], Any] | None  # None: stored uncompressed
    dtype: np.dtype  # with the stored byte order


def chunk_codec(arr: Any) -> ChunkCodec | None:
    """The codec of a zarr array when it is one this module decodes, else None."""
    import numcodecs

    meta = arr.metadata
    dtype = np.dtype(arr.dtype)
    if dtype.kind not in "iuf":
        return None
    if meta.zarr_format == 2:
        if meta.filters or meta.order != "C":
            return None
        return ChunkCodec(meta.compressor.decode if meta.compressor else None, dtype)
    codecs = list(meta.codecs)
    if not codecs or type(codecs[0]).__name__ != "BytesCodec" or len(codecs) > 2:
        return None
    endian = getattr(codecs[0].endian, "value", None)
    if endian is not None and dtype.itemsize > 1:
        dtype = dtype.newbyteorder("<" if endian == "little" else ">")
    if len(codecs) == 1:
        return ChunkCodec(None, dtype)
    name = _COMPRESSORS.get(type(codecs[1]).__name__)
    return ChunkCodec(getattr(numcodecs, name)().decode, dtype) if name else None


class ChunkStore:
    """Where chunk objects come from: a local folder or an fsspec filesystem."""

    def __init__(self, path: str, storage_options: dict[str, Any]) -> None:
        self.path = path.rstrip("/")
        self.fs = None
        if is_url(path):
            from fsspec.core import url_to_fs

            options = dict(storage_options)
            if path.startswith(("s3://", "s3a://")):
                # botocore's default pool (10 connections) would queue the batched requests
                config = {"max_pool_connections": REQUESTS_IN_FLIGHT}
                options["config_kwargs"] = {**config, **options.get("config_kwargs", {})}
            self.fs, root = url_to_fs(path, **options)
            self.root = root.rstrip("/")

    @property
    def local(self) -> bool:
        return self.fs is None

    def get(self, key: str) -> bytes | None:
        """One local chunk object (``None``: it does not exist)."""
        try:
            with open(os.path.join(self.path, key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def get_many(self, keys: list[str]) -> dict[str, bytes | None]:
        """Remote chunk objects, all requests in flight at once (fsspec ``cat``)."""
        urls = [f"{self.root}/{k}" for k in keys]
        try:
            found = self.fs.cat(urls, on_error="return")
        except Exception as exc:  # the endpoint itself: unreachable, refused, no credentials
            raise InputError(
                f"{self.path}: cannot read objects {keys[0]}...: {first_line(exc)}"
            ) from None
        out: dict[str, bytes | None] = {}
        for key, url in zip(keys, urls, strict=True):
            value = found.get(url, FileNotFoundError(url))
            if isinstance(value, FileNotFoundError):
                out[key] = None
            elif isinstance(value, BaseException):
                raise InputError(f"{self.path}: cannot read object {key}: {first_line(value)}")
            else:
                out[key] = value
        return out

    def will_need(self, keys: list[str]) -> None:
        """Ask the kernel to start reading local chunk files (read-ahead)."""
        if not self.local or not hasattr(os, "posix_fadvise"):
            return
        for key in keys:
            try:
                fd = os.open(os.path.join(self.path, key), os.O_RDONLY)
            except OSError:
                continue  # reported when it is read
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
            finally:
                os.close(fd)


class SharedChunks:
    """Decoded chunks that two neighbouring blocks read (a block's last steps are
    the next block's difference halo), decompressed once: whichever block comes
    first decodes, the other takes the values, waiting if they are being decoded.
    An entry leaves when its second reader takes it; entries whose second reader
    is elsewhere (another rank) leave oldest first beyond ``limit`` bytes. A
    chunk read by more than two blocks (a halo longer than a block) is decoded
    again by the third: the same values."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, Future] = OrderedDict()
        self._bytes = 0

    def take(self, key: str, decode: Callable[[], np.ndarray | None]) -> np.ndarray | None:
        """The values of chunk ``key``: ``decode()`` for its first reader, kept
        for (or waited on by) the second."""
        with self._lock:
            entry = self._entries.pop(key, None)
            first = entry is None
            if first:
                entry = self._entries[key] = Future()
            elif entry.done() and entry.exception() is None:
                self._bytes -= _nbytes(entry.result())
        if not first:
            return entry.result()
        try:
            values = decode()
        except BaseException as exc:
            with self._lock:
                if self._entries.get(key) is entry:
                    del self._entries[key]
            entry.set_exception(exc)
            raise
        entry.set_result(values)
        with self._lock:
            if self._entries.get(key) is entry:  # the second reader is yet to come
                self._bytes += _nbytes(values)
                for old in list(self._entries):
                    if self._bytes <= self.limit:
                        break
                    if self._entries[old].done():
                        self._bytes -= _nbytes(self._entries.pop(old).result())
        return values


def _nbytes(values: np.ndarray | None) -> int:
    return 0 if values is None else values.nbytes


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


class ZarrChunkReader:
    """Time slabs of the arrays of one zarr store (see module docstring)."""

    def __init__(self, path: str, storage_options: dict[str, Any], threads: int) -> None:
        import zarr

        self.path = path
        self.store = ChunkStore(path, storage_options)
        opts = {"storage_options": storage_options} if is_url(path) else {}
        self.group = zarr.open_group(path, mode="r", **opts)
        self.pool = ThreadPoolExecutor(
            max(1, threads or available_cpus()), thread_name_prefix="wxstats-chunks"
        )
        self._arrays: dict[str, tuple[Any, ChunkCodec | None]] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._chunk_shapes: dict[str, tuple[int, ...]] = {}
        self._plans: dict[SlabRequest, list] = {}
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._ahead: dict[tuple[str, ...], Future] = {}
        self._fetcher = ThreadPoolExecutor(BLOCKS_AHEAD, thread_name_prefix="wxstats-fetch")
        self._shared = SharedChunks(SHARED_BYTES)

    def _array(self, name: str) -> tuple[Any, ChunkCodec | None]:
        if name not in self._arrays:
            arr = self.group[name]
            # zarr computes these on every access: once here, not once per chunk
            self._shapes[name], self._chunk_shapes[name] = tuple(arr.shape), tuple(arr.chunks)
            self._arrays[name] = (arr, chunk_codec(arr))
        return self._arrays[name]

    def _chunks(self, req: SlabRequest) -> list[tuple[str, tuple, tuple, bool]]:
        """(key, where in the slab, where in the chunk, whether a neighbouring block
        reads it too) of every chunk of ``req``, in stored axis order. Kept for
        the read of a block whose read-ahead asked for it first."""
        plan = self._plans.get(req)
        if plan is None:
            if len(self._plans) >= PLANS_KEPT:
                self._plans.clear()
            plan = self._plans[req] = list(self._plan(req))
        return plan

    def _plan(self, req: SlabRequest):
        arr, _ = self._array(req.name)
        shape, cs, t = self._shapes[req.name], self._chunk_shapes[req.name], req.order[0]
        ranges = [
            range(req.start // c, (req.stop - 1) // c + 1) if d == t else range(-(-n // c))
            for d, (n, c) in enumerate(zip(shape, cs, strict=True))
        ]
        prefix = f"{arr.path}/" if arr.path else ""
        for coords in itertools.product(*ranges):
            dst, src = [], []
            for d, c in enumerate(coords):
                lo = c * cs[d]
                hi = min(lo + cs[d], shape[d])
                if d == t:
                    lo, hi = max(lo, req.start), min(hi, req.stop)
                    dst.append(slice(lo - req.start, hi - req.start))
                    shared = any(a < hi and lo < b for a, b in req.shared)
                else:
                    dst.append(slice(lo, hi))
                src.append(slice(lo - c * cs[d], hi - c * cs[d]))
            key = prefix + arr.metadata.encode_chunk_key(coords)
            yield key, tuple(dst), tuple(src), shared

    def keys(self, req: SlabRequest) -> list[str]:
        return [key for key, *_ in self._chunks(req)]

    def _keys(self, reqs: list[SlabRequest]) -> tuple[str, ...]:
        """The chunk objects this module fetches for ``reqs`` (not zarr's own)."""
        return tuple(k for r in reqs if self._array(r.name)[1] for k in self.keys(r))

    def will_need(self, reqs: list[SlabRequest]) -> None:
        """Read-ahead of a coming block: local files are announced to the kernel;
        remote objects are fetched in the background (at most ``BLOCKS_AHEAD``
        blocks held), so the network works while the kernel computes."""
        keys = self._keys(reqs)
        if self.store.local:
            self.store.will_need(list(keys))
            return
        with self._lock:
            if keys in self._ahead or len(self._ahead) >= BLOCKS_AHEAD:
                return
            self._ahead[keys] = self._fetcher.submit(self.store.get_many, list(keys))

    def read(self, reqs: list[SlabRequest]) -> dict[str, np.ndarray]:
        """The raw slabs of ``reqs`` (one block), keyed by variable name."""
        out, tasks = {}, []
        for req in reqs:
            arr, codec = self._array(req.name)
            shape = list(self._shapes[req.name])
            shape[req.order[0]] = req.stop - req.start
            dtype = np.dtype(arr.dtype).newbyteorder("=")
            slab = np.empty([shape[a] for a in req.order], dtype=dtype)
            out[req.name] = slab
            stored = slab.transpose(np.argsort(req.order))  # a view in stored axis order
            if codec is None:
                tasks.append((req, None, stored, None, None, False))
                continue
            for key, dst, src, shared in self._chunks(req):
                tasks.append((req, key, stored, dst, src, shared))
        fetched = None
        if not self.store.local:
            keys = self._keys(reqs)
            with self._lock:
                ahead = self._ahead.pop(keys, None)
            fetched = ahead.result() if ahead is not None else self.store.get_many(list(keys))
        futures = [self.pool.submit(self._fill, fetched, *t) for t in tasks]
        for fut in futures:
            fut.result()
        return out

    def _fill(self, fetched, req, key, stored, dst, src, shared) -> None:
        arr, _ = self._array(req.name)
        if key is None:  # zarr's own (basic) slicing
            try:
                where_t = [slice(None)] * arr.ndim
                where_t[req.order[0]] = slice(req.start, req.stop)
                stored[...] = arr[tuple(where_t)]
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
        """The values of chunk object ``key`` (``None``: missing, read as the fill value)."""
        arr, codec = self._array(req.name)
        where = f"{self.path}: variable {req.name}"
        try:
            data = fetched[key] if fetched is not None else self.store.get(key)
        except OSError as exc:
            raise InputError(f"{where}: cannot read object {key}: {first_line(exc)}") from None
        if data is None:
            if not req.missing_ok:
                raise InputError(
                    f"{where}: chunk object {key} is missing from the store (zarr would "
                    f"read it as the fill value {arr.fill_value!r}: silently wrong numbers)"
                )
            self._warn_missing(req.name, key)
            return None
        try:
            raw = codec.decompress(data) if codec.decompress else data
            return np.frombuffer(raw, dtype=codec.dtype).reshape(self._chunk_shapes[req.name])
        except Exception as exc:  # corrupt or truncated objects
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

    def close(self) -> None:
        self._fetcher.shutdown(wait=True, cancel_futures=True)
        self._ahead.clear()
        self.pool.shutdown(wait=True)
