"""zarr stores for the chunk reader (:mod:`.chunks`): where each chunk object is
(a local folder, or any fsspec URL with many requests in flight, as many as the
store sustains: obstore's client where it serves the URL, see
:func:`.urls.object_store`, else the filesystem's async requests) and how it is compressed.

Arrays with sharding, filters, checksums, ``F`` order or codecs other than
zstd/blosc/gzip (zarr 3) are read with zarr's own basic slicing. Chunk objects
are decoded within the size the metadata declares (:mod:`.decompress`).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from typing import Any

import numpy as np

from wxstats.core.errors import InputError, first_line
from wxstats.storage.chunks import ChunkReader
from wxstats.storage.decompress import TooLarge, bounded, check_stored, object_limit
from wxstats.storage.described import ChunkCodec, ChunkedArray
from wxstats.storage.readahead import will_need
from wxstats.storage.requests import Requests
from wxstats.storage.urls import is_url, object_store, read_options

_COMPRESSORS = {"ZstdCodec": "Zstd", "BloscCodec": "Blosc", "GzipCodec": "GZip"}


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
        return ChunkCodec(bounded(meta.compressor) if meta.compressor else None, dtype)
    codecs = list(meta.codecs)
    if not codecs or type(codecs[0]).__name__ != "BytesCodec" or len(codecs) > 2:
        return None
    endian = getattr(codecs[0].endian, "value", None)
    if endian is not None and dtype.itemsize > 1:
        dtype = dtype.newbyteorder("<" if endian == "little" else ">")
    if len(codecs) == 1:
        return ChunkCodec(None, dtype)
    name = _COMPRESSORS.get(type(codecs[1]).__name__)
    return ChunkCodec(bounded(getattr(numcodecs, name)()), dtype) if name else None


class RefusedObject(InputError):
    """An object larger than its declared size allows (:func:`.decompress.check_stored`):
    refused, never read whole another way."""


def _unreadable(path: str, key: str, why: BaseException) -> InputError:
    """The one line for an object that could not be read."""
    if isinstance(why, TooLarge):  # its text follows the object's name
        return RefusedObject(f"{path}: cannot read object {key}: {why}")
    return InputError(f"{path}: cannot read object {key}: {first_line(why)}")


class ChunkStore:
    """Where chunk objects come from: a local folder, an obstore store (S3 with
    known credentials, when obstore is installed) or an fsspec filesystem
    (``s3://``, ``gs://``, ``az://``...: its async requests, else its ``cat``)."""

    def __init__(self, path: str, storage_options: dict[str, Any]) -> None:
        self.path = path.rstrip("/")
        self.fs = None
        self.requests: Requests | None = None
        self._early: dict[str, Future] = {}
        self._early_lock = threading.Lock()  # fetched from the kernel's threads too
        objects = object_store(path, storage_options) if is_url(path) else None
        if objects is not None:
            self.requests = Requests(_obstore_fetch(*objects))
        elif is_url(path):
            from fsspec.core import url_to_fs

            self.fs, root = url_to_fs(path, **read_options(path, storage_options))
            self.root = root.rstrip("/")
            if getattr(self.fs, "async_impl", False):  # s3fs, gcsfs, adlfs, http
                self.requests = Requests(_fsspec_fetch(self.fs, self.root), self.fs.loop)

    @property
    def local(self) -> bool:
        return self.fs is None and self.requests is None

    def get(self, key: str, nbytes: int | None = None) -> bytes | None:
        """One local chunk object (``None``: it does not exist); one stored in more
        bytes than any codec takes for ``nbytes`` decoded bytes is refused unread."""
        try:
            with open(os.path.join(self.path, key), "rb") as f:
                if nbytes is not None:
                    check_stored(os.fstat(f.fileno()).st_size, nbytes)
                return f.read()
        except FileNotFoundError:
            return None

    def request_early(self, keys: list[str], sizes: list[int]) -> None:
        """Request ``keys`` before the reader asks for them (the first block's objects,
        sent with the coordinates' when the store is opened: :mod:`.zarropen`). The
        next :meth:`fetch` takes those it names and drops the others (a rank whose
        first block is another, a run that starts later): held no longer than that.
        ``sizes``: their declared decoded bytes (see :meth:`fetch`)."""
        if self.requests is not None and keys:
            early = self.requests.submit_each(keys, list(sizes))
            self._early = dict(zip(keys, early, strict=True))

    def drop_early(self) -> None:
        """Cancel the objects requested early that no fetch took (see
        :meth:`request_early`): a copy sent to a cluster's workers reads there."""
        with self._early_lock:
            early, self._early = self._early, {}
        for fut in early.values():
            fut.cancel()

    def fetch(self, keys: list[str], sizes: list[int] | None = None, arrived: Any = None) -> Future:
        """Remote chunk objects (a dict by key, ``None`` where missing), later: their
        requests share the store's requests in flight (:class:`Requests`), and
        ``arrived(index, data)`` gives what the dict holds for each found object.
        ``sizes``: each object's declared decoded bytes, of which no more than
        :func:`.decompress.object_limit` is read (``None``: metadata objects)."""
        bounds: list[int | None] = [None] * len(keys) if sizes is None else list(sizes)
        if self.requests is None:  # a filesystem without async requests: its cat
            done: Future = Future()
            try:
                done.set_result(self._cat(keys, bounds))
            except BaseException as exc:  # noqa: BLE001 (raised by result())
                done.set_exception(exc)
            return done
        with self._early_lock:
            early, self._early = self._early, {}
        taken = {i: early.pop(k) for i, k in enumerate(keys) if k in early}
        for fut in early.values():  # not this reader's first block: dropped
            fut.cancel()
        rest = [i for i in range(len(keys)) if i not in taken]
        values: list[Any] = [None] * len(keys)
        out: Future = Future()
        left = [len(taken) + 1]  # the early objects, and the requests of the rest
        lock = threading.Lock()

        def finished() -> None:
            with lock:
                left[0] -= 1
                if left[0]:
                    return
            result = {}
            for key, value in zip(keys, values, strict=True):
                if isinstance(value, BaseException):
                    out.set_exception(_unreadable(self.path, key, value))
                    return
                result[key] = value
            out.set_result(result)

        def one(index: int, fut: Future) -> None:
            try:
                data = fut.result()
                if arrived is not None and data is not None and not isinstance(data, Exception):
                    data = arrived(index, data)
            except BaseException as exc:  # noqa: BLE001 (named with its key by finished)
                data = exc
            values[index] = data
            finished()

        def others(found: Future) -> None:
            try:
                for i, value in zip(rest, found.result(), strict=True):
                    values[i] = value
            except BaseException as exc:  # noqa: BLE001 (named with its key by finished)
                for i in rest:
                    values[i] = exc
            finished()

        later = None if arrived is None else (lambda j, data: arrived(rest[j], data))
        wanted = self.requests.submit([keys[i] for i in rest], [bounds[i] for i in rest], later)
        wanted.add_done_callback(others)
        for i, fut in taken.items():
            fut.add_done_callback(lambda fut, i=i: one(i, fut))
        return out

    def get_many(self, keys: list[str], sizes: list[int] | None = None) -> dict[str, Any]:
        """Remote chunk objects, all requested at once (see :meth:`fetch`)."""
        return self.fetch(keys, sizes).result()

    def _cat(self, keys: list[str], sizes: list[int | None]) -> dict[str, Any]:
        urls = [f"{self.root}/{k}" for k in keys]
        ends = [object_limit(n) + 1 for n in sizes]  # one byte past: too large is seen
        try:
            found = self.fs.cat_ranges(urls, [0] * len(urls), ends, on_error="return")
        except Exception as exc:  # the endpoint itself: unreachable, refused, no credentials
            raise InputError(
                f"{self.path}: cannot read objects {keys[0]}...: {first_line(exc)}"
            ) from None
        out: dict[str, bytes | None] = {}
        for key, value, nbytes in zip(keys, found, sizes, strict=True):
            if isinstance(value, FileNotFoundError):
                out[key] = None
                continue
            try:
                if isinstance(value, BaseException):
                    raise value
                check_stored(len(value), nbytes, partly=True)
            except Exception as exc:  # noqa: BLE001 - the store's error, or too large
                raise _unreadable(self.path, key, exc) from None
            out[key] = value
        return out

    def will_need(self, keys: list[str], spans: list[tuple[int, int]] = ()) -> None:
        """Ask the kernel to start reading local chunk files (read-ahead; a zarr
        store has no ``spans``)."""
        if not self.local or not hasattr(os, "posix_fadvise"):
            return
        for key in keys:
            try:
                fd = os.open(os.path.join(self.path, key), os.O_RDONLY)
            except OSError:
                continue  # reported when it is read
            try:
                will_need(fd, 0, os.fstat(fd).st_size)  # a large chunk too, in pieces
            finally:
                os.close(fd)

    def close(self) -> None:
        self.drop_early()
        if self.requests is not None:
            self.requests.close()


def _obstore_fetch(store: Any, prefix: str) -> Any:
    """The coroutine function fetching one object by obstore (its Rust client, the
    buffer kept as obstore gives it): refused by its size before its body is read
    when larger than :func:`.decompress.object_limit` allows."""
    import obstore
    from obstore.exceptions import NotFoundError

    async def fetch(key: str, nbytes: int | None) -> Any:
        try:
            found = await obstore.get_async(store, f"{prefix}/{key}" if prefix else key)
        except NotFoundError:
            return None
        check_stored(int(found.meta["size"]), nbytes)
        data = await found.bytes_async()
        check_stored(len(data), nbytes)
        return data

    return fetch


def _fsspec_fetch(fs: Any, root: str) -> Any:
    """The coroutine function fetching one object by an async fsspec filesystem:
    its bytes up to one past :func:`.decompress.object_limit` (a range request),
    so that an object larger than its declared size is refused, not held."""

    async def fetch(key: str, nbytes: int | None) -> Any:
        data = await fs._cat_file(f"{root}/{key}", start=0, end=object_limit(nbytes) + 1)
        check_stored(len(data), nbytes, partly=True)
        return data

    return fetch


class ZarrChunkReader(ChunkReader):
    """Time slabs of the arrays of one zarr store (see :mod:`.chunks`)."""

    def __init__(
        self, path: str, storage_options: dict[str, Any], threads: int, opened: Any = None
    ) -> None:
        """``opened``: the store as :func:`.zarropen.open_remote` opened it (its group
        and request queue taken as they are: no request), else opened here."""
        import zarr

        if opened is not None:
            super().__init__(path, opened.take(), threads)
            self.group = opened.group
            return
        super().__init__(path, ChunkStore(path, storage_options), threads)
        opts = {"storage_options": read_options(path, storage_options)} if is_url(path) else {}
        self.group = zarr.open_group(path, mode="r", **opts)

    def _describe(self, name: str) -> ChunkedArray:
        arr = self.group[name]
        prefix = f"{arr.path}/" if arr.path else ""
        encode = arr.metadata.encode_chunk_key
        # zarr computes shape and chunks on every access: once here, not once per chunk
        return ChunkedArray(
            shape=tuple(arr.shape),
            chunks=tuple(arr.chunks),
            dtype=np.dtype(arr.dtype),
            fill_value=arr.fill_value,
            codec=chunk_codec(arr),
            key=lambda coords: prefix + encode(coords),
            read_plain=arr.__getitem__,
        )

    def close(self) -> None:
        super().close()
        self.store.close()


_PASSTHROUGH = ("MemoryCachedArray", "CopyOnWriteArray", "ImplicitToExplicitIndexingAdapter")
"""xarray's wrappers of a lazily opened array that hand its values on unchanged."""
_BACKEND_ARRAYS = ("ZarrArrayWrapper", "NetCDF4ArrayWrapper", "H5NetCDFArrayWrapper")
"""xarray's arrays of a backend's stored variable, read lazily."""
_DECODED_BY_XARRAY = ("scale_factor", "add_offset", "_Unsigned", "missing_value")
"""Encoding keys that mean xarray changed the stored values while decoding them."""


def given_zarr_store(dataset: Any, names: list[str]) -> str | None:
    """The local zarr store folder that the variables ``names`` of a Dataset opened by
    the caller read untransformed, for the chunk reader; ``None`` (xarray reads them)
    unless every one is its store's array of the same name, whole, in stored axis order
    and dtype, not yet loaded, and not decoded by xarray (no packing, a NaN fill or
    none; the attributes left by ``mask_and_scale=False`` are decoded as for a path).
    Anything a ``preprocess`` or a selection did shows as another wrapper, another dask
    layer or a loaded array: those are read through xarray, as the Dataset holds them."""
    try:
        roots = {_local_root(dataset.variables[name], name) for name in names}
    except (AttributeError, TypeError, ValueError):  # other xarray, dask or zarr internals
        return None
    source = dataset.encoding.get("source")  # the path xarray opened, when it had one
    if None in roots or len(roots) != 1 or (source and os.path.realpath(source) not in roots):
        return None
    return roots.pop()


def _local_root(var: Any, name: str) -> str | None:
    """The folder of the local zarr store whose array ``name`` ``var`` (an
    ``xarray.Variable``) holds untransformed, else ``None``."""
    wrapper = untouched_backend_array(var)
    if type(wrapper).__name__ != "ZarrArrayWrapper":
        return None
    arr = getattr(wrapper, "_array", None)
    if arr is None or arr.path.strip("/") != name:
        return None
    if tuple(arr.shape) != tuple(var.shape) or np.dtype(arr.dtype) != var.dtype:
        return None
    root = getattr(arr.store, "root", None)  # a LocalStore; object stores have none
    if type(arr.store).__name__ != "LocalStore" or root is None:
        return None
    return os.path.realpath(root)


def untouched_backend_array(var: Any) -> Any:
    """The backend array (xarray's ``ZarrArrayWrapper``, ``NetCDF4ArrayWrapper`` or
    ``H5NetCDFArrayWrapper``) that the ``xarray.Variable`` ``var`` holds untransformed:
    whole, not loaded, no dask layer beyond ``from_array``, in its stored shape and
    dtype and not decoded by xarray; else ``None``. The chunk readers read such a
    variable from its file or store, as a path would be read."""
    wrapper = _backend_array(var._data)
    if wrapper is None or _decoded(var):
        return None
    if tuple(wrapper.shape) != tuple(var.shape) or np.dtype(wrapper.dtype) != var.dtype:
        return None
    return wrapper


def _decoded(var: Any) -> bool:
    """Whether xarray's decoding may have changed the stored values of ``var``."""
    encoding = var.encoding
    if any(key in encoding for key in _DECODED_BY_XARRAY):
        return True
    if np.dtype(encoding.get("dtype", var.dtype)) != var.dtype:
        return True
    fill = encoding.get("_FillValue")
    return fill is not None and not (np.asarray(fill).dtype.kind == "f" and np.isnan(fill))


def _backend_array(data: Any) -> Any:
    """The backend array under xarray's lazy wrappers of ``data`` (see
    :func:`untouched_backend_array`), or ``None`` for anything else."""
    for _ in range(16):
        kind = type(data).__name__
        if kind in _BACKEND_ARRAYS:
            return data
        if hasattr(data, "dask"):  # dask: only from_array of the backend array, as opened
            data = _dask_source(data)
        elif kind == "LazilyIndexedArray":
            key = getattr(getattr(data, "key", None), "tuple", None)
            if key is None or any(k != slice(None) for k in key):
                return None
            data = data.array
        elif kind in _PASSTHROUGH:
            data = data.array
        else:
            return None
    return None


def _dask_source(array: Any) -> Any:
    """The array a dask array was made from by ``from_array`` (xarray's chunking of a
    backend array), or ``None`` if any other operation is in its graph."""
    graph, original = array.dask, f"original-{array.name}"
    if set(graph.layers) != {array.name, original}:
        return None
    if graph.dependencies.get(array.name) != {original}:
        return None
    values = list(dict(graph.layers[original]).values())
    if len(values) != 1:
        return None
    return getattr(values[0], "value", values[0])  # a dask DataNode holds its value
