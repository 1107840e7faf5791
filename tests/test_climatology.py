"""``--by month|hour``: statistics per group of time steps in one pass, against an
independent float64 reference, the same bits for any block size, in the
statistics file along a ``month``/``hour`` dimension."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from gridded_data import gridded, write_zarr
from growing import grow

from reference import assert_close
from wxstats.cli import main
from wxstats.io.read import read_stats
from wxstats.runtime.run import compute

STEPS = (1, 3)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """60 steps 18 h apart from 20 January: January, February and March."""
    root = tmp_path_factory.mktemp("clim")
    ds, truth = gridded(n_time=60)
    times = np.datetime64("2021-01-20T00", "h") + 18 * np.arange(60).astype("timedelta64[h]")
    ds = ds.assign_coords(time=times)
    return write_zarr(ds, root / "c.zarr", time_chunk=7), truth, times


def _reference(values, groups, group, start, stop, steps):
    """Two-pass float64 statistics of the steps of ``group`` in [start, stop);
    differences counted at their later time, both times inside."""
    inside = np.zeros(groups.shape[0], dtype=bool)
    inside[start:stop] = True
    sel = inside & (groups == group)
    x = values[sel].reshape(-1, values.shape[-1])
    out = {"count": x.shape[0], "mean": x.mean(0), "std": x.std(0), "diff": {}}
    out["min"], out["max"] = x.min(0), x.max(0)
    for k in steps:
        later = np.flatnonzero(sel)
        later = later[later - k >= start]
        d = (values[later] - values[later - k]).reshape(-1, values.shape[-1])
        out["diff"][k] = (d.shape[0], d.mean(0), d.std(0))
    return out


@pytest.mark.parametrize("by", ["month", "hour"])
def test_groups_match_a_float64_reference(store, by):
    path, truth, times = store
    index = pd.DatetimeIndex(times)
    keys = np.asarray(index.month if by == "month" else index.hour)
    splits = ["train=2021-01-20/2021-02-25", "val=2021-02-26/2021-03-30"]
    stats = compute(path, by=by, diff_steps=STEPS, splits=splits)
    bounds = {"train": (0, int(np.searchsorted(times, np.datetime64("2021-02-26")))), "val": None}
    bounds["val"] = (bounds["train"][1], 60)
    for var in ("t2m", "z", "msl"):
        for split, (a, b) in bounds.items():
            s = stats.streams[f"{var}__{split}"]
            values = list(s.layout.coords[by][1])
            assert values == (list(range(1, 13)) if by == "month" else list(range(24)))
            n_f = truth[var].shape[-1]
            for i, g in enumerate(values):
                f = slice(i * n_f, (i + 1) * n_f)
                if not ((keys == g) & (np.arange(60) >= a) & (np.arange(60) < b)).any():
                    assert (s.count[f] == 0).all() and np.isnan(s.mean[f]).all()
                    continue
                ref = _reference(truth[var], keys, g, a, b, STEPS)
                assert (s.count[f] == ref["count"]).all(), (var, split, g)
                assert_close(s.mean[f], ref["mean"], 1e-12, f"{var} {split} {g} mean")
                assert_close(s.std[f], ref["std"], 1e-10, f"{var} {split} {g} std")
                assert np.array_equal(s.minimum[f], ref["min"])
                for k, (n, dm, dsd) in ref["diff"].items():
                    if n:
                        assert (s.diff[k].count[f] == n).all()
                        assert_close(s.diff[k].std[f], dsd, 1e-10, f"{var} {g} diff{k} std")
                        assert_close(s.diff[k].mean[f], dm, 1e-9, f"{var} {g} diff{k} mean")


def _bits(stats) -> bytes:
    parts = []
    for name in sorted(stats.streams):
        s = stats.streams[name]
        parts += [s.count, s.mean, s.std, s.minimum, s.maximum]
        parts += [x for k in sorted(s.diff) for x in (s.diff[k].mean, s.diff[k].std)]
    return b"".join(np.asarray(p).tobytes() for p in parts)


def test_block_size_never_changes_a_bit(store):
    path, _, _ = store
    runs = [compute(path, by="hour", diff_steps=STEPS, block_mb=mb) for mb in (1e-6, 0.01, 64)]
    assert _bits(runs[0]) == _bits(runs[1]) == _bits(runs[2])


def test_statistics_file_has_the_group_dimension(store, tmp_path):
    path, _, _ = store
    out, summary = tmp_path / "c.nc", tmp_path / "c.json"
    args = ["compute", str(path), "--by", "month", "--output", str(out), "--summary", str(summary)]
    assert main([*args, "--quiet"]) == 0
    # the features are named as the file's reader names them: compare sees every value
    assert read_stats(out).streams["z__train"].features[:3] == ["z_1_500", "z_1_850", "z_2_500"]
    assert main(["compare", str(out), str(summary)]) == 0
    with xr.open_dataset(out) as ds:
        assert ds["t2m__train__mean"].dims == ("month",)
        assert ds["z__train__std"].dims == ("month", "level")
        assert ds["month"].values.tolist() == list(range(1, 13))
        assert np.isnan(ds["t2m__train__mean"].values[3:]).all()  # April..December: no data
        assert ds.attrs["source_climatology"] == "by month"


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--write-into"], ["--by month", "--write-into"]),
        (["--format", "graphcast"], ["--by month", "graphcast"]),
    ],
)
def test_refused_where_it_cannot_go(store, tmp_path, capsys, monkeypatch, extra, words):
    path, _, _ = store
    monkeypatch.chdir(tmp_path)
    args = ["compute", str(path), "--by", "month", *extra]
    out = [] if "--format" in extra else ["--output", "x.nc"]
    if "--format" in extra:
        out = ["--output-dir", "g"]
    assert main([*args, *out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(w in err[0] for w in words), err
    assert list(tmp_path.iterdir()) == []


def test_numeric_time_axis_is_refused(tmp_path, capsys):
    ds, _ = gridded(n_time=10)
    ds.assign_coords(time=np.arange(10)).to_netcdf(tmp_path / "n.nc")
    assert (
        main(
            ["compute", str(tmp_path / "n.nc"), "--by", "hour", "--output", str(tmp_path / "x.nc")]
        )
        == 2
    )
    assert "needs datetime64 times" in capsys.readouterr().err


def test_climatology_grows_byte_for_byte(store, tmp_path):
    """A state with --by month, updated twice and merged: the full run's bytes,
    the differences across the seams in their later time's month."""
    path, _, _ = store
    with xr.open_zarr(path, consolidated=False) as ds:
        full = ds.load()
    for name, cut in (("a", slice(0, 17)), ("b", slice(17, 40)), ("c", slice(40, 60))):
        write_zarr(full.isel(time=cut), tmp_path / f"{name}.zarr", time_chunk=5)
    opts = ["--by", "month", "--diff-steps", "1,3", "--quiet"]
    pieces = {name: tmp_path / f"{name}.zarr" for name in "abc"}
    grow(path, pieces, tmp_path, opts, merge_order="cab").assert_same_bytes()
