"""Shared by the parallel tests (test_distributed.py, test_slurm.py): a dataset
whose sample count divides by none of 2, 3, 4, 5, 7, running wxstats as
subprocesses, and comparing every output byte for byte."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src"
OUTPUT_FILES = (
    "parameter_mean.pt",
    "parameter_std.pt",
    "diff_mean.pt",
    "diff_std.pt",
    "flux_stats.pt",
    "parameter_weights.npy",
    "wxstats_stats.nc",
)


def make_odd_dataset(root: Path, analysis_times: int = 6) -> Path:
    """``2 * analysis_times - 1`` samples (11 by default) on a 4 x 5 grid: the
    last analysis time lacks member 1."""
    from wxstats.tools.example import ExampleSpec, write_example

    config = write_example(root, ExampleSpec(analysis_times=analysis_times, grid=(4, 5)))
    last = sorted((root / "samples" / "train").glob("nwp_20*_mbr001.npy"))[-1]
    last.unlink()
    return config


def odd_dataset_with_single_run(root: Path) -> tuple[Path, Path]:
    """(config, output dir of a single-process run) of :func:`make_odd_dataset`,
    the single-process result checked against the independent float64 reference
    so that parallel runs compared with it byte for byte are right, not just equal."""
    import warnings

    from reference import assert_close, meps_reference
    from wxstats.cli import main

    config = make_odd_dataset(root / "data")
    reference = root / "single"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the missing member
        assert main(compute_args(config, reference)) == 0
    ref = meps_reference(config)
    summary = json.loads((reference / "summary.json").read_text())
    assert summary["run"]["samples"] == 11
    assert_close(summary["state"]["mean"], ref["mean"], 1e-12, "mean")
    assert_close(summary["state"]["std"], ref["std"], 1e-10, "std")
    return config, reference


def sample_path(config: Path, index: int) -> Path:
    """The state file of sample ``index`` in the order wxstats splits the work."""
    from wxstats.sources.meps import MepsSource

    return MepsSource(config).samples[index].path


def env() -> dict[str, str]:
    """The environment for wxstats subprocesses: this checkout's code first."""
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join([str(SRC), out.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    for key in list(out):  # never inherit a launcher from the test runner
        if key.startswith(("SLURM_", "TORCHELASTIC_")) or key in (
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
        ):
            del out[key]
    return out


def wxstats_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "wxstats", *args]


def compute_args(config: Path, out: Path, *extra: str) -> list[str]:
    return [
        "compute",
        str(config),
        "--quiet",
        "--output-dir",
        str(out),
        "--summary",
        str(out / "summary.json"),
        *extra,
    ]


def kill_leftovers(processes) -> None:
    """End (SIGKILL) and reap the processes a test started that still run."""
    for p in processes:
        if p.poll() is None:
            p.kill()
            p.wait()


def run(cmd: list[str], timeout: float = 240, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, env=kw.pop("env", env()), capture_output=True, text=True, timeout=timeout, **kw
    )


def _summary_without_run(path: Path, where: bool) -> str:
    data = json.loads(path.read_text())
    run = data.pop("run")
    if not where:
        del data["source"]["datastore_config"], data["warnings"]  # they name the folder
    assert run["samples"] > 0
    return json.dumps(data, sort_keys=True)  # repr of every float: exact, -0.0 kept


def _netcdf_content(path: Path, where: bool) -> dict:
    import netCDF4

    skip = {"wxstats_run"} | (set() if where else {"source_datastore_config", "warnings"})
    with netCDF4.Dataset(path) as ds:
        attrs = {k: ds.getncattr(k) for k in ds.ncattrs() if k not in skip}
        variables = {}
        for name, v in ds.variables.items():
            data = np.asarray(v[:])
            payload = data.tobytes() if data.dtype != object else repr(data.tolist())
            attrs_v = {k: repr(v.getncattr(k)) for k in v.ncattrs()}
            variables[name] = (str(v.dtype), v.dimensions, data.shape, payload, attrs_v)
    return {"attrs": attrs, "variables": variables}


def assert_identical_outputs(reference: Path, other: Path, same_path: bool = True) -> None:
    """Every output file the same bytes; the netCDF file and the JSON summary
    the same apart from the description of the run (and of where the dataset
    lies, unless ``same_path``)."""
    for name in OUTPUT_FILES[:-1]:
        assert (other / name).read_bytes() == (reference / name).read_bytes(), name
    assert _netcdf_content(other / "wxstats_stats.nc", same_path) == _netcdf_content(
        reference / "wxstats_stats.nc", same_path
    )
    assert _summary_without_run(other / "summary.json", same_path) == _summary_without_run(
        reference / "summary.json", same_path
    )


def world_size_of(out: Path) -> int:
    return int(json.loads((out / "summary.json").read_text())["run"]["world_size"])


def processes_mentioning(text: str, within: float = 15.0) -> list[int]:
    """PIDs whose command line contains ``text`` (to prove nothing was left
    running). A process sent SIGKILL a moment ago may still be tearing down its
    memory, so look again until none is left or ``within`` seconds pass."""
    deadline = time.monotonic() + within
    while True:
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmdline:
                pids.append(int(entry.name))
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.2)


def readme_sbatch_script() -> str:
    """The multi-node ``sbatch`` script of docs/parallel.md, as written (the Slurm tiers run it)."""
    readme = (SRC.parent / "docs" / "parallel.md").read_text()
    match = re.search(r"<!-- sbatch-example[^>]*-->\s*```bash\n(.*?)```", readme, re.S)
    assert match, "docs/parallel.md lost its sbatch example"
    return match.group(1)
