"""What a format module tells the chunk reader (:mod:`.chunks`) of its arrays:
each array's shape, chunking and codec (:class:`ChunkedArray`), and where its
chunk objects come from (:class:`ChunkSource`). zarr (:mod:`.zarrchunks`) and
HDF5 (:mod:`.hdf5chunks`) describe their arrays this way; the reader knows no
format.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class ChunkCodec:
    """How the bytes of one chunk object become values: decompress (within the
    chunk's declared size, :mod:`.decompress`), then view."""

    bounded_decode: Callable[[Any, int], Any] | None  # (data, declared bytes); None: raw
    dtype: np.dtype  # with the stored byte order


@dataclass(frozen=True)
class ChunkedArray:
    """What the reader needs of one stored array, whatever the format."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype  # stored, with its byte order
    fill_value: Any
    codec: ChunkCodec | None  # None: read with read_plain
    key: Callable[[tuple[int, ...]], str]  # chunk coordinates -> the store's key
    read_plain: Callable[[tuple[slice, ...]], np.ndarray]  # the format library's slicing
    plain_offset: int | None = None
    """Where a contiguous, unfiltered array starts in the local file (its
    read-ahead; ``None``: not such an array)."""
    never_written: bool = False
    """Whether a missing chunk can only be one never written, which reads as a fill
    value the writer chose (HDF5 with a fill value: nothing deletes a chunk): it is
    decoded like written values, missing if the fill is, refused if netCDF's
    default fill (:mod:`wxstats.sources.xarray.decode`), else data."""


class ChunkSource(Protocol):
    """Where chunks come from, by key (``None``: the chunk does not exist), as
    bytes-like buffers (bytes, or a numpy array a format unfiltered into)."""

    @property
    def local(self) -> bool: ...

    def get(self, key: str, nbytes: int | None = None) -> bytes | np.ndarray | None:
        """Chunk object ``key``, whose decoded size is ``nbytes``; one stored in more
        bytes than any codec takes for that is refused unread
        (:class:`.decompress.TooLarge`)."""

    def get_many(
        self, keys: list[str], sizes: list[int] | None = None
    ) -> dict[str, bytes | np.ndarray | None]:
        """Chunk objects ``keys`` of declared decoded ``sizes``: a remote one is read
        no further than any codec would store that in (:func:`.decompress.object_limit`)."""

    def fetch(
        self,
        keys: list[str],
        sizes: list[int] | None = None,
        arrived: Callable[[int, Any], Any] | None = None,
    ) -> Future:
        """A remote store's ``get_many``, later (requested now, in the background);
        ``arrived(index, data)`` gives what it holds for each object found."""

    def will_need(self, keys: list[str], spans: list[tuple[int, int]] = ()) -> None:
        """Start reading these chunks, and (offset, length) ``spans`` of the file."""

    def drop_early(self) -> None:
        """Cancel what was requested before the reader asked (a remote store's
        first block, requested at opening); nothing elsewhere."""
