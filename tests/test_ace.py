"""ACE's statistics files (``--format ace``): names, shapes and attributes as ACE's
``scripts/data_process/get_stats.py`` writes them and ``fme/core/normalizer.py``
reads them; values against an independent float64 numpy reference, unweighted
(ACE's default) and cos(latitude)-weighted; the residual of the step asked for;
time means per grid point; the same values for any layout; read back; refusals.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from refusals import assert_refused

from wxstats.cli import main
from wxstats.io.read import read_stats

H, W, T = 9, 12, 30
LATS = np.linspace(80.0, -80.0, H)
NAMES = ("PRESsfc", "TMP2m")
FILES = ("centering.nc", "scaling-full-field.nc", "scaling-residual.nc", "time-mean.nc")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("ace")
    rng = np.random.default_rng(11)
    walk = np.cumsum(rng.standard_normal((T, H, W)), axis=0)  # residuals unlike the field
    ds = xr.Dataset(
        {
            "PRESsfc": (
                ("time", "lat", "lon"),
                (1e5 + 800 * np.cos(np.deg2rad(LATS))[None, :, None] + 30 * walk).astype(
                    np.float32
                ),
                {"units": "Pa", "long_name": "surface pressure"},
            ),
            "TMP2m": (
                ("time", "lat", "lon"),
                (250 + 40 * np.cos(np.deg2rad(LATS))[None, :, None] + 2 * walk[::-1]).astype(
                    np.float32
                ),
                {"units": "K"},
            ),
            "HGTsfc": (("lat", "lon"), rng.random((H, W)).astype(np.float32)),
            "T_level": (
                ("time", "level", "lat", "lon"),
                rng.random((T, 2, H, W)).astype(np.float32),
            ),
        },
        coords={
            "time": pd.date_range("2020-01-01", periods=T, freq="6h"),
            "level": [500, 850],
            "lat": ("lat", LATS, {"units": "degrees_north"}),
            "lon": np.arange(W) * 30.0,
        },
    )
    ds.to_zarr(root / "ace.zarr", mode="w", consolidated=False)
    fields = {n: ds[n].values.astype(np.float64) for n in NAMES}  # (time, lat, lon)
    return root, fields


def _run(root, out, *extra):
    args = ["compute", str(root / "ace.zarr"), "--format", "ace", "--output-dir", str(out)]
    assert main([*args, "--variables", ",".join(NAMES), "--quiet", *extra]) == 0


def _moments(x: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Two-pass float64 mean and population std of x (time, lat, lon), weights w (lat, lon)."""
    ww = np.broadcast_to(w, x.shape)
    mean = (ww * x).sum() / ww.sum()
    return mean, np.sqrt((ww * (x - mean) ** 2).sum() / ww.sum())


def _scalars(path) -> dict[str, float]:
    with xr.open_dataset(path) as ds:
        assert all(ds[n].ndim == 0 and ds[n].dtype == np.float64 for n in ds.data_vars)
        return {n: float(ds[n]) for n in ds.data_vars}


@pytest.mark.parametrize("weights", ["none", "coslat"])
def test_files_match_a_float64_reference(store, tmp_path, weights):
    root, fields = store
    _run(root, tmp_path, "--weights", weights)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FILES)
    coslat = np.repeat(np.cos(np.deg2rad(LATS))[:, None], W, axis=1)
    w = np.ones((H, W)) if weights == "none" else coslat
    mean, std = (_scalars(tmp_path / f) for f in FILES[:2])
    residual = _scalars(tmp_path / "scaling-residual.nc")
    assert set(mean) == set(std) == set(residual) == set(NAMES)
    for name, x in fields.items():
        m, s = _moments(x, w)
        np.testing.assert_allclose([mean[name], std[name]], [m, s], rtol=1e-12)
        np.testing.assert_allclose(residual[name], _moments(x[1:] - x[:-1], w)[1], rtol=1e-12)
    with xr.open_dataset(tmp_path / "time-mean.nc") as ds:
        assert ds.attrs["input_samples"] == T and ds.attrs["residual_step"] == 1
        assert ("coslat" in ds.attrs["method"]) == (weights == "coslat")
        for name, x in fields.items():
            assert ds[name].dims == ("lat", "lon") and ds[name].dtype == np.float32
            np.testing.assert_allclose(ds[name].values, x.mean(axis=0), rtol=1.2e-7)
    with xr.open_dataset(tmp_path / "centering.nc") as ds:
        assert ds["PRESsfc"].attrs["units"] == "Pa" and ds["TMP2m"].attrs["units"] == "K"
        assert ds.attrs["input_samples"] == T


