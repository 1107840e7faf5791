"""zarr stores for the chunk reader (:mod:`.chunks`): where each chunk object is
(a local folder, or any fsspec URL with many requests in flight) and how it is
compressed.

Arrays with sharding, filters, checksums, ``F`` order or codecs other than
zstd/blosc/gzip are read with zarr's own basic slicing.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from wxstats.core.errors import InputError
from wxstats.sources.xarray.chunks import ChunkCodec, ChunkedArray, ChunkReader
from wxstats.sources.xarray.open import first_line, is_url

REQUESTS_IN_FLIGHT = 64
"""Connections to an object store: a block's chunk objects are requested at once."""
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


class ZarrChunkReader(ChunkReader):
    """Time slabs of the arrays of one zarr store (see :mod:`.chunks`)."""

    def __init__(self, path: str, storage_options: dict[str, Any], threads: int) -> None:
        import zarr

        super().__init__(path, ChunkStore(path, storage_options), threads)
        opts = {"storage_options": storage_options} if is_url(path) else {}
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
