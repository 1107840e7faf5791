"""Wall time of ``wxstats compute --nproc 1`` against ``--nproc 2`` (and more),
on a MEPS-like dataset made with the example generator, in the same session.

    python benchmarks/bench_parallel.py /tmp/bench-data --times 4 --grid 268 238 --nproc 1 2

(4 analysis times x 2 members on MEPS's 268 x 238 grid: 8 samples, 2.4 GB.)
The files are read once before timing so that every run finds them in the
page cache; each configuration runs ``--repeat`` times, alternating, and the
best and median are reported along with a plain float32 read of the same
files (the speed limit on this machine). Delete the data afterwards.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src"


def plain_read(folder: Path) -> float:
    """Seconds to sum every sample file in float32 through a memory map."""
    started = time.perf_counter()
    for path in sorted(folder.glob("*.npy")):
        np.load(path, mmap_mode="r").sum(dtype=np.float32)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--times", type=int, default=4)
    parser.add_argument("--grid", type=int, nargs=2, default=(268, 238))
    parser.add_argument("--nproc", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()

    sys.path.insert(0, str(SRC))
    from wxstats.tools.example import ExampleSpec, write_example

    config = args.directory / "meps.datastore.yaml"
    if not config.exists():
        started = time.perf_counter()
        write_example(args.directory, ExampleSpec(analysis_times=args.times, grid=tuple(args.grid)))
        print(f"wrote the dataset in {time.perf_counter() - started:.0f} s")
    train = args.directory / "samples" / "train"
    size = sum(p.stat().st_size for p in train.glob("*.npy"))
    print(f"dataset: {config} ({size / 1e9:.2f} GB in train, {os.cpu_count()} CPUs)")
    print(f"plain float32 read (page cache warm-up): {plain_read(train):.1f} s")
    read = plain_read(train)
    print(f"plain float32 read: {read:.1f} s = {size / read / 1e9:.2f} GB/s (one core)")

    env = dict(os.environ, PYTHONPATH=str(SRC))
    times: dict[int, list[float]] = {n: [] for n in args.nproc}
    phase: dict[int, list[float]] = {n: [] for n in args.nproc}
    for _ in range(args.repeat):
        for n in args.nproc:
            out = args.directory / f"out-{n}"
            cmd = [sys.executable, "-m", "wxstats", "compute", str(config)]
            cmd += ["--overwrite", "--output-dir", str(out), "--nproc", str(n)]
            started = time.perf_counter()
            done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
            times[n].append(time.perf_counter() - started)
            # rank 0's closing line: the time from the first sample to the all_reduce
            match = re.search(r"samples \(.*\) in ([0-9.]+) s on", done.stderr)
            phase[n].append(float(match.group(1)) if match else float("nan"))
    print(f"{'ranks':>5} {'wall best':>9} {'median':>7} {'speed-up':>8} {'compute':>8} {'GB/s':>6}")
    base = min(times[args.nproc[0]])
    for n, values in times.items():
        best = min(values)
        print(
            f"{n:>5} {best:>9.1f} {statistics.median(values):>7.1f} {base / best:>8.2f} "
            f"{min(phase[n]):>8.1f} {size / min(phase[n]) / 1e9:>6.2f}"
        )


if __name__ == "__main__":
    main()
