"""The fixed costs of a ``wxstats`` command: what it costs besides the data.

Each row is the best (and median) wall time of a fresh ``python -m wxstats ...``
process over ``--repeat`` rounds, the rows interleaved in every round so that a
shared machine's drift hits them alike, against ``python -c "import numpy,
xarray"`` (the least any xarray-based tool pays) in the same rounds:

- ``wxstats --help``;
- ``wxstats compute`` on a tiny zarr store, the same data as a netCDF4 file, a
  zarr store of 5000 chunks (one time step each: a pass over every chunk file
  before the first read would show here), and the tiny neural-lam MEPS
  datastore of ``wxstats example`` (which writes the ``.pt`` files);
- the compiled kernel's load (its machine code stored by an earlier run,
  :mod:`wxstats.core.kernel.stored`; before that, numba's warm on-disk cache): in
  one process, after a run with the numpy twin, the first ``wxstats.compute`` of
  the tiny MEPS datastore with the compiled kernel minus the second.

Goals (issue 26): zarr/netCDF at most 1.3x the baseline, MEPS at most 1.6x; the
kernel's load well under 0.2 s.
``-X importtime`` on one of these commands says what is imported and why.

Every process reads and writes its bytecode in one cache folder of the run
(``PYTHONPYCACHEPREFIX``), even where ``PYTHONDONTWRITEBYTECODE`` is set, as an
installed package has its ``.pyc`` files: compiling wxstats' sources in every
process cost ~0.1 s and is no start-up a user pays. ``--src`` (repeatable)
times other source trees in the same rounds, e.g. the commit before a change::

    PYTHONPATH=src python benchmarks/bench_startup.py --repeat 7
    git archive HEAD~3 src | tar -x -C /tmp/old
    python benchmarks/bench_startup.py --src /tmp/old/src --src src
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
BASELINE = "import numpy, xarray"

KERNEL_LOAD = """
import sys, time, wxstats
from wxstats.cli import process
from wxstats.core.kernel import choice
process.tune_for_one_command()  # as the command does (numba without its BLAS probe)
choice.KERNEL = "numpy"  # every one-time cost but the compiled kernel's
wxstats.compute(sys.argv[1], threads=1)
choice.KERNEL = "numba"
started = time.perf_counter()
wxstats.compute(sys.argv[1], threads=1)
first = time.perf_counter() - started
started = time.perf_counter()
wxstats.compute(sys.argv[1], threads=1)
print(first - (time.perf_counter() - started))
"""


def environment(src: Path, pycache: Path) -> dict[str, str]:
    """The environment of the timed processes: ``src`` first, bytecode cached in ``pycache``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")]))
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def write_data(work: Path) -> dict[str, Path]:
    """The tiny inputs: zarr, netCDF4, a 5000-chunk zarr store, a MEPS datastore."""
    import numpy as np
    import xarray as xr

    from wxstats.tools.example import ExampleSpec, write_example

    times = np.datetime64("2000-01-01", "h") + np.arange(20).astype("timedelta64[h]")
    data = np.random.default_rng(0).random((20, 4, 5)).astype(np.float32)
    tiny = xr.Dataset({"t": (("time", "y", "x"), data)}, coords={"time": times})
    tiny.to_zarr(work / "tiny.zarr", mode="w", consolidated=True)
    tiny.to_netcdf(work / "tiny.nc", engine="netcdf4")
    n = 5000
    many_times = np.datetime64("2000-01-01", "h") + np.arange(n).astype("timedelta64[h]")
    many = xr.Dataset(
        {"t": (("time", "y", "x"), np.random.default_rng(1).random((n, 4, 5), dtype=np.float32))},
        coords={"time": many_times},
    )
    many.to_zarr(work / "chunks5000.zarr", mode="w", encoding={"t": {"chunks": (1, 4, 5)}})
    meps = write_example(work / "meps", ExampleSpec(analysis_times=1, grid=(12, 14)))
    return {"zarr": work / "tiny.zarr", "nc": work / "tiny.nc", "many": work / "chunks5000.zarr",
            "meps": meps}  # fmt: skip


def commands(paths: dict[str, Path], out: Path) -> dict[str, list[str]]:
    """The timed wxstats commands, by row name."""
    py = [sys.executable]
    compute = [*py, "-m", "wxstats", "compute", "--quiet", "--overwrite"]
    return {
        "wxstats --help": [*py, "-m", "wxstats", "--help"],
        "compute tiny zarr": [*compute, str(paths["zarr"]), "--output", str(out / "z.nc")],
        "compute tiny netCDF": [*compute, str(paths["nc"]), "--output", str(out / "n.nc")],
        "compute zarr, 5000 chunks": [*compute, str(paths["many"]), "--output", str(out / "m.nc")],
        "compute tiny MEPS (.pt files)": [*compute, str(paths["meps"])],
    }


def wall(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def kernel_load(meps: Path, env: dict[str, str]) -> float:
    cmd = [sys.executable, "-c", KERNEL_LOAD, str(meps)]
    return float(subprocess.run(cmd, check=True, env=env, capture_output=True, text=True).stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="rounds (best and median of)")
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: temp)")
    parser.add_argument("--src", type=Path, action="append", help="source tree(s) to time")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures")
    args = parser.parse_args(argv)
    trees = [path.resolve() for path in args.src or [SRC]]
    work = Path(tempfile.mkdtemp(prefix="wxstats-startup-", dir=args.dir))
    envs = {tree: environment(tree, work / "pycache" / str(i)) for i, tree in enumerate(trees)}
    base_env = environment(trees[0], work / "pycache" / "0")
    try:
        paths = write_data(work)
        out = work / "out"
        out.mkdir()
        rows: dict[str, tuple[list[str], dict[str, str]]] = {
            f"baseline: python -c {BASELINE!r}": ([sys.executable, "-c", BASELINE], base_env)
        }
        for name, cmd in commands(paths, out).items():
            for tree, env in envs.items():
                label = f"{name} [{tree.parent.name}/{tree.name}]" if len(trees) > 1 else name
                rows[label] = (cmd, env)
        for cmd, env in rows.values():  # numba's cache, the page cache, the bytecode
            wall(cmd, env)
        times: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(args.repeat):
            for name, (cmd, env) in rows.items():
                times[name].append(wall(cmd, env))
        kernel = {tree: [kernel_load(paths["meps"], env) for _ in range(args.repeat)]
                  for tree, env in envs.items()}  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = min(next(iter(times.values())))
    cpus = len(os.sched_getaffinity(0))
    print(f"start-up, fresh processes, best of {args.repeat} ({cpus} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}):")  # fmt: skip
    width = max(map(len, times))
    print(f"  {'command':<{width}} {'best s':>7} {'median s':>9} {'x baseline':>11}")
    for name, values in times.items():
        best = min(values)
        median = statistics.median(values)
        print(f"  {name:<{width}} {best:7.3f} {median:9.3f} {best / base:10.2f}x")
    for tree, values in kernel.items():
        where = f" [{tree.parent.name}/{tree.name}]" if len(trees) > 1 else ""
        print(f"  compiled kernel load, stored (first compute - second, in-process){where} "
              f"{min(values):.3f} s best, {statistics.median(values):.3f} s median")  # fmt: skip
    if args.json:
        figures = {"times": times, "kernel_load": {str(t): v for t, v in kernel.items()}}
        args.json.write_text(json.dumps({**figures, "cpus": cpus}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
