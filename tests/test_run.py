"""The statistics against the independent float64 reference, and order independence."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reference import assert_close, meps_reference
from wxstats.runtime.engine import accumulate, empty_accumulator
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.outputs import open_source, write_outputs
from wxstats.runtime.run import compute, compute_source, partition
from wxstats.tools.example import ExampleSpec, write_example


def _check_against_reference(stats, ref, rtol=1e-10):
    state = stats.state
    assert list(state.count) == [ref["count"]] * len(state.features)
    assert_close(state.mean, ref["mean"], rtol, "mean")
    assert_close(state.std, ref["std"], rtol, "std")
    assert np.array_equal(state.minimum, ref["min"]) and np.array_equal(state.maximum, ref["max"])
    d = state.diff[ref["step"]]
    assert list(d.count) == [ref["diff_count"]] * len(state.features)
    assert_close(d.mean, ref["diff_mean"], rtol, "diff_mean")
    assert_close(d.std, ref["diff_std"], rtol, "diff_std")
    flux = stats.streams["toa_downwelling_shortwave_flux"]
    n, m, s = ref["flux"]
    assert int(flux.count[0]) == n
    assert_close(flux.mean, [m], rtol, "flux mean")
    assert_close(flux.std, [s], rtol, "flux std")


def test_example_matches_float64_two_pass_reference(meps_small):
    stats = compute(meps_small)
    _check_against_reference(stats, meps_reference(meps_small))


@pytest.mark.parametrize("step", [1, 2, 3, 6])
def test_step_lengths_follow_neural_lam_pairs(meps_small, step):
    stats = compute(meps_small, step_length=step)
    _check_against_reference(stats, meps_reference(meps_small, step=step))
    # L = (65 // s) * s, pairs (t, t+s) with t + s <= L - 1: L - s pairs per sample
    used = (65 // step) * step
    assert stats.state.diff[step].count[0] == 10 * (used - step) * 12 * 14


def test_offset_1e5_spread_1e_2(tmp_path, meps_small):
    """Data a float32 E[x²]-E[x]² cannot resolve: still 1e-10 of the reference."""
    config = write_example(tmp_path, ExampleSpec(analysis_times=2, grid=(6, 7)))
    rng = np.random.default_rng(5)
    for path in sorted((tmp_path / "samples" / "train").glob("nwp_*_mbr*.npy")):
        x = np.load(path)
        x[...] = (1e5 + 1e-2 * rng.standard_normal(x.shape)).astype(np.float32)
        np.save(path, x)
    stats = compute(config)
    ref = meps_reference(config)
    _check_against_reference(stats, ref)
    assert stats.state.std.max() < 0.02


def test_val_split(meps_small):
    stats = compute(meps_small, split="val")
    _check_against_reference(stats, meps_reference(meps_small, split="val"))


def _result_bytes(source, stats, tmp_path, tag):
    opts = ComputeOptions(output_dir=tmp_path / tag, summary=tmp_path / tag / "s.json")
    write_outputs(source, stats, opts)
    files = {}
    for name in (
        "parameter_mean.pt",
        "parameter_std.pt",
        "diff_mean.pt",
        "diff_std.pt",
        "flux_stats.pt",
        "parameter_weights.npy",
    ):
        files[name] = (tmp_path / tag / name).read_bytes()
    summary = json.loads((tmp_path / tag / "s.json").read_text())
    summary.pop("run")
    return files, summary


@pytest.mark.parametrize("parts", range(1, 8))
def test_any_grouping_gives_identical_bytes(meps_small, tmp_path, parts):
    """Simulate ranks: split the samples into contiguous parts, reduce each
    part on its own (in reverse order), merge the parts in reverse order."""
    source = open_source(ComputeOptions(dataset=meps_small))
    whole = compute_source(source)
    partials = [
        accumulate(source, reversed(partition(len(source), r, parts))) for r in range(parts)
    ]
    total = empty_accumulator(source)
    for p in reversed(partials):
        total.merge(p)
    grouped = total.extract(source.streams, source.kind, source.capabilities.time_splits)
    grouped.attrs, grouped.run = whole.attrs, whole.run
    assert _result_bytes(source, whole, tmp_path, "a") == _result_bytes(
        source, grouped, tmp_path, "b"
    )


def test_threads_do_not_change_bits(meps_small):
    one = compute(meps_small, threads=1)
    three = compute(meps_small, threads=3)
    assert one.state.std.tobytes() == three.state.std.tobytes()
    assert one.state.diff[3].mean.tobytes() == three.state.diff[3].mean.tobytes()


def test_library_compute_uses_the_commands_default_threads(meps_small):
    """``wxstats.compute`` without ``threads`` runs like ``wxstats compute``
    (the available CPUs, at most 8; it used one thread)."""
    from wxstats.core.machine import available_cpus

    stats = compute(meps_small)
    assert stats.run["threads_per_rank"] == max(1, min(available_cpus(), 8))
    assert compute(meps_small, threads=1).run["threads_per_rank"] == 1


@pytest.mark.parametrize("n,world", [(10, 3), (2, 5), (7, 7), (11, 4), (0, 2)])
def test_partition_covers_every_sample_once(n, world):
    seen = [i for r in range(world) for i in partition(n, r, world)]
    assert seen == list(range(n))


def test_help_of_wxstats_compute_lists_every_option_it_takes():
    """``help(wxstats.compute)`` names every option of the data and the run that a
    notebook may pass (it listed none); the outputs' options belong to the command."""
    from dataclasses import fields

    import wxstats
    from wxstats.runtime.options import ComputeOptions

    outputs_and_launch = {
        "dataset", "output_dir", "summary", "output", "write_into", "output_format",
        "overwrite", "level_weights", "min_std", "checkpoint", "checkpoint_interval",
        "resume", "state", "base_state", "allow_gap", "nproc",
        "backend", "device", "timeout", "quiet", "log_format", "log_interval", "argv",
    }  # fmt: skip
    names = {f.name for f in fields(ComputeOptions)} - outputs_and_launch
    doc = wxstats.compute.__doc__
    assert names and not [n for n in names if f"``{n}``" not in doc]
