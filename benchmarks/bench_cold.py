"""wxstats on a cold page cache against the cold read limit, same run.

One command, from a clone (``PYTHONPATH=src`` or an installed wxstats):

    python benchmarks/bench_cold.py                  # ~1.5 GB each, in /tmp/wxstats-cold, kept
    python benchmarks/bench_cold.py --gb 0.5 --repeat 5

Three datasets are written once into ``--dir`` (reused by later runs): a
MEPS-like datastore (``wxstats.example``'s ``.npy`` samples, MEPS grid), the
ERA5-like zarr store of ``bench_zarr.py`` (zstd, one step per chunk) and the
same data as one uncompressed netCDF4 file. For each dataset and each of
``--repeat`` interleaved rounds, every file of the dataset is evicted from the
page cache (``posix_fadvise(POSIX_FADV_DONTNEED)``, which drops clean pages of
a file for every process) before each of:

- ``cold limit``: every byte of every file of the dataset read with
  ``os.pread`` into a per-thread buffer by ``--threads`` threads (files cut
  in 8 MiB pieces taken in file order; a zarr chunk file is one piece), and
  each compressed zarr chunk decompressed by numcodecs into a per-thread
  buffer; no arithmetic on the values. The time any reader of these files
  needs on this machine with this many threads: the I/O and, for a
  compressed store, the decompression, nothing more.
- ``wxstats cold``: ``wxstats.compute(path, threads=--threads)`` in this
  process (imports done and the kernel loaded by a warm-up run first), and
  with ``--ahead N ...`` again for each read-ahead depth N (samples or
  blocks announced ahead, ``wxstats.runtime.engine.SAMPLES_AHEAD``);

and, right after the cold run (the page cache now holds the data),
``wxstats warm``: the same call again, which is the compute bound. A cold run
cannot be faster than the larger of the cold limit and the warm run, so
besides ``limit / cold`` the table prints ``max(limit, warm) / cold``: how
well the read-ahead overlaps the disk with the kernel (1.0: perfectly).

Each row shows min / median / max over the rounds, GB/s of the median (bytes on
disk) and the median CPU seconds of the process (every thread: ``os.times``).
Where the limit and wxstats both keep every CPU busy (decompression on a few
cores), ``cold / cold limit`` cannot pass the ratio of their CPU seconds: the
table prints it (below 0.85 means the target is out of reach on this machine,
whatever the read-ahead; more cores than the work needs lift it).
The machine may be shared: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bench_zarr import netcdf_copy, write_store  # noqa: E402  (benchmarks/ is here)
from children import evict  # noqa: E402
from run import MEPS_GRID, spec_for  # noqa: E402

PIECE = 8 << 20
"""Bytes of one ``pread`` of the limit (large files are cut in these)."""


def all_files(root: Path) -> list[Path]:
    """Every regular file of a dataset (a folder, a datastore's folder or one file)."""
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file())


def zarr_codecs(store: Path) -> dict[str, object]:
    """{array name: numcodecs codec decoding its chunk files, or None}."""
    import zarr
    from numcodecs import Zstd

    out: dict[str, object] = {}
    for name, arr in zarr.open_group(store, mode="r").arrays():
        codecs = [type(c).__name__ for c in arr.metadata.codecs]
        out[name] = Zstd() if codecs[-1] == "ZstdCodec" else None
    return out


def pieces_of(root: Path) -> list[tuple[Path, int, int, object]]:
    """(file, offset, length, codec or None) of every byte of the dataset."""
    codecs = zarr_codecs(root) if root.suffix == ".zarr" else {}
    out = []
    for path in all_files(root):
        size = path.stat().st_size
        parts = path.relative_to(root).parts if root.is_dir() else ()
        codec = codecs.get(parts[0]) if parts and path.name[0] not in ".z" else None
        if codec is not None:
            out.append((path, 0, size, codec))
            continue
        out.extend((path, off, min(PIECE, size - off), None) for off in range(0, size, PIECE))
    return out


