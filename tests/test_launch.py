"""How ranks find each other: Slurm node lists, launch detection, ports, threads,
backend choice (pure functions, no processes started)."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
import torch

from wxstats.core.errors import WxstatsError
from wxstats.runtime.job import resolve_backend
from wxstats.runtime.launch import (
    Launch,
    detect_launch,
    expand_nodelist,
    slurm_port,
    strip_nproc,
)

# -- Slurm node lists and launch detection (pure functions) ------------------------


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node07", ["node07"]),
        ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
        ("a1,b[2-4]", ["a1", "b2", "b3", "b4"]),
        ("gpu[8-10]", ["gpu8", "gpu9", "gpu10"]),
        ("n[098-101]", ["n098", "n099", "n100", "n101"]),
        ("x[1-2],y,z[5]", ["x1", "x2", "y", "z5"]),
        ("r[1-2]-n[1-2]", ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]),
        ("login-1.cluster,c[3,1]", ["login-1.cluster", "c3", "c1"]),
    ],
)
def test_expand_nodelist(text, hosts):
    assert expand_nodelist(text) == hosts


@pytest.mark.parametrize("text", ["node[01-03", "node01]", "n[a-b]", "n[1-]"])
def test_expand_nodelist_rejects_malformed(text):
    with pytest.raises(ValueError):
        expand_nodelist(text)


SLURM_STEP = {
    "SLURM_PROCID": "5",
    "SLURM_STEP_ID": "0",
    "SLURM_NTASKS": "8",
    "SLURM_STEP_NUM_TASKS": "8",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "1",
    "SLURM_JOB_ID": "123456",
    "SLURM_JOB_NODELIST": "cn[07-08,11]",
    "SLURM_STEP_NODELIST": "cn[08,11]",
    "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
    "SLURM_CPUS_PER_TASK": "6",
}


def test_detect_slurm_step():
    launch = detect_launch(SLURM_STEP)
    expected = Launch("slurm", 5, 8, 1, 4, "cn08", slurm_port(123456, 0), 6)
    assert launch == replace(expected, token="slurm job 123456 step 0")
    assert launch.default_threads() == 6


def test_slurm_master_from_job_nodelist_and_overrides():
    env_ = {k: v for k, v in SLURM_STEP.items() if k != "SLURM_STEP_NODELIST"}
    assert detect_launch(env_).master_addr == "cn07"
    env_.update(MASTER_ADDR="head", MASTER_PORT="29400")
    launch = detect_launch(env_)
    assert (launch.master_addr, launch.master_port) == ("head", 29400)


def test_slurm_ports_differ_between_jobs_and_steps():
    ports = {slurm_port(job, step) for job in range(1000, 1100) for step in range(4)}
    assert len(ports) == 400
    assert all(20000 <= p < 60000 for p in ports)


def test_batch_script_without_srun_is_a_single_process():
    batch = {k: v for k, v in SLURM_STEP.items() if k != "SLURM_STEP_ID"}
    assert detect_launch(batch) is None
    assert detect_launch({}) is None


def test_torchrun_wins_over_slurm():
    env_ = dict(SLURM_STEP, RANK="3", WORLD_SIZE="4", LOCAL_RANK="1", LOCAL_WORLD_SIZE="2")
    env_.update(MASTER_ADDR="10.0.0.1", MASTER_PORT="29500")
    launch = detect_launch(env_)
    assert launch == Launch("torchrun", 3, 4, 1, 2, "10.0.0.1", 29500)


def test_threads_share_the_cpus_between_local_ranks():
    cpus = len(os.sched_getaffinity(0))
    launch = Launch("nproc", 0, 2, 0, 2, "127.0.0.1", 1)
    assert launch.default_threads() == max(1, min(cpus // 2, 8))
    assert Launch("nproc", 0, 64, 0, 64, "127.0.0.1", 1).default_threads() == 1


def test_strip_nproc():
    assert strip_nproc(["compute", "c.yaml", "--nproc", "3", "--quiet"]) == [
        "compute",
        "c.yaml",
        "--quiet",
    ]
    assert strip_nproc(["compute", "--nproc=2", "c.yaml"]) == ["compute", "c.yaml"]


def test_backend_and_device_choice_on_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    launch = Launch("nproc", 0, 2, 0, 2, "127.0.0.1", 1)
    assert resolve_backend("auto", "auto", launch) == ("gloo", "cpu")
    assert resolve_backend("gloo", "cpu", launch) == ("gloo", "cpu")
    with pytest.raises(WxstatsError, match="no CUDA device"):
        resolve_backend("auto", "cuda", launch)
    with pytest.raises(WxstatsError, match="nccl"):
        resolve_backend("nccl", "cpu", launch)


def test_more_ranks_than_cpus_is_warned(meps_small, tmp_path, capsys, monkeypatch):
    from wxstats.cli import main
    from wxstats.runtime import launch

    monkeypatch.setattr(launch, "available_cpus", lambda: 1)
    out = tmp_path / "o"
    assert (
        main(["compute", str(meps_small), "--quiet", "--output-dir", str(out), "--nproc", "2"]) == 0
    )
    err = capsys.readouterr().err
    assert "--nproc 2 starts more ranks than the 1 CPUs" in err
    assert (out / "parameter_mean.pt").is_file()
