"""Opening a remote zarr store in two round trips, not ten, the second shared
with the first block's chunk requests.

xarray opens a store one request after the other: the metadata, then each
dimension coordinate it builds an index of, and the time coordinate twice
more (the first and last values, to choose the decoded dtype), after which
the chunk reader opens the group again: ~10 round trips before the first
chunk request, 1 s of a 100 ms store's run (docs/benchmarks.md, "Object stores
with a cloud's latency"). Here, on an object store with async requests, the
metadata objects are requested together (one round trip), then every chunk
object of the coordinates and of the small arrays without time (one round
trip, through the same request queue as the chunks: :class:`.requests.Requests`);
xarray then opens the store from those bytes (:func:`_prefetched`) and the
chunk reader takes the group and the request queue as they are
(:class:`OpenedZarr`). The values are the same bytes either way.

The chunk objects of the run's first block need no coordinate value: where the
run reads from the first step (no period, no splits), the first time chunk of
each array it reads is requested together with the coordinates' (:class:`Early`),
so the second round trip fetches data too (at 100 ms, a tenth of a 2.7 s read).
The reader's first fetch takes them (:meth:`.ChunkStore.request_early`); a run
refused after opening (its outputs, its options) cancels them when the store
closes: at most one block's bytes, each bounded by its declared size.
"""

from __future__ import annotations

import functools
import itertools
import math
import weakref
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from wxstats.storage.decompress import TooLarge, object_limit
from wxstats.storage.urls import read_options
from wxstats.storage.zarrchunks import ChunkStore, RefusedObject, chunk_codec

METADATA = ("zarr.json", ".zmetadata", ".zgroup", ".zattrs")
"""The objects zarr asks for first when it opens a group of either format
(zarr 3's ``zarr.json`` holds the consolidated metadata, zarr 2's ``.zmetadata``)."""
_METADATA_NAMES = {*METADATA, ".zarray"}
ARRAY_BYTES = 16 * 2**20
"""The largest array (decoded) fetched at opening: a coordinate of 2,000,000 int64
times, a 1,440 x 721 float64 latitude field; larger ones are read when used."""
ALL_BYTES = 64 * 2**20
"""The most decoded bytes fetched at opening, all arrays together."""
MOST_OBJECTS = 4096
"""The most chunk objects fetched at opening."""


@dataclass(frozen=True)
class Early:
    """What of the data to request with the coordinates: the first time chunk of
    the arrays ``variables`` (``None``: every data array along time), at most
    ``nbytes`` decoded (the run's block: the first block holds them anyway)."""

    variables: Collection[str] | None
    nbytes: int


@functools.cache
def _prefetched() -> type:
    """The class of a zarr store (a ``zarr.storage.WrapperStore`` around the store
    xarray would open) that serves the objects fetched at opening from memory and
    keeps the metadata objects zarr reads (a store without consolidated
    metadata: each array's), so that xarray and the chunk reader, opening it
    after this module, send no request for them. A class made at first use
    (zarr is imported where a remote store is opened, not at start-up), found by
    pickle as this module's ``Prefetched`` (a dask graph of a static variable
    holds it), and pickled without the objects: a copy reads them again."""
    from zarr.abc.store import RangeByteRequest
    from zarr.storage import WrapperStore

    class Prefetched(WrapperStore):
        def __init__(self, store: Any, found: dict[str, Any], url: str = "") -> None:
            super().__init__(store)
            self.found, self.url = found, url

        def _with_store(self, store: Any) -> Any:
            return type(self)(store, self.found, self.url)

        async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
            if byte_range is None and key in self.found:
                data = self.found[key]
                return None if data is None else prototype.buffer.from_bytes(data)
            if byte_range is not None or key.rsplit("/", 1)[-1] not in _METADATA_NAMES:
                return await self._store.get(key, prototype, byte_range)
            # an array's metadata (a store without consolidated metadata): read no
            # further than a metadata object may be, as the first objects were
            limit = object_limit(None)
            data = await self._store.get(key, prototype, RangeByteRequest(0, limit + 1))
            if data is not None and len(data) > limit:
                too_large = TooLarge(None, stored=len(data), partly=True)
                raise RefusedObject(f"{self.url}: cannot read object {key}: {too_large}")
            self.found[key] = None if data is None else data.to_bytes()
            return data

        async def exists(self, key: str) -> bool:
            if key in self.found:
                return self.found[key] is not None
            return await self._store.exists(key)

        def __getstate__(self) -> dict[str, Any]:
            return {"_store": self._store, "found": {}, "url": self.url}

    Prefetched.__qualname__ = "Prefetched"
    return Prefetched


def __getattr__(name: str) -> Any:
    """``Prefetched``, the class :func:`_prefetched` makes (for pickle)."""
    if name == "Prefetched":
        return _prefetched()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class OpenedZarr:
    """A remote zarr store opened once: the ``store`` xarray opens, its root
    ``group`` and the request queue of its chunk objects (``chunks``), which the
    chunk reader takes (:meth:`take`); closed when this is dropped untaken."""

    def __init__(self, url: str, store: Any, group: Any, chunks: ChunkStore) -> None:
        self.url, self.store, self.group = url, store, group
        self._chunks = chunks
        self._close = weakref.finalize(self, chunks.close)

    def take(self) -> ChunkStore:
        """The request queue, now the caller's to close."""
        self._close.detach()
        return self._chunks


