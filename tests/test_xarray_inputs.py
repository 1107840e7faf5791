"""``wxstats.compute(ds)`` on Datasets opened the ways users open them: an icechunk
repository through its session, a kerchunk reference over netCDF4 files,
``open_mfdataset`` with a ``preprocess`` and a dask-chunked zarr store. Each against
a float64 two-pass numpy reference and byte for byte against the same data read by
path (the icechunk repository holds what a zarr store written beside it holds)."""

from __future__ import annotations

import icechunk
import numpy as np
import pytest
import xarray as xr
from gridded_data import assert_stream_matches, gridded, reference, write_zarr
from kerchunk.combine import MultiZarrToZarr
from kerchunk.hdf import SingleHdf5ToZarr

import wxstats
from wxstats.sources.kinds import Selection
from wxstats.sources.xarray import XarraySource

SPLITS = ("train=2021-01-01T00:00/2021-01-02T05:00", "val=2021-01-02T06/2021-01-03T01")
TRAIN, VAL = (0, 30), (30, 50)
STEPS = (1, 3, 6)
PLAIN = ("t2m", "z")  # float32 and float64: xarray's values are the stored ones
CUTS = ((0, 15), (15, 30), (30, 50))  # three files; 15 steps, a multiple of the time chunk


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The synthetic dataset, its float64 truth, and the folder to write it in."""
    ds, truth = gridded()
    return tmp_path_factory.mktemp("xarray-inputs"), ds, truth


@pytest.fixture(scope="module")
def netcdf_parts(data):
    """Three netCDF4 files (zlib, 5-step chunks, one time encoding as kerchunk needs
    to concatenate them), the static ``orog`` left out (it has no time to concatenate)."""
    root, ds, _ = data
    encoding = {"time": {"units": "hours since 2021-01-01", "dtype": "i8"}}
    for v in ("t2m", "z", "msl"):
        encoding[v] = {"zlib": True, "chunksizes": (5, *ds[v].shape[1:])}
    files = []
    for i, (a, b) in enumerate(CUTS):
        files.append(root / f"part{i}.nc")
        part = ds.drop_vars("orog").isel(time=slice(a, b))
        part.to_netcdf(files[-1], engine="netcdf4", encoding=encoding)
    return files


def _run(dataset, **kw):
    return wxstats.compute(dataset, splits=list(SPLITS), diff_steps=STEPS, **kw)


def _values(stats, names=PLAIN) -> dict[str, bytes]:
    """The bytes of every statistic of the variables ``names``, by output name."""
    ds = stats.to_xarray()
    return {v: ds[v].values.tobytes() for v in sorted(ds.data_vars) if v.split("__")[0] in names}


def _against_reference(stats, truth, names=PLAIN, rtol: float = 1e-10) -> None:
    for var in names:
        for split, (a, b) in (("train", TRAIN), ("val", VAL)):
            ref = reference(truth[var], a, b, STEPS)
            assert_stream_matches(stats.streams[f"{var}__{split}"], ref, rtol)


def test_icechunk_session_store(data):
    """An icechunk repository written here, read through a read-only session's store
    (no path: xarray reads it): the reference, and the bytes of the zarr store."""
    root, ds, truth = data
    plain = ds[list(PLAIN)]
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(root / "ice")))
    session = repo.writable_session("main")
    encoding = {v: {"chunks": (8, *plain[v].shape[1:])} for v in PLAIN}
    plain.to_zarr(session.store, zarr_format=3, consolidated=False, encoding=encoding)
    session.commit("the synthetic dataset")
    reader = repo.readonly_session("main")
    given = xr.open_zarr(reader.store, consolidated=False)
    assert given["t2m"].chunks[0][:2] == (8, 8)  # dask-backed, icechunk's own chunks
    stats = _run(given)
    _against_reference(stats, truth)
    by_path = _run(str(write_zarr(plain, root / "same.zarr", time_chunk=8)))
    assert _values(stats) == _values(by_path)


def test_kerchunk_reference_over_netcdf4_files(data, netcdf_parts):
    """A kerchunk reference combining three netCDF4 files along time, opened as zarr
    through fsspec's reference filesystem: the reference, the glob's bytes; packed
    msl as kerchunk's JSON attributes make xarray decode it (float64, exactly)."""
    _, _, truth = data
    singles = [SingleHdf5ToZarr(str(f), inline_threshold=0).translate() for f in netcdf_parts]
    refs = MultiZarrToZarr(singles, concat_dims=["time"], identical_dims=["y", "x", "level"])
    given = xr.open_dataset(
        "reference://",
        engine="zarr",
        chunks={},
        backend_kwargs={
            "consolidated": False,
            "storage_options": {
                "fo": refs.translate(),
                "remote_protocol": "file",
                "asynchronous": True,
            },
        },
    )
    assert given.sizes["time"] == 50
    names = (*PLAIN, "msl")
    stats = _run(given)
    _against_reference(stats, truth, names)
    glob = str(netcdf_parts[0].parent / "part*.nc")
    assert _values(stats, names) == _values(_run(glob), names)


