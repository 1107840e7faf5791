"""A large run: steady throughput after the fixed costs, and flat peak memory.

One command, from a clone (``PYTHONPATH=src`` or an installed wxstats):

    python benchmarks/bench_large.py                      # 5 GB and 20 GB
    python benchmarks/bench_large.py --sizes 5 20 40 --repeat 3 --keep

It writes a MEPS-like datastore of ``--base-times`` analysis times x 2
members (``wxstats.example``, MEPS grid, ~300 MB per sample: 1.2 GB by
default) and, for each of ``--sizes``, a datastore of as many analysis times as
that size needs whose sample files are symbolic links to the base's (cycled,
``run.py``'s ``linked_datastore``): wxstats reads every byte of the size, the
disk and the page cache hold only the base (so this measures the compute and
the memory of a long run, warm, not the disk). Then, in ``--repeat`` rounds
interleaved across the sizes, ``wxstats compute --threads T`` as a fresh
process on each and on a tiny 2 MB datastore (the fixed costs: interpreter,
imports, numba's load, writing the outputs), and prints per size:

- the whole command (min / median / max seconds);
- the steady state: the median whole command minus the median of the tiny
  one, as GB/s of bytes read;
- the peak resident memory of the process (``ru_maxrss`` from ``wait4``; the
  largest of the rounds), and its growth against the smallest size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from run import (  # noqa: E402  (benchmarks/ is this script's folder)
    GB,
    MEMBERS,
    MEPS_GRID,
    dataset_files,
    linked_datastore,
    total_bytes,
    wxstats_compute,
)

from wxstats.tools.example import ExampleSpec, write_example  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=float, nargs="+", default=[5, 20], help="GB (5 20)")
    p.add_argument("--base-times", type=int, default=2, help="real analysis times (2)")
    p.add_argument("--repeat", type=int, default=3, help="interleaved rounds (3)")
    p.add_argument("--threads", type=int, default=min(cpus, 8), help="threads (CPUs, <= 8)")
    p.add_argument("--grid", type=int, nargs=2, default=MEPS_GRID, metavar=("NY", "NX"))
    p.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the generated data")
    args = p.parse_args(argv)
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="wxstats-large-", dir=args.dir))
    try:
        return run(args, work)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def run(args, work: Path) -> int:
    grid = tuple(args.grid)
    spec = ExampleSpec(analysis_times=args.base_times, members=MEMBERS, grid=grid, val_times=0)
    t0 = time.perf_counter()
    base = write_example(work / "base", spec)
    base_bytes = total_bytes(dataset_files(base))
    print(
        f"base: {args.base_times} analysis times x {MEMBERS} members, grid {grid[0]}x{grid[1]}, "
        f"{base_bytes / GB:.2f} GB (written in {time.perf_counter() - t0:.0f} s)",
        flush=True,
    )
    tiny = write_example(work / "tiny", ExampleSpec(analysis_times=1, grid=(12, 14)))
    configs = {"tiny": tiny}
    per_time = spec.sample_bytes * MEMBERS
    for size in args.sizes:
        times = max(1, round(size * GB / per_time))
        configs[f"{size:g} GB"] = linked_datastore(
            base, work / f"size-{size:g}", times, spec.interval_hours
        )
    out = work / "out"
    out.mkdir()
    wxstats_compute(tiny, args.threads, out)  # numba's cache, the bytecode
    for path in dataset_files(base):  # warm the page cache with the real files
        path.read_bytes()
    walls: dict[str, list[float]] = {name: [] for name in configs}
    peaks: dict[str, int] = dict.fromkeys(configs, 0)
    for _ in range(args.repeat):
        for name, config in configs.items():
            wall, peak = wxstats_compute(config, args.threads, out)
            walls[name].append(wall)
            peaks[name] = max(peaks[name], peak)
    fixed = statistics.median(walls["tiny"])
    print(
        f"\nwxstats compute --threads {args.threads}, whole command, {args.repeat} interleaved "
        f"rounds (load average {os.getloadavg()[0]:.1f} at the end; page cache warm):"
    )
    print(
        f"  {'GB read':>8} {'samples':>7} | {'min':>7} {'median':>7} {'max':>7} s | "
        f"{'steady s':>8} {'GB/s':>6} | {'peak RSS MiB':>12} {'vs smallest':>11}"
    )
    smallest = None
    for name, config in configs.items():
        files = [p for p in dataset_files(config) if "_mbr" in p.name]
        nbytes = total_bytes(dataset_files(config))
        med = statistics.median(walls[name])
        if name == "tiny":
            steady = "-".rjust(8) + " " + "-".rjust(6)
            growth = "-"
        else:
            smallest = smallest or peaks[name]
            steady = f"{med - fixed:8.2f} {nbytes / (med - fixed) / GB:6.2f}"
            growth = f"{peaks[name] / smallest:.2f}x"
        print(
            f"  {nbytes / GB:8.3f} {len(files):7d} | {min(walls[name]):7.2f} {med:7.2f} "
            f"{max(walls[name]):7.2f} s | {steady} | {peaks[name] / 2**20:12.0f} {growth:>11}"
        )
    print(f"  (one sample is {spec.sample_bytes / 2**20:.0f} MiB; fixed costs {fixed:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
