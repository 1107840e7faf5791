"""``--format graphcast``: the files GraphCast's normalization reads, aligned on
the dataset's own level coordinate, checked against a float64 reference."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from gridded_data import hourly

from reference import assert_close
from wxstats.cli import main

FILES = ("mean_by_level.nc", "stddev_by_level.nc", "diffs_stddev_by_level.nc", "min_by_level.nc")


def _era5_like(path, level_units="hPa", levels=(500, 850, 1000)):
    rng = np.random.default_rng(7)
    n, ny, nx = 12, 4, 5
    z = (
        5e4
        + 1e3 * np.arange(len(levels))[None, :, None, None]
        + rng.standard_normal((n, len(levels), ny, nx)) * 300
    )
    t2m = (280 + 5 * rng.standard_normal((n, ny, nx))).astype(np.float32)
    ds = xr.Dataset(
        {
            "geopotential": (("time", "level", "lat", "lon"), z, {"units": "m2 s-2"}),
            "2m_temperature": (("time", "lat", "lon"), t2m, {"units": "K"}),
            "land_sea_mask": (("lat", "lon"), rng.random((ny, nx))),
        },
        coords={
            "time": hourly(n),
            "level": ("level", np.asarray(levels, dtype=np.int32), {"units": level_units}),
        },
    )
    ds.to_zarr(path, zarr_format=3, consolidated=False)
    return ds


def _normalize(inputs: xr.Dataset, mean: xr.Dataset, std: xr.Dataset) -> xr.Dataset:
    """What GraphCast's normalization does: by variable name, aligned by xarray."""
    return (inputs - mean) / std


