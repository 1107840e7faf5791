"""The labelled result model: statistics along their dimensions and coordinates
(``level``, a climatology's ``month``, ``diff_step``), selected by label, against an
independent float64 reference; the same labels computed in-process and read back
from the written file."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from gridded_data import gridded, write_zarr

import wxstats
from reference import two_pass
from wxstats.cli import main

STEPS = (1, 3)


@pytest.fixture(scope="module")
def clim(tmp_path_factory):
    """60 steps 18 h apart from 20 January (January to March), levels stored
    850 then 500 (not sorted: positions are not labels); ``--by month`` computed
    in-process and written to a statistics file."""
    root = tmp_path_factory.mktemp("labels")
    ds, _ = gridded(n_time=60)
    times = np.datetime64("2021-01-20T00", "h") + 18 * np.arange(60).astype("timedelta64[h]")
    ds = ds.assign_coords(time=times).isel(level=[1, 0])
    path = write_zarr(ds, root / "c.zarr", time_chunk=7)
    stats = wxstats.compute(path, by="month", diff_steps=STEPS)
    out = root / "stats.nc"
    argv = ["compute", str(path), "--by", "month", "--diff-steps", "1,3", "--quiet"]
    assert main([*argv, "--output", str(out)]) == 0
    return ds, stats, out


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """The same data without groups, written as a statistics file and a summary."""
    root = tmp_path_factory.mktemp("labels-plain")
    ds, _ = gridded(n_time=60)
    ds = ds.isel(level=[1, 0])
    path = write_zarr(ds, root / "p.zarr", time_chunk=7)
    argv = ["compute", str(path), "--quiet", "--output", str(root / "s.nc")]
    assert main([*argv, "--summary", str(root / "s.json")]) == 0
    return ds, root


def _reference(ds: xr.Dataset, var: str, level: int, month: int) -> dict:
    """Two-pass float64 statistics of ``var`` at ``level`` over the time steps of
    ``month``; differences counted at their later step."""
    x = np.asarray(ds[var].sel(level=level).values, dtype=np.float64)
    months = pd.DatetimeIndex(ds["time"].values).month
    at = np.flatnonzero(months == month)
    mean, std = two_pass(x[at].reshape(-1), 0)
    out = {"mean": mean, "std": std, "count": x[at].size, "min": x[at].min(), "max": x[at].max()}
    for k in STEPS:
        later = at[at >= k]
        d = (x[later] - x[later - k]).reshape(-1)
        out[k] = (d.size, *two_pass(d, 0))
    return out


def _views(stats) -> list[xr.Dataset]:
    """The stream's own labelled view, and the statistics file's variables of it."""
    whole = stats.to_xarray()
    named = {op: whole[f"z__train__{op}"] for op in ("mean", "std", "count", "min", "max")}
    named.update({f"diff_{op}": whole[f"z__train__diff_{op}"] for op in ("count", "mean", "std")})
    return [stats.streams["z__train"].to_xarray(), xr.Dataset(named)]


def _check(view: xr.Dataset, ds: xr.Dataset) -> None:
    assert list(view["month"].values) == list(range(1, 13))
    assert list(view["level"].values) == [850, 500]
    assert list(view["diff_step"].values) == list(STEPS)
    assert view["mean"].dims == ("month", "level")
    assert view["diff_std"].dims == ("diff_step", "month", "level")
    for level in (850, 500):
        for month in (1, 2, 3):
            ref = _reference(ds, "z", level, month)
            got = view.sel(level=level, month=month)
            assert int(got["count"]) == ref["count"]
            np.testing.assert_allclose(float(got["mean"]), ref["mean"], rtol=1e-12)
            np.testing.assert_allclose(float(got["std"]), ref["std"], rtol=1e-10)
            assert float(got["min"]) == ref["min"] and float(got["max"]) == ref["max"]
            for k in STEPS:
                n, mean, std = ref[k]
                step = got.sel(diff_step=k)
                assert int(step["diff_count"]) == n
                np.testing.assert_allclose(float(step["diff_mean"]), mean, rtol=1e-9, atol=1e-6)
                np.testing.assert_allclose(float(step["diff_std"]), std, rtol=1e-10)
    # a month without data is there, by its label, with nothing in it
    assert int(view["count"].sel(month=7, level=500)) == 0
    assert np.isnan(float(view["mean"].sel(month=7, level=500)))


def test_computed_statistics_select_by_label(clim):
    ds, stats, _ = clim
    for view in _views(stats):
        _check(view, ds)


def test_read_back_statistics_select_by_label(clim):
    ds, stats, out = clim
    read = wxstats.read(out)
    for view in _views(read):
        _check(view, ds)
    xr.testing.assert_identical(
        read.streams["z__train"].to_xarray(), stats.streams["z__train"].to_xarray()
    )


def test_pooled_statistics_carry_the_dimensions_pooled_over(clim, tmp_path):
    """``--pool level``: the pooled stream is labelled with what it was pooled over,
    computed and read back, and its values are those of every level together."""
    ds, _, _ = clim
    path = tmp_path / "p.zarr"
    write_zarr(ds, path, time_chunk=7)
    out = tmp_path / "pooled.nc"
    assert main(["compute", str(path), "--pool", "level", "--quiet", "--output", str(out)]) == 0
    computed = wxstats.compute(path, pool=("level",))
    x = np.asarray(ds["z"].values, dtype=np.float64).reshape(-1)
    mean, std = two_pass(x, 0)
    for stats in (computed, wxstats.read(out)):
        stream = stats.streams["z_pooled__train"]
        assert stream.labels.pooled_dims == ("level",)
        view = stream.to_xarray()
        assert view.attrs["pooled over"] == "level" and "level" not in view.dims
        np.testing.assert_allclose(float(view["mean"]), mean, rtol=1e-12)
        np.testing.assert_allclose(float(view["std"]), std, rtol=1e-10)
        assert int(view["count"]) == x.size


def test_a_summary_keeps_flat_feature_names_as_labels(plain):
    """The JSON summary keeps names, not levels: read back, its features are
    labelled by name along ``state_feature``; the statistics file keeps the levels."""
    ds, root = plain
    x = np.asarray(ds["z"].sel(level=850).values, dtype=np.float64).reshape(-1)
    mean, std = two_pass(x, 0)
    flat = wxstats.read(root / "s.json").streams["state"].to_xarray()
    assert "z_850" in list(flat["state_feature"].values)
    labelled = wxstats.read(root / "s.nc").streams["z__train"].to_xarray()
    for got in (flat.sel(state_feature="z_850"), labelled.sel(level=850)):
        np.testing.assert_allclose(float(got["mean"]), mean, rtol=1e-12)
        np.testing.assert_allclose(float(got["std"]), std, rtol=1e-10)
        assert int(got["count"]) == x.size


def test_a_meps_source_gives_labels_and_the_file_carries_its_units(meps_small):
    """The MEPS source hands over labels only (its variables along
    ``state_feature``, each with its own unit); the statistics file puts each
    feature's unit and long name, as the datastore config names them, in
    coordinates and writes no stream-wide ``units`` attribute."""
    import yaml

    from wxstats.sources.meps import MepsSource

    dataset = yaml.safe_load(meps_small.read_text())["dataset"]
    source = MepsSource(meps_small)
    state = source.streams[0].layout
    assert (state.variable, state.role, state.units_per_feature) == ("state", "state", True)
    assert set(state.coords) == {"state_feature"}
    assert list(state.coords["state_feature"][1]) == dataset["var_names"]
    ds = wxstats.compute(meps_small).to_xarray()
    mean = ds["state__train__mean"]
    assert list(mean["state_feature"].values) == dataset["var_names"]
    assert list(mean["state_feature_units"].values) == dataset["var_units"]
    assert list(mean["state_feature_long_name"].values) == dataset["var_longnames"]
    flux = ds["forcing__train__mean"]
    assert list(flux["forcing_feature_units"].values) == ["W/m**2"]
    assert "units" not in mean.attrs and "units" not in flux.attrs


# a MEPS state file's forcing stream as wxstats 0.x wrote it (keys and coordinates
# from before labels were named for what they mean)
OLD_SPEC = {
    "diff_span": {},
    "diff_steps": [],
    "features": ["toa_downwelling_shortwave_flux"],
    "layout": {
        "category": "forcing",
        "coords": {
            "forcing_feature": [["forcing_feature"], ["toa_downwelling_shortwave_flux"], "|O"],
            "forcing_feature_long_name": [
                ["forcing_feature"],
                ["toa_downwelling_shortwave_flux"],
                "|O",
            ],
            "forcing_feature_units": [["forcing_feature"], ["W/m**2"], "|O"],
        },
        "feature_dims": ["forcing_feature"],
        "feature_shape": [1],
        "prefix": "forcing",
        "split": "train",
        "unit_attribute": False,
    },
    "long_names": ["toa_downwelling_shortwave_flux"],
    "name": "toa_downwelling_shortwave_flux",
    "units": ["W/m**2"],
    "weighted": False,
}


def test_a_state_files_layout_reads_as_labels_and_writes_back_the_same_json():
    """An existing state file's stream reads as the source's labels (variable,
    role, units per feature; no unit coordinates), and writes the same JSON."""
    import json

    from wxstats.runtime.state import _spec_json, _spec_of

    spec = _spec_of(OLD_SPEC)
    lay = spec.layout
    assert (lay.variable, lay.split, lay.role) == ("forcing", "train", "forcing")
    assert lay.units_per_feature and set(lay.coords) == {"forcing_feature"}
    assert json.dumps(_spec_json(spec), sort_keys=True) == json.dumps(OLD_SPEC, sort_keys=True)
