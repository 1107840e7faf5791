"""The neural-lam file contract, the statistics file, and atomic writes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import xarray as xr

from reference import assert_close, meps_reference
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.outputs import open_source, write_outputs
from wxstats.runtime.run import compute_source


@pytest.fixture(scope="module")
def written(meps_small, tmp_path_factory):
    out = tmp_path_factory.mktemp("written")
    source = open_source(ComputeOptions(dataset=meps_small))
    stats = compute_source(source)
    write_outputs(source, stats, ComputeOptions(output_dir=out))
    return out, meps_reference(meps_small)


def test_neural_lam_file_contract(written):
    out, ref = written
    for name in ("parameter_mean.pt", "parameter_std.pt", "diff_mean.pt", "diff_std.pt"):
        t = torch.load(out / name, weights_only=True)
        assert isinstance(t, torch.Tensor) and t.dtype == torch.float32 and tuple(t.shape) == (17,)
    flux = torch.load(out / "flux_stats.pt", weights_only=True)
    assert flux.dtype == torch.float32 and tuple(flux.shape) == (2,)
    assert_close(flux.numpy(), ref["flux"][1:], 1e-7, "flux_stats")
    std = torch.load(out / "parameter_std.pt", weights_only=True).numpy()
    assert_close(std, ref["std"], 1e-7, "parameter_std")
    # diff_*.pt are on the standardized scale: statistics of (x[t+s]-x[t]) / std
    dstd = torch.load(out / "diff_std.pt", weights_only=True).numpy()
    assert_close(dstd, ref["diff_std"] / ref["std"], 1e-7, "diff_std standardized")
    dmean = torch.load(out / "diff_mean.pt", weights_only=True).numpy()
    assert_close(dmean, ref["diff_mean"] / ref["std"], 1e-6, "diff_mean standardized")
    w = np.load(out / "parameter_weights.npy")
    assert w.dtype == np.float32 and w.shape == (17,)
    # pres_0g (level 0), r_2 (2), r_65 (65), t_500, z_1000, z_500
    assert w[0] == np.float32(0.1) and w[4] == np.float32(1.0) and w[5] == np.float32(0.065)
    assert w[8] == np.float32(0.03) and w[15] == np.float32(0.1) and w[9] == np.float32(0.05)


def test_statistics_file_is_self_describing_float64(written):
    out, ref = written
    ds = xr.open_dataset(out / "wxstats_stats.nc")
    assert ds["state__train__mean"].dtype == np.float64
    assert list(ds["state_feature"].values)[:2] == ["pres_0g", "pres_0s"]
    assert ds["state_feature_units"].values[0] == "Pa"
    assert_close(ds["state__train__std"].values, ref["std"], 1e-10, "std in nc")
    assert_close(
        ds["state__train__diff_std"].sel(diff_step=3).values, ref["diff_std"], 1e-10, "diff"
    )
    assert "exact" in ds.attrs["method"]
    ds.close()


@pytest.mark.parametrize(
    "weights, message",
    [
        ("2=nan,0=1", "weight of level '2' is nan"),
        ("2=inf", "weight of level '2' is inf"),
        ("2=-1", "weight of level '2' is -1"),
        ("2=1e39", "weight of level '2' is 1e+39"),
        ("2=1,0=0.5,2=0.3", "level '2' is given twice"),
        ("=1", "expects LEVEL=WEIGHT"),
        ("2", "expects LEVEL=WEIGHT"),
    ],
)
def test_bad_level_weights_are_refused_naming_the_entry(
    meps_small, tmp_path, capsys, weights, message
):
    from wxstats.cli import main

    out = tmp_path / "o"
    args = ["compute", str(meps_small), "--output-dir", str(out), "--level-weights", weights]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists()


def test_level_weights_through_the_library_are_checked_too(meps_small, tmp_path):
    from wxstats.core.errors import WxstatsError

    options = ComputeOptions(
        dataset=str(meps_small), output_dir=tmp_path, level_weights={"2": float("nan")}
    )
    source = open_source(options)
    stats = compute_source(source)
    with pytest.raises(WxstatsError, match="weight of level '2' is nan"):
        write_outputs(source, stats, options)
    assert list(tmp_path.iterdir()) == []


def _with_constant_pres_0g(config) -> None:
    """Make the first state variable (pres_0g, file channel 0) constant in every train sample."""
    for path in (config.parent / "samples" / "train").glob("nwp_*_mbr*.npy"):
        x = np.load(path)
        x[..., 0] = 1000.0
        np.save(path, x)


def test_a_zero_std_is_refused_naming_the_variable(meps_copy, capsys):
    from wxstats.cli import main

    _with_constant_pres_0g(meps_copy)
    assert main(["compute", str(meps_copy), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "parameter_std.pt: the std of pres_0g is 0" in err and "--min-std" in err
    assert not (meps_copy.parent / "static" / "parameter_std.pt").exists()
    assert not (meps_copy.parent / "static" / "wxstats_stats.nc").exists()


def test_min_std_floors_what_neural_lam_divides_by(meps_copy):
    from wxstats.cli import main

    _with_constant_pres_0g(meps_copy)
    assert main(["compute", str(meps_copy), "--quiet", "--min-std", "1e-3"]) == 0
    ref = meps_reference(meps_copy)
    static = meps_copy.parent / "static"

    def pt(name):
        return torch.load(static / name, weights_only=True).double().numpy()

    std = np.where(ref["std"] < 1e-3, 1e-3, ref["std"])
    assert ref["std"][0] == 0 and std[0] == 1e-3 and np.all(ref["std"][1:] > 1e-3)
    assert_close(pt("parameter_std.pt"), std, 1.2e-7, "floored std")
    assert_close(pt("diff_mean.pt")[1:], ref["diff_mean"][1:] / std[1:], 1.2e-7, "diff mean")
    # the constant field's differences are 0: standardized 0, floored as a divisor
    assert pt("diff_mean.pt")[0] == 0 and pt("diff_std.pt")[0] == np.float32(1e-3)
    assert_close(pt("diff_std.pt")[1:], ref["diff_std"][1:] / std[1:], 1.2e-7, "diff std")
    with xr.open_dataset(static / "wxstats_stats.nc") as ds:
        assert float(ds["state__train__std"].values[0]) == 0.0  # the truth is kept


def _nan_in_the_last_sample(config) -> None:
    """A NaN that reading the data would report: a refusal naming something else
    came before any data was read."""
    path = sorted((config.parent / "samples" / "train").glob("nwp_*_mbr*.npy"))[-1]
    x = np.load(path)
    x[1, 0, 0, 3] = np.nan
    np.save(path, x)


@pytest.mark.parametrize("value", ["1e-50", "1e-45", "1e39"])
def test_a_min_std_float32_cannot_hold_is_refused_before_reading(meps_copy, capsys, value):
    """1e-50 is 0 in float32 and 1e-45 a subnormal: the floor itself would be a
    divisor of 0 (or whose reciprocal overflows) in parameter_std.pt."""
    from wxstats.cli import main

    _nan_in_the_last_sample(meps_copy)
    assert main(["compute", str(meps_copy), "--quiet", "--min-std", value]) == 2
    err = capsys.readouterr().err
    what = "inf" if value == "1e39" else "0 or subnormal"
    assert f"--min-std {float(value):g} is {what} in float32, the dtype of neural-lam's .pt" in err
    assert "NaN" not in err and "Traceback" not in err
    assert not list((meps_copy.parent / "static").glob("*.pt"))
    assert not (meps_copy.parent / "static" / "wxstats_stats.nc").exists()


def test_a_std_subnormal_in_float32_is_refused_or_floored(meps_copy, capsys):
    """pres_0g is 0 but for one value of 1e-38: its std (3e-41) is not 0 in float64,
    but a subnormal in parameter_std.pt, which neural-lam divides by."""
    from wxstats.cli import main

    for path in (meps_copy.parent / "samples" / "train").glob("nwp_*_mbr*.npy"):
        x = np.load(path)
        x[..., 0] = 0.0
        np.save(path, x)
    x[7, 2, 3, 0] = np.float32(1e-38)
    np.save(path, x)
    ref = meps_reference(meps_copy)
    assert 0 < ref["std"][0] < np.finfo(np.float32).tiny  # float64: not 0, float32: subnormal
    assert main(["compute", str(meps_copy), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "parameter_std.pt: the std of pres_0g (3.0" in err
    assert "is 0 or subnormal as stored in float32" in err and "--min-std" in err
    assert not list((meps_copy.parent / "static").glob("*.pt"))
    assert main(["compute", str(meps_copy), "--quiet", "--min-std", "1e-6"]) == 0
    std = torch.load(meps_copy.parent / "static" / "parameter_std.pt", weights_only=True).numpy()
    expected = np.maximum(ref["std"], 1e-6).astype(np.float32)  # the float64 std, rounded once
    assert std[0] == np.float32(1e-6)
    assert_close(std.astype(np.float64), expected.astype(np.float64), 0, "floored std")
