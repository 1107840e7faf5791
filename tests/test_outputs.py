"""Outputs of zarr/netCDF runs: the statistics file, the JSON summary, the CLI."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import xarray as xr
from gridded_data import gridded, reference, write_zarr

from reference import assert_close
from wxstats.cli import main

SPLITS = [
    "--split",
    "train=2021-01-01T00/2021-01-01T09",
    "--split",
    "val=2021-01-01T10/2021-01-01T15",
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("out")
    ds, truth = gridded(n_time=16)
    write_zarr(ds, root / "era.zarr", time_chunk=4)
    return root / "era.zarr", truth


def test_statistics_file_names_shapes_and_values(store, tmp_path):
    path, truth = store
    out = tmp_path / "s.nc"
    args = ["compute", str(path), *SPLITS, "--diff-steps", "1,3", "--output", str(out), "--quiet"]
    assert main(args) == 0
    ds = xr.open_dataset(out)
    assert ds["t2m__train__mean"].dims == () and ds["t2m__train__mean"].dtype == np.float64
    assert ds["z__val__std"].dims == ("level",) and list(ds["level"].values) == [500, 850]
    assert ds["z__val__diff_std"].dims == ("diff_step", "level")
    assert list(ds["diff_step"].values) == [1, 3]
    assert ds["msl__train__mean"].attrs["units"] == "hPa"
    ref = reference(truth["z"], 10, 16, (1, 3))
    assert_close(ds["z__val__std"].values, ref["std"], 1e-10, "z val std")
    assert_close(ds["z__val__diff_std"].sel(diff_step=3).values, ref["diff"][3]["std"], 1e-10)
    std = ds["z__val__std"].values
    assert_close(
        ds["z__val__diff_std_standardized"].sel(diff_step=1).values, ref["diff"][1]["std"] / std
    )
    assert ds.attrs["source_layout"] == "generic" and ds.attrs["split"] == "train,val"
    ds.close()


def test_summary_has_the_meps_schema_per_split(store, tmp_path):
    path, truth = store
    out = tmp_path / "s.json"
    assert main(["compute", str(path), *SPLITS, "--summary", str(out), "--quiet"]) == 0
    summary = json.loads(out.read_text())
    assert summary["variables"] == ["msl", "t2m", "z_500", "z_850"]  # zarr: alphabetical
    assert set(summary) >= {"variables", "units", "state", "diff", "forcing", "run", "splits"}
    assert list(summary["splits"]) == ["train", "val"]
    val = summary["splits"]["val"]
    assert "run" not in val and val["variables"] == summary["variables"]
    ref = reference(truth["msl"], 10, 16, (1,))
    assert val["state"]["std"][0] == pytest.approx(ref["std"][0], rel=1e-10)
    assert val["diff"]["1"]["count"][0] == 5 * 6 * 7
    assert summary["state"] == summary["splits"]["train"]["state"]
    assert not (tmp_path / "era.stats.nc").exists()  # --summary alone: no default file


def test_default_output_file_and_overwrite(store, tmp_path, capsys):
    path, _ = store
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert main(["compute", str(path)]) == 0
        assert (tmp_path / "era.stats.nc").exists()
        printed = capsys.readouterr().out
        assert printed.count("split train") == 1  # one table of every variable
        assert "│ t2m " in printed and "│ z_850 " in printed
        assert main(["compute", str(path)]) == 2
        assert "--overwrite" in capsys.readouterr().err
    finally:
        os.chdir(cwd)


def test_a_state_run_writes_its_statistics_beside_the_state(store, tmp_path, monkeypatch):
    """``compute DATA --state S`` wrote ``./DATA.stats.nc`` as well, so a second
    state of the same data was refused ("output exists"): the statistics file
    is named after the state, beside it, as ``update``'s (issue 22.13)."""
    path, truth = store
    monkeypatch.chdir(tmp_path)
    split = ["--split", "train=2021-01-01T00/2021-01-01T09", "--quiet"]
    for name in ("a", "b"):
        assert main(["compute", str(path), *split, "--state", f"states/{name}.wxstate"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["states"]
    names = sorted(p.name for p in (tmp_path / "states").iterdir())
    assert names == ["a.stats.nc", "a.wxstate", "b.stats.nc", "b.wxstate"]
    with xr.open_dataset(tmp_path / "states" / "b.stats.nc") as ds:
        assert_close(ds["z__train__std"].values, reference(truth["z"], 0, 10)["std"], 1e-10)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--split", "x=2030-01-01/2030-01-02"], "selects no time steps"),
        (["--diff-steps", "1,x"], "--diff-steps expects positive whole numbers"),
        (["--step-length", "3"], "--diff-steps"),
        (["--feature-dims", "time"], "the time dimension is what statistics are taken over"),
        (["--block-mb", "nan"], "--block-mb: expects a finite number > 0"),
        (["--block-mb", "inf"], "--block-mb: expects a finite number > 0"),
        (["--timeout", "-5", "--nproc", "2"], "--timeout: expects a finite number > 0"),
        (["--log-interval", "-1"], "--log-interval: expected seconds >= 0"),
        (["--level-weights", "2=1"], "--level-weights: not for the statistics file (neural-lam"),
        (["--min-std", "1e-6"], "--min-std: not for the statistics file (it floors what neural"),
    ],
)
def test_cli_errors_are_one_line_exit_2(store, tmp_path, capsys, args, message):
    path, _ = store
    argv = ["compute", str(path), "--output", str(tmp_path / "o.nc"), *args]
    try:
        code = main(argv)
    except SystemExit as exc:  # refused by argparse
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "o.nc").exists()


