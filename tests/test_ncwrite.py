"""The statistics file written with netCDF4 directly opens exactly like the one
xarray's ``to_netcdf`` writes (the reference), for generic and mllam-data-prep
layouts, short splits with their own diff dimension included."""

from __future__ import annotations

import xarray as xr
from gridded_data import gridded, mdp_store, write_zarr

from wxstats.io.formats.netcdf import netcdf_writer, stats_dataset
from wxstats.runtime.run import compute


def _same_as_xarray(stats, tmp_path):
    ours, theirs = tmp_path / "ours.nc", tmp_path / "xarray.nc"
    netcdf_writer(stats)(ours)
    stats_dataset(stats).to_netcdf(theirs, engine="netcdf4")
    with xr.open_dataset(ours) as a, xr.open_dataset(theirs) as b:
        xr.testing.assert_identical(a, b)
        assert list(a.coords) == list(b.coords) and list(a.data_vars) == list(b.data_vars)
    with xr.open_dataset(ours, decode_cf=False) as a, xr.open_dataset(theirs, decode_cf=False) as b:
        xr.testing.assert_identical(a, b)


def test_generic_layout_with_levels_and_short_split(tmp_path):
    ds, _ = gridded()
    write_zarr(ds, tmp_path / "g.zarr")
    splits = ["train=2021-01-01T00/2021-01-02T05", "val=2021-01-02T06/2021-01-02T08"]
    stats = compute(tmp_path / "g.zarr", splits=splits, diff_steps=(1, 3, 6))
    _same_as_xarray(stats, tmp_path)


def test_mdp_layout_with_unit_and_name_coordinates(tmp_path):
    mdp_store(tmp_path / "m.zarr")
    _same_as_xarray(compute(tmp_path / "m.zarr"), tmp_path)
