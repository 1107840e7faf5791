"""``--moments 4``: skewness and excess kurtosis of values and differences, exact
like the mean and std, against scipy and float64 two-pass references (weighted,
pooled, at a large offset), kept by states and their updates, absent by default;
and the report's advice for heavy-tailed variables checked on synthetic data."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
from scipy import stats as sps

import wxstats
from wxstats.cli import main
from wxstats.io.read import read_stats
from wxstats.tools.checks import transform_advice

LATS = np.array([-60.0, -20.0, 10.0, 50.0])


def _dataset(n_t: int = 48) -> xr.Dataset:
    """``t`` (time, level, lat, lon) near 1e4 with gamma noise (skewed), ``tp``
    (time, lat, lon) lognormal and non-negative (precipitation-like)."""
    rng = np.random.default_rng(7)
    t = 1e4 + rng.gamma(2.0, 3.0, (n_t, 2, len(LATS), 5))
    tp = 1e-3 * rng.lognormal(0.0, 1.0, (n_t, len(LATS), 5))
    return xr.Dataset(
        {
            "t": (("time", "level", "lat", "lon"), t),
            "tp": (("time", "lat", "lon"), tp),
        },
        coords={
            "time": np.datetime64("2021-01-01T00", "h") + np.arange(n_t).astype("m8[h]"),
            "level": [850, 500],
            "lat": ("lat", LATS, {"units": "degrees_north"}),
            "lon": np.arange(5.0),
        },
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("moments") / "d.zarr"
    _dataset().to_zarr(path)
    return path


def _weighted(x: np.ndarray, w: np.ndarray) -> tuple[float, float]:
    """Weighted population skewness and excess kurtosis, float64 two-pass."""
    w = np.broadcast_to(w, x.shape).ravel()
    x = x.ravel()
    mean = (w * x).sum() / w.sum()
    c = x - mean
    m2, m3, m4 = ((w * c**p).sum() / w.sum() for p in (2, 3, 4))
    return m3 / m2**1.5, m4 / m2**2 - 3


def test_values_and_differences_match_scipy_at_a_large_offset(store):
    stats = wxstats.compute(str(store), moments=4, diff_steps=(1,))
    t = _dataset()["t"].values
    s = stats.streams["t__train"]
    for level in range(2):
        x = t[:, level].ravel()
        np.testing.assert_allclose(s.skewness[level], sps.skew(x, bias=True), rtol=1e-9)
        np.testing.assert_allclose(
            s.excess_kurtosis[level], sps.kurtosis(x, fisher=True, bias=True), rtol=1e-9
        )
        d = (t[1:, level] - t[:-1, level]).ravel()
        np.testing.assert_allclose(s.diff[1].skewness[level], sps.skew(d), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(s.diff[1].excess_kurtosis[level], sps.kurtosis(d), rtol=1e-9)
        # the textbook one-pass formula from float64 raw moments loses digits at this
        # offset (cancellation); the exact raw moments lose none
        m1, m2, m3 = (np.mean(x**p) for p in (1, 2, 3))
        var = m2 - m1 * m1
        naive = (m3 - 3 * m1 * m2 + 2 * m1**3) / var**1.5
        assert abs(naive - sps.skew(x)) > 1e-7 * abs(sps.skew(x))


def test_weighted_and_pooled(store):
    stats = wxstats.compute(str(store), moments=4, weights="coslat", pool=("level",))
    t = _dataset()["t"].values
    w = np.cos(np.deg2rad(LATS))[:, None] * np.ones(5)
    levels = stats.streams["t__train"]
    for level in range(2):
        skew, kurt = _weighted(t[:, level], w)
        np.testing.assert_allclose(levels.skewness[level], skew, rtol=1e-9)
        np.testing.assert_allclose(levels.excess_kurtosis[level], kurt, rtol=1e-9)
    pooled = stats.streams["t_pooled__train"]
    skew, kurt = _weighted(np.moveaxis(t, 1, 0), w)
    np.testing.assert_allclose(pooled.skewness[0], skew, rtol=1e-9)
    np.testing.assert_allclose(pooled.excess_kurtosis[0], kurt, rtol=1e-9)


def test_absent_by_default_written_when_asked(store, tmp_path):
    default = wxstats.compute(str(store))
    assert all(s.skewness is None for s in default.streams.values())
    out, summary = tmp_path / "s.nc", tmp_path / "s.json"
    args = ["compute", str(store), "--moments", "4", "--quiet"]
    assert main([*args, "--output", str(out), "--summary", str(summary)]) == 0
    with xr.open_dataset(out) as ds:
        assert {"t__train__skewness", "tp__train__excess_kurtosis"} <= set(ds.data_vars)
        assert "t__train__diff_skewness" in ds.data_vars
    back = read_stats(out).streams["tp__train"]
    tp = _dataset()["tp"].values.ravel()
    np.testing.assert_allclose(back.skewness, [sps.skew(tp)], rtol=1e-9)
    entry = json.loads(summary.read_text())
    assert {"skewness", "excess_kurtosis"} <= set(entry["state"])


def test_a_state_keeps_the_order_through_update(store, tmp_path):
    """compute on the first half with --state, update with the second: the full run's
    bytes (the seam's differences included)."""
    ds = _dataset()
    first, second = tmp_path / "first.zarr", tmp_path / "second.zarr"
    ds.isel(time=slice(0, 24)).to_zarr(first)
    ds.isel(time=slice(24, None)).to_zarr(second)
    state = tmp_path / "p.wxstate"
    args = ["--moments", "4", "--quiet", "--diff-steps", "1"]
    assert main(["compute", str(first), "--state", str(state), *args]) == 0
    updated = tmp_path / "u.nc"
    assert main(["update", str(state), str(second), "--output", str(updated), "--quiet"]) == 0
    full = tmp_path / "full.nc"
    assert main(["compute", str(store), "--output", str(full), *args]) == 0
    with xr.open_dataset(updated) as a, xr.open_dataset(full) as b:
        for name in ("t__train__skewness", "t__train__diff_excess_kurtosis"):
            assert a[name].values.tobytes() == b[name].values.tobytes(), name


@pytest.mark.parametrize(
    "name,draw",
    [
        ("gamma shape 2", lambda rng: rng.gamma(2.0, 1.0, 200_000)),
        ("gamma shape 0.3 (precipitation)", lambda rng: 1e-3 * rng.gamma(0.3, 1.0, 200_000)),
        ("lognormal sigma 0.5", lambda rng: rng.lognormal(0.0, 0.5, 200_000)),
        ("lognormal sigma 1", lambda rng: rng.lognormal(0.0, 1.0, 200_000)),
        ("left-skewed (humidity)", lambda rng: 1.0 - rng.gamma(1.0, 0.05, 200_000)),
    ],
)
def test_the_advised_transform_brings_the_data_closer_to_normal(name, draw):
    x = draw(np.random.default_rng(3))
    skew, kurt = sps.skew(x), sps.kurtosis(x)
    advice = transform_advice(skew, kurt, x.mean(), x.min(), x.max())
    assert advice is not None, name
    transformed = eval(advice, {"log1p": np.log1p, "sqrt": np.sqrt, "x": x})  # noqa: S307
    assert abs(sps.skew(transformed)) < 0.6 * abs(skew), (name, advice)
    assert sps.kurtosis(transformed) < kurt, (name, advice)


def test_no_advice_for_near_normal_data():
    x = np.random.default_rng(4).normal(1e4, 3.0, 100_000)
    assert transform_advice(sps.skew(x), sps.kurtosis(x), x.mean(), x.min(), x.max()) is None
