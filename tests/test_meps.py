"""Bad input to the MEPS source: one clear error naming the file, no outputs touched."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
import yaml

from wxstats.cli import main
from wxstats.core.errors import InputError
from wxstats.sources.meps import MepsSource


def _run(config, capsys, *extra):
    status = main(["compute", str(config), "--quiet", *extra])
    err = capsys.readouterr().err
    return status, err


def _static_untouched(config):
    return not any((config.parent / "static").glob("parameter_*.pt"))


def _first(config, pattern="nwp_*_mbr*.npy"):
    return sorted((config.parent / "samples" / "train").glob(pattern))[0]


def test_missing_config(tmp_path, capsys):
    status, err = _run(tmp_path / "nope.yaml", capsys)
    assert status == 2 and "nope.yaml" in err and "not found" in err and "Traceback" not in err


def test_missing_split_folder(meps_copy, capsys):
    status, err = _run(meps_copy, capsys, "--split", "test")
    assert status == 2 and "samples/test" in err and "not found" in err


def test_no_sample_files(meps_copy, capsys):
    for p in (meps_copy.parent / "samples" / "train").glob("nwp_*_mbr*.npy"):
        p.unlink()
    status, err = _run(meps_copy, capsys)
    assert status == 2 and "no sample files" in err and _static_untouched(meps_copy)


def test_missing_flux_file(meps_copy, capsys):
    flux = _first(meps_copy, "nwp_toa_*.npy")
    flux.unlink()
    status, err = _run(meps_copy, capsys)
    assert status == 2 and flux.name in err and "flux file missing" in err


def test_differing_shape(meps_copy, capsys):
    path = sorted((meps_copy.parent / "samples" / "train").glob("nwp_*_mbr*.npy"))[3]
    np.save(path, np.load(path)[:, :-1])
    status, err = _run(meps_copy, capsys)
    assert status == 2 and path.name in err and "shape" in err and _static_untouched(meps_copy)


def test_truncated_file(meps_copy, capsys):
    path = sorted((meps_copy.parent / "samples" / "train").glob("nwp_*_mbr*.npy"))[4]
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    status, err = _run(meps_copy, capsys)
    assert status == 2 and path.name in err and "truncated" in err and _static_untouched(meps_copy)


@pytest.mark.parametrize("content", [b"", b"not a numpy file at all", b"\x93NUMPY\x01\x00garbage"])
def test_not_npy(meps_copy, capsys, content):
    path = _first(meps_copy)
    path.write_bytes(content)
    status, err = _run(meps_copy, capsys)
    assert status == 2 and path.name in err and "Traceback" not in err


def test_directory_instead_of_file(meps_copy, capsys):
    path = sorted((meps_copy.parent / "samples" / "train").glob("nwp_*_mbr*.npy"))[2]
    path.unlink()
    path.mkdir()
    status, err = _run(meps_copy, capsys)
    assert status == 2 and path.name in err and "directory" in err


def test_unreadable(meps_copy, capsys, monkeypatch):
    path = _first(meps_copy)
    path.chmod(0)
    if os.geteuid() == 0:  # root reads mode-0 files: make open() refuse like the kernel would
        import builtins

        from wxstats.sources import npy

        real_open = builtins.open

        def refusing_open(file, *args, **kwargs):
            if str(file) == str(path):
                raise PermissionError(13, "Permission denied", str(file))
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr(npy, "open", refusing_open, raising=False)
    status, err = _run(meps_copy, capsys)
    assert status == 2 and path.name in err and "permission" in err


def test_variable_count_mismatch(meps_copy, capsys):
    config = yaml.safe_load(meps_copy.read_text())
    for key in ("var_names", "var_units", "var_longnames"):
        config["dataset"][key] = config["dataset"][key][:-1]
    meps_copy.write_text(yaml.safe_dump(config))
    status, err = _run(meps_copy, capsys)
    assert status == 2 and "16 variables" in err and "17 are expected" in err


@pytest.mark.parametrize("bad,word", [(np.nan, "NaN"), (np.inf, "infinite"), (-np.inf, "infinite")])
def test_nan_and_inf_name_file_variable_count(meps_copy, capsys, bad, word):
    path = sorted((meps_copy.parent / "samples" / "train").glob("nwp_*_mbr*.npy"))[5]
    x = np.load(path)
    x[3, 1, 2, 6] = bad  # channel 6 is t_2
    x[4, 1, 2, 6] = bad
    np.save(path, x)
    status, err = _run(meps_copy, capsys)
    assert status == 2 and path.name in err and "t_2" in err and f"2 {word}" in err
    assert _static_untouched(meps_copy)


def test_nan_in_the_flux_names_the_flux_file(meps_copy, capsys):
    """The flux file of an analysis time is read with each of its samples: the
    message names the file holding the NaN, not the state sample beside it."""
    flux = _first(meps_copy, "nwp_toa_downwelling_shortwave_flux_*.npy")
    x = np.load(flux)
    x[5, 1, 2] = np.nan
    np.save(flux, x)
    status, err = _run(meps_copy, capsys)
    assert status == 2 and f"{flux}: variable toa_downwelling_shortwave_flux: 1 NaN" in err
    assert "_mbr" not in err
    assert _static_untouched(meps_copy)


def test_inf_is_an_error_even_with_skipna(meps_copy, capsys):
    path = sorted((meps_copy.parent / "samples" / "train").glob("nwp_*_mbr*.npy"))[2]
    x = np.load(path)
    x[0, 0, 0, 6] = -np.inf
    np.save(path, x)
    status, err = _run(meps_copy, capsys, "--skipna")
    assert status == 2 and path.name in err and "t_2" in err and "1 infinite" in err
    assert _static_untouched(meps_copy)


def test_skipna_excludes_and_counts(meps_copy, capsys, tmp_path):
    path = _first(meps_copy)
    x = np.load(path)
    x[3, 1, 2, 6] = np.nan
    np.save(path, x)
    status, _ = _run(meps_copy, capsys, "--skipna", "--summary", str(tmp_path / "s.json"))
    assert status == 0
    import json

    summary = json.loads((tmp_path / "s.json").read_text())
    i = summary["variables"].index("t_2")
    assert summary["state"]["nan_count"][i] == 1
    assert summary["state"]["count"][i] == summary["state"]["count"][0] - 1


def test_duplicate_sample(meps_copy, capsys):
    path = _first(meps_copy)
    shutil.copy(path, path.with_name(path.name.replace("mbr000", "mbr0")))
    status, err = _run(meps_copy, capsys)
    assert status == 2 and "duplicate" in err


def test_missing_member_warns_and_uses_what_exists(meps_copy):
    path = sorted((meps_copy.parent / "samples" / "train").glob("nwp_*_mbr001.npy"))[1]
    path.unlink()
    with pytest.warns(UserWarning, match="lack some of the members"):
        source = MepsSource(meps_copy)
    assert len(source) == 9


def test_samples_are_listed_once_per_analysis_time_and_member(meps_small):
    source = MepsSource(meps_small)
    keys = [(s.analysis_time, s.member) for s in source.samples]
    assert len(keys) == len(set(keys)) == 10


def test_float64_and_int16_samples_are_accepted(meps_copy):
    from wxstats.runtime.run import compute

    paths = sorted((meps_copy.parent / "samples" / "train").glob("nwp_*_mbr*.npy"))
    before = compute(meps_copy)
    for p in paths:
        np.save(p, np.load(p).astype(np.float64))
    after = compute(meps_copy)
    assert before.state.std.tobytes() == after.state.std.tobytes()
    for p in paths:
        np.save(p, np.load(p).astype(np.complex64))
    with pytest.raises(Exception, match="complex64"):
        compute(meps_copy)


def _rewrite_header(path, shape=None, dtype=None):
    """Keep the data bytes, write a header that claims ``shape``/``dtype``."""
    array = np.load(path, mmap_mode="r")
    data = path.read_bytes()[array.offset :]
    header = {
        "descr": np.lib.format.dtype_to_descr(np.dtype(dtype or array.dtype)),
        "fortran_order": False,
        "shape": tuple(shape or array.shape),
    }
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(data)


@pytest.mark.parametrize("lie", ["fewer time steps", "narrower dtype"])
def test_header_that_understates_the_data_is_an_error(meps_copy, capsys, lie):
    from wxstats.sources.npy import load_npy

    paths = sorted((meps_copy.parent / "samples" / "train").glob("nwp_*_mbr*.npy"))
    if lie == "fewer time steps":  # on the first sample, whose header sets the shape
        path = paths[0]
        shape = np.load(path, mmap_mode="r").shape
        _rewrite_header(path, shape=(shape[0] - 1, *shape[1:]))
        expected = "differs from (num_timesteps"  # the config says 65
    else:  # float32 data read as float16 would be twice the values, all wrong
        path = paths[5]
        _rewrite_header(path, dtype=np.float16)
        expected = "does not describe the data"
    status, err = _run(meps_copy, capsys)
    assert status == 2 and _static_untouched(meps_copy)
    assert str(path) in err and expected in err
    # the reader alone, without a shape to expect, never reads part of the data
    with pytest.raises(InputError, match="the header says .* does not describe the data"):
        load_npy(path)


def _state_paths(config):
    return sorted((config.parent / "samples" / "train").glob("nwp_*_mbr*.npy"))


@pytest.mark.parametrize("dtype", [np.float16, np.int16])
def test_float16_and_int16_samples_match_the_reference(meps_copy, dtype):
    from reference import assert_close, meps_reference
    from wxstats.runtime.run import compute

    centre = np.load(_state_paths(meps_copy)[0])[0].mean(axis=(0, 1))
    for p in _state_paths(meps_copy):
        x = np.load(p) - centre  # anomalies fit both types
        np.save(p, x.astype(dtype) if dtype == np.float16 else np.round(x * 10).astype(dtype))
    assert np.load(_state_paths(meps_copy)[0]).dtype == dtype
    stats = compute(meps_copy)
    ref = meps_reference(meps_copy)  # numpy's own widening to float64, two-pass
    assert_close(stats.state.mean, ref["mean"], 1e-12, "mean")
    assert_close(stats.state.std, ref["std"], 1e-11, "std")
    assert_close(stats.state.minimum, ref["min"], 0.0, "min")
    assert_close(stats.state.diff[3].std, ref["diff_std"], 1e-10, "diff std")


@pytest.mark.parametrize("power", [531, -1060])  # values ~1e160 (squares overflow), denormals
def test_huge_and_denormal_float64_samples_end_to_end(meps_copy, power):
    """Integer data times a power of two is exact in float64 (also as denormals):
    the statistics must be the integer data's, times that power of two."""
    from reference import meps_reference
    from wxstats.runtime.run import compute

    for p in _state_paths(meps_copy):
        np.save(p, np.round(np.load(p).astype(np.float64)))
    ref = meps_reference(meps_copy)
    scale = 2.0**power
    for p in _state_paths(meps_copy):
        np.save(p, np.load(p) * scale)
    stats = compute(meps_copy)
    tiny = 4 * np.spacing(0.0)  # a denormal result is exact to its own spacing only
    for name, actual, expected, rtol in [
        ("mean", stats.state.mean, ref["mean"] * scale, 1e-12),
        ("std", stats.state.std, ref["std"] * scale, 1e-10),
        ("min", stats.state.minimum, ref["min"] * scale, 0.0),
        ("diff std", stats.state.diff[3].std, ref["diff_std"] * scale, 1e-9),
    ]:
        assert np.isfinite(actual).all(), name
        assert np.all(np.abs(actual - expected) <= rtol * np.abs(expected) + tiny), name


