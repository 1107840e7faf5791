"""Where wxstats' CPU-seconds go on a compressed zarr store (issue 36, part 3).

    python benchmarks/bench_cpu.py --gb 0.3 --repeat 2

Writes ``bench_zarr.py``'s ERA5-like store (zstd, one step per chunk) into
``--dir`` once, warms the page cache, then runs ``wxstats.compute`` in this
process with each stage wrapped in a per-thread CPU clock (``time.thread_time``):

- decode: fetching a chunk object and zstd-decompressing it (``_decoded``);
- copy: placing the decoded chunk, transposed, into the block's slab (``_fill``
  less its decode);
- kernel: the compiled per-step sums (``run_kernel``);
- exact sums: the per-step exact integer sums in Python (``unit_raw_sums``);
- other: the process's CPU-seconds (``os.times``) less those.

Against: numcodecs decompressing every chunk object of the store once (the
decode the cold limit of ``bench_cold.py`` does). Best of ``--repeat``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bench_zarr import write_store  # noqa: E402  (benchmarks/ is this script's folder)

STAGES = ("decode", "copy", "kernel", "exact sums")


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def instrument() -> dict[str, float]:
    """Wrap the stages (see module docstring); returns their CPU-second totals."""
    from wxstats.core import combine, kernel
    from wxstats.storage import chunks

    totals = dict.fromkeys(STAGES, 0.0)
    lock = threading.Lock()
    inside = threading.local()

    def timed(stage, fn):
        def wrapper(*args, **kwargs):
            started = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.thread_time() - started
                with lock:
                    totals[stage] += spent
                if stage == "decode":
                    inside.decode = getattr(inside, "decode", 0.0) + spent

        return wrapper

    decoded = chunks.ChunkReader._decoded
    fill = chunks.ChunkReader._fill
    chunks.ChunkReader._decoded = timed("decode", decoded)

    def fill_less_decode(self, *args):
        inside.decode = 0.0
        started = time.thread_time()
        try:
            return fill(self, *args)
        finally:
            spent = time.thread_time() - started - inside.decode
            with lock:
                totals["copy"] += spent

    chunks.ChunkReader._fill = fill_less_decode
    kernel.run_kernel = timed("kernel", kernel.run_kernel)
    combine.unit_raw_sums = timed("exact sums", combine.unit_raw_sums)
    return totals


def decode_only(store: Path) -> float:
    """CPU-seconds of numcodecs decompressing every chunk object of ``store``."""
    import numcodecs

    codec = numcodecs.Zstd()
    files = [p for p in store.rglob("*") if p.is_file() and not p.name.startswith((".", "zarr"))]
    blobs = [p.read_bytes() for p in files]
    started = cpu()
    for blob in blobs:
        try:
            codec.decode(blob)
        except Exception:  # noqa: BLE001, S112 - a coordinate's raw chunk
            continue
    return cpu() - started


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gb", type=float, default=0.3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "wxstats-cpu")
    args = p.parse_args(argv)
    store = args.dir / f"era5-{args.gb:g}gb.zarr"
    if not store.exists():
        args.dir.mkdir(parents=True, exist_ok=True)
        write_store(store, args.gb)
    from wxstats.runtime.run import compute

    nbytes = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
    compute(str(store), threads=args.threads)  # warm: imports, the kernel, the page cache
    limit = min(decode_only(store) for _ in range(args.repeat))
    totals = instrument()
    best = None
    for _ in range(args.repeat):
        for stage in STAGES:
            totals[stage] = 0.0
        started, wall = cpu(), time.perf_counter()
        compute(str(store), threads=args.threads)
        total, wall = cpu() - started, time.perf_counter() - wall
        if best is None or total < best[0]:
            best = (total, wall, dict(totals))
    total, wall, stages = best
    load = os.getloadavg()[0]
    print(f"zarr (zstd) {nbytes / 1e9:.2f} GB on disk, warm, {args.threads} threads, "
          f"load average {load:.1f}, best of {args.repeat}:")  # fmt: skip
    print(f"  numcodecs decode alone         {limit:6.2f} CPU-s   1.00x")
    print(f"  wxstats, the whole compute     {total:6.2f} CPU-s   {total / limit:4.2f}x  "
          f"({wall:.2f} s wall)")  # fmt: skip
    other = total - sum(stages.values())
    for stage, spent in [*stages.items(), ("other", other)]:
        print(f"    {stage:<28} {spent:6.2f} CPU-s   {spent / limit:4.2f}x  "
              f"{spent / total:5.1%}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
