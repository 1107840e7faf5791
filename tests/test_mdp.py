"""mllam-data-prep stores: recognised, its definitions computed exactly, and
``--write-into`` replacing its statistics atomically for neural-lam."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from gridded_data import assert_stream_matches, gridded, mdp_store, reference, write_zarr
from small_disk import fill, small_fs, tree  # noqa: F401 - small_fs: a fixture

from reference import assert_close
from wxstats.cli import main
from wxstats.core.errors import WxstatsError
from wxstats.io.formats import mdp
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.outputs import open_source, prepare_outputs
from wxstats.runtime.run import compute

TRAIN, VAL = (0, 24), (24, 36)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("mdp") / "danra.zarr"
    return path, mdp_store(path)


@pytest.fixture
def store_copy(store, tmp_path):
    path, truth = store
    shutil.copytree(path, tmp_path / "copy.zarr")
    return tmp_path / "copy.zarr", truth


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _neural_lam_reads(path: Path, category: str) -> xr.Dataset:
    """What neural-lam's MDPDatastore.get_standardization_dataarray reads."""
    ds = xr.open_zarr(path, consolidated=True)
    names = {f"{category}__train__{op}": f"{category}_{op}" for op in ("mean", "std")}
    if category == "state":
        names.update({f"state__train__diff_{op}": f"state_diff_{op}" for op in ("mean", "std")})
    return ds[list(names)].rename(names).load()


def test_recognised_with_its_categories_and_splits(store):
    path, _ = store
    source = open_source(ComputeOptions(dataset=path))
    assert source.is_mdp
    # only train has statistics in the store: the default splits are those
    assert [s.name for s in source.splits] == ["train"]
    assert [s.name for s in source.streams] == ["state__train", "forcing__train", "static__train"]
    assert source.streams[0].features == ["t2m", "u10m", "pres_seasurface"]
    assert source.streams[0].units == ["K", "m/s", "Pa"]
    assert source.streams[2].diff_steps == ()


def test_statistics_are_mllam_definitions_computed_exactly(store):
    path, truth = store
    stats = compute(path, splits=["train", "val"])
    for split, (a, b) in (("train", TRAIN), ("val", VAL)):
        for cat in ("state", "forcing"):
            ref = reference(truth[cat], a, b, (1,))
            assert_stream_matches(stats.streams[f"{cat}__{split}"], ref)
        # static: reduced over the grid only, the same for every split
        assert_stream_matches(stats.streams[f"static__{split}"], reference(truth["static"], 0, 1))


def test_diff_std_is_of_consecutive_steps_not_a_second_difference(store):
    """mllam-data-prep issue 102: its diff_std is the std of diff(diff(x))."""
    path, truth = store
    stats = compute(path)
    state = truth["state"][TRAIN[0] : TRAIN[1]]
    once = np.diff(state, axis=0).reshape(-1, 3)
    assert_close(stats.streams["state__train"].diff[1].std, once.std(axis=0), 1e-10, "diff std")
    stored = xr.open_zarr(path)["state__train__diff_std"].values
    assert np.all(np.abs(stored / once.std(axis=0) - 1) > 0.1)  # the fixture has the bug


def test_write_into_gives_neural_lam_the_exact_values(store_copy, capsys):
    path, truth = store_copy
    before = _files(path)
    assert main(["compute", str(path), "--write-into", "--quiet"]) == 0
    assert not list(Path.cwd().glob("copy.stats.nc"))  # --write-into alone writes no file
    after = _files(path)
    assert set(after) == set(before)
    # the metadata changes only in the written variables' attributes, which record the run
    meta_before, meta_after = (json.loads(f[".zmetadata"])["metadata"] for f in (before, after))
    written = {k for k in meta_after if k.split("__")[-1].startswith(("mean/", "std/", "diff_"))}
    assert {k.split("/")[0] for k in written} >= {"state__train__mean", "static__train__std"}
    for key in meta_after:
        if key.endswith("/.zattrs") and key in written:
            added = {k: v for k, v in meta_after[key].items() if k not in meta_before[key]}
            assert added["statistics_period"] == "none (every time step of the split)"
            assert meta_after[key] == meta_before[key] | added
        else:
            assert meta_after[key] == meta_before[key], key
    assert not [p for p in path.iterdir() if p.name.startswith(".wxstats")]
    for cat in ("state", "forcing", "static"):
        got = _neural_lam_reads(path, cat)
        start, stop = (0, 1) if cat == "static" else TRAIN
        ref = reference(truth[cat], start, stop, (1,) if cat != "static" else ())
        assert got[f"{cat}_mean"].dtype == np.float32  # the store's own dtype
        # float64 results rounded once to float32 (what neural-lam converts to)
        assert_close(got[f"{cat}_mean"].values, ref["mean"], 6e-8, f"{cat} mean")
        assert_close(got[f"{cat}_std"].values, ref["std"], 6e-8, f"{cat} std")
        if cat == "state":
            assert_close(got["state_diff_std"].values, ref["diff"][1]["std"], 6e-8, "diff std")
            assert_close(got["state_diff_mean"].values, ref["diff"][1]["mean"], 6e-8, "d mean")
    # the data itself is untouched
    data_files = [k for k in before if k.split("/")[0] in ("state", "forcing", "static")]
    assert all(after[k] == before[k] for k in data_files)


