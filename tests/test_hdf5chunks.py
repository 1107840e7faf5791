"""netCDF4/HDF5 files read chunk by chunk (storage/hdf5chunks.py): the raw
values of any slab equal HDF5's own reading (h5py, the reference) for each
filter pipeline and storage it decodes or leaves to h5py; whole runs are
byte-identical to the xarray path and agree with a float64 reference; chunks
never written, skipped filters, truncated and corrupt files are handled as
HDF5 would or refused in one line."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest
from gridded_data import gridded, slab_dataset, summary_text

from wxstats.core.errors import InputError
from wxstats.runtime.run import compute, compute_source
from wxstats.sources.kinds import Selection
from wxstats.sources.xarray import XarraySource
from wxstats.storage.chunks import SlabRequest
from wxstats.storage.hdf5chunks import Hdf5ChunkReader, is_hdf5, unshuffle


def _dataset(n_time=23):
    return slab_dataset(n_time, seed=7, q_dtype="f8")


CHUNKS = {"a": (4, 2, 3, 4), "p": (4, 3, 4), "q": (2, 4, 4)}  # edge chunks everywhere
PIPELINES = {
    "zlib+shuffle": {"zlib": True, "complevel": 4, "shuffle": True},
    "zlib": {"zlib": True, "complevel": 1, "shuffle": False},
    "shuffle only": {"zlib": False, "shuffle": True},
    "chunked raw": {},
    "fletcher32 (h5py reads)": {"zlib": True, "fletcher32": True},
    "contiguous (memory-mapped)": None,
}


def _write(path, pipeline):
    ds = _dataset()
    enc = {}
    for v in ds.data_vars:
        spec = PIPELINES[pipeline]
        enc[v] = {"contiguous": True} if spec is None else {"chunksizes": CHUNKS[v], **spec}
    ds.to_netcdf(path, engine="netcdf4", encoding=enc)
    return path


@pytest.mark.parametrize("pipeline", list(PIPELINES))
def test_slabs_equal_hdf5s_own_reading(tmp_path, pipeline):
    path = _write(tmp_path / "s.nc", pipeline)
    reader = Hdf5ChunkReader(str(path), threads=3)
    chunked = reader._array("a").codec is not None
    assert chunked == (pipeline not in ("fletcher32 (h5py reads)", "contiguous (memory-mapped)"))
    try:
        with h5py.File(path, "r") as ref:
            for start, stop in ((0, 23), (3, 9), (22, 23), (5, 6)):
                got = reader.read(
                    [
                        SlabRequest("a", start, stop, (0, 2, 3, 1), False),
                        SlabRequest("p", start, stop, (0, 2, 1), False),
                        SlabRequest("q", start, stop, (1, 2, 0), False),
                    ]
                )
                want = {
                    "a": ref["a"][start:stop].transpose(0, 2, 3, 1),
                    "p": ref["p"][start:stop].transpose(0, 2, 1),
                    "q": ref["q"][:, start:stop].transpose(1, 2, 0),
                }
                for name, values in want.items():
                    assert got[name].dtype.isnative and got[name].flags.c_contiguous
                    np.testing.assert_array_equal(got[name], values, strict=False)
                    assert got[name].dtype == values.dtype.newbyteorder("=")
    finally:
        reader.close()


def _bytes(source):
    return summary_text(compute_source(source, threads=2))


@pytest.mark.parametrize("encoding", ["zlib+shuffle", "contiguous (memory-mapped)"])
def test_whole_run_identical_to_the_xarray_path_and_to_float64(tmp_path, encoding):
    ds, truth = gridded(n_time=40)
    spec = PIPELINES[encoding]
    enc = {
        v: ({"contiguous": True} if spec is None else {"chunksizes": (3, *ds[v].shape[1:]), **spec})
        for v in ("t2m", "z")
    }
    ds.to_netcdf(tmp_path / "g.nc", engine="netcdf4", encoding=enc)
    opts = Selection(diff_steps=(1, 3), block_bytes=4000)
    fast = XarraySource(str(tmp_path / "g.nc"), opts)
    slow = XarraySource(str(tmp_path / "g.nc"), opts)
    assert isinstance(fast._chunks, Hdf5ChunkReader)
    slow._chunks.close()
    slow._chunks = None  # xarray's backend (the reading before this module)
    assert _bytes(fast) == _bytes(slow)
    stats = compute_source(fast, threads=2)
    for name in ("t2m", "z", "msl"):
        x = truth[name]  # (time, y, x, features), float64
        stream = stats.streams[f"{name}__train"]
        np.testing.assert_allclose(stream.mean, x.mean(axis=(0, 1, 2)), rtol=1e-13)
        want = np.diff(x, axis=0).std(axis=(0, 1, 2))
        np.testing.assert_allclose(stream.diff[1].std, want, rtol=1e-11)
    fast._chunks.close()


def _shuffled(values: np.ndarray) -> bytes:
    """HDF5's shuffle filter, forward (independent of the module's unshuffle)."""
    raw = np.ascontiguousarray(values).view(np.uint8).reshape(values.size, values.itemsize)
    return raw.T.tobytes()


def test_a_chunk_whose_filter_was_skipped_is_read_as_hdf5_reads_it(tmp_path):
    """HDF5 may store a chunk without one of the pipeline's filters (its filter
    mask says which): deflate skipped here, the chunk only shuffled."""
    path = tmp_path / "m.nc"
    values = np.random.default_rng(3).standard_normal((6, 4, 5)).astype("f4")
    with h5py.File(path, "w") as f:
        d = f.create_dataset("v", shape=values.shape, dtype="f4", chunks=(2, 4, 5),
                             shuffle=True, compression="gzip")  # fmt: skip
        d[:] = values
        d.id.write_direct_chunk((2, 0, 0), _shuffled(values[2:4]), filter_mask=0b10)
    with h5py.File(path, "r") as f:
        assert f["v"].id.get_chunk_info_by_coord((2, 0, 0)).filter_mask == 0b10
        want = f["v"][:]
    np.testing.assert_array_equal(want, values)  # the reference reads it back
    reader = Hdf5ChunkReader(str(path), threads=2)
    try:
        got = reader.read([SlabRequest("v", 0, 6, (0, 1, 2), False)])["v"]
    finally:
        reader.close()
    np.testing.assert_array_equal(got, want)


def _unwritten_chunk_file(path, fill) -> np.ndarray:
    """Steps 0-3 and 8-11 written, the chunk of steps 4-7 never (netCDF4 leaves it
    unallocated in the file); ``fill``: its _FillValue, or False for none."""
    import netCDF4

    values = _dataset(n_time=12)["a"].values
    with netCDF4.Dataset(path, "w") as nc:
        for name, size in (("time", 12), ("level", 3), ("y", 5), ("x", 7)):
            nc.createDimension(name, size)
        t = nc.createVariable("time", "f8", ("time",))
        t.units = "hours since 2021-01-01"
        t[:] = np.arange(12)
        a = nc.createVariable("a", "f4", ("time", "level", "y", "x"), zlib=True,
                              chunksizes=(4, 3, 5, 7), fill_value=fill)  # fmt: skip
        a[0:4] = values[0:4]
        a[8:12] = values[8:12]
    with h5py.File(path, "r") as f:
        assert f["a"].id.get_num_chunks() == 2  # the middle one was never written
    return values


@pytest.mark.filterwarnings("ignore:.*is missing from the store:UserWarning")  # the refusal's
def test_unwritten_chunk_reads_as_missing_where_its_fill_decodes_to_missing(tmp_path):
    values = _unwritten_chunk_file(tmp_path / "u.nc", fill=np.float32(-999.0))
    with pytest.raises(InputError, match="variable a.*NaN values"):
        compute(str(tmp_path / "u.nc"), variables=["a"])
    with pytest.warns(UserWarning, match=r"variable a: chunk object a/1\.0\.0\.0 is missing"):
        stats = compute(str(tmp_path / "u.nc"), variables=["a"], skipna=True)
    stream = stats.streams["a__train"]
    assert list(stream.nan_count) == [4 * 5 * 7] * 3  # the unwritten chunk, as missing
    kept = np.concatenate([values[:4], values[8:]]).astype(np.float64)
    np.testing.assert_allclose(stream.mean, kept.mean(axis=(0, 2, 3)), rtol=1e-12)


def test_unwritten_chunk_without_a_fill_attribute_is_an_error_naming_it(tmp_path):
    # HDF5 would read zeros there, xarray would take them as data: never silent numbers
    _unwritten_chunk_file(tmp_path / "n.nc", fill=False)
    with pytest.raises(
        InputError, match=r"n\.nc: variable a: chunk object a/1\.0\.0\.0 is missing"
    ):
        compute(str(tmp_path / "n.nc"), variables=["a"])


def test_truncated_and_corrupt_files_name_the_file_variable_and_chunk(tmp_path):
    path = _write(tmp_path / "c.nc", "zlib+shuffle")
    with h5py.File(path, "r") as f:
        info = f["a"].id.get_chunk_info_by_coord((4, 0, 0, 0))
    with open(path, "r+b") as f:  # a chunk's compressed bytes overwritten
        f.seek(info.byte_offset)
        f.write(b"\0" * info.size)
    with pytest.raises(
        InputError, match=r"c\.nc: variable a: chunk object a/1\.0\.0\.0: cannot decode"
    ):
        compute(str(path), variables=["a"])
    # a file cut short: HDF5 refuses it at open (one line naming it); a chunk whose
    # bytes the file does not hold is refused by the reader (its own check)
    path = _write(tmp_path / "t.nc", "zlib+shuffle")
    reader = Hdf5ChunkReader(str(path), threads=1)
    reader._array("a")
    key = "a/1.0.0.0"
    offset, size, mask, pipeline, nbytes = reader.store.index[key]
    reader.store.index[key] = (os.path.getsize(path) - size // 2, size, mask, pipeline, nbytes)
    try:
        with pytest.raises(InputError, match=r"t\.nc: variable a: cannot read object a/1\.0"
                           r"\.0\.0: .*the file ends inside chunk"):  # fmt: skip
            reader.read([SlabRequest("a", 0, 23, (0, 1, 2, 3), False)])
    finally:
        reader.close()
    os.truncate(path, os.path.getsize(path) // 2)
    with pytest.raises(InputError, match=r"t\.nc: cannot open"):
        compute(str(path), variables=["a"])


def test_unshuffle_and_signature():
    values = np.arange(1000, dtype="<f8") * 1.5
    assert bytes(unshuffle(_shuffled(values) + b"xyz", 8)) == values.tobytes() + b"xyz"
    assert unshuffle(b"ab", 4) == b"ab"
    assert not is_hdf5(__file__)


def test_a_file_h5py_cannot_open_is_read_through_xarray(tmp_path, monkeypatch):
    """What netCDF4 opened and h5py cannot (a file lock it refuses, say) is read
    the slower way, with the same statistics."""
    path = _write(tmp_path / "l.nc", "zlib+shuffle")
    want = compute(str(path), variables=["a"])

    def refuse(*args, **kwargs):
        raise OSError("unable to lock file")

    monkeypatch.setattr(h5py, "File", refuse)
    source = XarraySource(str(path), Selection(variables=("a",)))
    assert source._chunks is None
    got = compute_source(source, threads=2).streams["a__train"]
    np.testing.assert_array_equal(got.mean, want.streams["a__train"].mean)
    np.testing.assert_array_equal(got.std, want.streams["a__train"].std)


def test_zlibs_inflate_where_isal_is_missing_reads_the_same(tmp_path, monkeypatch):
    """ISA-L inflates where its wheels exist (pyproject.toml), zlib elsewhere: the
    same values either way, and a corrupt chunk is refused by both."""
    import wxstats.storage.decompress as decompress

    pytest.importorskip("isal")  # installed with wxstats on this machine
    assert decompress.inflater is decompress.isal_inflater
    path = _write(tmp_path / "z.nc", "zlib+shuffle")
    with h5py.File(path, "r") as f:
        want = f["a"][:].transpose(0, 2, 3, 1)
    inflaters = (decompress.isal_inflater, decompress.zlib_inflater)
    for inflater in inflaters:
        monkeypatch.setattr(decompress, "inflater", inflater)
        reader = Hdf5ChunkReader(str(path), threads=2)
        try:
            got = reader.read([SlabRequest("a", 0, 23, (0, 2, 3, 1), False)])["a"]
        finally:
            reader.close()
        np.testing.assert_array_equal(got, want)
    with h5py.File(path, "r") as f:
        info = f["a"].id.get_chunk_info_by_coord((4, 0, 0, 0))
    with open(path, "r+b") as f:
        f.seek(info.byte_offset)
        f.write(b"\0" * info.size)
    for inflater in inflaters:
        monkeypatch.setattr(decompress, "inflater", inflater)
        reader = Hdf5ChunkReader(str(path), threads=2)
        try:
            with pytest.raises(InputError, match=r"chunk object a/1\.0\.0\.0: cannot decode"):
                reader.read([SlabRequest("a", 0, 23, (0, 2, 3, 1), False)])
        finally:
            reader.close()
