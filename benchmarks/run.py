"""wxstats against the speed of reading the data, and against its peers.

One command, run from a clone (``PYTHONPATH=src`` or an installed wxstats):

    python benchmarks/run.py                 # 3 GB, memory also at 6 GB
    python benchmarks/run.py --size-gb 3 --sizes 3 6 --repeat 3 --keep

It writes a MEPS-like dataset with :mod:`wxstats.tools.example` (neural-lam's
``npyfilesmeps`` layout, MEPS grid 238 x 268, 65 steps, 18 features) in a
temporary folder (deleted afterwards unless ``--keep``), warms the page cache,
and prints, measured in the same run on the same files:

* raw read: ``np.load(mmap_mode="r")`` + float32 ``sum`` of every file wxstats
  reads (the limit), in this process and as a fresh ``python`` process;
* ``wxstats compute`` end to end (the whole command, a subprocess) with
  ``--threads 1`` and with all cores, as GB/s and as ratios to the limit, plus
  its startup cost (the same command on a tiny dataset) and its in-process
  throughput once started;
* neural-lam's own statistics script on a subset, when ``neural_lam`` is
  importable (it is never installed by this script);
* xarray + dask ``.mean()/.std()`` (float32, as a user would write it) on a
  subset written to zarr, its time and its relative error against wxstats;
* with ``--scale``, ``bench_scale.py``'s rows: per-chunk and per-sample overhead
  and peak memory from 10,000 to 1,000,000 chunks and to 436,524 samples;
* peak resident memory of ``wxstats compute`` at every size in ``--sizes``
  (larger sizes reuse the same sample files through symbolic links under
  other analysis times: the bytes read grow, the page cache does not).

Timings are the best of ``--repeat`` runs, with the raw read and wxstats
interleaved so that load from other processes affects both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from children import child_env, evict, linked_datastore, run_child  # noqa: E402  (benchmarks/ is this script's folder)

from wxstats.tools.example import ExampleSpec, write_example  # noqa: E402

GB = 1e9
MEMBERS = 2
MEPS_GRID = (238, 268)


# -- the dataset ---------------------------------------------------------------
def spec_for(size_gb: float, grid: tuple[int, int]) -> ExampleSpec:
    per_time = ExampleSpec(grid=grid).sample_bytes * MEMBERS
    times = max(1, round(size_gb * GB / per_time))
    return ExampleSpec(analysis_times=times, members=MEMBERS, grid=grid, val_times=0)


def dataset_files(config: Path) -> list[Path]:
    folder = config.parent / "samples" / "train"
    return sorted(p for p in folder.glob("nwp_*.npy"))


def total_bytes(files: list[Path]) -> int:
    return sum(p.stat().st_size for p in files)


# -- measurements --------------------------------------------------------------
def raw_read(files: list[Path], threads: int = 1) -> float:
    """Seconds to memory-map and float32-sum every file (the limit), in ``threads``."""

    def one(path: Path) -> float:
        return float(np.load(path, mmap_mode="r").sum(dtype=np.float32))

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        sum(pool.map(one, files))
    return time.perf_counter() - started


RAW_CHILD = (
    "import sys, numpy as np\n"
    "[float(np.load(p, mmap_mode='r').sum(dtype=np.float32)) for p in sys.argv[1:]]\n"
)


def wxstats_compute(
    config: Path, threads: int, out_dir: Path, extra: list[str] = ()
) -> tuple[float, int]:
    wall, rss, _ = run_child(
        [
            sys.executable,
            "-m",
            "wxstats",
            "compute",
            str(config),
            "--threads",
            str(threads),
            "--output-dir",
            str(out_dir),
            "--overwrite",
            "--quiet",
            *extra,
        ]
    )
    return wall, rss


IN_PROCESS_CHILD = """
import sys, time
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.outputs import open_source
from wxstats.runtime.run import compute_source
source = open_source(ComputeOptions.of(sys.argv[1]))
threads, repeat = int(sys.argv[2]), int(sys.argv[3])
compute_source(source, threads=threads)
best = float("inf")
for _ in range(repeat):
    started = time.perf_counter()
    compute_source(source, threads=threads)
    best = min(best, time.perf_counter() - started)