def test_zarr_options_are_refused_for_a_meps_datastore(meps_small, capsys):
    assert main(["compute", str(meps_small), "--diff-steps", "3", "--quiet"]) == 2
    assert "--diff-steps: not for a neural-lam datastore" in capsys.readouterr().err
    assert main(["compute", str(meps_small), "--split", "train", "--split", "val"]) == 2


def test_report_and_compare_read_what_compute_writes_for_zarr(store, tmp_path, capsys):
    """The statistics file and summary of a plain zarr run read back as one model:
    report draws every feature, compare finds the file and the JSON equal, and the
    values read are the reference's."""
    from wxstats.io.read import read_stats

    path, truth = store
    out, summary = tmp_path / "s.nc", tmp_path / "s.json"
    args = ["compute", str(path), *SPLITS, "--output", str(out), "--summary", str(summary)]
    assert main([*args, "--quiet", "--skipna"]) == 0
    stats = read_stats(out, "val")
    state = stats.state  # t2m, z_500, z_850, msl of split val, one after the other
    assert state.features == ["msl", "t2m", "z_500", "z_850"]
    ref = reference(truth["z"], 10, 16, (1,))
    assert_close(state.std[2:], ref["std"], 1e-10, "z std read back")
    assert_close(state.diff[1].std[2:], ref["diff"][1]["std"], 1e-10, "z diff std read back")
    assert main(["report", str(out), "--split", "val", "-o", str(tmp_path / "r")]) == 0
    page = (tmp_path / "r" / "wxstats_report.html").read_text()
    assert all(f">{name}<" in page for name in state.features)
    capsys.readouterr()
    assert main(["compare", str(out), str(summary), "--rtol", "0"]) == 0
    text = capsys.readouterr().out
    assert "same within rtol 0" in text and "z_850" in text
    assert main(["compare", str(out), str(summary), "--split", "val", "--rtol", "0"]) == 0


def test_a_dataset_variable_named_state_is_one_variable_among_others(tmp_path, capsys):
    ds, _ = gridded(n_time=6)
    ds = ds[["t2m", "msl"]].rename(t2m="state")
    write_zarr(ds, tmp_path / "d.zarr")
    out = tmp_path / "s.nc"
    assert main(["compute", str(tmp_path / "d.zarr"), "--output", str(out), "--quiet"]) == 0
    assert main(["report", str(out), "-o", str(tmp_path / "r")]) == 0
    page = (tmp_path / "r" / "wxstats_report.html").read_text()
    assert ">msl<" in page and ">state<" in page


def test_two_outputs_on_one_file_are_refused_before_reading(store, tmp_path, capsys):
    path, _ = store
    out = tmp_path / "x.nc"
    args = ["compute", str(path), "--output", str(out), "--summary", str(tmp_path / "." / "x.nc")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "two outputs of this run are the same file" in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("inside", [False, True])
def test_an_output_on_or_inside_the_input_is_refused_even_with_overwrite(
    tmp_path, inside, capsys, monkeypatch
):
    ds, _ = gridded(n_time=6)
    if inside:
        data = write_zarr(ds, tmp_path / "d.zarr")
        target = data / "stats.nc"
    else:
        data = tmp_path / "d.nc"
        ds.to_netcdf(data)
        target = data
    before = sorted((p.name, p.stat().st_size) for p in tmp_path.rglob("*"))
    monkeypatch.chdir(tmp_path)  # given back after the test: its folder may be removed
    args = ["compute", str(data), "--output", os.path.relpath(target), "--overwrite", "--quiet"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "would destroy the data" in err and str(data) in err
    assert sorted((p.name, p.stat().st_size) for p in tmp_path.rglob("*")) == before


def test_a_glob_run_twice_leaves_its_own_output_out(tmp_path, capsys):
    ds, truth = gridded(n_time=12)
    for i in range(3):
        ds.isel(time=slice(4 * i, 4 * i + 4)).to_netcdf(tmp_path / f"era5_{i}.nc")
    pattern, out = str(tmp_path / "era5_*.nc"), tmp_path / "era5_stats.nc"
    args = ["compute", pattern, "--variables", "t2m", "--output", str(out), "--quiet"]
    assert main(args) == 0
    assert main([*args, "--overwrite"]) == 0
    assert "left out 1 statistics file(s) written by wxstats" in capsys.readouterr().err
    with xr.open_dataset(out) as stats:
        assert int(stats["t2m__train__count"].values) == truth["t2m"].size
        assert_close(stats["t2m__train__mean"].values, truth["t2m"].mean(), 1e-12, "mean")
    (tmp_path / "era5_0.nc").unlink(), (tmp_path / "era5_1.nc").unlink()
    (tmp_path / "era5_2.nc").unlink()
    assert main([*args, "--overwrite"]) == 2
    assert "all statistics written by wxstats" in capsys.readouterr().err


def test_a_meps_val_split_never_lands_on_the_training_normalization(meps_copy, capsys):
    import torch

    static = meps_copy.parent / "static"
    assert not (static / "parameter_mean.pt").exists()
    assert main(["compute", str(meps_copy), "--split", "val", "--quiet"]) == 0
    assert not (static / "parameter_mean.pt").exists()
    val_mean = torch.load(static / "val" / "parameter_mean.pt").double().numpy()
    samples = sorted((meps_copy.parent / "samples" / "val").glob("nwp_*_mbr*.npy"))
    data = np.concatenate([np.load(p) for p in samples]).astype(np.float64)
    data = np.delete(data, 15, axis=-1)  # the config's remove_state_features_with_index
    assert_close(val_mean, data.reshape(-1, data.shape[-1]).mean(axis=0), 1e-6, "val mean")
