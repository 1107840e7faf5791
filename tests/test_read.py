"""Reading statistics sets back: our netCDF and JSON, neural-lam static/, mllam zarr.

Values are checked against the independent float64 reference (tests/reference.py).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
import xarray as xr

from reference import assert_close, meps_reference
from wxstats.core.errors import InputError
from wxstats.io.read import read_stats
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.outputs import open_source, write_outputs
from wxstats.runtime.run import compute_source

NAMES_17 = 17


@pytest.fixture(scope="module")
def outputs(meps_small, tmp_path_factory):
    """Our outputs for the small MEPS dataset, in a copy of its datastore folder."""
    root = tmp_path_factory.mktemp("readers")
    shutil.copy(meps_small, root / meps_small.name)
    static = root / "static"
    source = open_source(ComputeOptions(dataset=meps_small))
    stats = compute_source(source)
    write_outputs(source, stats, ComputeOptions(output_dir=static, summary=root / "s.json"))
    return root, meps_reference(meps_small)


def _check_state(state, ref, rtol, what):
    assert_close(state.mean, ref["mean"], rtol, f"{what} mean")
    assert_close(state.std, ref["std"], rtol, f"{what} std")
    diff = state.diff[3]
    assert_close(diff.std, ref["diff_std"], rtol, f"{what} diff std")
    standardized = state.standardized_diff(3)[1]
    assert_close(standardized, ref["diff_std"] / ref["std"], rtol, f"{what} diff/std")
    # diff_mean is near zero: compare on the scale of the difference spread
    err = np.abs(diff.mean - ref["diff_mean"]) / ref["diff_std"]
    assert err.max() < rtol, f"{what} diff mean"


def test_meps_differences_are_named_by_their_span(outputs):
    """The MEPS step counts hours: its difference is ``3h`` in the summary, the
    statistics file and the table of each of the three sets a run writes."""
    from wxstats.tools.report import format_table

    root, _ = outputs
    assert json.loads((root / "s.json").read_text())["diff"]["3"]["span"] == "3h"
    with xr.open_dataset(root / "static" / "wxstats_stats.nc") as ds:
        assert list(ds["diff_span"].values) == ["3h"]
    for path in (root / "s.json", root / "static" / "wxstats_stats.nc"):
        table = format_table(read_stats(path))
        assert "diff 3h" in table and "diff3" not in table
    assert read_stats(root / "static").state.diff_label(3) == "diff 3h"


def test_netcdf_reads_back_the_reference_values(outputs):
    root, ref = outputs
    stats = read_stats(root / "static" / "wxstats_stats.nc")
    assert stats.source_kind == "wxstats-netcdf" and stats.splits() == ["train"]
    state = stats.state
    assert len(state.features) == NAMES_17 and state.features[0] == "pres_0g"
    assert state.units[0] == "Pa" and state.named
    _check_state(state, ref, 1e-10, "nc")
    assert_close(state.minimum, ref["min"], 0, "min")
    assert np.all(state.count == ref["count"])
    groups = stats.by_category()
    assert list(groups) == ["state", "forcing"]
    forcing = groups["forcing"]
    assert forcing.features == ["toa_downwelling_shortwave_flux"]
    assert_close([forcing.mean[0], forcing.std[0]], ref["flux"][1:], 1e-10)
    assert not state.derived  # the file holds both scales


def test_json_summary_reads_back_the_reference_values(outputs):
    root, ref = outputs
    stats = read_stats(root / "s.json")
    assert stats.source_kind == "wxstats-summary" and stats.state.features[-1] == "z_500"
    _check_state(stats.state, ref, 1e-10, "json")
    assert "diff3 std_standardized" in stats.state.derived


def test_neurallam_static_folder_with_names_from_the_yaml(outputs):
    root, ref = outputs
    for path in (root / "static", root, root / "meps.datastore.yaml"):
        stats = read_stats(path)
        assert stats.source_kind == "neural-lam-static"
        state = stats.state
        assert state.features[4] == "r_2" and state.units[6] == "K"
        assert list(state.diff) == [3]  # the step length from the YAML
        _check_state(state, ref, 2e-7, "static (float32)")
        assert "diff3 std" in state.derived  # raw = standardized * std
        flux = stats.streams["forcing"]
        assert_close([flux.mean[0], flux.std[0]], ref["flux"][1:], 1e-7)


def test_static_folder_alone_has_no_names(outputs, tmp_path):
    root, ref = outputs
    shutil.copytree(root / "static", tmp_path / "static")
    state = read_stats(tmp_path / "static").state
    assert not state.named and state.features[:2] == ["#0", "#1"]
    # the step (hours) of the run that wrote the folder, from wxstats_stats.nc beside it
    assert list(state.diff) == [3] and state.diff_label(3) == "diff 3h"
    assert_close(state.std, ref["std"], 1e-7, "std")
    (tmp_path / "static" / "wxstats_stats.nc").unlink()
    state = read_stats(tmp_path / "static").state
    assert list(state.diff) == [None] and state.diff_label(None) == "diff"


def test_mllam_data_prep_zarr(meps_small, tmp_path):
    """An mllam-data-prep-shaped zarr (raw-scale diffs, a 3-hourly time axis)
    built from the reference values."""
    ref = meps_reference(meps_small)
    names = [f"v{i}" for i in range(len(ref["mean"]))]
    times = np.arange("2022-04-01T00", "2022-04-02T00", np.timedelta64(3, "h"), "datetime64[ns]")
    ds = xr.Dataset(
        {
            "state": (("time", "grid_index", "state_feature"), np.zeros((len(times), 2, 17))),
            "state__train__mean": ("state_feature", ref["mean"]),
            "state__train__std": ("state_feature", ref["std"]),
            "state__train__diff_mean": ("state_feature", ref["diff_mean"]),
            "state__train__diff_std": ("state_feature", ref["diff_std"]),
            "forcing__train__mean": ("forcing_feature", [ref["flux"][1]]),
            "forcing__train__std": ("forcing_feature", [ref["flux"][2]]),
        },
        coords={
            "time": times,
            "state_feature": names,
            "state_feature_units": ("state_feature", ["u"] * 17),
            "forcing_feature": ["toa"],
        },
    )
    ds.to_zarr(tmp_path / "d.zarr", zarr_format=2)
    stats = read_stats(tmp_path / "d.zarr")
    assert stats.source_kind == "mllam-zarr" and stats.splits() == ["train"]
    assert stats.state.features == names and stats.state.units == ["u"] * 17
    _check_state(stats.state, ref, 1e-15, "zarr")
    assert "diff3 std_standardized" in stats.state.derived
    # its one-step difference on the 3-hourly axis (keyed by hours, as MEPS runs)
    assert stats.state.diff_label(3) == "diff 3h"
    assert stats.by_category()["forcing"].std[0] == ref["flux"][2]


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("s.json", "{not json", "not a readable JSON"),
        ("s.json", json.dumps({"x": 1}), "no 'state' section"),
        ("s.nc", "not netcdf", "cannot open"),
    ],
)
def test_unreadable_files_are_clear_errors(tmp_path, name, content, message):
    (tmp_path / name).write_text(content)
    with pytest.raises(InputError, match=message):
        read_stats(tmp_path / name)


def test_other_bad_inputs(tmp_path, outputs):
    root, _ = outputs
    with pytest.raises(InputError, match="no such file"):
        read_stats(tmp_path / "missing.nc")
    with pytest.raises(InputError, match="no statistics here"):
        read_stats(tmp_path)
    xr.Dataset({"t2m": ("x", [1.0])}).to_netcdf(tmp_path / "data.nc")
    with pytest.raises(InputError, match="no statistics variables"):
        read_stats(tmp_path / "data.nc")
    shutil.copytree(root / "static", tmp_path / "static")
    (tmp_path / "static" / "diff_std.pt").write_bytes(b"garbage")
    with pytest.raises(InputError, match="diff_std.pt: not a readable torch tensor"):
        read_stats(tmp_path / "static")
    torch.save(torch.zeros(3, 2), tmp_path / "static" / "diff_std.pt")
    with pytest.raises(InputError, match="1-D tensor"):
        read_stats(tmp_path / "static")
    torch.save(torch.zeros(5), tmp_path / "static" / "diff_std.pt")
    with pytest.raises(InputError, match="diff_std.pt has 5 values where .* have 17"):
        read_stats(tmp_path / "static")


def test_wxstats_read_prefers_the_float64_file_beside_the_pt_files(outputs):
    """``wxstats.read`` of a neural-lam folder gives the float64 statistics of
    ``wxstats_stats.nc`` (1e-12 of the reference), not the float32 ``.pt`` values
    (which ``compare`` and ``report`` read, as neural-lam does)."""
    import wxstats

    root, ref = outputs
    for path in (root / "static", root, root / "meps.datastore.yaml"):
        exact = wxstats.read(path).state
        assert exact.mean.dtype == np.float64
        _check_state(exact, ref, 1e-12, "wxstats.read")
        assert np.abs(read_stats(path).state.std / ref["std"] - 1).max() > 1e-12  # float32


def test_a_folder_of_several_statistics_sets_names_each_to_choose(outputs, tmp_path, capsys):
    """A folder holding a neural-lam set and a makani set was read as one of them
    without a word: it is refused naming the file that chooses each, and that file
    chooses."""
    from wxstats.cli import main

    root, ref = outputs
    both = tmp_path / "both"
    shutil.copytree(root / "static", both)
    np.save(both / "global_means.npy", np.full((1, 3, 1, 1), 7.0, np.float32))
    np.save(both / "global_stds.npy", np.full((1, 3, 1, 1), 2.0, np.float32))
    with pytest.raises(InputError, match="holds 2 statistics sets") as refused:
        read_stats(both)
    assert f"neural-lam: {both / 'parameter_mean.pt'}" in str(refused.value)
    assert f"makani: {both / 'global_means.npy'}" in str(refused.value)
    assert main(["report", str(both), "-o", str(tmp_path / "r")]) == 2
    assert "global_means.npy" in capsys.readouterr().err and not (tmp_path / "r").exists()
    makani = read_stats(both / "global_means.npy")
    assert makani.state.mean.tolist() == [7.0, 7.0, 7.0]
    _check_state(read_stats(both / "parameter_mean.pt").state, ref, 2e-7, "chosen .pt")


@pytest.mark.parametrize("fmt", ["graphcast", "makani", "ace", "aurora"])
def test_a_set_of_one_split_is_named_by_its_split(fmt, tmp_path):
    """``wxstats.read(folder).to_xarray()`` names the statistics of a makani, ACE,
    Aurora or GraphCast folder by the split the folder records (``state__train__mean``,
    not ``state____mean``), the values those of the split (a float64 reference);
    a split given must be the one recorded."""
    from gridded_data import gridded, write_zarr

    import wxstats
    from wxstats.cli import main

    ds, truth = gridded(n_time=30)
    write_zarr(ds, tmp_path / "g.zarr")
    out = tmp_path / fmt
    args = ["compute", str(tmp_path / "g.zarr"), "--format", fmt, "--output-dir", str(out)]
    split = ["--split", "first=2021-01-01T00/2021-01-01T19", "--variables", "t2m,msl"]
    split += ["--weights", "none"] if fmt == "makani" else []  # its default: coslat

    assert main([*args, *split, "--diff-steps", "1", "--quiet"]) == 0
    for given in (None, "first"):
        view = wxstats.read(out, split=given).to_xarray()
        assert "state__first__mean" in view.data_vars, sorted(view.data_vars)
        assert not [name for name in view.data_vars if "____" in name]
        mean = view["state__first__mean"].values
        expected = [truth[v][:20].mean() for v in ("t2m", "msl")]
        assert_close(mean, expected, 1e-6 if fmt == "makani" else 1e-12, f"{fmt} mean")
    with pytest.raises(InputError, match="no statistics for split 'train'"):
        wxstats.read(out, split="train")