print(best)
"""


def in_process_throughput(config: Path, threads: int, repeat: int) -> float:
    """Seconds of :func:`wxstats.runtime.run.compute_source` once imported and compiled
    (in a child, so that this process stays small: a child's peak RSS counts
    its parent's pages at fork)."""
    _, _, output = run_child(
        [sys.executable, "-c", IN_PROCESS_CHILD, str(config), str(threads), str(repeat)]
    )
    return float(output.strip().splitlines()[-1])


def summary_of(config: Path, out_dir: Path) -> dict:
    summary = out_dir / "summary.json"
    run_child(
        [
            sys.executable,
            "-m",
            "wxstats",
            "compute",
            str(config),
            "--output-dir",
            str(out_dir),
            "--summary",
            str(summary),
            "--overwrite",
            "--quiet",
        ]
    )
    return json.loads(summary.read_text())


def xarray_dask(config: Path, workdir: Path, kept: list[int]) -> tuple[float, float, dict]:
    """(seconds for write-free mean+std, bytes, {mean, std}) with xarray+dask on zarr."""
    import dask
    import dask.array
    import xarray as xr

    files = [p for p in dataset_files(config) if "_mbr" in p.name]
    store = workdir / "subset.zarr"
    first = np.load(files[0], mmap_mode="r")
    t, ny, nx, nf = first.shape
    arrays = [np.load(p, mmap_mode="r") for p in files]
    data = dask.array.stack([dask.array.from_array(a, chunks=(1, ny, nx, nf)) for a in arrays])
    ds = xr.Dataset({"state": (("sample", "time", "y", "x", "feature"), data)})
    ds.to_zarr(store, mode="w")
    opened = xr.open_zarr(store)["state"].isel(feature=kept)
    dims = ("sample", "time", "y", "x")
    started = time.perf_counter()
    mean, std = dask.compute(opened.mean(dims).data, opened.std(dims).data)
    seconds = time.perf_counter() - started
    return seconds, float(opened.nbytes), {"mean": np.asarray(mean), "std": np.asarray(std)}


NEURALLAM_PYTHON = os.environ.get("WXSTATS_NEURALLAM_PYTHON", sys.executable)
"""neural-lam may live in its own environment (scripts/neural-lam-env.sh prints its python)."""


def neural_lam_available() -> bool:
    probe = subprocess.run(
        [NEURALLAM_PYTHON, "-c", "import neural_lam"], env=child_env(), capture_output=True
    )
    return probe.returncode == 0


def neural_lam_script(config: Path) -> float:
    wall, _, _ = run_child(
        [
            NEURALLAM_PYTHON,
            "-m",
            "neural_lam.datastore.npyfilesmeps.compute_standardization_stats",
            "--datastore_config_path",
            str(config),
            "--batch_size",
            "2",
            "--step_length",
            "3",
            "--n_workers",
            "0",
        ]
    )
    return wall


# -- the report ----------------------------------------------------------------
def gbps(nbytes: float, seconds: float) -> str:
    return f"{nbytes / seconds / GB:6.2f} GB/s"


def main(argv: list[str] | None = None) -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-gb", type=float, default=3.0, help="main dataset size (default 3)")
    p.add_argument(
        "--sizes",
        type=float,
        nargs="+",
        default=None,
        help="sizes (GB) at which to measure peak memory (default: SIZE and 2 x SIZE)",
    )
    p.add_argument("--peer-gb", type=float, default=0.6, help="subset for the peers (0.6)")
    p.add_argument("--repeat", type=int, default=3, help="runs per timing, best kept (3)")
    p.add_argument("--threads", type=int, default=cpus, help=f"'all cores' (here {cpus})")
    p.add_argument("--grid", type=int, nargs=2, default=MEPS_GRID, metavar=("NY", "NX"))
    p.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the generated data")
    p.add_argument("--json", type=Path, default=None, help="also write the figures as JSON")
    p.add_argument(
        "--scale", action="store_true",
        help="also bench_scale.py: 10k to 1M zarr chunks, MEPS samples to 436,524 (minutes)",
    )  # fmt: skip
    args = p.parse_args(argv)
    sizes = args.sizes or [args.size_gb, 2 * args.size_gb]

    if args.dir is not None:
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="wxstats-bench-", dir=args.dir))
    results: dict = {"cpus": cpus, "size_gb": args.size_gb}
    try:
        code = run(args, sizes, work, results)
        if args.scale:
            import bench_scale

            print("\nmillions of chunks and samples (bench_scale.py):")
            code = code or bench_scale.main(["--dir", str(work)])
        return code
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))


