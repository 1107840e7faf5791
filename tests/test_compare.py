"""wxstats compare: passes on the same statistics, names the variable that changed."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch

from wxstats.cli import main
from wxstats.io.read import read_stats
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.outputs import open_source, write_outputs
from wxstats.runtime.run import compute_source
from wxstats.tools.compare import compare, relative_difference


@pytest.fixture(scope="module")
def datastore(meps_small, tmp_path_factory):
    """A datastore folder (YAML + static/ with our .pt and .nc files, + JSON)."""
    root = tmp_path_factory.mktemp("compare")
    shutil.copy(meps_small, root / meps_small.name)
    source = open_source(ComputeOptions(dataset=meps_small))
    stats = compute_source(source)
    write_outputs(
        source, stats, ComputeOptions(output_dir=root / "static", summary=root / "s.json")
    )
    return root


def test_relative_difference():
    assert relative_difference(2.0, 2.0) == 0.0
    assert relative_difference(100.0, 101.0) == pytest.approx(1 / 101)
    # a mean near zero is measured against the spread, not against itself
    assert relative_difference(1e-9, -1e-9, spread=5.0) == pytest.approx(4e-10)
    assert relative_difference(1e-9, -1e-9) == pytest.approx(2.0)
    assert relative_difference(math.nan, math.nan) == 0.0
    assert relative_difference(math.nan, 1.0) == math.inf
    assert relative_difference(0.0, 1e-300) == 1.0


@pytest.mark.parametrize(
    "a, b",
    [
        ("static/wxstats_stats.nc", "static/wxstats_stats.nc"),
        ("static/wxstats_stats.nc", "s.json"),
        ("static", "static/wxstats_stats.nc"),
    ],
)
def test_same_statistics_pass(datastore, a, b, capsys):
    assert main(["compare", str(datastore / a), str(datastore / b)]) == 0
    out = capsys.readouterr().out
    assert "same within rtol 1e-06" in out and "DIFFERS" not in out and "t_500" in out


def test_float32_files_fail_a_float64_tolerance(datastore, capsys):
    result = compare(read_stats(datastore / "static"), read_stats(datastore / "s.json"), 1e-12)
    assert result.exit_code == 1 and result.above
    assert {e.quantity for e in result.entries} >= {"mean", "std", "diff 3h mean/std"}


def test_one_perturbed_value_is_found_and_named(datastore, tmp_path, capsys):
    changed = tmp_path / "data"
    shutil.copytree(datastore, changed)
    std_file = changed / "static" / "parameter_std.pt"
    std = torch.load(std_file, weights_only=True)
    std[7] *= 1 + 1e-4  # t_65
    torch.save(std, std_file)
    status = main(["compare", str(datastore / "static" / "wxstats_stats.nc"), str(changed)])
    out = capsys.readouterr().out
    assert status == 1
    differs = [line for line in out.splitlines() if line.startswith("DIFFERS")]
    # the std itself, and the standardized diffs that divide by it
    assert differs and all(" t_65 " in line for line in differs), differs
    assert any("t_65 std:" in line for line in differs)
    assert "DIFFERENT" in out and "(t_65)" in out
    # a looser tolerance accepts it
    assert main(["compare", str(datastore / "static"), str(changed), "--rtol", "1e-3"]) == 0


def test_perturbed_count_and_min_in_netcdf(datastore, tmp_path, capsys):
    import xarray as xr

    ds = xr.load_dataset(datastore / "static" / "wxstats_stats.nc")
    ds["state__train__min"][2] = ds["state__train__min"][2] - 1e-3
    ds.to_netcdf(tmp_path / "b.nc")
    status = main(
        ["compare", str(datastore / "static" / "wxstats_stats.nc"), str(tmp_path / "b.nc")]
    )
    out = capsys.readouterr().out
    assert status == 1 and "DIFFERS state nlwrs_0 min" in out


def test_missing_variable_is_a_difference(datastore, tmp_path, capsys):
    import xarray as xr

    ds = xr.load_dataset(datastore / "static" / "wxstats_stats.nc")
    ds.isel(state_feature=slice(1, None)).to_netcdf(tmp_path / "fewer.nc")
    status = main(
        ["compare", str(datastore / "static" / "wxstats_stats.nc"), str(tmp_path / "fewer.nc")]
    )
    out = capsys.readouterr().out
    assert status == 1 and "only in A: pres_0g" in out


def test_no_names_match_by_position_with_a_warning(datastore, tmp_path, capsys):
    shutil.copytree(datastore / "static", tmp_path / "static")
    (tmp_path / "static" / "wxstats_stats.nc").unlink()  # nothing says the step
    nc = datastore / "static" / "wxstats_stats.nc"
    assert main(["compare", str(nc), str(tmp_path / "static")]) == 0
    out = capsys.readouterr().out
    assert "matched by position" in out
    assert "diff 3h (A) with a step the file does not name (B)" in out
    std = torch.load(tmp_path / "static" / "parameter_std.pt", weights_only=True)
    torch.save(std[:-1].clone(), tmp_path / "static" / "parameter_std.pt")
    # a file with 16 values among files with 17 is unreadable: exit 2
    assert main(["compare", str(nc), str(tmp_path / "static")]) == 2
    assert "parameter_std.pt has 16 values where" in capsys.readouterr().err


def test_unreadable_input_exits_2(datastore, tmp_path, capsys):
    (tmp_path / "x.json").write_text("[]")
    assert main(["compare", str(datastore / "s.json"), str(tmp_path / "x.json")]) == 2
    assert "x.json" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "nope"), str(datastore / "s.json")]) == 2


def test_values_compared_are_the_files_values(datastore):
    """The entries carry the numbers read, matched by name."""
    a, b = read_stats(datastore / "s.json"), read_stats(datastore / "static")
    result = compare(a, b)
    entry = next(e for e in result.entries if e.variable == "z_500" and e.quantity == "std")
    assert entry.a == a.state.std[16]
    assert entry.b == np.float32(b.state.std[16])


def test_compare_help_has_examples(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["compare", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "wxstats compare " in out


def test_summary_and_statistics_file_of_an_mdp_store_compare_every_category(tmp_path, capsys):
    import json

    from gridded_data import mdp_store, reference

    truth = mdp_store(tmp_path / "m.zarr")
    out, summary = tmp_path / "s.nc", tmp_path / "s.json"
    args = ["compute", str(tmp_path / "m.zarr"), "--output", str(out), "--summary", str(summary)]
    assert main([*args, "--quiet"]) == 0
    # the summary holds the forcing's differences, checked against the reference
    data = json.loads(summary.read_text())
    n = len(truth["forcing"])  # the train split of mdp_store: steps [0, 24)
    ref = reference(truth["forcing"][:24], 0, 24, (1,))
    entry = data["forcing"]["toa_radiation"]["diff"]["1"]
    assert entry["count"] == ref["diff"][1]["count"] and n > 24
    assert math.isclose(entry["std"], ref["diff"][1]["std"][0], rel_tol=1e-12)
    assert data["static"]["lsm"]["nan_count"] == 0
    capsys.readouterr()
    assert main(["compare", str(summary), str(out), "--rtol", "0"]) == 0
    text = capsys.readouterr().out
    assert "not compared" not in text and "no common difference step" not in text
    entry["std"] *= 1.01
    summary.write_text(json.dumps(data))
    assert main(["compare", str(summary), str(out), "--rtol", "1e-6"]) == 1
    assert "toa_radiation" in capsys.readouterr().out


def test_a_difference_mean_lost_as_nan_is_a_difference_unless_the_set_lacks_it(datastore):
    """NaN where the other set has numbers is a difference; only a set that says it
    does not hold the difference mean (GraphCast-style files) is left out, with a note."""
    a = read_stats(datastore / "static" / "wxstats_stats.nc")
    b = read_stats(datastore / "static" / "wxstats_stats.nc")
    state = b.streams["state__train"]
    step = next(iter(state.diff))
    state.diff[step].mean = np.full_like(state.diff[step].mean, np.nan)
    lost = compare(a, b)
    assert not lost.equal
    assert any(e.quantity == "diff 3h mean" and e.rel == math.inf for e in lost.above)
    state.missing.add(f"diff{step} mean")
    lacking = compare(a, b)
    assert lacking.equal
    assert "state: diff 3h mean only in A, not compared" in lacking.notes


@pytest.mark.parametrize("command", ["compare", "report"])
def test_a_static_folder_missing_a_file_is_refused_naming_it(datastore, tmp_path, command, capsys):
    """A neural-lam folder without parameter_mean.pt is not read as the
    wxstats_stats.nc beside it (compare then compared that file with itself)."""
    broken = tmp_path / "data"
    shutil.copytree(datastore, broken)
    (broken / "static" / "parameter_mean.pt").unlink()
    static = broken / "static"
    args = [str(static / "wxstats_stats.nc")] if command == "compare" else []
    args += ["-o", str(tmp_path / "r")] if command == "report" else []
    assert main([command, str(static), *args]) == 2
    captured = capsys.readouterr()
    assert "same within" not in captured.out and "Traceback" not in captured.err
    assert f"{static / 'parameter_mean.pt'}: missing" in captured.err
    assert not (tmp_path / "r").exists()


def test_a_static_file_of_the_wrong_length_is_the_one_named(datastore, tmp_path, capsys):
    broken = tmp_path / "data"
    shutil.copytree(datastore, broken)
    mean_file = broken / "static" / "parameter_mean.pt"
    torch.save(torch.cat([torch.load(mean_file, weights_only=True), torch.zeros(1)]), mean_file)
    assert main(["compare", str(broken / "static"), str(datastore / "s.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "static: parameter_mean.pt has 18 values where parameter_std.pt, diff_mean.pt, "
        "diff_std.pt have 17: each file holds one value per variable"
    )


def _zarr_run_file(path, ref, names, span: str | None):
    """The statistics netCDF a zarr/netCDF run writes for the same values on a
    3-hourly axis: its one-step difference (``diff_step`` 1) spans 3 h. Written with
    xarray, as an older file (``span`` None: no ``diff_span``) or a newer one."""
    import xarray as xr

    coords = {"diff_step": [1], "state_feature": names}
    if span is not None:
        coords["diff_span"] = ("diff_step", [span])
    xr.Dataset(
        {
            "state__train__mean": ("state_feature", ref["mean"]),
            "state__train__std": ("state_feature", ref["std"]),
            "state__train__diff_mean": (("diff_step", "state_feature"), [ref["diff_mean"]]),
            "state__train__diff_std": (("diff_step", "state_feature"), [ref["diff_std"]]),
        },
        coords=coords,
    ).to_netcdf(path)
    return path


def test_differences_are_matched_by_span_not_by_step(datastore, meps_small, tmp_path):
    """MEPS counts its difference in hours (step 3), a zarr run in time steps (step 1 of
    a 3-hourly axis): the same quantity, compared as ``diff 3h`` without a caveat;
    another span is not compared, and a file without spans falls back to the step."""
    from reference import meps_reference

    ref = meps_reference(meps_small)
    static = read_stats(datastore / "static")
    names = static.state.features
    same = compare(static, read_stats(_zarr_run_file(tmp_path / "3h.nc", ref, names, "3h")))
    assert "diff 3h mean/std" in {e.quantity for e in same.entries}
    assert "diff 3h std/std" in {e.quantity for e in same.entries}
    assert not [n for n in same.notes if "step" in n], same.notes
    assert same.equal, same.above[:3]
    other = compare(static, read_stats(_zarr_run_file(tmp_path / "6h.nc", ref, names, "6h")))
    assert not [e for e in other.entries if e.quantity.startswith("diff")]
    assert "state: no common difference span (A: diff 3h, B: diff 6h)" in other.notes
    older = compare(static, read_stats(_zarr_run_file(tmp_path / "old.nc", ref, names, None)))
    assert "state: comparing difference statistics of diff 3h (A) with step 1 (B)" in " ".join(
        older.notes
    )