def test_open_mfdataset_preprocess_renaming_and_dropping(data, netcdf_parts):
    """A preprocess that renames t2m and drops z: statistics under the new name, equal
    byte for byte to the glob's of the old name; z is gone from the output."""
    _, _, truth = data

    def fn(part: xr.Dataset) -> xr.Dataset:
        return part.rename({"t2m": "temperature"}).drop_vars("z")

    given = xr.open_mfdataset(netcdf_parts, preprocess=fn, combine="by_coords")
    stats = _run(given)
    assert sorted({s.split("__")[0] for s in stats.streams}) == ["msl", "temperature"]
    _against_reference(stats, {"temperature": truth["t2m"]}, ("temperature",))
    by_path = _run(str(netcdf_parts[0].parent / "part*.nc"), variables=["t2m"]).to_xarray()
    renamed = stats.to_xarray()
    for name in by_path.data_vars:
        new = name.replace("t2m", "temperature", 1)
        assert renamed[new].values.tobytes() == by_path[name].values.tobytes(), new


def test_dask_rechunked_zarr_store(data):
    """A zarr store of 8-step chunks opened with dask chunks of 6 steps (neither a
    multiple of the other): the reference, and the bytes read by path."""
    root, ds, truth = data
    path = write_zarr(ds[list(PLAIN)], root / "dask.zarr", time_chunk=8)
    with pytest.warns(UserWarning, match="separate the stored chunks"):
        given = xr.open_zarr(path, chunks={"time": 6}, consolidated=False)
    assert given["z"].chunks[0][:2] == (6, 6)
    stats = _run(given)
    _against_reference(stats, truth)
    assert _values(stats) == _values(_run(str(path)))


def _reader(given) -> str:
    """Which reader a Dataset's variables are read with: the chunk reader's class, or
    ``NoneType`` for xarray's own reading."""
    source = XarraySource(given, Selection(splits=SPLITS, diff_steps=STEPS))
    try:
        return type(source._chunks).__name__
    finally:
        source.close()


def test_untransformed_zarr_dataset_is_read_chunk_by_chunk(data):
    """A Dataset opened from a local zarr store as it is (dask or not, decoded or not,
    some variables kept) is read by the chunk reader: the bytes of the path's read."""
    root, ds, truth = data
    path = write_zarr(ds[list(PLAIN)], root / "fast.zarr", time_chunk=8)
    by_path = _values(_run(str(path)))
    opened = {
        "open_zarr": xr.open_zarr(path, consolidated=False),
        "no dask": xr.open_dataset(path, engine="zarr", chunks=None, consolidated=False),
        "undecoded": xr.open_zarr(path, consolidated=False, mask_and_scale=False),
        "t2m only": xr.open_zarr(path, consolidated=False)[["t2m"]],
    }
    for label, given in opened.items():
        assert _reader(given) == "ZarrChunkReader", label
        stats = _run(given)
        names = list(given.data_vars)
        _against_reference(stats, truth, names)
        expected = {k: v for k, v in by_path.items() if k.split("__")[0] in names}
        assert _values(stats) == expected, label


def test_transformed_zarr_dataset_is_read_through_xarray(data):
    """Whatever changed a variable after opening (a preprocess shifting t2m, a time
    selection, a rename, a packed variable xarray decoded) leaves the chunk reader out:
    the statistics are those of the Dataset's values, not of the store's."""
    root, ds, truth = data
    path = write_zarr(ds[[*PLAIN, "msl"]], root / "pre.zarr", time_chunk=8)

    def shift(part: xr.Dataset) -> xr.Dataset:
        return part.assign(t2m=part["t2m"] - np.float32(273.15))

    kw = {"engine": "zarr", "consolidated": False}
    given = xr.open_mfdataset([path], preprocess=shift, **kw)[list(PLAIN)]
    assert _reader(given) == "NoneType"
    shifted = (truth["t2m"].astype(np.float32) - np.float32(273.15)).astype(np.float64)
    _against_reference(_run(given), {"t2m": shifted, "z": truth["z"]})
    opened = xr.open_zarr(path, consolidated=False)
    later = opened[list(PLAIN)].isel(time=slice(1, None))
    assert _reader(later) == "NoneType"
    assert _reader(opened[list(PLAIN)].rename(t2m="temperature")) == "NoneType"
    assert _reader(opened) == "NoneType"  # msl: int16 that xarray decoded to float32
    undecoded = xr.open_zarr(path, consolidated=False, mask_and_scale=False)
    assert _reader(undecoded) == "ZarrChunkReader"  # msl's packing decoded as for a path
    names = (*PLAIN, "msl")
    stats = _run(undecoded)
    _against_reference(stats, truth, names)
    assert _values(stats, names) == _values(_run(str(path)), names)


