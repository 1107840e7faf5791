"""Thread scaling: wxstats against the read limit with the same number of threads.

One command; for a MEPS-like datastore (``wxstats.tools.example``, as
``run.py`` writes it) and an ERA5-like zarr store (``bench_zarr.py``'s, zarr's
default compression), page cache warm, best of ``--repeat``, at each thread
count t it times:

- ``limit``: every sample memory-mapped (MEPS) or every chunk decoded with
  numcodecs (zarr) and summed in float32, in a pool of t threads;
- ``in-process``: ``wxstats.compute(path, threads=t)`` (step-1 differences
  for zarr), numba's kernels already compiled;
- ``command``: ``python -m wxstats compute PATH --threads t`` (start-up included);
- ``--nproc t``: the same command as t ranks of one thread (t > 1), so the
  table shows whether ranks or threads scale better;

"x limit" is the limit's time over wxstats' (1 = as fast as the read limit).

    python benchmarks/bench_threads.py --meps-gb 2 --zarr-gb 2 --keep --dir /tmp/wxb
    python benchmarks/bench_threads.py --meps-gb 0.003 --zarr-gb 0.003 --threads 1 2
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
import zarr
from bench_zarr import limit_numcodecs, run_command, write_store
from run import GB, MEPS_GRID, dataset_files, raw_read, spec_for, total_bytes, wxstats_compute

import wxstats
from wxstats.core.machine import available_cpus
from wxstats.tools.example import write_example


def default_threads(cpus: int) -> list[int]:
    """Powers of two below ``cpus``, then ``cpus`` itself."""
    counts = [1 << i for i in range(cpus.bit_length()) if 1 << i < cpus]
    return [*counts, cpus]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def best(repeat: int, fn, threads: int) -> float:  # noqa: ANN001 - fn(threads) -> seconds
    return min(fn(threads) for _ in range(repeat))


def seconds(fn) -> float:  # noqa: ANN001 - a callable timed once
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def scale(name: str, nbytes: int, args, record, limit, inproc, command, ranks) -> None:  # noqa: ANN001
    """The rows of one format, each printed and passed to ``record``; ``limit``
    ... ``ranks`` take the thread count and return seconds."""
    threads, repeat = args.threads, args.repeat
    limit(max(threads)), inproc(max(threads))  # warm the page cache, compile the kernels
    print(f"\n{name}: {nbytes / GB:.3f} GB float32, best of {repeat}")
    print(f"{'threads':>7} | {'limit s':>8} {'GB/s':>6} | {'in-process s':>12} {'x limit':>7} "
          f"| {'command s':>9} {'x limit':>7} | --nproc t --threads 1 s")  # fmt: skip
    for t in threads:
        row = {"format": name, "gb": nbytes / GB, "threads": t}
        row["limit_s"] = best(repeat, limit, t)
        row["limit_gbps"] = nbytes / row["limit_s"] / GB
        row["in_process_s"] = best(repeat, inproc, t)
        row["command_s"] = best(repeat, command, t)
        row["nproc_s"] = best(repeat, ranks, t) if t > 1 else None
        nproc = f"{row['nproc_s']:8.3f}" if row["nproc_s"] is not None else f"{'-':>8}"
        print(
            f"{t:7d} | {row['limit_s']:8.3f} {row['limit_gbps']:6.2f} | "
            f"{row['in_process_s']:12.3f} {row['limit_s'] / row['in_process_s']:7.3f} | "
            f"{row['command_s']:9.3f} {row['limit_s'] / row['command_s']:7.3f} | {nproc}",
            flush=True,
        )
        record(row)


def written(path: Path, write, made: list[Path]) -> Path:  # noqa: ANN001 - write(path)
    """``path``, written (and added to ``made``) unless there; under another
    name until complete, so that an interrupted run is not reused."""
    if not path.exists():
        partial = path.with_name(path.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        started = time.perf_counter()
        write(partial)
        partial.rename(path)
        print(f"wrote {path} in {time.perf_counter() - started:.0f} s", flush=True)
        made.append(path)
    return path


def meps_rows(args: argparse.Namespace, work: Path, out: Path, made: list[Path], record) -> None:  # noqa: ANN001
    gb, grid = args.meps_gb, args.grid
    folder = f"meps-{gb:g}gb-{grid[0]}x{grid[1]}"
    data = written(work / folder, lambda p: write_example(p, spec_for(gb, grid)), made)
    config = data / "meps.datastore.yaml"
    files = dataset_files(config)
    scale(
        "MEPS (npy)", total_bytes(files), args, record,
        limit=lambda t: raw_read(files, t),
        inproc=lambda t: seconds(lambda: wxstats.compute(str(config), threads=t)),
        command=lambda t: wxstats_compute(config, t, out)[0],
        ranks=lambda t: wxstats_compute(config, 1, out, ["--nproc", str(t)])[0],
    )  # fmt: skip


def zarr_rows(args: argparse.Namespace, work: Path, out: Path, made: list[Path], record) -> None:  # noqa: ANN001
    gb = args.zarr_gb
    store = written(work / f"era5-{gb:g}gb.zarr", lambda p: write_store(p, gb, batch=4), made)
    group = zarr.open_group(store, mode="r")
    nbytes = sum(a.nbytes for _, a in group.arrays() if a.ndim >= 3)
    scale(
        "ERA5-like zarr (zstd)", nbytes, args, record,
        limit=lambda t: limit_numcodecs(store, t),
        inproc=lambda t: seconds(lambda: wxstats.compute(str(store), threads=t, diff_steps=(1,))),
        command=lambda t: run_command(str(store), out, ["--threads", str(t)]),
        ranks=lambda t: run_command(str(store), out, ["--threads", "1", "--nproc", str(t)]),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    cpus = available_cpus()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--meps-gb", type=float, default=2.0, help="MEPS-like datastore size (2)")
    p.add_argument("--zarr-gb", type=float, default=2.0, help="zarr store size, float32 (2)")
    p.add_argument("--threads", type=int, nargs="+", default=default_threads(cpus),
                   help=f"thread counts (default: powers of two and {cpus}, the CPUs)")  # fmt: skip
    p.add_argument("--grid", type=int, nargs=2, default=MEPS_GRID, metavar=("NY", "NX"))
    p.add_argument("--repeat", type=int, default=2, help="runs per timing, best kept (2)")
    p.add_argument("--dir", type=Path, default=None, help="work folder, data reused if there")
    p.add_argument("--keep", action="store_true", help="keep the generated data")
    p.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = p.parse_args(argv)
    out = Path(tempfile.mkdtemp(prefix="wxstats-threads-out-"))  # statistics, overwritten
    work = args.dir or Path(tempfile.mkdtemp(prefix="wxstats-threads-"))
    work.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []  # the data this run wrote (what it reused stays)
    header = (
        f"{cpu_model()}, {cpus} CPUs; python {platform.python_version()}, numpy "
        f"{np.__version__}, numba {numba.__version__}, zarr {zarr.__version__}"
    )
    print(header, flush=True)
    rows: list[dict] = []

    def record(row: dict) -> None:
        """Keep ``row``; the JSON is rewritten after each (a run cut short keeps its rows)."""
        rows.append(row)
        if args.json:
            args.json.write_text(json.dumps({"machine": header, "rows": rows}, indent=2))

    try:
        meps_rows(args, work, out, made, record)
        zarr_rows(args, work, out, made, record)
    finally:
        if args.keep and made:
            print(f"kept {', '.join(map(str, made))}")
        for path in [out] + ([] if args.keep else made):
            shutil.rmtree(path, ignore_errors=True)
        if args.dir is None and not args.keep:
            shutil.rmtree(work, ignore_errors=True)  # this run's own temporary folder
    return 0


if __name__ == "__main__":
    sys.exit(main())
