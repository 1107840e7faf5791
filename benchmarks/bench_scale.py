"""Millions of chunks and samples: per-item overhead and peak memory against the count.

    python benchmarks/bench_scale.py          # 10k, 100k, 1M chunks; MEPS to 436,524
    python benchmarks/bench_scale.py --chunks 10000 100000 --samples 1000 --plan-samples 10000

Two kinds of rows, each a fresh ``wxstats compute`` command (a subprocess, its
peak resident memory from ``wait4``), against the same command on the smallest
count so that the fixed costs (interpreter, imports, the kernel's load, the
output) cancel:

* a zarr store of N tiny chunks (``(1, 4, 5)`` float32, one time step each:
  ARCO-ERA5's layout, one chunk per step), uncompressed. Its chunk files are
  hard links to one file written by zarr (a copy per 60,000), so a million chunks cost directory
  entries, not a million inodes or 4 GiB of blocks;
* a MEPS datastore (neural-lam's ``npyfilesmeps``) of N samples, computed whole
  (``--samples``) and planned only (``--plan-samples``: ``wxstats inspect
  --no-measure``, which lists, sizes and checks every sample as a run does
  before its first) and listed only (``--list-samples``: what a run holds for
  its samples), made of
  symbolic links to the few real sample files of a tiny example (grid 2 x 3),
  as ``benchmarks/run.py`` makes its larger sizes: the seed's 436,524 samples
  are counted here as files, not as its 7 TB.

Per chunk (per sample) = (time at N - time at the smallest N) / (N - smallest N).
Memory flat means peak RSS at N within a few MiB of the smallest N's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from children import linked_datastore, run_child  # noqa: E402  (benchmarks/ is this script's folder)

from wxstats.tools.example import ExampleSpec, write_example  # noqa: E402

CHUNK = (1, 4, 5)
LINKS_PER_FILE = 60_000
"""Hard links made to one chunk file (ext4 allows 65,000 per inode)."""
BLOCK_MB: float | None = None
"""Blocks of the chunk rows (``--block-mb``; default: wxstats' own, 32 MiB). A
block's budget counts what a step costs the kernel beside its 80 bytes of values
(~7 KiB: :func:`wxstats.core.kernel.step_bytes`), so blocks are
of the same ~4,600 steps (chunks) at every count from 10,000 on, and what grows
with the count shows apart from what a block holds."""
SEED_SAMPLES = 436_524
"""The seed's MEPS datastore: 7 TB in this many sample files."""


def chunked_store(path: Path, n: int) -> Path:
    """A zarr (format 2) store of one variable ``t`` of ``n`` uncompressed chunks of
    ``CHUNK``, one per time step; every chunk file a hard link to the first."""
    import zarr

    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    t = root.create_array(
        "t", shape=(n, *CHUNK[1:]), chunks=CHUNK, dtype="float32", compressors=None,
        fill_value=np.nan, attributes={"_ARRAY_DIMENSIONS": ["time", "y", "x"]},
    )  # fmt: skip
    time_ = root.create_array(
        "time", shape=(n,), chunks=(n,), dtype="int64", compressors=None,
        attributes={"_ARRAY_DIMENSIONS": ["time"], "units": "hours since 2000-01-01",
                    "calendar": "proleptic_gregorian"},
    )  # fmt: skip
    time_[:] = np.arange(n, dtype=np.int64)
    t[0] = np.arange(np.prod(CHUNK[1:]), dtype=np.float32).reshape(CHUNK[1:]) / 7
    first = path / "t" / "0.0.0"
    source = first
    for i in range(1, n):
        target = path / "t" / f"{i}.0.0"
        if i % LINKS_PER_FILE == 0:  # a file system's limit of links to one inode
            shutil.copyfile(first, target)
            source = target
        else:
            os.link(source, target)
    zarr.consolidate_metadata(str(path))
    return path


def meps_datastore(work: Path, n: int, base: Path) -> Path:
    """A datastore of ``n`` samples (2 members per analysis time) linking to ``base``'s."""
    return linked_datastore(base, work / f"meps{n}", -(-n // 2), 1)


LIST = "import sys; from wxstats.sources.meps import MepsSource; MepsSource(sys.argv[1])"
"""A datastore's listing alone: what a run holds for its samples while it runs."""


def compute(path: Path, out: Path, kind: str = "compute") -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of ``wxstats compute`` on ``path`` (``planned``:
    ``wxstats inspect --no-measure``, everything a run does before its first sample;
    ``listed``: the datastore's listing only)."""
    args = [sys.executable, "-m", "wxstats", "compute", str(path), "--quiet", "--overwrite"]
    if kind == "listed":
        args = [sys.executable, "-c", LIST, str(path)]
    elif kind == "planned":
        args = [sys.executable, "-m", "wxstats", "inspect", str(path), "--no-measure"]
        args += ["--output-dir", str(out)]
    elif path.suffix == ".zarr":
        args += ["--output", str(out / "stats.nc")]
        args += [] if BLOCK_MB is None else ["--block-mb", str(BLOCK_MB)]
    else:
        args += ["--output-dir", str(out)]
    wall, rss, _ = run_child(args)
    return wall, rss


def table(title: str, unit: str, counts: list[int], rows: dict[int, tuple[float, int]]) -> list:
    print(title)
    print(f"  {unit:>9}   best s   per {unit[:-1]} us   peak RSS MiB   x smallest")
    smallest = counts[0]
    t0, rss0 = rows[smallest]
    out = []
    for n in counts:
        wall, rss = rows[n]
        per = (wall - t0) / (n - smallest) * 1e6 if n > smallest else float("nan")
        shown = f"{per:14.1f}" if n > smallest else f"{'-':>14}"
        print(f"  {n:>9,}  {wall:7.2f}  {shown}   {rss / 2**20:12.0f}   {rss / rss0:9.2f}x")
        out.append({"count": n, "seconds": wall, "per_item_us": per, "peak_rss": rss})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--chunks", type=int, nargs="*", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--samples", type=int, nargs="*", default=[1_000, 4_000],
                   help="MEPS samples computed whole (~4 ms of CPU each)")  # fmt: skip
    p.add_argument("--plan-samples", type=int, nargs="*", default=[1_000, 10_000],
                   help="MEPS samples planned (inspect --no-measure, ~3 ms each)")  # fmt: skip
    p.add_argument("--list-samples", type=int, nargs="*", default=[10_000, 100_000, SEED_SAMPLES],
                   help="MEPS samples listed (the datastore's listing alone)")  # fmt: skip
    p.add_argument("--block-mb", type=float, default=None,
                   help="blocks of the chunk rows, MiB (default: wxstats' own)")  # fmt: skip
    p.add_argument("--repeat", type=int, default=1, help="runs per row, best kept (1)")
    p.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp dir)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = p.parse_args(argv)
    global BLOCK_MB
    BLOCK_MB = args.block_mb
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="wxstats-scale-", dir=args.dir))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{os.cpu_count()} CPUs, load average {load:.1f}; best of {args.repeat}")
    results: dict = {}
    try:
        out = work / "out"
        out.mkdir()
        kinds = (
            ("chunks", args.chunks), ("samples", args.samples),
            ("planned", args.plan_samples), ("listed", args.list_samples),
        )  # fmt: skip
        base = None
        for kind, counts in ((k, sorted(c)) for k, c in kinds):
            if not counts:
                continue
            rows = {}
            if kind != "chunks" and base is None:
                base = write_example(
                    work / "base",
                    ExampleSpec(analysis_times=2, members=2, grid=(2, 3), val_times=0),
                )
            for n in counts:
                started = time.perf_counter()
                if kind == "chunks":
                    path = chunked_store(work / f"chunks{n}.zarr", n)
                else:
                    path = meps_datastore(work, n, base)
                made = time.perf_counter() - started
                best = (float("inf"), 0)
                for _ in range(args.repeat):
                    wall, rss = compute(path, out, kind)
                    best = (min(best[0], wall), max(best[1], rss))
                rows[n] = best
                print(f"  ({n:,} {kind} made in {made:.1f} s, computed in {best[0]:.1f} s)")
                shutil.rmtree(path if kind == "chunks" else path.parent, ignore_errors=True)
            title = {
                "chunks": f"zarr store of N chunks {CHUNK} float32, uncompressed, one step each "
                f"(blocks: {'default' if BLOCK_MB is None else f'{BLOCK_MB} MiB'}):",
                "samples": "MEPS datastore of N samples (links to 4 files, grid 2 x 3), computed:",
                "planned": "the same, planned only (wxstats inspect --no-measure: listing, "
                "sizes, every header, the outputs' checks):",
                "listed": "the same, listed only (the datastore's samples, as a run holds them):",
            }[kind]
            results[kind] = table(title, kind, counts, rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