def open_remote(
    url: str, storage_options: dict[str, Any], time_dim: str, early: Early | None = None
) -> OpenedZarr | None:
    """The zarr store at the URL ``url`` opened in two round trips (see the module
    doc), ``early``'s chunk objects requested with the second; ``None`` where its
    filesystem has no async requests, or any of it fails: then xarray opens it as
    before, and says what failed."""
    chunks = ChunkStore(url, storage_options)
    try:
        if chunks.requests is None:
            raise LookupError("no async requests")
        found = dict(chunks.get_many(list(METADATA)))
        if all(found[key] is None for key in METADATA):
            raise LookupError("not a zarr group")
        import zarr
        from zarr.storage import FsspecStore

        options = read_options(url, storage_options)
        remote = FsspecStore.from_url(url, storage_options=options, read_only=True)
        store = _prefetched()(remote, found, url)
        group = zarr.open_group(store, mode="r")
        members = _members(group, time_dim)
        opening = chunks.fetch(*_unzip(opening_keys(members)))
        if early is not None:
            chunks.request_early(*_unzip(first_keys(members, time_dim, early)))
        found.update(opening.result())
    except RefusedObject:  # larger than declared: not to be read whole another way
        chunks.close()
        raise
    except Exception:  # noqa: BLE001 - xarray opens it the usual way, and says why
        chunks.close()
        return None
    return OpenedZarr(url, store, group, chunks)


def _dims(arr: Any) -> tuple[str, ...] | None:
    """An array's dimension names (zarr 3's metadata, zarr 2's xarray attribute)."""
    names = getattr(arr.metadata, "dimension_names", None) or arr.attrs.get("_ARRAY_DIMENSIONS")
    if not names or any(n is None for n in names):
        return None
    return tuple(map(str, names))


def _unzip(pairs: list[tuple[str, int]]) -> tuple[list[str], list[int]]:
    return [k for k, _ in pairs], [n for _, n in pairs]


Member = tuple[str, Any, tuple[str, ...], bool]
"""An array's name, the array, its dimension names, whether it is data along time."""


def _members(group: Any, time_dim: str) -> list[Member]:
    """Each array of ``group`` once (zarr makes every array from its metadata at
    each listing), with its dimensions and whether it is data along ``time_dim``:
    not a coordinate, neither its own dimension nor named in an array's
    ``coordinates`` attribute. Left out: a sharded array and one without
    dimension names (zarr reads them itself)."""
    arrays = dict(group.arrays())
    named = {c for arr in arrays.values() for c in str(arr.attrs.get("coordinates", "")).split()}
    out = []
    for name, arr in arrays.items():
        dims = _dims(arr)
        if dims is None or getattr(arr, "shards", None) is not None:
            continue
        out.append((name, arr, dims, time_dim in dims and dims != (name,) and name not in named))
    return out


def _chunk_bytes(arr: Any) -> int:
    """The decoded bytes of one chunk of ``arr``, as its metadata declares them."""
    return math.prod(arr.chunks) * np.dtype(arr.dtype).itemsize


def opening_keys(members: list[Member]) -> list[tuple[str, int]]:
    """The chunk objects of what is read when the store is opened and planned:
    every dimension coordinate (xarray's indexes), coordinates along time named
    in an array's ``coordinates`` attribute (decoded at opening), and the arrays
    without ``time_dim`` (coordinates, static fields, mllam-data-prep's
    splits), each within :data:`ARRAY_BYTES`; never a sharded array's, nor the
    data with time, which the chunk reader fetches (``members``: :func:`_members`).
    Each with its declared decoded bytes (what bounds its fetch)."""
    keys: list[tuple[str, int]] = []
    total = 0
    for _, arr, _, data in members:
        if data:
            continue
        nbytes = math.prod(arr.shape) * np.dtype(arr.dtype).itemsize
        grid = [range(math.ceil(s / c)) for s, c in zip(arr.shape, arr.chunks, strict=True)]
        count = math.prod(len(r) for r in grid)
        if nbytes > ARRAY_BYTES or total + nbytes > ALL_BYTES:
            continue
        if len(keys) + count > MOST_OBJECTS:
            continue
        total += nbytes
        keys.extend(_chunk_keys(arr, grid))
    return keys


def _chunk_keys(arr: Any, grid: list[range]) -> list[tuple[str, int]]:
    """The keys of ``arr``'s chunks at the chunk coordinates ``grid`` spans, each
    with a chunk's declared decoded bytes."""
    prefix = f"{arr.path}/" if arr.path else ""
    encode = arr.metadata.encode_chunk_key
    nbytes = _chunk_bytes(arr)
    return [(prefix + encode(coords), nbytes) for coords in itertools.product(*grid)]


def first_keys(members: list[Member], time_dim: str, early: Early) -> list[tuple[str, int]]:
    """The chunk objects of the first time chunk of each data array along
    ``time_dim`` that the chunk reader decodes (the run's first block reads them:
    see the module doc), within ``early.nbytes``, in the store's order."""
    keys: list[tuple[str, int]] = []
    total = 0
    for name, arr, dims, data in members:
        if not data or (early.variables is not None and name not in early.variables):
            continue
        if chunk_codec(arr) is None:
            continue
        t = dims.index(time_dim)
        grid = [range(1) if d == t else range(math.ceil(s / c))
                for d, (s, c) in enumerate(zip(arr.shape, arr.chunks, strict=True))]  # fmt: skip
        count = math.prod(len(r) for r in grid)
        nbytes = count * _chunk_bytes(arr)
        if total + nbytes > early.nbytes or len(keys) + count > MOST_OBJECTS:
            break
        total += nbytes
        keys.extend(_chunk_keys(arr, grid))
    return keys