def test_a_dangling_link_in_place_of_a_sample_is_one_line(meps_copy, capsys):
    sample = _first(meps_copy)
    sample.unlink()
    sample.symlink_to(sample.parent / "gone.npy")
    for command in (["compute", str(meps_copy), "--quiet"], ["inspect", str(meps_copy)]):
        status = main(command)
        err = capsys.readouterr().err
        assert status == 2 and f"{sample}: a link to" in err and "does not exist" in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert _static_untouched(meps_copy)


def test_a_file_neural_lam_would_list_but_not_parse_is_refused(meps_copy, capsys):
    sample = _first(meps_copy)
    shutil.copy(sample, sample.with_name(sample.stem + "_copy.npy"))
    status, err = _run(meps_copy, capsys)
    assert status == 2 and "_mbr000_copy.npy" in err and "nwp_YYYYMMDDHH_mbrNNN.npy" in err


def test_members_beyond_the_config_are_left_out_as_neural_lam_does(meps_copy):
    from reference import assert_close, meps_reference
    from wxstats.runtime.run import compute

    ref = meps_reference(meps_copy)  # members 0 and 1: num_ensemble_members is 2
    extra = _first(meps_copy, "nwp_*_mbr001.npy")
    np.save(extra.with_name(extra.name.replace("mbr001", "mbr002")), np.load(extra) + 50.0)
    with pytest.warns(UserWarning, match="beyond num_ensemble_members 2 are left out"):
        stats = compute(meps_copy)
    assert stats.state.count[0] == ref["count"]
    assert_close(stats.state.mean, ref["mean"], 1e-12, "mean")


