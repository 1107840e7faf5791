"""makani's statistics files (``--format makani``): shapes and dtypes as makani's
``get_stats.py`` writes them, values against a float64 numpy reference weighted by
cos(latitude) and against makani's own ``naive`` quadrature (re-derived here from
its definition), time means per grid point, the same bytes for any layout.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr
from distributed_helpers import env
from refusals import assert_refused

from wxstats.cli import main
from wxstats.io.read import read_stats

H, W, T = 19, 36, 30  # an equiangular grid with both poles, as makani's default expects
LATS = np.linspace(90.0, -90.0, H)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("makani")
    rng = np.random.default_rng(7)
    shape = (T, H, W)
    ds = xr.Dataset(
        {
            "t2m": (
                ("time", "lat", "lon"),
                (
                    250
                    + 40 * np.cos(np.deg2rad(LATS))[None, :, None]
                    + 3 * rng.standard_normal(shape)
                ).astype(np.float32),
                {"units": "K"},
            ),
            "z": (
                ("time", "level", "lat", "lon"),
                (
                    np.array([5.5e4, 1.4e4])[None, :, None, None]
                    + 200 * rng.standard_normal((T, 2, H, W))
                ).astype(np.float32),
                {"units": "m2 s-2"},
            ),
        },
        coords={
            "time": pd.date_range("2020-01-01", periods=T, freq="6h"),
            "level": [500, 850],
            "lat": ("lat", LATS, {"units": "degrees_north"}),
            "lon": np.arange(W) * 10.0,
        },
    )
    encoding = {"t2m": {"chunks": (7, H, W)}, "z": {"chunks": (7, 2, H, W)}}
    ds.to_zarr(root / "era.zarr", mode="w", encoding=encoding, consolidated=False)
    # the channels in makani's layout (time, C, H, W), in the order asked for below
    cube = np.concatenate([ds.z.values, ds.t2m.values[:, None]], axis=1).astype(np.float64)
    return root, cube


def _run(root, out, *extra):
    args = ["compute", str(root / "era.zarr"), "--format", "makani", "--output-dir", str(out)]
    assert main([*args, "--variables", "z,t2m", "--diff-steps", "1,4", "--quiet", *extra]) == 0


def _weighted(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """mean and std over (time, H, W) of x (time, C, H, W), weights w (H, W), float64."""
    ww = np.broadcast_to(w, x.shape)
    mean = (ww * x).sum(axis=(0, 2, 3)) / ww.sum(axis=(0, 2, 3))
    var = (ww * (x - mean[None, :, None, None]) ** 2).sum(axis=(0, 2, 3)) / ww.sum(axis=(0, 2, 3))
    return mean, np.sqrt(var)


def test_files_match_a_cos_latitude_reference(store, tmp_path):
    root, cube = store
    _run(root, tmp_path)
    c = cube.shape[1]
    coslat = np.repeat(np.cos(np.deg2rad(LATS))[:, None], W, axis=1)
    mean, std = _weighted(cube, coslat)
    loaded = {p.stem: np.load(p) for p in tmp_path.glob("*.npy")}
    for name in ("global_means", "global_stds", "mins", "maxs"):
        assert loaded[name].shape == (1, c, 1, 1) and loaded[name].dtype == np.float32, name
    rtol = 1.2e-7  # float64 statistics rounded once to float32
    np.testing.assert_allclose(loaded["global_means"].ravel(), mean, rtol=rtol)
    np.testing.assert_allclose(loaded["global_stds"].ravel(), std, rtol=rtol)
    assert np.array_equal(loaded["mins"].ravel(), cube.min(axis=(0, 2, 3)).astype(np.float32))
    assert np.array_equal(loaded["maxs"].ravel(), cube.max(axis=(0, 2, 3)).astype(np.float32))
    for k in (1, 4):
        d_mean, d_std = _weighted(cube[k:] - cube[:-k], coslat)
        np.testing.assert_allclose(
            loaded[f"time_diff_means_dt{k}"].ravel(), d_mean, rtol=1e-6, atol=1e-5
        )
        np.testing.assert_allclose(loaded[f"time_diff_stds_dt{k}"].ravel(), d_std, rtol=rtol)
    # time means: per grid point, over time, unweighted (as makani's)
    assert loaded["time_means"].shape == (1, c, H, W)
    np.testing.assert_allclose(loaded["time_means"][0], cube.mean(axis=0), rtol=1.2e-7)
    meta = json.loads((tmp_path / "wxstats_makani.json").read_text())
    assert meta["channels"] == ["z_500", "z_850", "t2m"]
    assert "coslat" in meta["method"]


def test_global_statistics_agree_with_makanis_naive_quadrature(store, tmp_path):
    """makani's default rule, from its definition: weights sin(colatitude) on
    linspace(0, pi, H) in float32 torch, tiled over longitudes, sums in float64."""
    root, cube = store
    _run(root, tmp_path)
    jacobian = torch.clamp(torch.sin(torch.linspace(0, torch.pi, H)), min=0.0)
    quad = (jacobian.unsqueeze(1) * (2 * torch.pi / W) * (torch.pi / H)).tile(1, W)
    data = torch.as_tensor(cube)
    total = quad.to(torch.float64).sum() * data.shape[0]
    mean = (data * quad.to(torch.float64)).sum(dim=(0, 2, 3)) / total
    m2 = ((data - mean[None, :, None, None]) ** 2 * quad.to(torch.float64)).sum(dim=(0, 2, 3))
    std = torch.sqrt(m2 / total)
    np.testing.assert_allclose(np.load(tmp_path / "global_means.npy").ravel(), mean, rtol=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "global_stds.npy").ravel(), std, rtol=1e-6)


def test_any_layout_writes_the_same_bytes(store, tmp_path, monkeypatch):
    root, _ = store
    monkeypatch.setenv("PYTHONPATH", env()["PYTHONPATH"])  # the ranks run this checkout
    runs = []
    for i, extra in enumerate(([], ["--block-mb", "0.01"], ["--nproc", "3", "--block-mb", "0.02"])):
        _run(root, tmp_path / str(i), *extra)
        runs.append({p.name: p.read_bytes() for p in sorted((tmp_path / str(i)).glob("*.npy"))})
    assert runs[0] == runs[1] == runs[2]
    assert len(runs[0]) == 9


def test_read_back_as_statistics(store, tmp_path):
    root, cube = store
    _run(root, tmp_path)
    stats = read_stats(tmp_path)
    state = stats.streams["state"]
    assert state.features == ["z_500", "z_850", "t2m"] and sorted(state.diff) == [1, 4]
    assert np.array_equal(state.minimum, cube.min(axis=(0, 2, 3)).astype(np.float32))
    # compare: the float32 files against the float64 statistics file of the same run
    nc = tmp_path / "f.nc"
    args = ["compute", str(root / "era.zarr"), "--weights", "coslat", "--output", str(nc)]
    assert main([*args, "--variables", "z,t2m", "--diff-steps", "1,4", "--quiet"]) == 0
    assert main(["compare", str(tmp_path), str(nc), "--rtol", "1e-7"]) == 0
    assert main(["compare", str(tmp_path), str(nc), "--rtol", "1e-12"]) == 1  # float32


def test_what_makani_files_cannot_hold_is_refused(store, tmp_path, capsys):
    root, _ = store
    base = ["compute", str(root / "era.zarr"), "--format", "makani", "--quiet"]
    out = ["--output-dir", str(tmp_path)]
    assert_refused(
        capsys,
        tmp_path,
        [*base, *out, "--split", "a=2020-01-01/2020-01-03", "--split", "b=2020-01-04/2020-01-08"],
        "one split",
        "a, b",
    )
    assert_refused(capsys, tmp_path, [*base, *out, "--skipna"], "--skipna")
    assert_refused(capsys, tmp_path, [*base, "--output", str(tmp_path / "x.nc")], "--output-dir")
    flat = tmp_path / "cells.zarr"
    xr.Dataset(
        {"t": (("time", "cell"), np.ones((4, 5), np.float32))},
        coords={"time": pd.date_range("2020", periods=4, freq="h")},
    ).to_zarr(flat, consolidated=False)
    assert_refused(
        capsys,
        tmp_path,
        ["compute", str(flat), "--format", "makani", "--weights", "none", *out, "--quiet"],
        "2-D grid",
        "t: cell",
    )
