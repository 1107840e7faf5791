"""Pooled statistics (``--pool level``): each variable over all its levels together,
against a float64 numpy reference over the pooled values, where NaN (``--skipna``)
make the counts differ per level and anemoi's equal-count formula is measurably
wrong; weighted too; byte-identical for two block sizes; refused clearly where it
has no meaning.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
from growing import merge_states
from refusals import assert_refused

from wxstats.cli import main
from wxstats.io.read import read_stats

LATS = np.array([-70.0, -30.0, 0.0, 40.0, 80.0])
LEVELS = [850, 500, 250]
NAN_SHARE = [0.0, 0.35, 0.7]  # counts differ per level
STEPS = ["--diff-steps", "1", "--quiet"]


def _dataset() -> tuple[xr.Dataset, np.ndarray]:
    """``t`` (time, level, lat, lon) with very different means per level and a
    different share of NaN on each; ``t2m`` (time, lat, lon) without levels."""
    rng = np.random.default_rng(11)
    shape = (40, len(LEVELS), len(LATS), 6)
    base = np.array([1.2e4, 5.6e4, 1.05e5])[None, :, None, None]
    t = base + np.array([30.0, 200.0, 900.0])[None, :, None, None] * rng.standard_normal(shape)
    for level, share in enumerate(NAN_SHARE):
        t[:, level][rng.random(t[:, level].shape) < share] = np.nan
    ds = xr.Dataset(
        {
            "t": (("time", "level", "lat", "lon"), t, {"units": "m2 s-2"}),
            "t2m": (("time", "lat", "lon"), 280 + rng.standard_normal(shape[:1] + shape[2:])),
        },
        coords={
            "time": np.datetime64("2021-01-01T00", "h") + np.arange(shape[0]).astype("m8[h]"),
            "level": LEVELS,
            "lat": ("lat", LATS, {"units": "degrees_north"}),
            "lon": np.arange(6.0),
        },
    )
    return ds, t


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("pool")
    ds, t = _dataset()
    ds.to_zarr(root / "d.zarr", encoding={"t": {"chunks": (5, 3, 5, 6)}})
    return root / "d.zarr", t


def _reference(x: np.ndarray, w: np.ndarray) -> tuple[int, float, float]:
    """(count, mean, std) of every finite value together, weighted by ``w``, two-pass."""
    ok = np.isfinite(x)
    ww = np.broadcast_to(w, x.shape)[ok]
    v = x[ok]
    mean = (ww * v).sum() / ww.sum()
    return int(ok.sum()), mean, np.sqrt((ww * (v - mean) ** 2).sum() / ww.sum())


def _equal_count(mean: np.ndarray, std: np.ndarray) -> tuple[float, float]:
    """anemoi's joint normalizer: E[x²] rebuilt from the per-level mean and std,
    assuming an equal sample count per level."""
    m = float(np.mean(mean))
    return m, float(np.sqrt(np.mean(std**2 + mean**2) - m * m))


def _run(path, out, *extra: str) -> None:
    args = ["compute", str(path), "--pool", "level", "--skipna", "--output", str(out)]
    assert main([*args, *STEPS, *extra]) == 0


@pytest.mark.parametrize("weights", [None, "coslat"])
def test_pooled_statistics_are_exact_where_the_equal_count_formula_is_not(store, tmp_path, weights):
    path, t = store
    out = tmp_path / "s.nc"
    summary = tmp_path / "s.json"
    extra = ["--summary", str(summary)] + (["--weights", weights] if weights else [])
    _run(path, out, *extra)
    w = np.cos(np.deg2rad(LATS))[:, None] * np.ones(6) if weights else np.ones((5, 6))
    stats = read_stats(out)
    pooled = stats.streams["t_pooled__train"]
    count, mean, std = _reference(t, w)
    assert pooled.features == ["t_pooled"] and int(pooled.count[0]) == count
    np.testing.assert_allclose(pooled.mean[0], mean, rtol=1e-12)
    np.testing.assert_allclose(pooled.std[0], std, rtol=1e-12)
    assert pooled.minimum[0] == np.nanmin(t) and pooled.maximum[0] == np.nanmax(t)
    d_count, d_mean, d_std = _reference(t[1:] - t[:-1], w)
    assert int(pooled.diff[1].count[0]) == d_count
    np.testing.assert_allclose(pooled.diff[1].mean[0], d_mean, rtol=1e-10)
    np.testing.assert_allclose(pooled.diff[1].std[0], d_std, rtol=1e-12)
    # the per-level statistics are unchanged; the equal-count formula on them is wrong
    levels = stats.streams["t__train"]
    assert len(set(levels.count.tolist())) == 3
    eq_mean, eq_std = _equal_count(levels.mean, levels.std)
    assert abs(eq_mean - mean) / abs(mean) > 1e-6
    assert abs(eq_std - std) / std > 1e-6
    # a variable without levels has nothing to pool
    assert "t2m_pooled__train" not in stats.streams
    with xr.open_dataset(out) as ds:
        assert ds["t_pooled__train__mean"].attrs["pooled over"] == "level"
        assert ds["t_pooled__train__mean"].dims == ()
        assert ds["t_pooled__train__mean"].attrs["units"] == "m2 s-2"
        assert ds.attrs["source_pooled_over"] == "level"
    entry = json.loads(summary.read_text())
    assert entry["source"]["pooled_over"] == "level"
    i = entry["variables"].index("t_pooled")
    assert entry["state"]["mean"][i] == float(pooled.mean[0])
    assert entry["state"]["std"][i] == float(pooled.std[0])


def test_pooled_statistics_do_not_depend_on_the_block_size(store, tmp_path):
    path, _ = store
    files = []
    for mb in ("0.001", "64"):
        out = tmp_path / f"b{mb}.nc"
        _run(path, out, "--block-mb", mb, "--weights", "coslat")
        files.append(out)
    with xr.open_dataset(files[0]) as a, xr.open_dataset(files[1]) as b:
        names = [n for n in a.data_vars if n.startswith("t_pooled")]
        assert names and names == [n for n in b.data_vars if n.startswith("t_pooled")]
        for name in names:
            assert a[name].values.tobytes() == b[name].values.tobytes(), name


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--pool", "lat"], "no selected variable has lat as a feature dimension"),
        (["--pool", "height"], "no selected variable has height"),
        (["--pool", "time"], "the time dimension is always reduced"),
        (["--pool", "level", "--by", "month"], "not with --by"),
        (["--pool", "level", "--write-into"], "store's statistics; not with --pool level"),
        (["--pool", "level", "--format", "graphcast"], "--pool level (no place for pooled"),
    ],
)
def test_refused_before_reading(store, tmp_path, capsys, extra, message):
    path, _ = store
    out = tmp_path / "r.nc"
    args = ["compute", str(path), "--output", str(out), "--quiet", *extra]
    assert_refused(capsys, tmp_path, args, message)


def test_a_state_keeps_the_pooling(store, tmp_path):
    """``merge`` of a state written with ``--pool`` writes the same pooled statistics."""
    path, _ = store
    direct, state = tmp_path / "d.nc", tmp_path / "s.wxstate"
    _run(path, direct, "--state", str(state))
    merged = merge_states([state], tmp_path / "m.nc")
    with xr.open_dataset(direct) as a, xr.open_dataset(merged) as b:
        names = [n for n in a.data_vars if n.startswith("t_pooled")]
        assert names == [n for n in b.data_vars if n.startswith("t_pooled")]
        for name in names:
            assert a[name].values.tobytes() == b[name].values.tobytes(), name
        assert b["t_pooled__train__std"].attrs["pooled over"] == "level"


def test_pooled_over_one_of_two_feature_dimensions(tmp_path):
    """``--pool level`` of ``q(time, level, member, ...)`` stays along ``member``."""
    rng = np.random.default_rng(3)
    q = (
        rng.standard_normal((12, 3, 2, 4, 5)) * np.array([1.0, 10.0, 100.0])[:, None, None, None]
        + 7
    )
    q[:, 2][rng.random(q[:, 2].shape) < 0.5] = np.nan
    ds = xr.Dataset(
        {"q": (("time", "level", "member", "y", "x"), q)},
        coords={"time": np.arange(12), "level": LEVELS, "member": [3, 9]},
    )
    ds.to_zarr(tmp_path / "q.zarr")
    out = tmp_path / "q.nc"
    args = ["--feature-dims", "level,member", "--split", "train=0/11"]
    _run(tmp_path / "q.zarr", out, *args)
    pooled = read_stats(out).streams["q_pooled__train"]
    assert pooled.features == ["q_pooled_3", "q_pooled_9"]
    for m in range(2):
        count, mean, std = _reference(q[:, :, m], np.ones((4, 5)))
        assert int(pooled.count[m]) == count
        np.testing.assert_allclose([pooled.mean[m], pooled.std[m]], [mean, std], rtol=1e-12)
    with xr.open_dataset(out) as f:
        assert f["q_pooled__train__mean"].dims == ("member",)
        assert list(f["member"].values) == [3, 9]


def test_states_with_and_without_pooling_do_not_merge(store, tmp_path, capsys):
    """Which pooled statistics a merge writes must not depend on the order of the
    states: a state with ``--pool`` and one without are refused, naming it."""
    path, _ = store
    first = ["--split", "train=2021-01-01T00/2021-01-01T19"]
    second = ["--split", "train=2021-01-01T20/2021-01-02T15"]
    _run(path, tmp_path / "a.nc", *first, "--state", str(tmp_path / "a.wxstate"))
    args = ["compute", str(path), "--skipna", *STEPS, *second]
    assert (
        main([*args, "--output", str(tmp_path / "b.nc"), "--state", str(tmp_path / "b.wxstate")])
        == 0
    )
    capsys.readouterr()
    merged = tmp_path / "m.nc"
    for order in (["a", "b"], ["b", "a"]):
        states = [str(tmp_path / f"{n}.wxstate") for n in order]
        assert main(["merge", *states, "--output", str(merged), "--quiet"]) == 2
        err = capsys.readouterr().err.strip()
        assert "pool" in err and len(err.splitlines()) == 1, err
        assert not merged.exists()