def cold_limit(root: Path, threads: int) -> float:
    """Seconds to ``pread`` (and decompress) every byte: see the module docstring."""
    pieces = pieces_of(root)
    local = threading.local()

    def one(piece) -> int:
        path, off, length, codec = piece
        buf = getattr(local, "buf", None)
        if buf is None or len(buf) < length:
            buf = local.buf = bytearray(max(length, PIECE))
        fd = os.open(path, os.O_RDONLY)
        try:
            view = memoryview(buf)[:length]
            got = os.preadv(fd, [view], off)
        finally:
            os.close(fd)
        if codec is not None:
            return len(codec.decode(view[:got]))
        return got

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        sum(pool.map(one, pieces, chunksize=1))
    return time.perf_counter() - started


def run_wxstats(path: Path, threads: int, ahead: int | None = None) -> float:
    """Seconds of ``wxstats.compute``, with ``ahead`` samples announced ahead
    (:data:`wxstats.runtime.engine.SAMPLES_AHEAD`; ``None``: wxstats' default)."""
    from wxstats.runtime import engine
    from wxstats.runtime.run import compute

    engine.SAMPLES_AHEAD, default = ahead, engine.SAMPLES_AHEAD
    try:
        started = time.perf_counter()
        compute(str(path), threads=threads)
        return time.perf_counter() - started
    finally:
        engine.SAMPLES_AHEAD = default


def datasets(
    work: Path, gb: float, which: list[str], grid: tuple[int, int] = MEPS_GRID
) -> dict[str, tuple[Path, Path]]:
    """{name: (what wxstats opens, the folder or file holding its bytes)}, written once."""
    from wxstats.tools.example import write_example

    out = {}
    if "meps" in which:
        meps = work / f"meps-{gb:g}gb-{grid[0]}x{grid[1]}"
        config = next(meps.glob("*.datastore.yaml"), None)
        if config is None:
            t0 = time.perf_counter()
            config = write_example(meps, spec_for(gb, grid))
            print(f"wrote {meps} in {time.perf_counter() - t0:.0f} s", flush=True)
        out["MEPS (npy)"] = (config, meps)
    store = work / f"era5-{gb:g}gb.zarr"
    if ("zarr" in which or "netcdf" in which) and not store.exists():
        t0 = time.perf_counter()
        write_store(store, gb)
        print(f"wrote {store} in {time.perf_counter() - t0:.0f} s", flush=True)
    if "zarr" in which:
        out["zarr (zstd)"] = (store, store)
    if "netcdf" in which:
        nc = netcdf_copy(store)
        out["netCDF4 (uncompressed)"] = (nc, nc)
    return out


def spread(values: list[float]) -> str:
    return f"{min(values):7.2f} {statistics.median(values):7.2f} {max(values):7.2f}"


CPU_SECONDS: dict[str, dict[str, list[float]]] = {}
"""{dataset: {row: [CPU seconds of this process per round]}}, filled by :func:`measure`."""


def cpu_seconds() -> float:
    """User + system CPU seconds of this process, every thread."""
    times = os.times()
    return times.user + times.system


def timed(fn: Callable[[], float], cpu: list[float]) -> float:
    """``fn()``, with the process's CPU seconds during it appended to ``cpu``."""
    start = cpu_seconds()
    seconds = fn()
    cpu.append(cpu_seconds() - start)
    return seconds


