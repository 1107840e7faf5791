"""What a command imports, not how long it takes (``benchmarks/bench_startup.py``
times it): torch costs seconds and numba a third of one, so each is imported
only where it is needed (the compiled kernel is linked by llvmlite alone once
its machine code is stored, :mod:`wxstats.core.kernel.stored`). Each command
runs as ``python -m wxstats`` does (its own process, :func:`wxstats.cli.console`),
and reports the modules loaded when the interpreter ends, after every thread of
the run has finished."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from distributed_helpers import env
from gridded_data import gridded, write_zarr

pytestmark = pytest.mark.slow  # starts a process per command

WATCHED = ("torch", "numba", "llvmlite", "xarray", "zarr", "netCDF4")
CHILD = f"""
import atexit, sys
atexit.register(lambda: print("LOADED", *[m for m in {WATCHED!r} if sys.modules.get(m)]))
sys.argv = ["wxstats", *sys.argv[1:]]
from wxstats.cli import console
raise SystemExit(console())
"""


def loaded(*args: str) -> set[str]:
    """The watched modules loaded by ``wxstats ARGS`` (which must succeed)."""
    out = subprocess.run(
        [sys.executable, "-c", CHILD, *args], capture_output=True, text=True, env=env(), timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    line = [x for x in out.stdout.splitlines() if x.startswith("LOADED")][-1]
    return set(line.split()[1:])


def test_the_command_module_imports_no_numpy_before_the_command_tunes_the_process():
    """``python -m wxstats`` imports ``wxstats.cli`` before :func:`console` sets
    numpy's environment (``OPENBLAS_NUM_THREADS``: OpenBLAS threads spin otherwise)
    and pauses the collector; numpy imported then cost every run 0.14 s of CPU
    (the output-target table, imported for ``--format``'s choices, did)."""
    code = "import sys, wxstats.cli; print([m for m in ('numpy', 'xarray') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(),
                         timeout=120, check=True)  # fmt: skip
    assert out.stdout.strip() == "[]", out.stdout


@pytest.mark.parametrize("args", [["--help"], ["compute", "--help"], ["inspect", "--help"]])
def test_help_imports_no_library(args):
    assert loaded(*args) == set()


@pytest.fixture(scope="module")
def tiny_zarr(tmp_path_factory):
    ds, _ = gridded(n_time=20, ny=4, nx=5)
    return write_zarr(ds, tmp_path_factory.mktemp("startup") / "tiny.zarr")


def test_a_tiny_zarr_run_imports_neither_torch_nor_numba(tiny_zarr, tmp_path):
    out = tmp_path / "stats.nc"
    modules = loaded("compute", str(tiny_zarr), "--quiet", "--output", str(out))
    assert out.is_file()
    # its blocks are summed by the numpy twin of the kernel (core/kernel/choice.py)
    assert not {"torch", "numba", "llvmlite"} & modules
    assert {"xarray", "zarr", "netCDF4"} <= modules  # the watch itself works


def test_a_netcdf_run_imports_no_zarr(tmp_path):
    data = tmp_path / "tiny.nc"
    gridded(n_time=20, ny=4, nx=5)[0].to_netcdf(data, engine="netcdf4")
    modules = loaded("compute", str(data), "--quiet", "--output", str(tmp_path / "stats.nc"))
    # xarray imports every backend plugin when it guesses the engine (kerchunk's: zarr)
    assert not {"zarr", "torch", "numba"} & modules
    assert {"xarray", "netCDF4"} <= modules


def test_a_meps_run_writes_the_pt_files_without_torch(meps_copy):
    loaded("compute", str(meps_copy), "--quiet")  # the first may compile the kernel (numba)
    modules = loaded("compute", str(meps_copy), "--quiet", "--overwrite")
    assert "torch" not in modules
    # its samples are larger than the numpy twin's share: the compiled kernel, stored
    # by the first run, is linked without numba
    assert "llvmlite" in modules and "numba" not in modules
    static = meps_copy.parent / "static"
    for name in ("parameter_mean.pt", "parameter_std.pt", "diff_mean.pt", "diff_std.pt"):
        tensor = torch.load(static / name, weights_only=True)
        assert tensor.dtype == torch.float32 and tuple(tensor.shape) == (17,)
    flux = torch.load(static / "flux_stats.pt", weights_only=True)
    assert flux.dtype == torch.float32 and tuple(flux.shape) == (2,)


def test_inspect_without_measuring_imports_no_kernel(meps_small):
    assert not {"torch", "numba", "llvmlite"} & loaded("inspect", str(meps_small), "--no-measure")
