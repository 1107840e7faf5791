"""Opening what the user named: a zarr store (folder or URL), a netCDF file, or a
glob of netCDF files; one clear line for whatever goes wrong."""

from __future__ import annotations

import glob as globlib
import os
import warnings
from pathlib import Path
from typing import Any

from wxstats.core.conventions import RUN_ATTR
from wxstats.core.errors import InputError, first_line
from wxstats.storage.sizes import check_zarr_metadata
from wxstats.storage.urls import is_url, read_options
from wxstats.storage.zarropen import Early, OpenedZarr, open_remote

NETCDF_SUFFIXES = (".nc", ".nc4", ".netcdf", ".cdf", ".h5", ".hdf5", ".he5")


def is_glob(text: str) -> bool:
    return not is_url(text) and any(c in text for c in "*?[")


def is_zarr(text: str) -> bool:
    stripped = text.rstrip("/")
    if stripped.endswith(".zarr"):
        return True
    if is_url(text):
        return not stripped.lower().endswith(NETCDF_SUFFIXES)
    path = Path(text)
    return path.is_dir() and any(
        (path / name).exists() for name in (".zgroup", ".zmetadata", "zarr.json", ".zarray")
    )


GIVEN = "xarray.Dataset"
"""How errors and attributes name a Dataset given already open (it has no path)."""
GIVEN_DECODING = (
    "values as the given xarray.Dataset holds them (decoded by xarray when it was opened "
    "with mask_and_scale; packing and fill attributes still on a variable are decoded in "
    "float64 as for a file)"
)


def given_dataset(dataset: Any) -> Any:
    """``dataset`` if it is an ``xarray.Dataset`` opened by the caller (any way: a
    file, ``open_mfdataset`` with ``preprocess``, dask-backed or in memory); ``None``
    for a path. Its values are read through xarray, a block at a time
    (``.isel(time=...).values``: dask computes each block's slab), unless they are a
    local zarr store's or one local netCDF4/HDF5 file's untransformed (then chunk by
    chunk, the same values: :func:`.zarrchunks.given_zarr_store`,
    :func:`.hdf5chunks.given_hdf5_file`), and taken as they come: what xarray
    decoded (``mask_and_scale``: float32 from packed int16) is not decoded again,
    whereas a path's packed integers are decoded in float64 here."""
    if isinstance(dataset, (str, os.PathLike)):
        return None
    import xarray as xr

    if isinstance(dataset, xr.Dataset):
        return dataset
    hint = " (DataArray.to_dataset() makes one)" if isinstance(dataset, xr.DataArray) else ""
    raise InputError(
        f"the dataset must be a path or an xarray.Dataset, not {type(dataset).__name__}{hint}"
    )


_NETCDF_MAGIC = (b"CDF", b"\x89HDF\r\n\x1a\n")
"""netCDF classic and HDF5 files start so (xarray's netcdf4 backend checks the same)."""


def _local_netcdf_engine(text: str) -> str | None:
    """``netcdf4`` for a local netCDF or HDF5 file (its first bytes say so): the
    engine xarray would guess for it, named so that xarray does not load every
    installed backend plugin to guess (kerchunk's imported zarr: 0.1 s of a
    netCDF run). ``None`` (xarray guesses) for anything else."""
    if is_url(text):
        return None
    try:
        with open(text, "rb") as f:
            head = f.read(8)
    except OSError:
        return None
    return "netcdf4" if head.startswith(_NETCDF_MAGIC) else None


def remote_zarr(
    text: str, storage_options: dict[str, Any], time_dim: str, early: Early | None = None
) -> OpenedZarr | None:
    """A zarr store at a URL opened in two round trips (:func:`.zarropen.open_remote`,
    ``early``: the first block's objects requested with the second), for
    :func:`open_files` and then the chunk reader; ``None`` for anything else."""
    if not is_url(text) or not is_zarr(text):
        return None
    return open_remote(text, storage_options, time_dim, early)


def open_one(
    text: str, storage_options: dict[str, Any] | None = None, opened: OpenedZarr | None = None
):
    """The dataset ``text`` names, opened lazily without decoding (``opened``: a
    remote zarr store's objects fetched already, see :func:`remote_zarr`)."""
    import xarray as xr

    kwargs = {"mask_and_scale": False, "decode_timedelta": False, "cache": False, "chunks": None}
    options = read_options(text, storage_options or {}) if is_url(text) else {}
    if options and opened is None:
        kwargs["storage_options"] = options
    if not is_url(text) and not Path(text).exists():
        raise InputError(f"{text}: dataset not found")
    if not is_url(text) and Path(text).is_dir() and not is_zarr(text):
        raise InputError(f"{text}: a folder that is not a zarr store (no .zgroup or zarr.json)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if opened is not None:
                ds = xr.open_dataset(opened.store, engine="zarr", **kwargs)
                ds.encoding["source"] = text  # as xarray records a URL it opens
                return ds
            if is_zarr(text):
                if not is_url(text):
                    check_zarr_metadata(text)  # before xarray loads its coordinates
                return xr.open_dataset(text, engine="zarr", **kwargs)
            return xr.open_dataset(text, engine=_local_netcdf_engine(text), **kwargs)
    except InputError:
        raise
    except ImportError as exc:
        raise InputError(
            f"{text}: opening it needs the Python package {exc.name or 'for its protocol'} "
            "(e.g. fsspec and s3fs/gcsfs for remote stores)"
        ) from None
    except Exception as exc:  # backends raise many kinds; the user needs one line
        raise InputError(f"{text}: cannot open with xarray: {first_line(exc)}") from None


def open_files(
    text: str, storage_options: dict[str, Any] | None = None, opened: OpenedZarr | None = None
) -> list[tuple[str, Any]]:
    """The datasets ``text`` names (``opened``: see :func:`open_one`); a glob leaves
    out statistics files wxstats wrote (``era5_*.nc`` run twice would otherwise
    read ``era5_stats.nc``)."""
    if not is_glob(text):
        return [(text, open_one(text, storage_options, opened))]
    files = sorted(globlib.glob(text))
    if not files:
        raise InputError(f"{text}: no files match this pattern")
    time_files, outputs = [], []
    for f in files:
        ds = open_one(f)
        if RUN_ATTR in ds.attrs:
            ds.close()
            outputs.append(f)
        else:
            time_files.append((f, ds))
    if outputs:
        if not time_files:
            raise InputError(
                f"{text}: the files matching this pattern are all statistics written by "
                f"wxstats ({', '.join(outputs)}), not data"
            )
        warnings.warn(
            f"{text}: left out {len(outputs)} statistics file(s) written by wxstats that "
            f"match the pattern: {', '.join(outputs)}",
            UserWarning,
            stacklevel=2,
        )
    return time_files