def test_write_into_records_the_period_on_what_it_writes(store_copy):
    """state__train__mean over a --period is not over the store's train split: each
    variable written says so, and a later run over the whole split says that."""
    path, truth = store_copy
    period = "2021-01-01T06/2021-01-01T17"  # train steps 6..17
    args = ["compute", str(path), "--write-into", "--quiet"]
    assert main([*args, "--split", "val", "--period", "2021-01-02T00/2021-01-02T05"]) == 0
    assert main([*args, "--split", "train", "--period", period]) == 0
    ds = xr.open_zarr(path, consolidated=True)
    ref = reference(truth["state"], 6, 18, (1,))
    assert_close(ds["state__train__mean"].values, ref["mean"], 6e-8, "mean over the period")
    for name in ("state__train__mean", "state__train__diff_std", "forcing__train__std"):
        attrs = ds[name].attrs
        assert attrs["statistics_period"] == (
            f"{period} (train 2021-01-01T06:00:00 to 2021-01-01T17:00:00)"
        ), name
        assert (
            attrs["statistics_splits"].startswith("train=")
            and "12 steps" in attrs["statistics_splits"]
        )
        assert attrs["statistics_written_by"].startswith("wxstats")
    # the variables added by the val run record theirs (written through the staging store)
    assert ds["state__val__mean"].attrs["statistics_period"].startswith("2021-01-02T00/")
    recorded = {k: v for k, v in ds["state__train__mean"].attrs.items() if "statistics" in k}
    assert zarr_attrs(path, "state__train__mean") == recorded
    assert main([*args, "--split", "train"]) == 0  # the whole split: its period record goes
    ds = xr.open_zarr(path, consolidated=True)
    assert ds["state__train__mean"].attrs["statistics_period"].startswith("none")
    assert "24 steps" in ds["state__train__mean"].attrs["statistics_splits"]


def zarr_attrs(path: Path, name: str) -> dict:
    """The attributes as the array's own metadata holds them (not the consolidated copy)."""
    import zarr

    attrs = zarr.open_array(path / name, mode="r").attrs.asdict()
    return {k: v for k, v in attrs.items() if k.startswith("statistics_")}


def test_write_into_adds_statistics_of_other_splits(store_copy):
    path, truth = store_copy
    assert main(["compute", str(path), "--write-into", "--split", "val", "--quiet"]) == 0
    ds = xr.open_zarr(path, consolidated=True)
    ref = reference(truth["state"], *VAL, (1,))
    assert_close(ds["state__val__std"].values, ref["std"], 6e-8, "val std")
    assert_close(ds["state__val__diff_std"].values, ref["diff"][1]["std"], 6e-8, "val diff std")
    assert ds["state__val__mean"].dims == ("state_feature",)


def test_failed_write_keeps_the_old_values(store_copy, monkeypatch):
    path, _ = store_copy
    before = _files(path)
    real_replace, calls = os.replace, []

    def failing(src, dst):
        if ".wxstats-" not in str(dst):  # into the store (zarr itself writes via os.replace)
            calls.append(dst)
            if len(calls) == 3:
                raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(mdp.os, "replace", failing)
    source = open_source(ComputeOptions(dataset=path, write_into=True))
    from wxstats.runtime.outputs import write_outputs
    from wxstats.runtime.run import compute_source

    stats = compute_source(source)
    with pytest.raises(WxstatsError, match="left as it was.*old values kept.*no space left on"):
        write_outputs(source, stats, ComputeOptions(write_into=True))
    assert len(calls) == 5  # two chunks moved in, the third failed, the two put back
    assert _files(path) == before


