"""netCDF4/HDF5 files for the chunk reader (:mod:`.chunks`): where each chunk is
in the file and how it is filtered, from h5py's chunk index.

netCDF4-python (xarray's backend) decompresses a file's chunks one at a time,
in HDF5, under a lock: a zlib-compressed ERA5 file from the Climate Data Store
reads on one core however many there are. Here the chunk index gives each
chunk's byte range; the chunks are read with ``os.pread`` and inflated within
their declared size (:mod:`.decompress`: ISA-L, or zlib where its wheels are
missing; both release the GIL) and unshuffled in
the reader's thread pool, HDF5's own format: deflate (filter 1) and shuffle
(filter 2), in pipeline order, each skipped for a chunk whose filter mask says
it was not applied.

A contiguous, unfiltered variable is memory-mapped at its offset in the file
(a plain copy of the page cache, no lock). Any other filter (fletcher32
checksums, szip, plugins such as zstd or blosc) or storage is read with h5py's
own slicing. A chunk never written reads as the variable's fill value, as
HDF5 reads it, and is decoded like written values (nothing deletes a chunk),
unless the variable has no fill value (netCDF's NOFILL mode): then it is refused.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from wxstats.storage.chunks import ChunkReader
from wxstats.storage.decompress import check_stored, inflate
from wxstats.storage.described import ChunkCodec, ChunkedArray
from wxstats.storage.readahead import will_need

_DEFLATE, _SHUFFLE = 1, 2  # HDF5's filter identifiers
_DECODED_FILTERS = {_DEFLATE, _SHUFFLE}
_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def chunk_key(name: str, coords: tuple[int, ...]) -> str:
    """The reader's key of a dataset's chunk (``name/i.j.k``, in chunk units)."""
    return f"{name}/" + ".".join(map(str, coords))


def is_hdf5(path: str) -> bool:
    """Whether ``path`` is an HDF5 file (netCDF4 is one): its signature at byte 0
    or at a user block of 512, 1024, 2048... bytes."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            offset = 0
            while offset + len(_SIGNATURE) <= size:
                f.seek(offset)
                if f.read(len(_SIGNATURE)) == _SIGNATURE:
                    return True
                offset = 512 if offset == 0 else offset * 2
    except OSError:
        return False
    return False


def unshuffle(data: bytes, itemsize: int) -> bytes | np.ndarray:
    """HDF5's shuffle filter undone: the bytes of each element were stored
    grouped by position (all first bytes, then all second bytes...); a tail
    shorter than an element was stored as it is. One plane at a time into a
    column of the elements (5x numpy's transposing copy of the whole)."""
    n = len(data) // itemsize
    if itemsize <= 1 or n == 0:
        return data
    stored = np.frombuffer(data, dtype=np.uint8)
    planes = stored[: n * itemsize].reshape(itemsize, n)
    out = np.empty(len(data), dtype=np.uint8)
    elements = out[: n * itemsize].reshape(n, itemsize)
    for i in range(itemsize):
        elements[:, i] = planes[i]
    out[n * itemsize :] = stored[n * itemsize :]
    return out


