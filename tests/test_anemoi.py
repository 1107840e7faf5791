"""anemoi datasets: read as a source, their statistics written as anemoi reads them.

The datasets are built here with zarr-python in anemoi 0.5.47's layout (zarr
format 2, ``data`` (dates, variables, ensembles, cells), ``dates``, the
``variables`` and ``frequency`` attributes); anemoi itself is exercised in
``test_anemoi_interop.py``. Values are checked against a float64 two-pass
numpy reference, written independently of the kernel.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from small_disk import fill, small_fs, tree  # noqa: F401 - small_fs: a fixture

from wxstats.cli import main
from wxstats.core.errors import WxstatsError
from wxstats.io.formats import anemoi as fmt
from wxstats.io.read import read_stats
from wxstats.sources.anemoi import default_window

VARIABLES = ["msl", "t2m", "z_500"]
OPS = ("mean", "stdev", "minimum", "maximum")


def make_dataset(
    path: Path, n_dates: int = 23, members: int = 2, cells: int = 30, seed: int = 0, **attrs
) -> np.ndarray:
    """An anemoi-layout dataset of float32 values without NaN; returns the data."""
    rng = np.random.default_rng(seed)
    base = np.array([101325.0, 280.0, 55000.0])[None, :, None, None]
    scale = np.array([500.0, 8.0, 900.0])[None, :, None, None]
    walk = np.cumsum(rng.standard_normal((n_dates, 3, members, cells)), axis=0) * 0.3
    data = (base + scale * (walk + rng.standard_normal((n_dates, 3, members, cells)))).astype(
        np.float32
    )
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    array = group.create_array(
        "data", shape=data.shape, dtype="float32", chunks=(1, 3, members, cells), fill_value=np.nan
    )
    array[...] = data
    dates = np.datetime64("2020-01-01T00:00:00", "s") + np.arange(n_dates) * np.timedelta64(6, "h")
    group.create_array("dates", shape=(n_dates,), dtype="datetime64[s]")[...] = dates
    group.attrs.update({"variables": VARIABLES, "frequency": "6h", **attrs})
    return data


def reference(data: np.ndarray, lo: int, hi: int, k: int | None = None) -> dict[str, np.ndarray]:
    """float64 two-pass statistics per variable over dates [lo, hi) x members x cells,
    or of x[t+k] - x[t] for the pairs with both dates there."""
    x = data[lo:hi].astype(np.float64)
    if k is not None:
        x = x[k:] - x[:-k]
    flat = np.moveaxis(x, 1, 0).reshape(x.shape[1], -1)
    mean = flat.sum(axis=1) / flat.shape[1]
    std = np.sqrt(((flat - mean[:, None]) ** 2).sum(axis=1) / flat.shape[1])
    return {"mean": mean, "stdev": std, "minimum": flat.min(1), "maximum": flat.max(1)}


def stored(path: Path) -> dict[str, np.ndarray]:
    group = zarr.open_group(str(path), mode="r")
    return {k: group[k][:] for k in group.array_keys() if k not in ("data", "dates")}


def assert_matches(got: dict[str, np.ndarray], ref: dict[str, np.ndarray], prefix: str = ""):
    for op in OPS:
        value = got[prefix + op]
        assert value.dtype == np.float64, prefix + op
        scale = np.maximum(np.abs(ref[op]), ref["stdev"])
        assert np.all(np.abs(value - ref[op]) <= 1e-12 * scale), (prefix + op, value, ref[op])


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "an.zarr"
    return path, make_dataset(path)


def test_write_into_matches_two_pass_reference_over_anemois_default_window(dataset):
    path, data = dataset
    assert main(["compute", str(path), "--write-into", "--diff-steps", "1,2,4", "--quiet"]) == 0
    got = stored(path)
    lo, hi = 0, int(23 * 0.8)  # anemoi's rule under 10 years: the first 80 % of the dates
    assert_matches(got, reference(data, lo, hi))
    for k, name in ((1, "6h"), (2, "12h"), (4, "1d")):
        assert_matches(got, reference(data, lo, hi, k), f"statistics_tendencies_{name}_")
    attrs = json.loads((path / ".zattrs").read_text())
    assert attrs["statistics_start_date"] == "2020-01-01T00:00:00"
    assert attrs["statistics_end_date"] == "2020-01-05T06:00:00"  # date 17 of 0..22
    assert attrs["variables"] == VARIABLES  # the rest of the attributes kept
    # zarr format 2 arrays, as anemoi 0.5.47 (zarr <= 2.18.7) reads them
    meta = json.loads((path / "mean" / ".zarray").read_text())
    assert meta["zarr_format"] == 2 and meta["dtype"] == "<f8" and meta["shape"] == [3]
    assert not list(path.glob(".wxstats-*"))


def test_default_window_is_anemois_rule():
    def dates(start: str, n: int, step: str) -> np.ndarray:
        return np.datetime64(start, "s") + np.arange(n) * np.timedelta64(1, step)

    assert default_window(dates("2020-01-01", 8, "h")) == (0, 6)  # under 10 dates
    assert default_window(dates("2020-01-01", 1, "h")) == (0, 1)
    assert default_window(dates("2020-01-01", 101, "h")) == (0, 80)  # under 10 years
    daily = np.arange("2000-01-01", "2011-01-01", dtype="datetime64[D]").astype("datetime64[s]")
    lo, hi = default_window(daily)  # 11 years: the last year left out
    assert str(daily[hi - 1])[:10] == "2009-12-31" and lo == 0
    daily = np.arange("1990-01-01", "2012-07-01", dtype="datetime64[D]").astype("datetime64[s]")
    lo, hi = default_window(daily)  # 22.5 years: the last three left out
    assert str(daily[hi - 1])[:10] == "2009-12-31"


def test_window_from_the_dataset_then_period(tmp_path):
    path = tmp_path / "an.zarr"
    data = make_dataset(
        path,
        statistics_start_date="2020-01-02T00:00:00",
        statistics_end_date="2020-01-04T12:00:00",
    )
    assert main(["compute", str(path), "--write-into", "--quiet"]) == 0
    assert_matches(stored(path), reference(data, 4, 15))
    assert main(["compute", str(path), "--write-into", "--period", "2020-01-03/", "--quiet"]) == 0
    assert_matches(stored(path), reference(data, 8, 23))
    assert_matches(stored(path), reference(data, 8, 23, 1), "statistics_tendencies_6h_")
    attrs = json.loads((path / ".zattrs").read_text())
    assert (attrs["statistics_start_date"], attrs["statistics_end_date"]) == (
        "2020-01-03T00:00:00",
        "2020-01-06T12:00:00",
    )
    # read back as any statistics set (report, compare)
    stats = read_stats(path)
    np.testing.assert_array_equal(stats.state.mean, stored(path)["mean"])
    six = stored(path)["statistics_tendencies_6h_stdev"]
    np.testing.assert_array_equal(stats.state.diff[1].std, six)


def _bytes(path: Path) -> dict[str, bytes]:
    return {k: v.tobytes() for k, v in stored(path).items()}


def test_any_block_size_gives_the_same_bytes(tmp_path):
    paths = []
    for i, extra in enumerate(([], ["--block-mb", "0.0001"], ["--block-mb", "0.002"])):
        path = tmp_path / f"an{i}.zarr"
        make_dataset(path)
        args = ["compute", str(path), "--write-into", "--diff-steps", "1,3", "--quiet", *extra]
        assert main(args) == 0
        paths.append(path)
    assert _bytes(paths[0]) == _bytes(paths[1]) == _bytes(paths[2])


def test_a_block_holds_its_budget_with_the_kernels_rows(dataset):
    """A block's budget counts what the kernel holds for each step beside its
    values: with 60 float32 values a step (240 bytes) the kernel's rows are most
    of it, and a budget of 4 such steps makes blocks of 4 steps, not 40."""
    from wxstats.core.kernel import step_bytes
    from wxstats.sources.anemoi import AnemoiSource

    path, _ = dataset
    per_step = 3 * 2 * 30 * 4 + step_bytes(3, 2)
    source = AnemoiSource(path, diff_steps=(1,), block_bytes=4 * per_step)
    assert max(b.stop - b.start for b in source.blocks) == 4
    assert sum(b.stop - b.start for b in source.blocks) == source.stop - source.start


def test_sidecar_holds_what_write_into_writes(dataset, tmp_path):
    path, _ = dataset
    side = tmp_path / "stats.zarr"
    assert main(["compute", str(path), "--format", "anemoi", "--output", str(side), "--quiet"]) == 0
    assert not (tmp_path / "an.stats.nc").exists()
    assert "mean" not in stored(path)  # the dataset untouched
    group = zarr.open_group(str(side), mode="r")
    assert group["data"].shape == (0, 3, 1, 1)  # anemoi opens every dataset by its data
    assert group.attrs["variables"] == VARIABLES and group.attrs["frequency"] == "6h"
    assert main(["compute", str(path), "--write-into", "--quiet"]) == 0
    assert _bytes(side) == _bytes(path)
    # an existing sidecar is replaced only with --overwrite, and only if it is one
    args = ["compute", str(path), "--format", "anemoi", "--output", str(side), "--quiet"]
    assert main(args) == 2
    assert main([*args, "--overwrite"]) == 0
    other = tmp_path / "other.zarr"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    args = ["compute", str(path), "--format", "anemoi", "--output", str(other), "--overwrite"]
    assert main(args) == 2
    assert (other / "keep.txt").exists()


def test_legacy_arrays_removed_and_stale_tendencies_refused(dataset):
    path, data = dataset
    group = zarr.open_group(str(path), mode="r+")
    for name in ("sums", "squares", "count", "has_nans", "statistics_tendencies_6h_sums"):
        group.create_array(name, shape=(3,), dtype="float64")[...] = 1.0
    for op in OPS:
        group.create_array(f"statistics_tendencies_1d_{op}", shape=(3,), dtype="float64")
    assert main(["compute", str(path), "--write-into", "--diff-steps", "1", "--quiet"]) == 2
    # the default steps are the tendencies the dataset already has
    assert main(["compute", str(path), "--write-into", "--quiet"]) == 0
    got = stored(path)
    assert not {"sums", "squares", "count", "has_nans", "statistics_tendencies_6h_sums"} & set(got)
    assert_matches(got, reference(data, 0, 18, 4), "statistics_tendencies_1d_")


@pytest.mark.parametrize(
    "asked,names",
    [(["6h", "12h"], {"6h": 1, "12h": 2}), (["6h", "9h", "1d"], {"6h": 1, "1d": 4}),
     (True, {"6h": 1, "12h": 2, "1d": 4})],
)  # fmt: skip
def test_default_tendencies_come_from_the_recipe_before_anemois_finalise(tmp_path, asked, names):
    """A dataset after anemoi's ``init``/``load`` has no statistics arrays yet: the
    tendencies its recipe asks for are the default (only 6h was written before), a
    span that is not a whole number of dates (9h of 6-hourly data) and anemoi's
    ``true`` (1, 3, 6, 12, 24 hours) as anemoi's finalise takes them."""
    path = tmp_path / "an.zarr"
    data = make_dataset(path, recipe={"statistics": {"tendencies": asked}})
    assert main(["compute", str(path), "--write-into", "--quiet"]) == 0
    got = stored(path)
    written = {k.split("_")[2] for k in got if k.startswith("statistics_tendencies_")}
    assert written == set(names)
    for name, k in names.items():
        assert_matches(got, reference(data, 0, 18, k), f"statistics_tendencies_{name}_")


