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
        assert "t2m__train" in printed and "z_850" in printed
        assert main(["compute", str(path)]) == 2
        assert "--overwrite" in capsys.readouterr().err
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--split", "x=2030-01-01/2030-01-02"], "selects no time steps"),
        (["--diff-steps", "1,x"], "--diff-steps expects positive whole numbers"),
        (["--step-length", "3"], "--diff-steps"),
        (["--variables", "orog"], "has no time dimension"),
    ],
)
def test_cli_errors_are_one_line_exit_2(store, tmp_path, capsys, args, message):
    path, _ = store
    argv = ["compute", str(path), "--output", str(tmp_path / "o.nc"), *args]
    if "1,x" in args:  # refused by argparse
        with pytest.raises(SystemExit, match="2"):
            main(argv)
    else:
        assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "o.nc").exists()


def test_zarr_options_are_refused_for_a_meps_datastore(meps_small, capsys):
    assert main(["compute", str(meps_small), "--diff-steps", "3", "--quiet"]) == 2
    assert "--diff-steps apply to zarr/netCDF datasets only" in capsys.readouterr().err
    assert main(["compute", str(meps_small), "--split", "train", "--split", "val"]) == 2