class Hdf5ChunkStore:
    """The chunks of a file's datasets by key (``name/i.j.k``), read with
    ``os.pread`` and unfiltered in the calling (pool) thread."""

    local = True

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        # key -> (offset, size, filter mask, the dataset's filter pipeline, decoded size)
        self.index: dict[str, tuple[int, int, int, tuple[tuple[int, int], ...], int]] = {}

    def add(self, name: str, dataset: Any, pipeline: tuple[tuple[int, int], ...]) -> None:
        """Index every written chunk of ``dataset`` (h5py's chunk iterator)."""
        chunks = dataset.chunks
        nbytes = math.prod(chunks) * dataset.dtype.itemsize

        def record(info) -> None:
            coords = tuple(o // c for o, c in zip(info.chunk_offset, chunks, strict=True))
            key = chunk_key(name, coords)
            self.index[key] = (info.byte_offset, info.size, info.filter_mask, pipeline, nbytes)

        dataset.id.chunk_iter(record)

    def get(self, key: str, nbytes: int | None = None) -> bytes | np.ndarray | None:
        """Chunk ``key`` unfiltered, inflated within its declared size (the index's
        own, whatever ``nbytes`` says)."""
        entry = self.index.get(key)
        if entry is None:
            return None  # never written: HDF5 reads the fill value
        offset, size, mask, pipeline, nbytes = entry
        check_stored(size, nbytes)
        data = os.pread(self.fd, size, offset)
        if len(data) != size:
            raise OSError(f"the file ends inside chunk {key} (truncated?)")
        for position in range(len(pipeline) - 1, -1, -1):  # undone last filter first
            if mask & (1 << position):
                continue  # this filter was not applied to this chunk
            code, itemsize = pipeline[position]
            data = inflate(data, nbytes) if code == _DEFLATE else unshuffle(data, itemsize)
        return data

    def get_many(
        self, keys: list[str], sizes: list[int] | None = None
    ) -> dict[str, bytes | np.ndarray | None]:
        """The chunks ``keys`` (each stored size checked by :meth:`get` against the index)."""
        return {key: self.get(key) for key in keys}

    def will_need(self, keys: list[str], spans: list[tuple[int, int]] = ()) -> None:
        """Ask the kernel to start reading these chunks and spans (read-ahead)."""
        if not hasattr(os, "posix_fadvise"):
            return
        for key in keys:
            entry = self.index.get(key)
            if entry is not None:
                will_need(self.fd, entry[0], entry[1])
        for offset, length in spans:
            will_need(self.fd, offset, length)

    def drop_early(self) -> None:
        """A local file: nothing is requested before the reader asks."""

    def close(self) -> None:
        os.close(self.fd)


def _pipeline(dataset: Any) -> tuple[tuple[int, int], ...] | None:
    """(filter id, element size) of each filter, in the order they were applied;
    ``None`` when one is not decoded here."""
    plist = dataset.id.get_create_plist()
    out = []
    for i in range(plist.get_nfilters()):
        code, _flags, values, _name = plist.get_filter(i)
        if code not in _DECODED_FILTERS:
            return None
        out.append((code, int(values[0]) if code == _SHUFFLE and values else 1))
    return tuple(out)


class Hdf5ChunkReader(ChunkReader):
    """Time slabs of the variables of one netCDF4/HDF5 file (see module docstring)."""

    store: Hdf5ChunkStore

    def __init__(self, path: str, threads: int) -> None:
        import h5py

        self.file = h5py.File(path, "r")  # where it cannot: the source reads via xarray
        try:
            store = Hdf5ChunkStore(path)
        except OSError:
            self.file.close()
            raise
        super().__init__(path, store, threads)

    def _describe(self, name: str) -> ChunkedArray:
        dataset = self.file[name]
        dtype = np.dtype(dataset.dtype)
        shape = tuple(dataset.shape)
        codec, chunks, read_plain, plain_offset = None, shape, dataset.__getitem__, None
        pipeline = _pipeline(dataset) if dtype.kind in "iuf" else None
        if dataset.chunks is not None and pipeline is not None:
            self.store.add(name, dataset, pipeline)
            codec, chunks = ChunkCodec(None, dtype), tuple(dataset.chunks)
        elif dataset.chunks is None and pipeline == ():  # unfiltered numbers
            offset = dataset.id.get_offset()  # None: never written
            if offset is not None and 0 not in shape:
                mapped = np.memmap(self.path, dtype=dtype, mode="r", offset=offset, shape=shape)
                read_plain, plain_offset = mapped.__getitem__, offset
        return ChunkedArray(
            shape=shape,
            chunks=chunks,
            dtype=dtype,
            fill_value=dataset.fillvalue,
            codec=codec,
            key=lambda coords: chunk_key(name, coords),
            read_plain=read_plain,
            plain_offset=plain_offset,
            never_written=_fills(dataset),
        )

    def close(self) -> None:
        super().close()
        self.file.close()
        self.store.close()


def _fills(dataset: Any) -> bool:
    """Whether HDF5 writes the dataset's own fill value where nothing was written
    (netCDF's NOFILL mode leaves whatever was on disk, read as zeros: not a fill)."""
    import h5py

    plist = dataset.id.get_create_plist()
    return (
        plist.get_fill_time() != h5py.h5d.FILL_TIME_NEVER
        and plist.fill_value_defined() == h5py.h5d.FILL_VALUE_USER_DEFINED
    )


def given_hdf5_file(dataset: Any, names: list[str]) -> str | None:
    """The local netCDF4/HDF5 file that the variables ``names`` of a Dataset opened
    by the caller (``xr.open_dataset``, engine netcdf4 or h5netcdf, dask or not) read
    untransformed, for the chunk reader; ``None`` (xarray reads them) unless the
    Dataset's ``source`` is that file and every variable is its root group's
    variable of the same name, untouched (see
    :func:`.zarrchunks.untouched_backend_array`: whole, not loaded, not decoded by
    xarray, so that wxstats decodes it as for the path)."""
    from wxstats.storage.urls import is_url
    from wxstats.storage.zarrchunks import untouched_backend_array

    source = dataset.encoding.get("source")  # the path xarray opened
    if not isinstance(source, str) or is_url(source) or not is_hdf5(source):
        return None
    try:
        files = set()
        for name in names:
            wrapper = untouched_backend_array(dataset.variables[name])
            kind = type(wrapper).__name__
            if kind not in ("NetCDF4ArrayWrapper", "H5NetCDFArrayWrapper"):
                return None
            store = wrapper.datastore
            if wrapper.variable_name != name or store._group not in (None, "", "/"):
                return None
            if store.is_remote:
                return None
            files.add(os.path.realpath(store._filename))
    except (AttributeError, TypeError, ValueError, KeyError):  # other xarray internals
        return None
    path = os.path.realpath(source)
    return path if files == {path} else None
