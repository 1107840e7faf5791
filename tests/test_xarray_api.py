"""xarray in, xarray out: ``wxstats.compute(ds)`` on a Dataset opened any way, against
a float64 reference and byte for byte against the same data read by path; and
``Stats.to_xarray()`` against ``xarray.open_dataset`` of the file a run writes."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from gridded_data import assert_stream_matches, gridded, reference

import wxstats
from wxstats.cli import main
from wxstats.core.errors import InputError
from wxstats.sources.kinds import Selection
from wxstats.sources.xarray import XarraySource

SPLITS = ("train=2021-01-01T00:00/2021-01-02T05:00", "val=2021-01-02T06/2021-01-03T01")
TRAIN, VAL = (0, 30), (30, 50)
STEPS = (1, 3, 6)
PLAIN = ("t2m", "z")  # float32 and float64 in the files: the same floats either way


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """One dataset as one netCDF file and as two (cut inside the train split)."""
    root = tmp_path_factory.mktemp("xarray-api")
    ds, truth = gridded()
    ds.to_netcdf(root / "g.nc")
    for i, (a, b) in enumerate(((0, 17), (17, 50))):
        ds.isel(time=slice(a, b)).to_netcdf(root / f"part{i}.nc")
    return root, ds, truth


def _run(dataset, **kw):
    return wxstats.compute(dataset, splits=list(SPLITS), diff_steps=STEPS, **kw)


def _values(stats, names=PLAIN) -> dict[str, bytes]:
    """The bytes of every statistic of the variables ``names``, by output name."""
    ds = stats.to_xarray()
    return {v: ds[v].values.tobytes() for v in sorted(ds.data_vars) if v.split("__")[0] in names}


def _against_reference(stats, truth, names=PLAIN) -> None:
    for var in names:
        for split, (a, b) in (("train", TRAIN), ("val", VAL)):
            ref = reference(truth[var], a, b, STEPS)
            assert_stream_matches(stats.streams[f"{var}__{split}"], ref)


def test_open_mfdataset_with_preprocess(data):
    """Two files through dask, a preprocess dropping a variable: the reference, and the
    same bytes as the glob read by path; packed msl as xarray decoded it (float32)."""
    root, _, truth = data
    files = [root / "part0.nc", root / "part1.nc"]
    ds = xr.open_mfdataset(files, preprocess=lambda d: d.drop_vars("orog"), combine="by_coords")
    stats = _run(ds)
    assert sorted({s.split("__")[0] for s in stats.streams}) == ["msl", "t2m", "z"]
    _against_reference(stats, truth)
    by_path = _run(str(root / "part*.nc"), variables=["t2m", "z", "msl"])
    assert _values(stats) == _values(by_path)
    # xarray's own decoding of the packed int16 (float32), taken as it comes
    decoded = ds["msl"].values
    assert decoded.dtype == np.float32
    for split, (a, b) in (("train", TRAIN), ("val", VAL)):
        ref = reference(decoded[..., None], a, b, STEPS)
        assert_stream_matches(stats.streams[f"msl__{split}"], ref)
    assert ds["t2m"].values.shape == (50, 6, 7)  # the caller's Dataset is still open


def test_dask_chunked_in_memory_dataset(data):
    """Dask chunks of 7 steps (not the file's): the blocks follow them; same bytes."""
    root, ds, truth = data
    chunked = ds.chunk(time=7)
    stats = _run(chunked, variables=list(PLAIN))
    _against_reference(stats, truth)
    assert _values(stats) == _values(_run(root / "g.nc", variables=list(PLAIN)))
    one_chunk = XarraySource(chunked, Selection(splits=SPLITS, block_bytes=1))
    starts = [b.start for b in one_chunk.blocks]
    assert starts == [0, 7, 14, 21, 28, 35, 42, 49]  # the dask chunks of 7 steps


def test_plain_in_memory_dataset_with_options(data):
    """Feature dims, weights by a variable, skipna: as by path, byte for byte; msl
    still carries its packing attributes, so it is decoded in float64 as from a file."""
    root, ds, truth = data
    holes = ds.copy(deep=True)
    holes["t2m"].values[3, 2, 1] = np.nan
    holes.to_netcdf(root / "holes.nc")
    opts = {"skipna": True, "weights": "orog", "feature_dims": ["level"]}
    stats = _run(holes, **opts)
    names = (*PLAIN, "msl")
    assert _values(stats, names) == _values(_run(root / "holes.nc", **opts), names)
    unweighted = _run(holes, skipna=True)
    t2m = truth["t2m"].copy()
    t2m[3, 2, 1] = np.nan
    ref = reference(t2m, *TRAIN, STEPS)
    assert_stream_matches(unweighted.streams["t2m__train"], ref)
    assert_stream_matches(unweighted.streams["msl__train"], reference(truth["msl"], *TRAIN, STEPS))
    assert stats.attrs["weights"] != unweighted.attrs["weights"]
    assert stats.attrs["dataset"] == "xarray.Dataset"


def test_climatology_and_coslat_weights_of_a_dask_dataset(tmp_path):
    """``by`` and ``weights="coslat"`` as for a path, byte for byte; the hour coordinate."""
    ds, _ = gridded()
    lat = np.linspace(60, 40, 6)
    ds = ds.assign_coords(lat=("y", lat, {"units": "degrees_north"}))
    ds.to_netcdf(tmp_path / "lat.nc")
    opts = {"by": "hour", "weights": "coslat", "variables": ["t2m", "z"]}
    given = wxstats.compute(ds.chunk(time=5), **opts)
    assert _values(given) == _values(wxstats.compute(tmp_path / "lat.nc", **opts))
    out = given.to_xarray()
    assert list(out["hour"].values) == list(range(24))
    assert out["t2m__train__mean"].dims == ("hour",)


def test_to_xarray_equals_the_written_file(data, tmp_path):
    root, _, _ = data
    out = tmp_path / "stats.nc"
    argv = ["compute", str(root / "g.nc"), "--diff-steps", "1,3,6", "--quiet"]
    argv += [a for s in SPLITS for a in ("--split", s)]
    assert main([*argv, "--output", str(out)]) == 0
    with xr.open_dataset(out) as written:
        xr.testing.assert_equal(_run(root / "g.nc").to_xarray(), written)
        assert "diff_span" in written.coords and "level" in written.coords
        train = [v for v in written.data_vars if v.split("__")[1] == "train"]
        xr.testing.assert_equal(wxstats.read(out, "train").to_xarray(), written[train])


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (lambda ds: ds.isel(time=0), "xarray.Dataset: no dimension 'time'"),
        (lambda ds: ds["t2m"], "not DataArray (DataArray.to_dataset() makes one)"),
        (lambda ds: [ds], "the dataset must be a path or an xarray.Dataset, not list"),
    ],
)
def test_refusals_are_one_line(data, given, message):
    _, ds, _ = data
    with pytest.raises(InputError) as err:
        wxstats.compute(given(ds))
    assert message in str(err.value) and "\n" not in str(err.value)
