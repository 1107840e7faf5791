"""``wxstats example``: the built-in dataset, and a folder the user already has."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from wxstats.cli import main

SMALL = ["--times", "1", "--grid", "6", "7"]


def test_a_non_empty_folder_is_refused_and_left_untouched(tmp_path, capsys):
    store = tmp_path / "mine"
    (store / "static").mkdir(parents=True)
    (store / "meps.datastore.yaml").write_text("my datastore\n")
    np.save(store / "static" / "nwp_xy.npy", np.arange(3.0))
    assert main(["example", str(store), *SMALL]) == 2
    err = capsys.readouterr().err
    assert str(store) in err and "not empty" in err and "--overwrite" in err
    assert (store / "meps.datastore.yaml").read_text() == "my datastore\n"
    np.testing.assert_array_equal(np.load(store / "static" / "nwp_xy.npy"), np.arange(3.0))
    assert sorted(p.name for p in store.rglob("*")) == [
        "meps.datastore.yaml",
        "nwp_xy.npy",
        "static",
    ]


def test_overwrite_writes_into_a_non_empty_folder(tmp_path):
    store = tmp_path / "mine"
    store.mkdir()
    (store / "notes.txt").write_text("kept")
    assert main(["example", str(store), *SMALL, "--overwrite"]) == 0
    assert (store / "notes.txt").read_text() == "kept"
    assert (store / "static" / "parameter_mean.pt").is_file()


def test_the_same_example_is_reused_and_a_different_one_refused(tmp_path, capsys):
    store = tmp_path / "ex"
    assert main(["example", str(store), *SMALL]) == 0
    sample = next((store / "samples" / "train").glob("nwp_*_mbr000.npy"))
    stats_file = store / "static" / "wxstats_stats.nc"
    before, stats_before = sample.stat().st_mtime_ns, stats_file.stat().st_mtime_ns
    first = capsys.readouterr().out
    # the README's promise: a rerun reuses the example, its data and its statistics,
    # and shows them (it exited 2 "output exists", then said "example finished")
    assert main(["example", str(store), *SMALL]) == 0
    captured = capsys.readouterr()
    assert "using the example dataset already in" in captured.out
    assert "example finished" in captured.out and not captured.err
    assert sample.stat().st_mtime_ns == before
    assert stats_file.stat().st_mtime_ns == stats_before
    with xr.open_dataset(stats_file) as ds:  # the table shows the file's numbers
        mean = float(ds["state__train__mean"].sel(state_feature="pres_0g"))
    assert f"{mean:.6g}" in captured.out and f"{mean:.6g}" in first
    assert main(["example", str(store), "--times", "2", "--grid", "6", "7"]) == 2
    assert "holds a different wxstats example" in capsys.readouterr().err
    assert sample.stat().st_mtime_ns == before


def test_a_rerun_that_fails_never_says_finished(tmp_path, capsys):
    store = tmp_path / "ex"
    assert main(["example", str(store), *SMALL]) == 0
    (store / "static" / "parameter_mean.pt").unlink()  # an incomplete set: computed again
    capsys.readouterr()
    assert main(["example", str(store), *SMALL]) == 2
    captured = capsys.readouterr()
    assert "output exists" in captured.err and "finished" not in captured.out


def test_a_file_in_place_of_the_folder_is_refused(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    assert main(["example", str(target), *SMALL]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert target.read_text() == "x"


@pytest.mark.parametrize("existing", [False, True])
def test_a_new_or_empty_folder_is_written(tmp_path, existing):
    store = tmp_path / "ex"
    if existing:
        store.mkdir()
    assert main(["example", str(store), *SMALL]) == 0
    assert (store / "meps.datastore.yaml").is_file()
