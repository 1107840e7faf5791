"""A growing dataset: a full recomputation against ``wxstats update`` adding 10 % more.

Writes the ERA5-like store of :mod:`bench_zarr` (t, u, z on 13 levels, t2m,
msl; one time step per chunk), and beside it the last 10 % of its time steps
as a store of their own (the new data). Then times, as whole commands
(start-up included), best of ``--repeat``:

- ``full``: ``wxstats compute`` over all the time steps (the recomputation an
  update replaces);
- ``state``: ``wxstats compute --state`` over the first 90 % (done once);
- ``update``: ``wxstats update`` of that state with the new 10 %;

checks that the update's statistics are the full run's, value for value, and
prints the update's time as a fraction of the full run's (the goal: about the
fraction of the data it reads).

    python benchmarks/bench_grow.py --gb 0.5
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_zarr import write_store  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}


def wxstats(*args: str) -> float:
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "wxstats", *args, "--quiet", "--overwrite"]
    subprocess.run(cmd, check=True, env=ENV, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def same_values(a: Path, b: Path) -> bool:
    import xarray as xr

    with xr.open_dataset(a) as x, xr.open_dataset(b) as y:
        names = sorted(x.data_vars)
        return names == sorted(y.data_vars) and all(
            x[n].values.tobytes() == y[n].values.tobytes() for n in names
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=0.5, help="size of the whole store")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument(
        "--work", type=Path, help="folder for the stores (default: a temporary one)"
    )
    args = parser.parse_args()
    import xarray as xr

    work = args.work or Path(tempfile.mkdtemp(prefix="wxstats-grow-"))
    work.mkdir(parents=True, exist_ok=True)
    store, new = work / "all.zarr", work / "new.zarr"
    if not store.exists():
        write_store(store, args.gb)
    with xr.open_zarr(store) as ds:
        n = ds.sizes["time"]
        cut = n - max(1, n // 10)
        old_end = str(ds["time"].values[cut - 1])[:19]
        first = str(ds["time"].values[0])[:19]
        if not new.exists():
            part = ds.isel(time=slice(cut, n))
            enc = {v: {"chunks": (1, *part[v].shape[1:])} for v in part.data_vars}
            for v in part.variables.values():
                v.encoding.pop("chunks", None)
                v.encoding.pop("preferred_chunks", None)
            part.to_zarr(new, mode="w", encoding=enc, consolidated=True)
    steps = ["--diff-steps", "1"]
    full = min(
        wxstats("compute", str(store), "--output", str(work / "full.nc"), *steps)
        for _ in range(args.repeat)
    )
    state = wxstats(
        "compute", str(store), "--split", f"train={first}/{old_end}",
        "--state", str(work / "old.wxstate"), "--output", str(work / "old.nc"), *steps,
    )  # fmt: skip
    update = min(
        wxstats("update", str(work / "old.wxstate"), str(new), "--output", str(work / "up.nc"))
        for _ in range(args.repeat)
    )
    identical = same_values(work / "full.nc", work / "up.nc")
    print(f"store: {n} time steps, {args.gb:g} GB; new data: {n - cut} steps ({(n - cut) / n:.0%})")
    print(f"full run       {full:7.2f} s")
    print(f"state (90 %)   {state:7.2f} s  (once)")
    print(f"update (+10 %) {update:7.2f} s  = {update / full:.0%} of the full run")
    print(f"update byte-identical to the full run: {identical}")


if __name__ == "__main__":
    main()
