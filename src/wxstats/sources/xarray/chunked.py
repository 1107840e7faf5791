"""Which chunk reader an xarray source reads through, if any.

A zarr store or one local netCDF4/HDF5 file is read chunk by chunk (see
:mod:`wxstats.storage.chunks`), and so is a given Dataset whose variables are
a local zarr store's or one local netCDF4/HDF5 file's, untransformed
(:func:`~wxstats.storage.zarrchunks.given_zarr_store`,
:func:`~wxstats.storage.hdf5chunks.given_hdf5_file`); other files (netCDF3, a
glob of files) and other Datasets are read through xarray. The reader's recipe
(its kind, store or file, fsspec options) is kept so that a copy of the source
on another process opens its own.
"""

from __future__ import annotations

from typing import Any

from wxstats.core.errors import InputError, first_line
from wxstats.sources.xarray.open import is_zarr
from wxstats.storage.chunks import ChunkReader
from wxstats.storage.hdf5chunks import Hdf5ChunkReader, given_hdf5_file, is_hdf5
from wxstats.storage.urls import is_url
from wxstats.storage.zarrchunks import ZarrChunkReader, given_zarr_store
from wxstats.storage.zarropen import OpenedZarr

Recipe = tuple[str, str, dict[str, Any]]
"""How to open a chunk reader: ``zarr`` or ``hdf5``, the store or file, fsspec options."""

Opened = tuple[ChunkReader | None, Recipe | None]


def open_reader(recipe: Recipe, io_threads: int, opened: OpenedZarr | None = None) -> ChunkReader:
    """The chunk reader of ``recipe`` (``opened``: its remote zarr store, opened already)."""
    kind, where, storage = recipe
    if kind == "zarr":
        return ZarrChunkReader(where, storage, io_threads, opened)
    return Hdf5ChunkReader(where, io_threads)


def _try(recipe: Recipe, io_threads: int) -> Opened:
    """The reader of ``recipe``, or none: what xarray opened and zarr (h5py) cannot
    is read through xarray."""
    try:
        return open_reader(recipe, io_threads), recipe
    except Exception:  # zarr and h5py raise many kinds for what xarray opened
        return None, None


def chunk_reader(source: Any, storage: dict[str, Any], opened: OpenedZarr | None = None) -> Opened:
    """The chunk reader of ``source`` and its recipe (None, None: read through xarray;
    ``opened``: its remote zarr store as :func:`.open.remote_zarr` opened it)."""
    threads = source.options.io_threads
    if source.given:
        names = [v.name for v in source.vars if v.has_time]
        store = given_zarr_store(source.time_files[0].ds, names)
        if store is not None:
            return _try(("zarr", store, {}), threads)
        path = given_hdf5_file(source.time_files[0].ds, names)
        return (None, None) if path is None else _try(("hdf5", path, {}), threads)
    if len(source.time_files) != 1:
        return None, None
    if is_zarr(source.path):
        recipe = ("zarr", source.path, storage)
        try:
            return open_reader(recipe, threads, opened), recipe
        except Exception as exc:  # zarr raises many kinds for what xarray opened
            msg = f"{source.path}: cannot open with zarr: {first_line(exc)}"
            raise InputError(msg) from None
    if is_url(source.path) or not is_hdf5(source.time_files[0].path):
        return None, None
    return _try(("hdf5", source.time_files[0].path, {}), threads)