def test_a_recipe_tendency_that_is_no_time_span_is_refused(tmp_path, capsys):
    path = tmp_path / "an.zarr"
    make_dataset(path, recipe={"statistics": {"tendencies": ["6h", "often"]}})
    assert main(["compute", str(path), "--write-into", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "'often', not a time span" in err and len(err.splitlines()) == 1
    assert not [k for k in stored(path) if k.startswith("statistics_")]


def test_missing_dates_left_out_with_skipna_as_anemoi_does(tmp_path, capsys):
    path = tmp_path / "an.zarr"
    data = make_dataset(path, missing_dates=["2020-01-02T06:00:00"])
    (path / "data" / "5.0.0.0").unlink()  # never written: the fill value, NaN, as anemoi has it
    data[5] = np.nan
    assert main(["compute", str(path), "--write-into", "--skipna", "--diff-steps", "1,2"]) == 0
    assert "chunk object data/5.0.0.0 is missing" in capsys.readouterr().err
    got = stored(path)
    for name, k in (
        ("", None),
        ("statistics_tendencies_6h_", 1),
        ("statistics_tendencies_12h_", 2),
    ):
        x = data[:18].astype(np.float64)
        x = x[k:] - x[:-k] if k else x
        flat = np.moveaxis(x, 1, 0).reshape(3, -1)
        flat = [row[~np.isnan(row)] for row in flat]  # anemoi's NaN mask
        ref = {
            "mean": np.array([r.mean() for r in flat]),
            "stdev": np.array([r.std() for r in flat]),
            "minimum": np.array([r.min() for r in flat]),
            "maximum": np.array([r.max() for r in flat]),
        }
        assert_matches(got, ref, name)


def test_failed_write_leaves_the_dataset_as_it_was(dataset, monkeypatch):
    path, _ = dataset
    assert main(["compute", str(path), "--write-into", "--quiet"]) == 0
    files = {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    real, calls = os.rename, []

    def failing(src, dst):
        calls.append(dst)
        if len(calls) == 5:
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(fmt.os, "rename", failing)
    from wxstats.runtime.options import ComputeOptions
    from wxstats.runtime.outputs import open_source, write_outputs
    from wxstats.runtime.run import compute_source

    options = ComputeOptions(dataset=path, write_into=True, period="2020-01-02/")
    source = open_source(options)
    with pytest.raises(WxstatsError, match="left as it was.*no space left on"):
        write_outputs(source, compute_source(source), options)
    monkeypatch.undo()
    after = {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    assert after == files


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("wxstats: error:")]
    assert len(errors) == 1, err
    return errors[0]


@pytest.mark.parametrize(
    "change, args, expected",
    [
        ("no-variables", [], "no 'variables' attribute"),
        ("3d", [], "data has 3 dimensions"),
        ("int", [], "data is int16; anemoi stores float32 or float64"),
        ("none", ["--period", "2031-01-01/2031-12-31"], "no date in the statistics window"),
        ("none", ["--period", "2020-01-01T00/2020-01-01T00"], "no pairs for a tendency"),
        ("frequency", [], "frequency 'often'"),
        ("none", ["--weights", "coslat"], "--weights: not for an anemoi dataset"),
        ("missing", [], "1 missing date(s) in the statistics window (2020-01-01T12:00:00)"),
    ],
)
def test_hostile_datasets_one_clear_error_nothing_written(tmp_path, capsys, change, args, expected):
    path = tmp_path / "bad.zarr"
    make_dataset(path, n_dates=12)
    group = zarr.open_group(str(path), mode="r+")
    if change == "no-variables":
        del group.attrs["variables"]
    elif change == "frequency":
        group.attrs["frequency"] = "often"
    elif change == "missing":
        group.attrs["missing_dates"] = ["2020-01-01T12:00:00", "2020-01-03T12:00:00"]
    elif change in ("3d", "int"):
        shutil.rmtree(path / "data")
        shape, dtype = ((12, 3, 30), "float32") if change == "3d" else ((12, 3, 2, 30), "int16")
        group.create_array("data", shape=shape, dtype=dtype)
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    side = tmp_path / "s.zarr"
    assert main(["compute", str(path), "--format", "anemoi", "--output", str(side), *args]) == 2
    line = _one_error(capsys)
    assert str(path) in line and expected in line, line
    assert main(["compute", str(path), "--write-into", *args]) == 2
    line = _one_error(capsys)
    assert expected in line, line
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before


@pytest.mark.slow
def test_one_and_three_processes_give_the_same_bytes(tmp_path):
    from distributed_helpers import run, wxstats_cmd

    out = []
    for n in (1, 3):
        path = tmp_path / f"an{n}.zarr"
        make_dataset(path)
        side = tmp_path / f"s{n}.zarr"
        cmd = wxstats_cmd("compute", str(path), "--write-into", "--diff-steps", "1,2")
        result = run([*cmd, "--block-mb", "0.0001", "--nproc", str(n), "--quiet"], timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        cmd = wxstats_cmd("compute", str(path), "--format", "anemoi", "--output", str(side))
        result = run([*cmd, "--nproc", str(n), "--quiet"], timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        out.append((_bytes(path), _bytes(side)))
    assert out[0] == out[1]


def test_inspect_lists_the_sidecar_and_refuses_what_compute_would(dataset, tmp_path, capsys):
    path, _ = dataset
    side = tmp_path / "stats.zarr"
    assert main(["inspect", str(path), "--format", "anemoi", "--output", str(side)]) == 0
    assert str(side) in capsys.readouterr().out
    other = tmp_path / "other.zarr"
    other.mkdir()
    args = ["inspect", str(path), "--format", "anemoi", "--output", str(other), "--overwrite"]
    assert main(args) == 2
    assert "not a statistics store written by wxstats" in _one_error(capsys)


def test_consolidated_metadata_updated_last(dataset):
    path, data = dataset
    group = zarr.open_group(str(path), mode="r+")
    group.create_array("sums", shape=(3,), dtype="float64")[...] = 1.0
    zarr.consolidate_metadata(str(path))
    assert main(["compute", str(path), "--write-into", "--quiet"]) == 0
    meta = json.loads((path / ".zmetadata").read_text())["metadata"]
    assert "sums/.zarray" not in meta and "mean/.zarray" in meta
    assert meta[".zattrs"]["statistics_end_date"] == "2020-01-05T06:00:00"
    consolidated = zarr.open_group(str(path), mode="r", use_consolidated=True)
    assert "sums" not in set(consolidated.array_keys())
    np.testing.assert_array_equal(consolidated["stdev"][:], stored(path)["stdev"])
    assert_matches(stored(path), reference(data, 0, 18))


def test_failed_sidecar_replacement_keeps_the_old_one(dataset, tmp_path, monkeypatch):
    path, _ = dataset
    side = tmp_path / "stats.zarr"
    assert main(["compute", str(path), "--format", "anemoi", "--output", str(side), "--quiet"]) == 0
    before = _bytes(side)
    real, calls = os.rename, []

    def failing(src, dst):
        calls.append(dst)
        if len(calls) == 2:  # the old store moved aside, the new one fails to move in
            raise OSError(28, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(fmt.os, "rename", failing)
    args = ["compute", str(path), "--format", "anemoi", "--output", str(side), "--overwrite"]
    assert main([*args, "--period", "2020-01-02/", "--quiet"]) == 2
    monkeypatch.undo()
    assert _bytes(side) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".stats")] == []


def test_compare_an_anemoi_dataset_with_wxstats_files(dataset, tmp_path, capsys):
    path, _ = dataset
    side, nc = tmp_path / "s.zarr", tmp_path / "s.nc"
    args = ["compute", str(path), "--format", "anemoi", "--output", str(side), "--quiet"]
    assert main(args) == 0
    assert main(["compute", str(path), "--output", str(nc), "--diff-steps", "1", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["compare", str(side), str(nc), "--rtol", "1e-15"]) == 0
    out = capsys.readouterr().out
    assert "msl" in out and "z_500" in out and "diff 6h std" in out
    # another window differs, variable by variable
    args = ["compute", str(path), "--period", "2020-01-02/", "--output", str(tmp_path / "o.nc")]
    assert main([*args, "--diff-steps", "1", "--quiet"]) == 0
    assert main(["compare", str(side), str(tmp_path / "o.nc")]) == 1


def test_a_cmip_like_store_with_a_data_variable_is_not_taken_for_anemoi(tmp_path):
    import xarray as xr

    from wxstats.runtime.options import ComputeOptions
    from wxstats.runtime.outputs import open_source

    times = np.datetime64("2020-01-01", "ns") + np.arange(4) * np.timedelta64(1, "D")
    ds = xr.Dataset(
        {"data": (("time", "x"), np.ones((4, 3), np.float32))},
        coords={"time": times},
        attrs={"frequency": "day"},
    )
    ds.to_zarr(tmp_path / "cmip.zarr", zarr_format=2)
    assert open_source(ComputeOptions(dataset=tmp_path / "cmip.zarr")).kind == "xarray"


def test_tendencies_are_named_by_their_span(dataset, tmp_path, capsys):
    """Steps of 1, 2, 4 dates of a 6-hourly dataset are the 6h, 12h, 1d tendencies:
    so named in the table, the summary and the statistics file, and read back
    from the dataset's own tendency arrays."""
    import xarray as xr

    path, _ = dataset
    out, summary = tmp_path / "s.nc", tmp_path / "s.json"
    args = ["compute", str(path), "--diff-steps", "1,2,4", "--output", str(out)]
    assert main([*args, "--summary", str(summary)]) == 0
    table = capsys.readouterr().out
    assert all(f"diff {span} " in table for span in ("6h", "12h", "1d")), table
    assert "diff1" not in table and "diff 1 step" not in table
    entries = json.loads(summary.read_text())["diff"]
    assert {k: e["span"] for k, e in entries.items()} == {"1": "6h", "2": "12h", "4": "1d"}
    with xr.open_dataset(out) as ds:
        assert list(ds["diff_span"].values) == ["6h", "12h", "1d"]
    assert main(["compute", str(path), "--write-into", "--diff-steps", "1,2,4", "--quiet"]) == 0
    state = read_stats(path).state
    assert [state.diff_label(k) for k in (1, 2, 4)] == ["diff 6h", "diff 12h", "diff 1d"]


@pytest.mark.parametrize("kill", [1, 5, 16, "commit"])
def test_a_write_into_killed_between_renames_is_refused_then_repaired(
    dataset, tmp_path, capsys, kill
):
    """SIGKILL after some of the renames of a second --write-into (each array moved
    aside and the new one in, then the attributes and the consolidated metadata), or
    at the commit point: report refuses the dataset in one line; the repair gives back
    the previous statistics byte for byte (or, every rename done, the new ones); the
    next --write-into repairs and writes the reference."""
    import subprocess

    from rename_faults import killing_env
    from rename_faults import wxstats as wxstats_cmd

    path, data = dataset
    assert main(["compute", str(path), "--write-into", "--diff-steps", "1", "--quiet"]) == 0
    zarr.consolidate_metadata(str(path))
    before = {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    args = ["compute", str(path), "--write-into", "--diff-steps", "1", "--period", "2020-01-02/"]
    killed = subprocess.run(
        wxstats_cmd(*args, "--quiet"),
        env=killing_env(tmp_path, path, kill),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -9, killed.stderr
    assert (path / ".wxstats-replacing.json").is_file()
    assert main(["report", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "write into this store was interrupted" in err[0], err
    from wxstats.io.zarrstore import locked_store

    copy = tmp_path / "repaired.zarr"
    shutil.copytree(path, copy)
    with pytest.warns(UserWarning, match="interrupted between renames"), locked_store(copy):
        pass
    after = {str(p.relative_to(copy)): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    lo, hi = 4, 23  # 2020-01-02T00 to the last date
    if kill == "commit":
        assert_matches(stored(copy), reference(data, lo, hi))
    else:
        assert after == before
    assert main(args) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "interrupted between renames" in err, err
    assert_matches(stored(path), reference(data, lo, hi))
    assert_matches(stored(path), reference(data, lo, hi, 1), "statistics_tendencies_6h_")
    assert not [p.name for p in path.iterdir() if p.name.startswith(".wxstats")]
    consolidated = zarr.open_group(str(path), mode="r", use_consolidated=True)
    np.testing.assert_array_equal(consolidated["stdev"][:], stored(path)["stdev"])


def test_a_full_disk_leaves_the_dataset_exactly_as_it_was(tmp_path, small_fs, capsys):  # noqa: F811
    """The dataset on a small tmpfs, filled at several points of the write: each
    failure is one line naming the full disk and leaves every file as it was."""
    path = small_fs / "an.zarr"
    data = make_dataset(path)
    assert main(["compute", str(path), "--write-into", "--diff-steps", "1", "--quiet"]) == 0
    before = tree(path)
    args = ["compute", str(path), "--write-into", "--diff-steps", "1,2", "--quiet"]
    failures = 0
    for leave_pages in range(0, 200, 3):
        filler = fill(small_fs, leave_pages)
        code = main(args)
        err = capsys.readouterr().err
        filler.unlink()
        if code == 0:
            break
        failures += 1
        assert tree(path) == before, f"{leave_pages} pages free: {err}"
        assert code == 2 and err.count("\n") == 1, err
        assert f"no space left on tmpfs (mounted at {small_fs})" in err, err
    else:
        pytest.fail("the write never fitted in the filesystem")
    assert failures >= 2
    assert_matches(stored(path), reference(data, 0, 18, 2), "statistics_tendencies_12h_")
