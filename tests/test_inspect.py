"""wxstats inspect: the plan matches the files on disk, and nothing is written."""

from __future__ import annotations

import os

import pytest

from wxstats.cli import main
from wxstats.runtime.options import ComputeOptions
from wxstats.tools.inspect import Inspection, inspect_dataset


def _tree(root) -> dict[str, tuple[int, int]]:
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_plan_matches_the_files(meps_small):
    before = _tree(meps_small.parent)
    plan = inspect_dataset(
        ComputeOptions(dataset=meps_small, threads=2, output_dir=meps_small.parent / "o")
    )
    assert _tree(meps_small.parent) == before  # inspect writes nothing
    assert not (meps_small.parent / "o").exists()
    train = meps_small.parent / "samples" / "train"
    samples = sorted(train.glob("nwp_2*_mbr*.npy"))
    fluxes = sorted(train.glob("nwp_toa_downwelling_shortwave_flux_*.npy"))
    assert plan.kind == "npyfilesmeps" and plan.samples == len(samples) == 10
    # every member file once, and its analysis time's flux file once per member
    members = len(samples) // len(fluxes)
    expected = sum(os.path.getsize(p) for p in samples) + members * sum(
        os.path.getsize(p) for p in fluxes
    )
    assert plan.total_bytes == expected
    state = dict(plan.streams)["state"]
    assert len(state) == 17 and state[0] == "pres_0g"
    names = {p.name for p, _ in plan.outputs}
    assert {"parameter_mean.pt", "diff_std.pt", "wxstats_stats.nc"} <= names
    # the formula itself: test_estimate_uses_the_slower_rate, with numbers worked by hand
    assert plan.read_gbps > 0 and plan.compute_gbps > 0 and plan.estimate_s > 0


def test_estimate_uses_the_slower_rate():
    plan = Inspection("p", "k", "train", 1, [], int(10e9), "x", read_gbps=2.0, compute_gbps=0.5)
    assert plan.estimate_s == 20.0  # 10 GB at 0.5 GB/s with one thread
    plan.threads = 8
    assert plan.estimate_s == 5.0  # 4 GB/s of compute, the 2 GB/s read limits
    plan.compute_gbps = None
    assert plan.estimate_s is None


def test_cli_inspect(meps_small, capsys, monkeypatch):
    import wxstats.core.machine as machine

    monkeypatch.setattr(machine, "available_cpus", lambda: 4)
    assert main(["inspect", str(meps_small), "--threads", "3"]) == 0
    out = capsys.readouterr().out
    assert "samples:   10" in out and "npyfilesmeps" in out and "z_500" in out
    assert "estimated time:" in out and "3 thread(s)" in out and "raw read" in out
    # more threads than CPUs: the estimate counts those that can run at once
    assert main(["inspect", str(meps_small), "--threads", "16"]) == 0
    out = capsys.readouterr().out
    assert "with 4 thread(s)" in out and "--threads 16 on 4 CPUs" in out
    assert main(["inspect", str(meps_small), "--no-measure"]) == 0
    assert "estimated time: not measured" in capsys.readouterr().out