def measure(
    entries: dict[str, tuple[Path, Path]], threads: int, repeat: int, aheads: list[int]
) -> dict[str, dict[str, list[float]]]:
    """{dataset: {row: [seconds per round]}}, rounds interleaved across datasets
    (and read-ahead depths: a ``cold ahead=N`` row for each of ``aheads``); the
    CPU seconds of each go to :data:`CPU_SECONDS`."""
    times: dict[str, dict[str, list[float]]] = {
        name: {"limit": [], "cold": [], **{f"cold ahead={a}": [] for a in aheads}, "warm": []}
        for name in entries
    }
    cpu = {name: {row: [] for row in rows} for name, rows in times.items()}
    CPU_SECONDS.update(cpu)
    for path, _ in entries.values():  # imports, numba's load, zarr's metadata
        run_wxstats(path, threads)
    for _ in range(repeat):
        for name, (path, holder) in entries.items():
            files = all_files(holder)
            steps: list[tuple[str, Callable[[], float]]] = [
                ("limit", partial(cold_limit, holder, threads)),
                ("cold", partial(run_wxstats, path, threads)),
                *((f"cold ahead={a}", partial(run_wxstats, path, threads, a)) for a in aheads),
            ]
            for row, fn in steps:
                evict(files)
                times[name][row].append(timed(fn, cpu[name][row]))
            warm = partial(run_wxstats, path, threads)
            times[name]["warm"].append(timed(warm, cpu[name]["warm"]))
    return times


def report(entries, times, threads: int, repeat: int) -> None:
    load = os.getloadavg()[0]
    print(
        f"\ncold page cache, {threads} threads, {repeat} interleaved rounds, seconds "
        f"min / median / max (load average {load:.1f} at the end):"
    )
    for name, (_, holder) in entries.items():
        nbytes = sum(p.stat().st_size for p in all_files(holder))
        rows = times[name]
        med = {k: statistics.median(v) for k, v in rows.items()}
        print(f"{name}: {nbytes / 1e9:.2f} GB on disk")
        labels = {
            "limit": "cold limit (pread + decompress)",
            "cold": "wxstats cold (in-process)",
            **{row: f"wxstats {row}" for row in rows if row.startswith("cold ahead")},
            "warm": "wxstats warm (the compute bound)",
        }
        cpu = {row: statistics.median(v) for row, v in CPU_SECONDS.get(name, {}).items() if v}
        for row, label in labels.items():
            used = f" {cpu[row]:6.2f} CPU-s" if row in cpu else ""
            print(f"  {label:34} {spread(rows[row])} s {nbytes / med[row] / 1e9:6.2f} GB/s{used}")
        bound = max(med["limit"], med["warm"])
        best = min(rows["limit"]) / min(rows["cold"])
        print(
            f"  wxstats cold / cold limit: {med['limit'] / med['cold']:.2f} (medians), "
            f"{best:.2f} (best of each)  target >= 0.85"
        )
        print(f"  overlap, max(limit, warm) / cold: {bound / med['cold']:.2f} (medians)")
        if "cold" in cpu and cpu.get("limit"):
            print(
                f"  CPU: wxstats cold {cpu['cold']:.2f} CPU-s, the limit {cpu['limit']:.2f} "
                f"({cpu['cold'] / cpu['limit']:.2f}x): where both keep every CPU busy, "
                f"cold / cold limit <= {cpu['limit'] / cpu['cold']:.2f} (medians)"
            )


def main(argv: list[str] | None = None) -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gb", type=float, default=1.5, help="size of each dataset (1.5)")
    p.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "wxstats-cold")
    p.add_argument("--repeat", type=int, default=3, help="interleaved rounds (3)")
    p.add_argument("--threads", type=int, default=min(cpus, 8), help="threads (CPUs, <= 8)")
    p.add_argument(
        "--only",
        nargs="+",
        choices=["meps", "zarr", "netcdf"],
        default=["meps", "zarr", "netcdf"],
        help="datasets to measure (all)",
    )
    p.add_argument("--grid", type=int, nargs=2, default=MEPS_GRID, metavar=("NY", "NX"),
                   help="MEPS grid (238 268)")  # fmt: skip
    p.add_argument(
        "--ahead",
        type=int,
        nargs="*",
        default=[],
        help="also cold with these read-ahead depths (samples or blocks; engine.SAMPLES_AHEAD)",
    )
    args = p.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    entries = datasets(args.dir, args.gb, args.only, tuple(args.grid))
    times = measure(entries, args.threads, args.repeat, args.ahead)
    report(entries, times, args.threads, args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
