"""No cliffs in ``--block-mb``: the whole command at each block size, same run.

A user found ``--block-mb 2`` 15x slower than ``--block-mb 3`` on a 164 MB
zarr store of ten variables (its 245 kB blocks went to the numpy twin of the
kernel, whose lane loop runs in Python); the twin is now rented only up to the
price of loading the compiled kernel (``core/kernel/choice.py``). This writes
such a store (ten surface variables, one time step per chunk, zarr's default
compression; ``--mb`` of float32 on a ``--grid``) and times ``wxstats compute
--diff-steps 1 --block-mb B`` as a fresh process for each ``--block-mb``, in
``--repeat`` interleaved rounds, against the fastest: min and median seconds,
and the statistics' digest (every value of the output file, as xarray decodes
it), which must be the same for every block size.

    python benchmarks/bench_blocks.py                      # 164 MB, 1 2 3 8 32 128 MB blocks
    python benchmarks/bench_blocks.py --mb 400 --block-mb 1 4 16 --repeat 5
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from children import child_env  # benchmarks/, this script's folder

VARIABLES = 10


def write_store(path: Path, mb: float, grid: tuple[int, int], batch: int = 64) -> int:
    """Ten smooth fields with noise, one step per chunk; returns the time steps."""
    import xarray as xr

    per_step = VARIABLES * grid[0] * grid[1] * 4
    n_time = max(4, int(mb * 1e6 / per_step))
    rng = np.random.default_rng(1)
    y = np.linspace(-1, 1, grid[0])[:, None]
    x = np.linspace(-np.pi, np.pi, grid[1])[None, :]
    times = np.datetime64("2000-01-01T00", "h") + 6 * np.arange(n_time).astype("timedelta64[h]")
    warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
    for t0 in range(0, n_time, batch):
        n = min(batch, n_time - t0)
        phase = 2 * np.pi * np.arange(t0, t0 + n)[:, None, None] / 40
        data = {
            f"v{i}": (
                ("time", "y", "x"),
                (
                    100 * i
                    + 10 * np.cos(3 * y + phase + i) * np.sin(x)
                    + rng.standard_normal((n, *grid), dtype=np.float32)
                ).astype(np.float32),
            )  # fmt: skip
            for i in range(VARIABLES)
        }
        ds = xr.Dataset(data, coords={"time": times[t0 : t0 + n]})
        if t0 == 0:
            enc = {v: {"chunks": (1, *grid)} for v in ds.data_vars}
            ds.to_zarr(path, mode="w", encoding=enc)
        else:
            ds.to_zarr(path, append_dim="time")
    return n_time


def digest(path: Path) -> str:
    """Every value of a statistics file, as xarray decodes it (not its run record)."""
    import xarray as xr

    h = hashlib.sha256()
    with xr.open_dataset(path) as ds:
        for name in sorted(ds.data_vars):
            h.update(name.encode() + np.ascontiguousarray(ds[name].values).tobytes())
    return h.hexdigest()[:16]


def command(store: Path, out: Path, block_mb: float) -> float:
    env = child_env()
    cmd = [sys.executable, "-m", "wxstats", "compute", str(store), "--quiet", "--overwrite",
           "--diff-steps", "1", "--block-mb", str(block_mb), "--output", str(out)]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mb", type=float, default=164.0, help="store size, MB of float32 (164)")
    p.add_argument("--grid", type=int, nargs=2, default=(64, 96), metavar=("NY", "NX"))
    p.add_argument("--block-mb", type=float, nargs="+", default=[1, 2, 3, 8, 32, 128])
    p.add_argument("--repeat", type=int, default=3, help="interleaved rounds (3)")
    p.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp dir)")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="wxstats-blocks-", dir=args.dir))
    try:
        store = work / "ten.zarr"
        n_time = write_store(store, args.mb, tuple(args.grid))
        step_kb = VARIABLES * args.grid[0] * args.grid[1] * 4 / 1e3
        times: dict[float, list[float]] = {b: [] for b in args.block_mb}
        digests: dict[float, str] = {}
        for b in args.block_mb:  # warm: the page cache, the bytecode, the stored kernel
            command(store, work / "warm.nc", b)
        for _ in range(args.repeat):
            for b in args.block_mb:
                out = work / f"stats-{b}.nc"
                times[b].append(command(store, out, b))
                digests[b] = digest(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    best = min(min(v) for v in times.values())
    print(f"zarr store: {VARIABLES} variables, grid {args.grid[0]}x{args.grid[1]}, "
          f"{n_time} steps ({step_kb:.0f} kB a step), {args.mb:.0f} MB float32; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"wxstats compute --diff-steps 1 --block-mb B, {args.repeat} interleaved rounds:")
    print(f"  {'--block-mb':>10} {'min s':>7} {'median s':>9} {'x fastest':>10}  statistics")
    for b, values in times.items():
        print(f"  {b:>10g} {min(values):7.2f} {statistics.median(values):9.2f} "
              f"{min(values) / best:9.2f}x  {digests[b]}")  # fmt: skip
    same = len(set(digests.values())) == 1
    print(f"  the same statistics for every block size: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