def test_cli_inspect_bad_input(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err


def test_inspect_reports_a_first_sample_that_would_fail(meps_copy, capsys):
    import numpy as np

    first = sorted((meps_copy.parent / "samples" / "train").glob("nwp_2*_mbr*.npy"))[0]
    x = np.load(first)
    x[5, 3, 3, 6] = np.nan
    np.save(first, x)
    assert main(["inspect", str(meps_copy)]) == 2  # compute would fail: so does inspect
    err = capsys.readouterr().err
    assert "first sample fails" in err and "t_2" in err and "--skipna" in err


def test_inspect_help_has_examples(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["inspect", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "wxstats inspect " in out


def test_inspect_takes_compute_source_options_for_zarr(tmp_path, capsys):
    from gridded_data import gridded, write_zarr

    ds, _ = gridded(n_time=10)
    ds = ds.rename(time="step")
    write_zarr(ds.assign_coords(step=ds["step"]), tmp_path / "g.zarr")
    args = ["inspect", str(tmp_path / "g.zarr"), "--no-measure", "--time-dim", "step"]
    assert main([*args, "--variables", "t2m,z", "--diff-steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "t2m__train" in out and "z__train" in out and "msl__train" not in out
    assert main(["inspect", str(tmp_path / "g.zarr"), "--no-measure"]) == 2  # no 'time' there
    assert "--time-dim" in capsys.readouterr().err


def test_inspect_finds_a_truncated_sample_that_is_not_the_first(meps_copy, capsys):
    last = sorted((meps_copy.parent / "samples" / "train").glob("nwp_2*_mbr*.npy"))[-1]
    data = last.read_bytes()
    last.write_bytes(data[: len(data) // 2])
    assert main(["inspect", str(meps_copy), "--no-measure"]) == 2
    err = capsys.readouterr().err
    assert str(last) in err and "truncated" in err


def test_inspect_lists_the_arrays_write_into_would_write(tmp_path, capsys):
    """--write-into: the arrays that would go into the dataset's own store, for an
    mllam-data-prep store and an anemoi dataset; nothing written."""
    from gridded_data import mdp_store
    from test_anemoi import make_dataset

    mdp_store(tmp_path / "mdp.zarr")
    make_dataset(tmp_path / "an.zarr")
    before = _tree(tmp_path)
    assert main(["inspect", str(tmp_path / "mdp.zarr"), "--write-into", "--no-measure"]) == 0
    out = capsys.readouterr().out
    assert f"into {tmp_path / 'mdp.zarr'} (" in out
    assert "state__train__mean" in out and "forcing__train__diff_std" in out
    args = ["inspect", str(tmp_path / "an.zarr"), "--write-into", "--diff-steps", "1,2"]
    assert main([*args, "--no-measure"]) == 0
    out = capsys.readouterr().out
    assert "(12 arrays): mean, stdev, minimum, maximum, statistics_tendencies_6h_mean" in out
    assert "statistics_tendencies_12h_maximum" in out
    assert _tree(tmp_path) == before


def test_projection_on_nodes_by_hand():
    from wxstats.tools.inspect import projection

    # 7 TB; 0.5 GB/s per thread x 16 threads = 8 GB/s per node; storage 2 GB/s per node
    assert projection(int(7e12), 2.0, 0.5, 16, 10) == (7e12 / 20e9, "storage")  # 350 s
    # a faster storage: the CPU limits, 10 nodes x 8 GB/s = 80 GB/s -> 87.5 s
    assert projection(int(7e12), 20.0, 0.5, 16, 10) == (87.5, "CPU")
    # a shared storage of 40 GB/s in total: 10 nodes could compute 80, it gives 40
    assert projection(int(7e12), 20.0, 0.5, 16, 10, storage_gbps=40.0) == (175.0, "storage")
    plan = Inspection("p", "k", "train", 4, [], int(8e9), "x", read_gbps=1.0, compute_gbps=0.25)
    plan.threads, plan.nodes = 2, 100  # 4 samples: 4 nodes get one each, 4 x 0.5 GB/s
    assert plan.projection() == (4.0, "CPU")


def test_cli_inspect_prints_the_projection(meps_small, capsys):
    assert main(["inspect", str(meps_small), "--threads", "2", "--nodes", "3"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("projected on 3 node(s) x "))
    assert "limited by CPU" in line or "limited by storage" in line
    assert "measured on sample 0 only" in out
    args = ["inspect", str(meps_small), "--nodes", "50", "--storage-gbps", "0.001"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "projected on 10 node(s)" in out and "only 10 of the 50 nodes" in out
    assert "limited by storage" in out and "the storage is the limit" in out
    with pytest.raises(SystemExit) as exit_info:  # refused by the parser, in one line
        main(["inspect", str(meps_small), "--nodes", "0"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--nodes" in err and len(err.strip().splitlines()) == 1, err
