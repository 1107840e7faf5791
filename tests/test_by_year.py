"""``compute --by year`` and the drift part of ``wxstats report``: per-year
statistics against an independent float64 two-pass reference (zarr and
netCDF), labelled by year in the statistics file, their cumulative estimate
against the same reference over the years so far, a trend flagged and
stationary noise not, the figure and table written."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from gridded_data import write_zarr

from reference import assert_close, two_pass
from wxstats.cli import main
from wxstats.io.read import read_stats
from wxstats.runtime.run import compute
from wxstats.tools.drift import year_series

FIRST, LAST = 2006, 2019  # 14 years: 12 earlier years and the last 2


def _dataset(seed: int = 3) -> tuple[xr.Dataset, dict[str, np.ndarray], np.ndarray]:
    """Every 5 days over 14 years on a 3 x 4 grid: ``still`` (float32 noise),
    ``warming`` (the same noise plus 1.5 K a year: the yearly means scatter by
    about 0.14 K), ``z`` on two levels, 500 stationary and 850 jumping by 100
    (10 scatters of a yearly mean) in the last two years; the float64 truth of
    each as (time, grid..., feature) and the years of the time steps."""
    rng = np.random.default_rng(seed)
    time = pd.date_range(f"{FIRST}-01-01", f"{LAST}-12-31", freq="5D").values
    years = pd.DatetimeIndex(time).year.to_numpy()
    n = len(time)
    noise = rng.standard_normal((n, 3, 4))
    still = (280 + 4 * noise).astype(np.float32)
    warming = (280 + 1.5 * (years - FIRST)[:, None, None] + 4 * noise).astype(np.float32)
    z = 5e4 + np.array([0.0, 3.7e4])[None, :, None, None] + 300 * rng.standard_normal((n, 2, 3, 4))
    z[:, 1] += np.where(years >= LAST - 1, 100.0, 0.0)[:, None, None]
    ds = xr.Dataset(
        {
            "still": (("time", "y", "x"), still, {"units": "K"}),
            "warming": (("time", "y", "x"), warming, {"units": "K"}),
            "z": (("time", "level", "y", "x"), z, {"units": "m2 s-2"}),
        },
        coords={"time": time, "level": [500, 850], "y": np.arange(3), "x": np.arange(4)},
    )
    truth = {
        "still": still.astype(np.float64)[..., None],
        "warming": warming.astype(np.float64)[..., None],
        "z": z.transpose(0, 2, 3, 1),
    }
    return ds, truth, years


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("by_year")
    ds, truth, years = _dataset()
    write_zarr(ds, root / "y.zarr", time_chunk=100)
    ds.to_netcdf(root / "y.nc")
    stats = root / "stats.nc"
    assert main(["compute", str(root / "y.zarr"), "--by", "year", "--output", str(stats),
                 "--quiet"]) == 0  # fmt: skip
    return root, truth, years, stats


@pytest.mark.parametrize("name", ["y.zarr", "y.nc"])
def test_per_year_matches_a_float64_reference(data, name):
    """Each year's count, mean and std against numpy two-pass over that year's
    steps, to 1e-12 relative, for a zarr store and a netCDF file."""
    root, truth, years, _ = data
    stats = compute(str(root / name), by="year")
    for var, values in truth.items():
        s = stats.streams[f"{var}__train"]
        assert s.layout.coords["year"][1].tolist() == list(range(FIRST, LAST + 1))
        n_f = values.shape[-1]
        for i, year in enumerate(range(FIRST, LAST + 1)):
            x = values[years == year].reshape(-1, n_f)
            mean, std = two_pass(x, 0)
            f = slice(i * n_f, (i + 1) * n_f)
            assert (s.count[f] == x.shape[0]).all(), (var, year)
            assert_close(s.mean[f], mean, 1e-12, f"{var} {year} mean")
            assert_close(s.std[f], std, 1e-12, f"{var} {year} std")


def test_file_is_labelled_by_year(data):
    """A ``year`` coordinate in the statistics file, as xarray reads it, and
    features named with the year when wxstats reads it back."""
    _, _, _, stats = data
    with xr.open_dataset(stats) as ds:
        assert ds["year"].values.tolist() == list(range(FIRST, LAST + 1))
        assert ds["still__train__mean"].dims == ("year",)
        assert ds["z__train__std"].dims == ("year", "level")
        assert ds.attrs["source_climatology"] == "by year"
    features = read_stats(stats).streams["z__train"].features
    assert features[:3] == [f"z_{FIRST}_500", f"z_{FIRST}_850", f"z_{FIRST + 1}_500"]


def test_years_are_those_of_the_splits(data):
    """One year dimension for every split; a year outside a split has count 0."""
    root, truth, years, _ = data
    splits = [f"train={FIRST + 1}-01-01/{LAST - 3}-12-31", f"val={LAST - 2}-01-01/{LAST - 1}-12-31"]
    stats = compute(str(root / "y.zarr"), by="year", splits=splits)
    want = list(range(FIRST + 1, LAST))
    for split in ("train", "val"):
        s = stats.streams[f"still__{split}"]
        assert s.layout.coords["year"][1].tolist() == want
        inside = [y for y in want if (y <= LAST - 3) == (split == "train")]
        assert [y for y, c in zip(want, s.count, strict=True) if c > 0] == inside
    x = truth["still"][years == LAST - 1].reshape(-1)
    assert_close(stats.streams["still__val"].mean[-1], x.mean(), 1e-12, "val last year")


def test_cumulative_matches_a_reference_over_the_years_so_far(data):
    """The report's cumulative mean and std after each year against numpy
    two-pass over every step up to the end of that year."""
    _, truth, years, stats = data
    series = {s.variable: s for s in year_series(read_stats(stats), None)}
    for name, (var, level) in {"still": ("still", 0), "z_850": ("z", 1)}.items():
        s = series[name]
        assert s.years.tolist() == list(range(FIRST, LAST + 1))
        for i, year in enumerate(s.years):
            mean, std = two_pass(truth[var][years <= year][..., level].reshape(-1), 0)
            assert_close(s.cum_mean[i], mean, 1e-12, f"{name} to {year} mean")
            assert_close(s.cum_std[i], std, 1e-12, f"{name} to {year} std")


def test_trend_flagged_stationary_noise_not(data):
    _, _, _, stats = data
    series = year_series(read_stats(stats), None, last=2)
    flagged = {s.variable for s in series if s.flagged}
    assert flagged == {"warming", "z_850"}
    assert all(s.assessed for s in series)
    warming = next(s for s in series if s.variable == "warming")
    assert any("mean" in f for f in warming.flags)
    # the cumulative mean moved by the trend over the last two years
    dm_rel, _, _ = warming.change()
    assert dm_rel > 0


def test_report_writes_the_drift_figure_and_table(data, tmp_path, capsys):
    _, _, _, stats = data
    out = tmp_path / "report"
    out.mkdir()
    assert main(["report", str(stats), "-o", str(out), "--last-years", "2"]) == 0
    printed = capsys.readouterr().out
    png = (out / "wxstats_drift.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    page = (out / "wxstats_report.html").read_text()
    assert "Per year: convergence and drift" in page and "Δstd/std" in page
    rows = {line.split("│")[1].strip(): line for line in printed.splitlines() if "│" in line}
    assert {"still", "warming", "z_500", "z_850"} <= set(rows)
    assert "outside" in rows["warming"] and "outside" not in rows["still"]
    assert "warning: state warming: drift:" in printed


def test_too_few_years_is_said_not_flagged(data, tmp_path):
    """With N = 13 of 14 years there is one earlier year: no rule, said so."""
    _, _, _, stats = data
    series = year_series(read_stats(stats), None, last=13)
    assert not any(s.flagged for s in series)
    assert all(not s.assessed and "needs 13 + 2" in s.note for s in series)


@pytest.mark.parametrize(
    "args, words",
    [
        (["--state", "s.wxstate"], ["--by year", "--state"]),
        (["--output", "x.nc", "--write-into"], ["--by year", "--write-into"]),
    ],
)
def test_refused_where_years_cannot_go(data, tmp_path, monkeypatch, capsys, args, words):
    root = data[0]
    monkeypatch.chdir(tmp_path)
    assert main(["compute", str(root / "y.zarr"), "--by", "year", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(w in err[0] for w in words), err
    assert list(tmp_path.iterdir()) == []


def test_last_years_must_be_positive(data, tmp_path, capsys):
    _, _, _, stats = data
    assert main(["report", str(stats), "-o", str(tmp_path), "--last-years", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--last-years 0" in err[0], err


def test_weighted_with_missing_values_is_said_approximate(data):
    """With --weights the counts weigh the years exactly only when no value is
    missing: a year with NaN left out says its cumulative is approximate."""
    _, _, _, stats = data
    read = read_stats(stats)
    read.attrs["source_weights"] = "coslat"
    assert not any("approximate" in s.note for s in year_series(read, None))
    read.streams["still__train"].nan_count[3] = 5
    notes = {s.variable: s.note for s in year_series(read, None)}
    assert "approximate" in notes["still"] and "approximate" not in notes["warming"]