@pytest.fixture(scope="module")
def netcdf_file(data):
    """One netCDF4 file of the time variables, zlib + shuffle in 8-step chunks."""
    root, ds, _ = data
    names = (*PLAIN, "msl")
    enc = {v: {"zlib": True, "shuffle": True, "chunksizes": (8, *ds[v].shape[1:])} for v in names}
    path = root / "one.nc"
    ds[list(names)].to_netcdf(path, engine="netcdf4", encoding=enc)
    return path


@pytest.fixture
def hdf5_chunks_read(monkeypatch):
    """How many chunks the HDF5 chunk reader read (a spy on its store)."""
    from wxstats.storage import hdf5chunks

    calls = []
    real = hdf5chunks.Hdf5ChunkStore.get

    def get(self, key, nbytes=None):
        calls.append(key)
        return real(self, key, nbytes)

    monkeypatch.setattr(hdf5chunks.Hdf5ChunkStore, "get", get)
    return calls


def test_untransformed_netcdf_dataset_is_read_chunk_by_chunk(data, netcdf_file, hdf5_chunks_read):
    """A Dataset opened from one local netCDF4 file as it is (dask or not, undecoded
    packing) is read by the HDF5 chunk reader: the bytes of the path's read, and the
    float64 two-pass reference."""
    _, _, truth = data
    by_path = _values(_run(str(netcdf_file)), (*PLAIN, "msl"))
    with pytest.warns(UserWarning, match="separate the stored chunks"):
        six = xr.open_dataset(netcdf_file, chunks={"time": 6})[list(PLAIN)]
    opened = {
        "no dask": xr.open_dataset(netcdf_file, engine="netcdf4")[list(PLAIN)],
        "dask 6 steps": six,
        "dask as stored": xr.open_dataset(netcdf_file, chunks={})[list(PLAIN)],
        "undecoded": xr.open_dataset(netcdf_file, mask_and_scale=False),
    }
    for label, given in opened.items():
        assert _reader(given) == "Hdf5ChunkReader", label
        hdf5_chunks_read.clear()
        stats = _run(given)
        assert hdf5_chunks_read, label  # the values came from the chunk reader
        names = list(given.data_vars)
        _against_reference(stats, truth, names, rtol=1e-12)
        expected = {k: v for k, v in by_path.items() if k.split("__")[0] in names}
        assert _values(stats, names) == expected, label
        given.close()


def test_transformed_netcdf_dataset_is_read_through_xarray(data, netcdf_file, hdf5_chunks_read):
    """A variable changed after opening (t2m + 1), a time selection, a rename or a
    packed variable xarray decoded leave the HDF5 chunk reader out: the statistics
    are those of the Dataset's values."""
    _, _, truth = data
    for chunks in (None, {"time": 8}):
        given = xr.open_dataset(netcdf_file, chunks=chunks)[list(PLAIN)]
        given["t2m"] = given.t2m + np.float32(1)
        assert _reader(given) == "NoneType", chunks
        stats = _run(given)
        assert not hdf5_chunks_read, chunks
        shifted = (truth["t2m"].astype(np.float32) + np.float32(1)).astype(np.float64)
        _against_reference(stats, {"t2m": shifted, "z": truth["z"]}, rtol=1e-12)
    opened = xr.open_dataset(netcdf_file)
    assert _reader(opened[list(PLAIN)].isel(time=slice(1, None))) == "NoneType"
    assert _reader(opened[list(PLAIN)].isel(x=slice(None, None, -1))) == "NoneType"  # same shape
    assert _reader(opened[list(PLAIN)].rename(t2m="temperature")) == "NoneType"
    assert _reader(opened) == "NoneType"  # msl: int16 that xarray decoded to float32
    assert _reader(opened[list(PLAIN)].load()) == "NoneType"
    opened.close()