def test_store_with_other_statistics_shape_is_refused_before_work(store_copy):
    path, _ = store_copy
    ds = xr.open_zarr(path)
    per_point = ds["state"].isel(time=slice(0, 24)).mean("time").astype("float32").compute()
    shutil.rmtree(path / "state__train__mean")
    xr.Dataset({"state__train__mean": per_point}).to_zarr(path, mode="a", consolidated=True)
    source = open_source(ComputeOptions(dataset=path))
    with pytest.raises(WxstatsError, match=r"state__train__mean has dimensions \('grid_index'"):
        prepare_outputs(source, ComputeOptions(write_into=True)).discard()


def test_write_into_needs_an_mllam_store_and_step_1(tmp_path, store, capsys):
    ds, _ = gridded(n_time=6)
    write_zarr(ds[["t2m"]], tmp_path / "g.zarr")
    assert main(["compute", str(tmp_path / "g.zarr"), "--write-into"]) == 2
    # both kinds of data --write-into writes into are named, not only mllam-data-prep's
    err = capsys.readouterr().err.strip()
    assert "for mllam-data-prep zarr stores and anemoi datasets" in err, err
    path, _ = store
    assert main(["compute", str(path), "--write-into", "--diff-steps", "3"]) == 2


def test_cli_output_names_follow_mllam(store, tmp_path, capsys):
    path, _ = store
    out = tmp_path / "stats.nc"
    assert (
        main(["compute", str(path), "--output", str(out), "--summary", str(tmp_path / "s.json")])
        == 0
    )
    ds = xr.open_dataset(out)
    assert ds["state__train__mean"].dims == ("state_feature",)
    assert list(ds["state_feature"].values) == ["t2m", "u10m", "pres_seasurface"]
    assert list(ds["state_feature_units"].values) == ["K", "m/s", "Pa"]
    assert ds["state__train__diff_std"].dims == ("diff_step", "state_feature")
    assert "static__train__mean" in ds and "static__train__diff_std" not in ds
    ds.close()
    import json

    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["variables"] == ["t2m", "u10m", "pres_seasurface"]
    assert list(summary["forcing"]) == ["toa_radiation"]
    assert list(summary["static"]) == ["orography", "lsm"]
    assert list(summary["splits"]) == ["train"]


def test_split_bounds_stored_as_datetimes(tmp_path, store):
    """mllam-data-prep writes the bounds as given in its YAML: strings or datetimes."""
    path, truth = store
    ds = xr.open_zarr(path).load()
    ds["splits"] = (ds["splits"].dims, ds["splits"].values.astype("datetime64[ns]"))
    for name in ds.variables:
        ds[name].encoding = {}
    ds.to_zarr(tmp_path / "dt.zarr", mode="w", zarr_format=2, consolidated=True)
    stats = compute(tmp_path / "dt.zarr", splits=["val"])
    assert_stream_matches(stats.streams["state__val"], reference(truth["state"], *VAL, (1,)))