def run(args, sizes: list[float], work: Path, results: dict) -> int:
    grid = tuple(args.grid)
    main_spec = spec_for(args.size_gb, grid)
    started = time.perf_counter()
    config = write_example(work / "data", main_spec)
    files = dataset_files(config)
    nbytes = total_bytes(files)
    print(
        f"dataset: {main_spec.analysis_times} analysis times x {MEMBERS} members, grid "
        f"{grid[0]}x{grid[1]}, {nbytes / GB:.2f} GB in {len(files)} files "
        f"(written in {time.perf_counter() - started:.0f} s) at {config.parent}"
    )
    out = work / "out"
    out.mkdir()

    # compile/load numba's cache and the imports once, on a tiny dataset
    tiny = write_example(work / "tiny", ExampleSpec(analysis_times=1, grid=(12, 14)))
    wxstats_compute(tiny, 1, out)
    for path in files:  # warm the page cache
        np.load(path, mmap_mode="r").sum(dtype=np.float32)

    t_raw = t_raw_child = t_one = t_all = float("inf")
    rss = {}
    for _ in range(args.repeat):
        t_raw = min(t_raw, raw_read(files))
        wall, _, _ = run_child([sys.executable, "-c", RAW_CHILD, *map(str, files)])
        t_raw_child = min(t_raw_child, wall)
        wall, peak = wxstats_compute(config, 1, out)
        t_one = min(t_one, wall)
        rss[("1", args.size_gb)] = max(rss.get(("1", args.size_gb), 0), peak)
        wall, peak = wxstats_compute(config, args.threads, out)
        t_all = min(t_all, wall)
        rss[("all", args.size_gb)] = max(rss.get(("all", args.size_gb), 0), peak)
    t_start = min(wxstats_compute(tiny, 1, out)[0] for _ in range(args.repeat))
    t_all_start = min(wxstats_compute(tiny, args.threads, out)[0] for _ in range(args.repeat))
    t_raw_cold = t_all_cold = float("inf")
    for _ in range(args.repeat):  # cold: every file evicted before each run
        evict(files)
        t_raw_cold = min(t_raw_cold, raw_read(files))
        evict(files)
        t_all_cold = min(t_all_cold, wxstats_compute(config, args.threads, out)[0])
    for path in files:  # warm again for the in-process rows
        np.load(path, mmap_mode="r").sum(dtype=np.float32)
    t_inproc_one = in_process_throughput(config, 1, args.repeat)
    t_inproc_all = in_process_throughput(config, args.threads, args.repeat)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"\nthroughput on {nbytes / GB:.2f} GB, page cache warm, best of {args.repeat} "
        f"({args.threads} cores, load average {load:.1f} at the end):"
    )
    rows = [
        ("raw read, np.load(mmap)+float32 sum (the limit)", t_raw),
        ("raw read as a fresh python process", t_raw_child),
        ("wxstats compute --threads 1 (whole command)", t_one),
        (f"wxstats compute --threads {args.threads} (whole command)", t_all),
        ("wxstats in-process, 1 thread (after startup)", t_inproc_one),
        (f"wxstats in-process, {args.threads} threads (after startup)", t_inproc_all),
    ]
    for name, seconds in rows:
        print(
            f"  {name:<58} {seconds:7.2f} s {gbps(nbytes, seconds)}  {t_raw / seconds:5.2f}x limit"
        )
    print(f"  wxstats startup+write (same command on a 4 MB dataset)     {t_start:7.2f} s")
    steady = t_all - t_all_start
    print(
        f"  steady state, {args.threads} threads (whole command - the same on 4 MB) "
        f"{steady:7.2f} s {gbps(nbytes, steady)}  {t_raw / steady:5.2f}x limit"
    )
    print(f"cold page cache (files evicted before each run), best of {args.repeat}:")
    cold_steady = t_all_cold - t_all_start
    for name, seconds in (
        ("raw read, np.load(mmap)+float32 sum (the cold limit)", t_raw_cold),
        (f"wxstats compute --threads {args.threads} (whole command)", t_all_cold),
        ("  its steady state (minus the same on 4 MB)", cold_steady),
    ):
        print(
            f"  {name:<58} {seconds:7.2f} s {gbps(nbytes, seconds)}  "
            f"{t_raw_cold / seconds:5.2f}x cold limit"
        )
    print("ratios:")
    print(f"  1 thread, whole command / raw read           {t_raw / t_one:5.2f}  (target >= 0.5)")
    print(f"  steady state, all threads / raw read         {t_raw / steady:5.2f}  (>= 0.8)")
    print(f"  cold steady state / cold raw read            {t_raw_cold / cold_steady:5.2f} (>=0.8)")
    print(f"  1 thread, whole command / raw read process   {t_raw_child / t_one:5.2f}")
    print(f"  1 thread, in-process / raw read              {t_raw / t_inproc_one:5.2f}")
    print(
        f"  {args.threads} threads / 1 thread, whole command       {t_one / t_all:5.2f}  (>= 1.6)"
    )
    print(
        f"  {args.threads} threads / 1 thread, in-process          "
        f"{t_inproc_one / t_inproc_all:5.2f}"
    )
    results.update(
        bytes=nbytes,
        raw_s=t_raw,
        raw_process_s=t_raw_child,
        wxstats_1_s=t_one,
        wxstats_all_s=t_all,
        wxstats_inprocess_1_s=t_inproc_one,
        wxstats_inprocess_all_s=t_inproc_all,
        startup_s=t_start,
        startup_all_s=t_all_start,
        raw_cold_s=t_raw_cold,
        wxstats_all_cold_s=t_all_cold,
    )

    # peak memory at several sizes
    print("\npeak resident memory of wxstats compute (with mapped pages of samples in flight):")
    for size in sizes:
        if size != args.size_gb:
            times = max(1, round(size * GB / (main_spec.sample_bytes * MEMBERS)))
            cfg = linked_datastore(config, work / f"size-{size:g}", times, main_spec.interval_hours)
            for label, threads in (("1", 1), ("all", args.threads)):
                rss[(label, size)] = wxstats_compute(cfg, threads, out)[1]
        else:
            cfg = config
        size_bytes = total_bytes(dataset_files(cfg))
        print(
            f"  {size_bytes / GB:6.2f} GB: --threads 1 {rss[('1', size)] / 2**20:7.0f} MiB, "
            f"--threads {args.threads} {rss[('all', size)] / 2**20:7.0f} MiB "
            f"(one sample is {main_spec.sample_bytes / 2**20:.0f} MiB)"
        )
    results["peak_rss_bytes"] = {f"{k[0]}@{k[1]:g}GB": v for k, v in rss.items()}

    # peers, on a subset
    subset_times = max(1, round(args.peer_gb * GB / (main_spec.sample_bytes * MEMBERS)))
    subset = linked_datastore(config, work / "subset", subset_times, main_spec.interval_hours)
    subset_bytes = total_bytes(dataset_files(subset))
    print(f"\npeers on a subset of {subset_bytes / GB:.2f} GB ({subset_times * MEMBERS} samples):")
    t_sub = min(wxstats_compute(subset, args.threads, out)[0] for _ in range(args.repeat))
    print(f"  wxstats compute (whole command)  {t_sub:7.2f} s {gbps(subset_bytes, t_sub)}")
    if neural_lam_available():
        t_nl = neural_lam_script(subset)
        print(
            f"  neural-lam compute_standardization_stats {t_nl:7.2f} s "
            f"{gbps(subset_bytes, t_nl)}; wxstats is {t_nl / t_sub:.0f}x faster on the subset, "
            f"{(nbytes / t_one) / (subset_bytes / t_nl):.0f}x by throughput at 1 thread "
            "(target >= 200)"
        )
        results["neural_lam_s"] = t_nl
    else:
        print("  neural-lam: not installed (import neural_lam failed); not measured")
        results["neural_lam_s"] = None
    summary = summary_of(subset, work / "subset-out")
    from wxstats.tools.example import REMOVED_INDEX, VARIABLES

    kept = [f for f in range(len(VARIABLES) + 1) if f != REMOVED_INDEX]
    t_xr, xr_bytes, xr_stats = xarray_dask(subset, work, kept)
    ours = {k: np.array(summary["state"][k], dtype=np.float64) for k in ("mean", "std")}
    err = {k: float(np.max(np.abs(xr_stats[k] - ours[k]) / np.abs(ours[k]))) for k in ours}
    worst = {
        k: summary["variables"][int(np.argmax(np.abs(xr_stats[k] - ours[k]) / np.abs(ours[k])))]
        for k in ours
    }
    print(
        f"  xarray+dask on zarr, float32 .mean()+.std() of the state ({xr_bytes / GB:.2f} GB): "
        f"{t_xr:.2f} s {gbps(xr_bytes, t_xr)}; wxstats (state, diffs, flux, 6 files) is "
        f"{(nbytes / t_one) / (xr_bytes / t_xr):.1f}x by throughput at 1 thread"
    )
    print(
        f"  xarray relative error vs wxstats: mean {err['mean']:.1e} ({worst['mean']}), "
        f"std {err['std']:.1e} ({worst['std']})"
    )
    results.update(
        subset_bytes=subset_bytes, wxstats_subset_s=t_sub, xarray_s=t_xr, xarray_rel_err=err
    )

    return 0


if __name__ == "__main__":
    sys.exit(main())