def test_the_residual_of_the_step_asked_for(store, tmp_path):
    root, fields = store
    _run(root, tmp_path, "--diff-steps", "4")
    residual = _scalars(tmp_path / "scaling-residual.nc")
    for name, x in fields.items():
        np.testing.assert_allclose(
            residual[name], _moments(x[4:] - x[:-4], np.ones((H, W)))[1], rtol=1e-12
        )
    assert sorted(read_stats(tmp_path).streams["state"].diff) == [4]


def test_any_layout_gives_the_same_values(store, tmp_path):
    root, _ = store
    runs = []
    for i, extra in enumerate(([], ["--block-mb", "0.005"])):
        _run(root, tmp_path / str(i), *extra)
        runs.append(
            {
                f: {
                    n: v.values.tobytes() for n, v in xr.load_dataset(tmp_path / str(i) / f).items()
                }
                for f in FILES
            }
        )
    assert runs[0] == runs[1]


def test_read_back_and_compared_with_the_float64_file(store, tmp_path):
    root, fields = store
    out = tmp_path / "ace"
    _run(root, out)
    state = read_stats(out).streams["state"]
    assert state.features == list(NAMES) and state.units == ["Pa", "K"]
    assert sorted(state.diff) == [1] and np.isnan(state.diff[1].mean).all()
    np.testing.assert_allclose(state.mean, [fields[n].mean() for n in NAMES], rtol=1e-12)
    nc = tmp_path / "f.nc"
    args = ["compute", str(root / "ace.zarr"), "--output", str(nc), "--quiet"]
    assert main([*args, "--variables", ",".join(NAMES)]) == 0
    assert main(["compare", str(out), str(nc), "--rtol", "1e-15"]) == 0  # float64, unrounded


def test_reads_a_folder_written_as_aces_get_stats_writes_it(tmp_path):
    """xarray's own files as get_stats.py makes them: float32 scalars, no residual_step
    (its residual is ``diff("time")``: step 1), a non-scalar variable ACE skips."""
    for name, values in (("centering.nc", [1.5, 2.0]), ("scaling-full-field.nc", [3.0, 4.0])):
        ds = xr.Dataset({n: np.float32(v) for n, v in zip(NAMES, values, strict=True)})
        ds["ak"] = ("z", np.arange(3.0))
        ds.attrs["input_samples"] = 8
        ds.to_netcdf(tmp_path / name)
    xr.Dataset({"PRESsfc": np.float32(0.5), "TMP2m": np.float32(0.25)}).to_netcdf(
        tmp_path / "scaling-residual.nc"
    )
    state = read_stats(tmp_path).streams["state"]
    assert state.features == list(NAMES)
    assert state.mean.tolist() == [1.5, 2.0] and state.std.tolist() == [3.0, 4.0]
    assert state.diff[1].std.tolist() == [0.5, 0.25]


def test_what_ace_files_cannot_hold_is_refused(store, tmp_path, capsys):
    root, _ = store
    base = ["compute", str(root / "ace.zarr"), "--format", "ace", "--quiet"]
    out = ["--output-dir", str(tmp_path)]
    names = ["--variables", ",".join(NAMES)]
    two = ["--split", "a=2020-01-01/2020-01-03", "--split", "b=2020-01-04/2020-01-08"]
    assert_refused(capsys, tmp_path, [*base, *out, *names, *two], "one split", "a, b")
    steps = [*base, *out, *names, "--diff-steps", "1,2"]
    assert_refused(capsys, tmp_path, steps, "one residual step", "1, 2")
    assert_refused(capsys, tmp_path, [*base, *out, *names, "--skipna"], "--skipna")
    assert_refused(
        capsys, tmp_path, [*base, *names, "--output", str(tmp_path / "x.nc")], "--output"
    )
    static = [*base, *out, "--variables", "PRESsfc,HGTsfc"]
    assert_refused(capsys, tmp_path, static, "HGTsfc: no time")
    levels = [*base, *out, "--variables", "T_level"]
    assert_refused(capsys, tmp_path, levels, "T_level: level", "--variables")