def test_duplicate_var_names_are_refused(meps_copy, capsys):
    config = yaml.safe_load(meps_copy.read_text())
    names = config["dataset"]["var_names"]
    names[3] = names[1]
    meps_copy.write_text(yaml.safe_dump(config))
    status, err = _run(meps_copy, capsys)
    assert status == 2 and f"names {names[1]} more than once" in err


def test_big_endian_samples_are_converted_exactly(meps_copy):
    from reference import assert_close, meps_reference
    from wxstats.runtime.run import compute

    for p in _state_paths(meps_copy):
        np.save(p, np.load(p).astype(">f4"))
    assert np.load(_state_paths(meps_copy)[0]).dtype == np.dtype(">f4")
    stats = compute(meps_copy)
    ref = meps_reference(meps_copy)
    assert_close(stats.state.mean, ref["mean"], 1e-12, "mean")
    assert_close(stats.state.std, ref["std"], 1e-11, "std")
    assert_close(stats.state.maximum, ref["max"], 0.0, "max")


@pytest.mark.parametrize("step", [33, 40, 64])
def test_a_step_length_without_pairs_is_refused_before_reading(
    meps_copy, capsys, monkeypatch, step
):
    from wxstats.sources import meps

    def no_reading(*args, **kwargs):
        raise AssertionError("a sample was read")

    monkeypatch.setattr(meps, "load_npy", no_reading)
    status, err = _run(meps_copy, capsys, "--step-length", str(step))
    assert status == 2 and f"step length {step} h leaves no differences" in err
    assert "use at most 32" in err and _static_untouched(meps_copy)