def test_write_into_refuses_or_floors_a_zero_std(store_copy, capsys):
    import zarr

    path, _ = store_copy
    zarr.open_group(path, mode="r+")["static"][:, 1] = 1.0  # lsm constant: std 0
    before = _files(path)
    assert main(["compute", str(path), "--write-into", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "static__train__std: the std of lsm is 0" in err and "--min-std" in err
    assert _files(path) == before
    assert main(["compute", str(path), "--write-into", "--quiet", "--min-std", "1e-6"]) == 0
    ds = xr.open_zarr(path, consolidated=True)
    assert float(ds["static__train__std"].values[1]) == np.float32(1e-6)
    assert float(ds["static__train__std"].values[0]) > 1  # orography's own std


def _retype(path: Path, name: str, dtype: str) -> None:
    """The store's variable ``name`` stored in ``dtype`` instead (same dimensions)."""
    values = xr.open_zarr(path)[name].load()
    shutil.rmtree(path / name)
    with np.errstate(over="ignore", invalid="ignore"):
        retyped = values.astype(dtype)
    xr.Dataset({name: retyped}).to_zarr(path, mode="a", consolidated=True)


def _nan_in_the_data(path: Path) -> None:
    """A NaN that reading the data would report: a refusal naming something else
    came before any data was read."""
    import zarr

    zarr.open_group(path, mode="r+")["state"][5, 0, 0] = np.nan


def test_an_integer_statistics_variable_is_refused_before_reading(store_copy, capsys):
    """int32 truncated every value: a std of 0.45 was written as 0."""
    path, _ = store_copy
    _retype(path, "static__train__std", "int32")
    _nan_in_the_data(path)
    before = _files(path)
    assert main(["compute", str(path), "--write-into", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: static__train__std is int32: statistics written into it would be" in err
    assert "NaN" not in err and "Traceback" not in err
    assert _files(path) == before


def test_a_value_that_overflows_float16_is_refused_with_nothing_written(store_copy, capsys):
    """101305 Pa is inf in float16 (numpy only warned, and inf was written)."""
    path, truth = store_copy
    _retype(path, "state__train__mean", "float16")
    before = _files(path)
    assert main(["compute", str(path), "--write-into", "--quiet"]) == 2
    err = capsys.readouterr().err
    mean = reference(truth["state"], *TRAIN, ())["mean"][2]
    assert mean > np.finfo(np.float16).max  # the float64 reference: too large for float16
    assert f"{path}: state__train__mean: pres_seasurface ({mean:.6g}) overflows float16" in err
    assert _files(path) == before


def test_statistics_added_to_a_float16_store_are_float32(store_copy):
    """A new variable takes its category's float dtype, but at least float32."""
    path, _ = store_copy
    _retype(path, "forcing", "float16")
    assert main(["compute", str(path), "--write-into", "--split", "val", "--quiet"]) == 0
    ds = xr.open_zarr(path, consolidated=True)
    ref = reference(ds["forcing"].values.astype(np.float64), *VAL, (1,))
    assert ds["forcing__val__std"].dtype == np.float32
    assert_close(ds["forcing__val__std"].values, ref["std"], 6e-8, "val std")


def test_a_min_std_the_store_cannot_hold_is_refused_before_reading(store_copy, capsys):
    path, _ = store_copy
    _nan_in_the_data(path)
    before = _files(path)
    assert main(["compute", str(path), "--write-into", "--quiet", "--min-std", "1e-50"]) == 2
    err = capsys.readouterr().err
    assert f"--min-std 1e-50 is 0 or subnormal in float32, the dtype of {path}: state__" in err
    assert _files(path) == before


# -- a full disk: a small tmpfs mounted for the test -------------------------------------------


def test_a_full_disk_leaves_the_store_exactly_as_it_was(store, small_fs, capsys):  # noqa: F811
    """The disk fills at every point of the write in turn (a little more room each
    time): each failure leaves every file and folder of the store as it was; then
    with room the same command works."""
    src, truth = store
    path = small_fs / "danra.zarr"
    shutil.copytree(src, path)
    before = tree(path)
    # train replaces the store's statistics, val adds new variables
    args = ["compute", str(path), "--write-into", "--split", "train", "--split", "val", "--quiet"]
    failures = 0
    for leave_pages in range(0, 600, 2):
        filler = fill(small_fs, leave_pages)
        code = main(args)
        err = capsys.readouterr().err
        filler.unlink()
        if code == 0:
            break
        failures += 1
        assert tree(path) == before, f"{leave_pages} pages free: {err}"
        assert code == 2 and err.count("\n") == 1, err
        assert f"no space left on tmpfs (mounted at {small_fs})" in err, err  # the disk named
        assert f"{path}: writing the statistics failed, the store was left as it was" in err
        xr.open_zarr(path, consolidated=False).close()  # opens (it raised KeyError before)
    else:
        pytest.fail("the write never fitted in the filesystem")
    assert failures >= 10  # the disk filled at many points of the write
    assert not [p for p in path.iterdir() if p.name.startswith(".wxstats")]
    ref = reference(truth["state"], *VAL, (1,))
    for consolidated in (False, True):  # neural-lam reads the consolidated metadata
        with xr.open_zarr(path, consolidated=consolidated) as ds:
            assert_close(ds["state__val__std"].values, ref["std"], 6e-8, "val std")
            assert_close(ds["state__val__diff_mean"].values, ref["diff"][1]["mean"], 6e-8, "d")
            assert ds["state__val__mean"].dims == ("state_feature",)


@pytest.mark.filterwarnings("ignore:.*Zarr V3 specification")  # zarr 3 on string dtypes
@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part")
@pytest.mark.parametrize("consolidated", [True, False])
def test_write_into_adds_variables_to_a_zarr3_store(store, tmp_path, consolidated):
    path, truth = store
    ds = xr.open_zarr(path).load()
    for name in ds.variables:
        ds[name].encoding = {}
    v3 = tmp_path / "v3.zarr"
    ds.to_zarr(v3, zarr_format=3, consolidated=consolidated, mode="w")
    args = ["compute", str(v3), "--write-into", "--split", "train", "--split", "val", "--quiet"]
    assert main(args) == 0
    ref = reference(truth["state"], *VAL, (1,))
    for read_consolidated in {False, consolidated}:
        with xr.open_zarr(v3, consolidated=read_consolidated) as got:
            assert_close(got["state__val__std"].values, ref["std"], 6e-8, "val std")
            assert got["state__val__mean"].dims == ("state_feature",)
            # an existing variable's zarr.json (and the consolidated copy) records the run
            assert got["state__train__mean"].attrs["statistics_splits"].startswith("train=")


# -- a write killed between two renames: refused by every reader, repaired by the next -------


def _assert_reference_values(path: Path, truth: dict) -> None:
    """What neural-lam reads equals the float64 two-pass reference (rounded to float32)."""
    with xr.open_zarr(path, consolidated=True) as ds:
        for split, (a, b) in (("train", TRAIN), ("val", VAL)):
            ref = reference(truth["state"], a, b, (1,))
            assert_close(ds[f"state__{split}__mean"].values, ref["mean"], 6e-8, f"{split} mean")
            assert_close(ds[f"state__{split}__std"].values, ref["std"], 6e-8, f"{split} std")
            got = ds[f"state__{split}__diff_std"].values
            assert_close(got, ref["diff"][1]["std"], 6e-8, f"{split} diff std")


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("wxstats: error:"), err
    return err[0]


@pytest.mark.parametrize("kill", [1, 3, 25, "commit"])
def test_a_write_into_killed_between_renames_is_refused_then_repaired(
    store_copy, tmp_path, capsys, monkeypatch, kill
):
    """SIGKILL after some of the ~30 renames (train's statistics replaced, val's added)
    or at the commit point: report, compute, compare and wxstats.read refuse the store
    in one line; the repair gives back the previous store byte for byte (or, every
    rename done, the new one); the next --write-into repairs and writes the reference."""
    import subprocess

    from rename_faults import killing_env
    from rename_faults import wxstats as wxstats_cmd

    import wxstats

    path, truth = store_copy
    monkeypatch.chdir(tmp_path)  # report's figure and page go here
    before = _files(path)
    args = ["compute", str(path), "--write-into", "--split", "train", "--split", "val", "--quiet"]
    killed = subprocess.run(
        wxstats_cmd(*args),
        env=killing_env(tmp_path, path, kill),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert killed.returncode == -9, killed.stderr
    assert (path / ".wxstats-replacing.json").is_file() and _files(path) != before  # a mix, marked
    for command in (
        ["report", str(path), "--split", "train"],
        ["compute", str(path), "--quiet", "--output", str(tmp_path / "s.nc")],
        ["compare", str(path), str(path)],
    ):
        assert main(command) == 2
        assert "a wxstats write into this store was interrupted" in _one_error(capsys)
    with pytest.raises(WxstatsError, match="write into this store was interrupted"):
        wxstats.read(path)
    # the repair alone, on a copy: the previous store, or every rename done: the new one
    from wxstats.io.zarrstore import locked_store

    copy = tmp_path / "repaired.zarr"
    shutil.copytree(path, copy)
    with pytest.warns(UserWarning, match="interrupted between renames"), locked_store(copy):
        pass
    if kill == "commit":
        _assert_reference_values(copy, truth)
    else:
        assert _files(copy) == before
    # the next --write-into repairs first (one warning line), then writes
    assert main(args[:-1]) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "interrupted between renames" in err, err
    _assert_reference_values(path, truth)
    assert not [p.name for p in path.iterdir() if p.name.startswith(".wxstats")]
    assert main(["report", str(path), "--split", "train"]) == 0
