"""``wxstats doctor``: the facts a bug report needs, as the machine has them."""

from __future__ import annotations

import json
import sys

import numpy
import torch
import xarray
import zarr

from wxstats.cli import main


def _doctor(capsys) -> dict:
    assert main(["doctor", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_versions_and_torch_build_are_the_installed_ones(capsys, monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_STEP_ID"):
        monkeypatch.delenv(key, raising=False)
    info = _doctor(capsys)
    libraries = info["libraries"]
    assert libraries["numpy"] == numpy.__version__
    assert libraries["xarray"] == xarray.__version__
    assert libraries["zarr"] == zarr.__version__
    assert libraries["torch"] == torch.__version__
    assert info["torch"]["build"] == (f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU")
    assert info["torch"]["gloo"] == torch.distributed.is_gloo_available()
    assert info["launcher"] == "none (one process)"
    assert info["python"].startswith(".".join(map(str, sys.version_info[:3])))


def test_the_launcher_is_the_one_this_process_would_join(capsys, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.5")
    monkeypatch.setenv("MASTER_PORT", "29500")
    assert _doctor(capsys)["launcher"] == "torchrun: rank 1 of 2, master 10.0.0.5:29500"


def test_a_broken_torch_is_reported_not_raised(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    info = _doctor(capsys)
    assert info["torch"]["importable"] is False and "torch" in info["torch"]["error"]
    assert info["libraries"]["torch"] == torch.__version__  # still known from its metadata
