"""wxstats on a Dask cluster against xarray's own ``ds.mean()``/``ds.std()`` on the
same cluster, same store, same run, with a float64 two-pass reference.

Writes an ERA5-like zarr store (bench_xarray.py's: float32 2-m temperature and
sea-level pressure, hourly; default 0.3 GB), starts a ``LocalCluster`` of
``--workers`` processes (one thread each), and times on it:

- ``wxstats on the cluster``: ``wxstats.compute(ds, client=client)`` on
  ``xr.open_zarr`` (mean, std, min, max and the step-1 difference statistics,
  exact; each sample summed on a worker, only the partials merged);
- ``xarray+dask float32``: ``dask.compute(ds.mean(), ds.std())`` on the same
  Dataset and cluster (what a user types; the data's own float32);
- ``xarray+dask float64``: the same after ``.astype("float64")``;

then the reference, in this process: numpy, float64, two passes (the mean of
the chunks' float64 sums with ``math.fsum``, then the squared deviations
from it), against which each row's relative error is printed. The store is
deleted afterwards. The CPU may be shared with other work: compare the
numbers of one run with each other, not across runs.

    python benchmarks/bench_dask.py                    # 0.3 GB in /tmp, 2 workers
    python benchmarks/bench_dask.py --gb 1 --workers 4 --dir /scratch
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_xarray import _rel, store_arguments, write_store  # noqa: E402 - the same store as bench_xarray

VARIABLES = ("t2m", "msl")


def run_wxstats(ds, client):
    import wxstats

    started = time.perf_counter()
    stats = wxstats.compute(ds, client=client)
    seconds = time.perf_counter() - started
    return seconds, {
        v: (stats.streams[f"{v}__train"].mean[0], stats.streams[f"{v}__train"].std[0])
        for v in VARIABLES
    }


def run_dask(ds, dtype: str | None):
    import dask

    if dtype:
        ds = ds.astype(dtype)
    started = time.perf_counter()
    mean, std = dask.compute(ds.mean(), ds.std())  # on the current client: the cluster
    seconds = time.perf_counter() - started
    return seconds, {v: (float(mean[v]), float(std[v])) for v in VARIABLES}


def reference(path: Path, chunk: int):
    """float64 two-pass mean and std of every variable, chunk by chunk, in this process."""
    import xarray as xr

    started = time.perf_counter()
    out = {}
    with xr.open_zarr(path, consolidated=False) as ds:
        for v in VARIABLES:
            n = ds[v].shape[0]
            pieces = [
                ds[v][a : a + chunk].values.astype(np.float64) for a in range(0, n, chunk)
            ]  # fmt: skip
            count = sum(p.size for p in pieces)
            mean = math.fsum(float(p.sum()) for p in pieces) / count
            var = math.fsum(float(((p - mean) ** 2).sum()) for p in pieces) / count
            out[v] = (mean, math.sqrt(var))
    return time.perf_counter() - started, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    store_arguments(parser, 0.3, (181, 360))
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    args = parser.parse_args()

    import xarray as xr
    from distributed import Client, LocalCluster

    args.dir.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="wxstats-bench-dask-", dir=args.dir))
    path = folder / "era5like.zarr"
    try:
        info = write_store(path, args.gb, tuple(args.grid), args.chunk)
        gb = info["nbytes"] / 1e9
        print(
            f"store: {info['n_time']} steps x {args.grid[0]}x{args.grid[1]} x 2 variables, "
            f"{gb:.2f} GB float32, {info['disk'] / 1e9:.2f} GB on disk; "
            f"LocalCluster of {args.workers} processes x 1 thread"
        )
        with (
            LocalCluster(
                n_workers=args.workers, threads_per_worker=1, processes=True,
                dashboard_address=None,
            ) as cluster,
            Client(cluster) as client,
        ):  # fmt: skip
            ds = xr.open_zarr(path, consolidated=False)
            results = {
                "wxstats on the cluster (exact)": run_wxstats(ds, client),
                "xarray+dask float32": run_dask(ds, None),
                "xarray+dask float64": run_dask(ds, "float64"),
            }
        ref_seconds, ref = reference(path, args.chunk)
        print(f"{'':32s} {'seconds':>8s} {'GB/s':>6s}   rel. error of mean / std vs reference")
        for name, (seconds, values) in results.items():
            errors = "  ".join(
                f"{v}: {_rel(values[v][0], ref[v][0]):.1e} / {_rel(values[v][1], ref[v][1]):.1e}"
                for v in VARIABLES
            )
            print(f"{name:32s} {seconds:8.1f} {gb / seconds:6.2f}   {errors}")
        print(f"{'reference: numpy float64 2-pass':32s} {ref_seconds:8.1f} {gb / ref_seconds:6.2f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
