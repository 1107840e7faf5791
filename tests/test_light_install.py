"""The base install has no torch (an extra, ``wxstats[torch]``): every command of
one process works without it, the ``.pt`` files written and read back, and every
command that needs ranks says in one line which extra to install.

Each command runs in a process where ``import torch`` fails (a ``sitecustomize``
puts ``None`` in ``sys.modules``, as if torch were not installed); the fresh
virtual environment of the README's first command is checked by hand (see the
issue's closing note): a pip install costs minutes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from distributed_helpers import env
from gridded_data import gridded, write_zarr

pytestmark = pytest.mark.slow  # starts a process per command

EXTRA = "pip install 'wxstats[torch]'"


@pytest.fixture(scope="module")
def no_torch(tmp_path_factory) -> dict[str, str]:
    """The environment of a process without torch (this checkout's code)."""
    folder = tmp_path_factory.mktemp("no-torch")
    (folder / "sitecustomize.py").write_text("import sys\nsys.modules['torch'] = None\n")
    out = env()
    out["PYTHONPATH"] = os.pathsep.join([str(folder), out["PYTHONPATH"]])
    return out


def wxstats(where: Path, environment: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "wxstats", *args], cwd=where, env=environment,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_torch_is_unimportable_there(no_torch):
    done = subprocess.run([sys.executable, "-c", "import torch"], env=no_torch, capture_output=True)
    assert done.returncode != 0 and b"ModuleNotFoundError" in done.stderr


def test_one_process_computes_writes_and_reads_everything_without_torch(no_torch, tmp_path):
    """The README's first command, then what a user does next: report and compare
    neural-lam's ``.pt`` files (read without torch), a zarr dataset."""
    done = wxstats(tmp_path, no_torch, "example", "--times", "2", "--grid", "6", "7")
    assert done.returncode == 0, done.stderr
    static = tmp_path / "wxstats-example" / "static"
    assert (static / "parameter_std.pt").is_file()
    done = wxstats(tmp_path, no_torch, "report", str(static), "-o", str(tmp_path / "r"))
    assert done.returncode == 0, done.stderr
    # the float32 .pt files (read without torch) against the float64 file beside them
    done = wxstats(tmp_path, no_torch, "compare", str(static), str(static / "wxstats_stats.nc"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "same within rtol" in done.stdout
    ds, _ = gridded(n_time=12, ny=4, nx=5)
    write_zarr(ds, tmp_path / "g.zarr")
    done = wxstats(tmp_path, no_torch, "compute", "g.zarr", "--threads", "2", "--quiet")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "g.stats.nc").is_file()


RANKS = [
    (["--nproc", "2"], {}, "--nproc 2"),
    ([], {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_PORT": "29511"},
     "a torchrun rank"),
    ([], {"SLURM_PROCID": "0", "SLURM_STEP_ID": "0", "SLURM_NTASKS": "2",
          "SLURM_JOB_NODELIST": "localhost", "SLURM_JOB_ID": "7"}, "a slurm rank"),
    (["--device", "cuda"], {}, "--device cuda"),
    (["--backend", "gloo"], {}, "--backend gloo"),
]  # fmt: skip


@pytest.mark.parametrize("args, launcher, what", RANKS, ids=[r[2] for r in RANKS])
def test_what_needs_ranks_names_the_extra_in_one_line(no_torch, tmp_path, args, launcher, what):
    ds, _ = gridded(n_time=12, ny=4, nx=5)
    write_zarr(ds, tmp_path / "g.zarr")
    for command in (["compute", "g.zarr"], ["update", "no.wxstate", "g.zarr"]):
        if command[0] == "update":  # update runs like compute: its state first
            state = wxstats(tmp_path, no_torch, "compute", "g.zarr", "--state", "no.wxstate")
            assert state.returncode == 0, state.stderr
            (tmp_path / "no.stats.nc").unlink()
        done = wxstats(tmp_path, no_torch | launcher, *command, *args, "--quiet")
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1, done.stderr
        assert lines[0].startswith(f"wxstats: error: {what} needs PyTorch"), lines
        assert EXTRA in lines[0]
        assert not list(tmp_path.glob("*.nc")), "nothing written"
