"""``--period``: statistics over other times than the data's, distinct from the
splits, against an independent float64 reference, and recorded in every output."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
from gridded_data import assert_stream_matches, gridded, reference, write_zarr

from reference import assert_close, meps_reference
from wxstats.cli import main
from wxstats.runtime.run import compute
from wxstats.sources.meps import MepsSource

SPLITS = [
    "--split",
    "train=2021-01-01T00/2021-01-02T05",
    "--split",
    "val=2021-01-02T06/2021-01-03T01",
]
PERIOD = "2021-01-01T05/2021-01-02T10"  # steps 5..34: train 5..29, val 30..34


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("period")
    ds, truth = gridded(n_time=50)
    return write_zarr(ds, root / "g.zarr"), truth


def test_every_split_cut_to_the_period(store, tmp_path):
    path, truth = store
    out, summary = tmp_path / "s.nc", tmp_path / "s.json"
    args = ["compute", str(path), *SPLITS, "--period", PERIOD, "--diff-steps", "1,3"]
    assert main([*args, "--output", str(out), "--summary", str(summary), "--quiet"]) == 0
    stats = compute(path, splits=SPLITS[1::2], period=PERIOD, diff_steps=(1, 3))
    for var in ("t2m", "z", "msl"):
        for split, (a, b) in (("train", (5, 30)), ("val", (30, 35))):
            expected = reference(truth[var], a, b, (1, 3))
            assert_stream_matches(stats.streams[f"{var}__{split}"], expected)
    with xr.open_dataset(out) as ds:
        said = ds.attrs["source_statistics_period"]
        assert int(ds["t2m__val__count"]) == 5 * 42
    assert said.startswith(PERIOD) and "train 2021-01-01T05:00:00 to 2021-01-02T05:00:00" in said
    assert "val 2021-01-02T06:00:00 to 2021-01-02T10:00:00" in said
    assert PERIOD in json.dumps(json.loads(summary.read_text()))


@pytest.mark.parametrize(
    "period, words",
    [
        ("2021-01-01T00/2021-01-01T10", ["split val", "no time steps in --period"]),
        ("2021-01-01", ["--period '2021-01-01'", "START/END"]),
        ("/", ["--period '/'", "START/END"]),
    ],
)
def test_period_refused_in_one_line(store, tmp_path, capsys, period, words):
    path, _ = store
    args = ["compute", str(path), *SPLITS, "--period", period, "--output", str(tmp_path / "x.nc")]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(w in err[0] for w in words), err
    assert not (tmp_path / "x.nc").exists()


def test_meps_period_selects_analysis_times(meps_copy, tmp_path):
    times = sorted({s.analysis_time for s in MepsSource(meps_copy).samples})
    start, end = times[1], times[3]
    iso = [f"{t[:4]}-{t[4:6]}-{t[6:8]}T{t[8:]}" for t in (start, end)]
    period = "/".join(iso)
    stats = compute(meps_copy, period=period)
    assert f"analysis times {start} to {end}" in stats.attrs["statistics_period"]
    folder = meps_copy.parent / "samples" / "train"
    for t in (times[0], times[4]):  # the reference reads what is left
        for f in folder.glob(f"*_{t}*.npy"):
            f.unlink()
    ref = meps_reference(meps_copy)
    assert int(stats.state.count[0]) == ref["count"]
    assert_close(stats.state.mean, ref["mean"], 1e-10, "mean")
    assert_close(stats.state.std, ref["std"], 1e-10, "std")
    assert_close(stats.state.diff[ref["step"]].std, ref["diff_std"], 1e-10, "diff std")
    assert np.array_equal(stats.state.minimum, ref["min"])


def test_open_ended_period(store):
    path, truth = store
    stats = compute(path, period="/2021-01-02T10", diff_steps=(1,))
    assert_stream_matches(stats.streams["t2m__train"], reference(truth["t2m"], 0, 35, (1,)))


def test_graphcast_files_record_the_period(store, tmp_path):
    path, _ = store
    args = ["compute", str(path), "--period", PERIOD, "--format", "graphcast"]
    assert main([*args, "--output-dir", str(tmp_path), "--quiet"]) == 0
    for name in ("mean_by_level.nc", "stddev_by_level.nc"):
        with xr.open_dataset(tmp_path / name) as ds:
            assert ds.attrs["statistics_period"].startswith(PERIOD)
