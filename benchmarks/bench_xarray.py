"""wxstats on a zarr store against xarray + dask, same store, same run.

Writes an ERA5-like zarr store (default 2.1 GB of float32: 2-m temperature
around 280 K and sea-level pressure around 101325 Pa, hourly, zarr's default
compression), then times:

- ``wxstats``: ``compute_source`` over the whole store (mean, std, min, max
  and the step-1 difference statistics, all exact), ``--threads`` threads;
- ``xarray+dask float32``: ``dask.compute(ds.mean(), ds.std())`` on
  ``xr.open_zarr`` (what a user types; the data's own float32);
- ``xarray+dask float64``: the same after ``.astype("float64")``: the
  reference the errors are measured against (two-level, float64).

and prints the wall times, throughputs and each result's relative error.
The store is deleted afterwards unless ``--keep``. The CPU may be shared with
other work: compare the numbers of one run with each other, not across runs.

    python benchmarks/bench_xarray.py                 # 2.1 GB in /tmp
    python benchmarks/bench_xarray.py --gb 0.2 --dir /scratch
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np


def write_store(path: Path, gb: float, grid: tuple[int, int], chunk: int) -> dict:
    import dask.array as da
    import xarray as xr

    per_step = 2 * grid[0] * grid[1] * 4
    n_time = max(chunk, int(gb * 1e9 / per_step) // chunk * chunk)
    shape, chunks = (n_time, *grid), (chunk, *grid)
    rng = da.random.default_rng(0)
    yy = np.linspace(-1, 1, grid[0])[:, None]
    xx = np.linspace(-1, 1, grid[1])[None, :]
    field = np.cos(3 * yy) * np.sin(2 * xx)  # a smooth spatial pattern
    t2m = 280 + 10 * field + 3 * rng.standard_normal(shape, chunks=chunks, dtype=np.float32)
    msl = 101325 + 1200 * field + 300 * rng.standard_normal(shape, chunks=chunks, dtype=np.float32)
    times = np.datetime64("2000-01-01T00", "h") + np.arange(n_time).astype("timedelta64[h]")
    ds = xr.Dataset(
        {
            "t2m": (("time", "y", "x"), t2m.astype(np.float32), {"units": "K"}),
            "msl": (("time", "y", "x"), msl.astype(np.float32), {"units": "Pa"}),
        },
        coords={"time": times},
    )
    ds.to_zarr(path, mode="w", consolidated=False)  # zarr's default format and compression
    return {"n_time": n_time, "nbytes": int(ds.nbytes), "disk": _disk(path)}


def _disk(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def run_wxstats(path: Path, threads: int):
    import wxstats

    started = time.perf_counter()
    stats = wxstats.compute(str(path), threads=threads)  # what a notebook calls
    seconds = time.perf_counter() - started
    return seconds, {
        v: (stats.streams[f"{v}__train"].mean[0], stats.streams[f"{v}__train"].std[0])
        for v in ("t2m", "msl")
    }


def run_dask(path: Path, dtype: str | None):
    import dask
    import xarray as xr

    ds = xr.open_zarr(path, consolidated=False)
    if dtype:
        ds = ds.astype(dtype)
    started = time.perf_counter()
    mean, std = dask.compute(ds.mean(), ds.std())
    seconds = time.perf_counter() - started
    return seconds, {v: (float(mean[v]), float(std[v])) for v in ("t2m", "msl")}


def _rel(value: float, reference: float) -> float:
    return abs(float(value) / float(reference) - 1)


def store_arguments(parser: argparse.ArgumentParser, gb: float, grid: tuple[int, int]) -> None:
    """The store's size, grid, chunking and folder (bench_dask.py writes the same store)."""
    parser.add_argument("--gb", type=float, default=gb, help=f"uncompressed size (default {gb})")
    parser.add_argument("--grid", type=int, nargs=2, default=grid, metavar=("NY", "NX"))
    parser.add_argument("--chunk", type=int, default=24, help="time steps per zarr chunk")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    store_arguments(parser, 2.1, (361, 720))
    parser.add_argument("--threads", type=int, default=2, help="wxstats threads (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep the store")
    args = parser.parse_args()

    args.dir.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="wxstats-bench-xarray-", dir=args.dir))
    path = folder / "era5like.zarr"
    try:
        started = time.perf_counter()
        info = write_store(path, args.gb, tuple(args.grid), args.chunk)
        print(
            f"store: {path} {info['n_time']} steps x {args.grid[0]}x{args.grid[1]} x 2 variables, "
            f"{info['nbytes'] / 1e9:.2f} GB float32, {info['disk'] / 1e9:.2f} GB on disk "
            f"(written in {time.perf_counter() - started:.0f} s)"
        )
        gb = info["nbytes"] / 1e9
        results = {
            "wxstats (exact, + diff stats)": run_wxstats(path, args.threads),
            "xarray+dask float32": run_dask(path, None),
            "xarray+dask float64 (reference)": run_dask(path, "float64"),
        }
        _, ref = results["xarray+dask float64 (reference)"]
        print(f"{'':34s} {'seconds':>8s} {'GB/s':>6s}   rel. error of mean / std vs float64")
        for name, (seconds, values) in results.items():
            errors = "  ".join(
                f"{v}: {_rel(values[v][0], ref[v][0]):.1e} / {_rel(values[v][1], ref[v][1]):.1e}"
                for v in ("t2m", "msl")
            )
            print(f"{name:34s} {seconds:8.1f} {gb / seconds:6.2f}   {errors}")
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