@pytest.mark.parametrize("level_units, levels", [("hPa", (500, 850, 1000)), ("Pa", (50000, 85000))])
def test_graphcast_files_normalize_every_variable_and_level(tmp_path, level_units, levels):
    ds = _era5_like(tmp_path / "era5.zarr", level_units, levels)
    out = tmp_path / "stats"
    args = ["compute", str(tmp_path / "era5.zarr"), "--format", "graphcast", "--output-dir"]
    names = "geopotential,2m_temperature,land_sea_mask"  # the static field named: included
    assert main([*args, str(out), "--diff-steps", "2", "--variables", names, "--quiet"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    opened = {name: xr.open_dataset(out / name) for name in FILES}
    mean, std = opened["mean_by_level.nc"], opened["stddev_by_level.nc"]
    # the level coordinate exactly as in the data: values, dtype, units
    assert mean["level"].values.tolist() == list(levels)
    assert mean["level"].dtype == ds["level"].dtype
    assert mean["level"].attrs["units"] == level_units
    assert mean["geopotential"].dims == ("level",) and mean["2m_temperature"].dims == ()
    assert set(mean.data_vars) == {"geopotential", "2m_temperature", "land_sea_mask"}
    diffs = opened["diffs_stddev_by_level.nc"]
    assert set(diffs.data_vars) == {"geopotential", "2m_temperature"}  # no diffs of a static

    # against the float64 reference: population statistics, diffs x[t+2] - x[t]
    z = ds["geopotential"].values.astype(np.float64)
    assert_close(mean["geopotential"].values, z.mean(axis=(0, 2, 3)), 1e-12, "mean")
    assert_close(std["geopotential"].values, z.std(axis=(0, 2, 3)), 1e-12, "std")
    dz = z[2:] - z[:-2]
    assert_close(diffs["geopotential"].values, dz.std(axis=(0, 2, 3)), 1e-12, "diffs std")
    assert_close(opened["min_by_level.nc"]["geopotential"].values, z.min(axis=(0, 2, 3)), 0, "min")
    t2m = ds["2m_temperature"].values.astype(np.float64)
    assert_close(std["2m_temperature"].values, t2m.std(), 1e-12, "t2m std")

    # GraphCast's normalization: nothing left without statistics, no level dropped
    normalized = _normalize(ds, mean, std)
    assert normalized["geopotential"].sizes["level"] == len(levels)
    assert set(normalized.data_vars) == set(ds.data_vars)
    per_level = normalized["geopotential"].std(dim=("time", "lat", "lon")).values
    assert_close(per_level, np.ones(len(levels)), 1e-12, "normalized std")
    for f in opened.values():
        f.close()


def test_graphcast_needs_one_split_and_one_step_before_reading(tmp_path, capsys):
    _era5_like(tmp_path / "era5.zarr")
    base = ["compute", str(tmp_path / "era5.zarr"), "--format", "graphcast", "--quiet"]
    out = ["--output-dir", str(tmp_path / "o")]
    assert main([*base, *out, "--diff-steps", "1,2"]) == 2
    assert "one split and one difference step" in capsys.readouterr().err
    assert main([*base, "--output", str(tmp_path / "x.nc")]) == 2
    assert "give --output-dir" in capsys.readouterr().err
    assert not (tmp_path / "o").exists() and not (tmp_path / "x.nc").exists()


def test_graphcast_folder_is_read_back_and_compared(tmp_path, capsys):
    """``report``/``compare`` read a GraphCast-style folder: the same values as the
    run's own summary, the difference mean (not in GraphCast's files) skipped."""
    ds = _era5_like(tmp_path / "era5.zarr")
    out, summary = tmp_path / "stats", tmp_path / "s.json"
    args = ["compute", str(tmp_path / "era5.zarr"), "--format", "graphcast", "--output-dir"]
    names = ["--variables", "geopotential,2m_temperature", "--diff-steps", "2"]
    assert main([*args, str(out), "--summary", str(summary), *names, "--quiet"]) == 0
    from wxstats.io.read import read_stats

    state = read_stats(out).streams["state"]
    assert state.features == [
        "geopotential_500", "geopotential_850", "geopotential_1000", "2m_temperature"
    ]  # fmt: skip
    z = ds["geopotential"].values.astype(np.float64)
    assert_close(state.mean[:3], z.mean(axis=(0, 2, 3)), 1e-12, "mean read back")
    assert_close(state.diff[2].std[:3], (z[2:] - z[:-2]).std(axis=(0, 2, 3)), 1e-12, "diff")
    capsys.readouterr()
    assert main(["compare", str(out), str(summary), "--rtol", "1e-15"]) == 0
    text = capsys.readouterr().out
    assert "diff 2h mean only in B, not compared" in text and "same within rtol" in text
    # two steps of the hourly axis: the span is in the file and read back
    with xr.open_dataset(out / "diffs_stddev_by_level.nc") as diffs:
        assert diffs.attrs["diff_span"] == "2h" and diffs.attrs["diff_step"] == 2
    assert state.diff_span == {2: 7200}


def test_graphcast_folder_with_a_static_field_is_read_back(tmp_path, capsys):
    """docs/graphcast.md's example names ``land_sea_mask``: the diffs file has no
    static (GraphCast divides only its targets' residuals by it), and ``report``,
    ``compare`` and ``wxstats.read`` read the folder, the static as a ``static``
    stream without differences, equal to a float64 reference."""
    import wxstats

    ds = _era5_like(tmp_path / "era5.zarr")
    out, summary = tmp_path / "stats", tmp_path / "s.json"
    args = ["compute", str(tmp_path / "era5.zarr"), "--format", "graphcast", "--output-dir"]
    names = ["--variables", "geopotential,2m_temperature,land_sea_mask", "--diff-steps", "1"]
    assert main([*args, str(out), "--summary", str(summary), *names, "--quiet"]) == 0
    with xr.open_dataset(out / "diffs_stddev_by_level.nc") as diffs:
        assert "land_sea_mask" not in diffs.data_vars
    stats = wxstats.read(out)
    assert set(stats.streams) == {"state", "static"}
    static = stats.streams["static"]
    assert static.features == ["land_sea_mask"] and static.category == "static"
    assert not static.diff
    lsm = ds["land_sea_mask"].values.astype(np.float64)
    assert_close(static.mean, [lsm.mean()], 1e-12, "static mean")
    assert_close(static.std, [lsm.std()], 1e-12, "static std")
    assert_close(static.minimum, [lsm.min()], 0, "static min")
    t2m = ds["2m_temperature"].values.astype(np.float64)
    state = stats.streams["state"]
    assert state.features[-1] == "2m_temperature"
    assert_close(state.diff[1].std[-1:], [(t2m[1:] - t2m[:-1]).std()], 1e-12, "t2m diff")
    capsys.readouterr()
    assert main(["report", str(out), "-o", str(tmp_path / "report")]) == 0
    assert main(["compare", str(out), str(summary), "--rtol", "1e-15"]) == 0
    text = capsys.readouterr().out
    assert "static: only in" not in text and "same within rtol" in text
    # a variable with time missing from the diffs file is still refused in mean/stddev
    with xr.open_dataset(out / "stddev_by_level.nc") as std:
        std.load().drop_vars("land_sea_mask").to_netcdf(tmp_path / "std.nc")
    (tmp_path / "std.nc").replace(out / "stddev_by_level.nc")
    assert main(["report", str(out), "-o", str(tmp_path / "report")]) == 2
    assert "stddev_by_level.nc: no land_sea_mask" in capsys.readouterr().err
