"""wxstats on an ERA5-like zarr store against the store's own read limit, same run.

Writes (once, reused with ``--keep``) an ERA5-like zarr store: t, u, z on 13
pressure levels plus t2m and msl, 6-hourly, a 121 x 240 grid, one time step per
chunk, zarr's default compression (2 GB of float32 with the default ``--gb``).
Then, warm (page cache full) and cold (every chunk file evicted with
``posix_fadvise(POSIX_FADV_DONTNEED)`` before the run), it times:

- ``limit``: reading, decoding and summing (float32) every chunk, nothing
  else, with as many threads as CPUs: each chunk file read and decompressed by
  numcodecs, and zarr-python reading each array in slabs of 8 steps; the
  faster of the two is the limit (what any reader of this store can reach);
- ``wxstats``: ``compute`` over the whole store (mean, std, min, max and
  step-1 differences of every level, exact) in-process, and ``wxstats
  compute`` as a command (start-up included), as fractions of the limit;
- ``xarray+dask f64`` (unless ``--no-dask``): the xarray + dask float64
  script (mean, std and std of the step-1 difference per level, one
  ``dask.compute``);

the same data as one netCDF file, uncompressed and as the Climate Data Store
delivers ERA5 (zlib + shuffle, a step per chunk) (unless ``--no-netcdf``: the
limit is netCDF4-python reading every variable in slabs of 8 steps and summing
them, with the one core its lock allows; wxstats reads the file's chunks
itself, with every core: ``storage/hdf5chunks.py``); the same store
uploaded to moto's S3 server on localhost (unless ``--no-s3``: the limit is
every chunk object fetched in batches of 256, with s3fs's ``cat`` and with
obstore's gathered GETs, whichever is faster, and decompressed; wxstats reads
``s3://``, with obstore's client where installed and with fsspec's ``cat``;
``--repeat`` interleaved rounds, min and median); and the start-up: ``wxstats
compute`` of a tiny store against ``python -c "import numpy, xarray"`` (whole
process); the ranks: ``--nproc 2 --threads 1`` against ``--nproc 1 --threads 1``,
each compute phase being the whole command minus the same on a tiny store.

The machine may be shared: the ratios are measured in one run, compare them,
not the absolute times across runs.

    python benchmarks/bench_zarr.py                       # 2 GB store in /tmp, kept
    python benchmarks/bench_zarr.py --gb 0.3 --no-cold
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from children import child_env, evict  # benchmarks/, this script's folder

LEVELS = [50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 925, 1000]
GRID = (121, 240)
THREADS = os.cpu_count() or 1


def write_store(path: Path, gb: float, batch: int = 16) -> int:
    """The ERA5-like store (see module docstring); returns its time steps."""
    import xarray as xr

    per_step = (3 * len(LEVELS) + 2) * GRID[0] * GRID[1] * 4
    n_time = max(batch, int(gb * 1e9 / per_step))
    rng = np.random.default_rng(0)
    lat = np.linspace(-1, 1, GRID[0])[:, None]
    lon = np.linspace(-np.pi, np.pi, GRID[1])[None, :]
    lev = np.asarray(LEVELS, dtype=np.float32)[:, None, None] / 1000
    times = np.datetime64("2000-01-01T00", "h") + 6 * np.arange(n_time).astype("timedelta64[h]")

    def fields(t0: int, n: int) -> dict:
        phase = 2 * np.pi * np.arange(t0, t0 + n)[:, None, None] / 40

        def level_var(base, amp, noise):
            smooth = base + amp * np.cos(3 * lat + phase) * np.sin(lon)
            values = smooth[:, None] * (1 + lev[None]) + noise * rng.standard_normal(
                (n, len(LEVELS), *GRID), dtype=np.float32
            )
            return (("time", "level", "lat", "lon"), np.round(values, 2).astype(np.float32))

        def surface(base, amp, noise):
            values = (
                base
                + amp * np.cos(2 * lat + phase) * np.sin(lon)
                + noise * (rng.standard_normal((n, *GRID), dtype=np.float32))
            )
            return (("time", "lat", "lon"), np.round(values, 1).astype(np.float32))

        return {
            "t": level_var(230, 20, 1.0),
            "u": level_var(5, 15, 3.0),
            "z": level_var(50000, 5000, 50.0),
            "t2m": surface(285, 10, 1.0),
            "msl": surface(101325, 800, 100.0),
        }

    coords = {
        "level": LEVELS,
        "lat": np.linspace(90, -90, GRID[0]),
        "lon": np.arange(GRID[1]) * 1.5,
    }
    # consolidated metadata (what ERA5 stores on the cloud have) makes zarr 3 warn that
    # it is not in its specification, once per appended batch: not news for a benchmark
    warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
    for t0 in range(0, n_time, batch):
        n = min(batch, n_time - t0)
        ds = xr.Dataset(fields(t0, n), coords={**coords, "time": times[t0 : t0 + n]})
        if t0 == 0:
            enc = {v: {"chunks": (1, *ds[v].shape[1:])} for v in ds.data_vars}
            ds.to_zarr(path, mode="w", encoding=enc, consolidated=True)
        else:
            ds.to_zarr(path, append_dim="time", consolidated=True)
    return n_time


def chunk_files(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file() and p.name[0] not in ".z"]


def store_files(path: Path) -> list[Path]:
    """Every file of the store, metadata included."""
    return [p for p in path.rglob("*") if p.is_file()]


def limit_numcodecs(path: Path, threads: int = THREADS) -> float:
    """Seconds to read and decompress every chunk file with numcodecs, in threads."""
    import zarr
    from numcodecs import Zstd

    group = zarr.open_group(path, mode="r")
    codec = {}
    for name, arr in group.arrays():
        codecs = [type(c).__name__ for c in arr.metadata.codecs]
        codec[name] = Zstd() if codecs[-1] == "ZstdCodec" else None
    files = [(p.relative_to(path).parts[0], p) for p in chunk_files(path)]
    files = [(name, p) for name, p in files if name in codec and codec[name] is not None]

    def one(item) -> float:
        name, p = item
        data = codec[name].decode(p.read_bytes())
        return float(np.frombuffer(data, dtype=np.float32).sum())

    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        sum(pool.map(one, files))
    return time.perf_counter() - start


def limit_zarr(path: Path, steps: int = 8) -> float:
    """Seconds for zarr-python to read every array in slabs of ``steps`` steps."""
    import zarr

    group = zarr.open_group(path, mode="r")
    start = time.perf_counter()
    for name, arr in group.arrays():
        if arr.ndim < 3:
            continue
        for t in range(0, arr.shape[0], steps):
            float(arr[t : t + steps].sum(dtype=np.float64))
        del name
    return time.perf_counter() - start


def run_wxstats(path: Path) -> float:
    from wxstats.runtime.run import compute

    start = time.perf_counter()
    compute(str(path), diff_steps=(1,), threads=THREADS)
    return time.perf_counter() - start


def netcdf_copy(store: Path, compressed: bool = False) -> Path:
    """The store as one netCDF4 file, written once: uncompressed and contiguous,
    or (``compressed``) zlib level 4 with shuffle and one time step per chunk, as
    the Copernicus Climate Data Store delivers ERA5."""
    import xarray as xr

    path = store.with_name(store.stem + ("-zlib" if compressed else "") + ".nc")
    if not path.exists():
        with xr.open_zarr(store) as ds:
            encoding = {
                v: {"zlib": True, "complevel": 4, "shuffle": True,
                    "chunksizes": (1, *ds[v].shape[1:])}
                for v in ds.data_vars
            } if compressed else {}  # fmt: skip
            ds.to_netcdf(path.with_suffix(".part"), engine="netcdf4", encoding=encoding)
        path.with_suffix(".part").rename(path)
    return path


def limit_netcdf4(path: Path, steps: int = 8) -> float:
    """netCDF4-python alone: every 3-D/4-D variable in slabs of ``steps``, summed."""
    import netCDF4

    start = time.perf_counter()
    with netCDF4.Dataset(path) as ds:
        ds.set_auto_mask(False)
        for var in ds.variables.values():
            if var.ndim >= 3:
                for i in range(0, var.shape[0], steps):
                    np.asarray(var[i : i + steps], dtype=np.float32).sum(dtype=np.float32)
    return time.perf_counter() - start


def run_dask(path: Path) -> float:
    import dask
    import xarray as xr

    start = time.perf_counter()
    ds = xr.open_zarr(path).astype("float64")
    dims = ["time", "lat", "lon"]
    dask.compute(ds.mean(dims), ds.std(dims), ds.diff("time").std(dims))
    return time.perf_counter() - start


def wall(cmd: list[str], env: dict | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def tiny_store(work: Path) -> Path:
    """A 1.6 kB store: what ``wxstats compute`` costs besides the data."""
    import xarray as xr

    tiny = work / "tiny.zarr"
    if not tiny.exists():
        times = np.datetime64("2000-01-01", "h") + np.arange(20).astype("timedelta64[h]")
        data = np.random.default_rng(0).random((20, 4, 5)).astype(np.float32)
        xr.Dataset({"t": (("time", "y", "x"), data)}, coords={"time": times}).to_zarr(tiny)
    return tiny


def startup(work: Path) -> tuple[float, float]:
    """Best of 3 wall times: ``wxstats compute`` on a tiny store, ``import numpy, xarray``."""
    tiny = tiny_store(work)
    env = child_env()
    out = work / "tiny.stats.nc"
    cmd = [sys.executable, "-m", "wxstats", "compute", str(tiny), "--quiet", "--overwrite"]
    ours = min(wall([*cmd, "--output", str(out)], env) for _ in range(3))
    base = min(wall([sys.executable, "-c", "import numpy, xarray"]) for _ in range(3))
    return ours, base


def run_command(path: str, work: Path, extra: list[str] = ()) -> float:
    """``wxstats compute`` as a fresh process: the whole command, start-up included."""
    env = child_env()
    out = work / "bench.stats.nc"
    cmd = [sys.executable, "-m", "wxstats", "compute", path, "--quiet", "--overwrite"]
    return wall([*cmd, "--output", str(out), "--diff-steps", "1", *extra], env)


class S3:
    """The store served by moto's S3 server on localhost (a real S3 endpoint)."""

    def __init__(self, store: Path) -> None:
        import logging

        import s3fs
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.options = {
            "endpoint_url": f"http://{host}:{port}",
            "key": "bench",
            "secret": "bench",
            "client_kwargs": {"region_name": "eu-west-1"},
        }
        self.fs = s3fs.S3FileSystem(**self.options)
        self.fs.mkdir("bench")
        self.url = "s3://bench/store.zarr"
        t0 = time.perf_counter()
        self.fs.put(str(store), "bench/store.zarr", recursive=True)
        self.keys = [str(p.relative_to(store)) for p in chunk_files(store)]
        print(f"uploaded the store to moto in {time.perf_counter() - t0:.0f} s")

    def limit(self, _path: Path) -> float:
        """Every chunk object fetched (s3fs's batched cat) and decompressed in threads."""
        # max_concurrency=1: no HEAD before each GET (as wxstats reads chunk objects)
        fs = type(self.fs)(
            **self.options,
            config_kwargs={"max_pool_connections": 64},
            max_concurrency=1,
            skip_instance_cache=True,
        )
        urls = [f"bench/store.zarr/{k}" for k in self.keys]
        return self._batched(lambda batch: list(fs.cat(batch).values()), urls)

    def limit_obstore(self, _path: Path) -> float:
        """Every chunk object fetched (obstore, a batch's GETs gathered on one event
        loop) and decompressed in threads."""
        import asyncio

        import obstore
        from obstore.store import S3Store

        store = S3Store(
            "bench",
            endpoint=self.options["endpoint_url"],
            access_key_id="bench",
            secret_access_key="bench",
            region="eu-west-1",
            client_options={"allow_http": True},
        )

        async def fetch(names: list[str]) -> list:
            async def one(name: str):
                return await (await obstore.get_async(store, name)).bytes_async()

            return await asyncio.gather(*(one(n) for n in names))

        names = [f"store.zarr/{k}" for k in self.keys]
        return self._batched(lambda batch: asyncio.run(fetch(batch)), names)

    def _batched(self, fetch, names: list[str], batch: int = 256) -> float:
        """Seconds to ``fetch`` ``names`` in batches, each batch decompressed and
        summed in threads while the next is fetched."""
        from numcodecs import Zstd

        codec = Zstd()
        start = time.perf_counter()
        with ThreadPoolExecutor(THREADS) as pool:
            pending = []
            for i in range(0, len(names), batch):
                data = fetch(names[i : i + batch])
                for fut in pending:
                    fut.result()
                pending = [
                    pool.submit(lambda b: float(np.frombuffer(codec.decode(b), "f4").sum()), b)
                    for b in data
                ]
            for fut in pending:
                fut.result()
        return time.perf_counter() - start

    def wxstats(self, _path: Path) -> float:
        from wxstats.runtime.run import compute

        start = time.perf_counter()
        compute(self.url, diff_steps=(1,), threads=THREADS, storage_options=self.options)
        return time.perf_counter() - start

    def wxstats_fsspec(self, path: Path) -> float:
        """wxstats with its chunk objects fetched by fsspec's batched cat (no obstore)."""
        from wxstats.storage import zarrchunks

        chosen = zarrchunks.object_store
        zarrchunks.object_store = lambda *_: None
        try:
            return self.wxstats(path)
        finally:
            zarrchunks.object_store = chosen

    def stop(self) -> None:
        self.server.stop()


def table(title: str, nbytes: int, results: dict[str, float], limit: float, zarr=None) -> None:
    """One row per result: seconds, GB/s (of float32 data) and fractions of the
    limit (and of zarr-python's own reading, when measured)."""
    print(title)
    for name, seconds in results.items():
        versus = f" {zarr / seconds:6.2f} x zarr-python" if zarr else ""
        print(
            f"  {name:28} {seconds:8.2f} s {nbytes / seconds / 1e9:6.2f} GB/s "
            f"{limit / seconds:6.2f} x limit{versus}"
        )


def s3_rows(store: Path, nbytes: int, rounds: int) -> None:
    """The store on moto's S3 server: the batched limits (s3fs's ``cat`` and
    obstore's gathered GETs: the faster is the limit) and wxstats (obstore's client
    when installed, and fsspec's ``cat``), ``rounds`` interleaved rounds, min and
    median; the ratios are the limit's min over each row's min, medians likewise."""
    import statistics

    s3 = S3(store)
    try:
        rows = {"limit: batched cat (s3fs)": s3.limit}
        try:
            import obstore  # noqa: F401

            rows["limit: batched get (obstore)"] = s3.limit_obstore
            rows["wxstats (obstore)"] = s3.wxstats
        except ImportError:
            print("obstore is not installed: its rows are left out")
        rows["wxstats (fsspec cat)"] = s3.wxstats_fsspec
        s3.wxstats(store)  # the kernel and both clients' first connections
        s3.wxstats_fsspec(store)
        times: dict[str, list[float]] = {name: [] for name in rows}
        for _ in range(rounds):
            for name, fn in rows.items():
                times[name].append(fn(store))
        limits = [t for name, t in times.items() if name.startswith("limit")]
        best = min(min(t) for t in limits)
        median = min(statistics.median(t) for t in limits)
        print(f"zarr on S3 (moto server, localhost), {rounds} interleaved rounds:")
        print(f"  {'':30} {'min s':>7} {'median':>7} {'GB/s':>6}  x limit: best  median")
        for name, t in times.items():
            print(
                f"  {name:30} {min(t):7.2f} {statistics.median(t):7.2f} "
                f"{nbytes / min(t) / 1e9:6.2f}  {best / min(t):13.2f} "
                f"{median / statistics.median(t):7.2f}"
            )
    finally:
        s3.stop()


def ranks(store: Path, work: Path, nbytes: int) -> None:
    """``--nproc 2 --threads 1`` against ``--nproc 1 --threads 1``: the compute
    phase is the whole command minus the same command on the tiny store."""
    tiny = str(tiny_store(work))
    phase = {}
    for n in (1, 2):
        flags = ["--nproc", str(n), "--threads", "1"]
        whole = run_command(str(store), work, flags)
        phase[n] = whole - min(run_command(tiny, work, flags) for _ in range(2))
        print(
            f"  --nproc {n} --threads 1: whole command {whole:.2f} s, "
            f"compute phase {phase[n]:.2f} s"
        )
    print(f"ranks: --nproc 2 / --nproc 1 compute phase speed-up {phase[1] / phase[2]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gb", type=float, default=2.0, help="store size (float32 GB)")
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "wxstats-bench")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold-cache rows")
    parser.add_argument("--no-dask", action="store_true", help="skip xarray + dask float64")
    parser.add_argument("--no-s3", action="store_true", help="skip the S3 (moto) rows")
    parser.add_argument("--no-netcdf", action="store_true", help="skip the netCDF rows")
    parser.add_argument("--no-ranks", action="store_true", help="skip the --nproc rows")
    parser.add_argument("--repeat", type=int, default=2, help="best of N for the warm rows")
    parser.add_argument("--s3-only", action="store_true", help="only the S3 (moto) rows")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    args.dir.mkdir(parents=True, exist_ok=True)
    store = args.dir / f"era5-{args.gb:g}gb.zarr"
    if not store.exists():
        t0 = time.perf_counter()
        n = write_store(store, args.gb)
        print(f"wrote {store} ({n} steps) in {time.perf_counter() - t0:.0f} s")
    disk = sum(p.stat().st_size for p in chunk_files(store))
    nbytes = sum(
        np.prod(a.shape) * a.dtype.itemsize
        for _, a in __import__("zarr").open_group(store, mode="r").arrays()
        if a.ndim >= 3
    )
    print(f"store: {nbytes / 1e9:.2f} GB float32, {disk / 1e9:.2f} GB on disk; threads {THREADS}")
    print(f"load average before: {os.getloadavg()[0]:.2f} (other work on the machine skews times)")
    if args.s3_only:
        return s3_rows(store, nbytes, args.repeat)
    run_wxstats(store)  # compile the kernels once
    modes = ["warm"] + ([] if args.no_cold else ["cold"])
    for mode in modes:
        results = {}
        rows = [
            ("limit: numcodecs, threads", limit_numcodecs),
            ("limit: zarr-python slabs", limit_zarr),
            ("wxstats (in-process)", run_wxstats),
            ("wxstats compute (command)", lambda p: run_command(str(p), args.dir)),
        ]
        if not args.no_dask:
            rows.append(("xarray+dask float64", run_dask))
        for name, fn in rows:
            best = float("inf")
            for _ in range(args.repeat if mode == "warm" else 1):
                if mode == "cold":
                    evict(store_files(store))
                best = min(best, fn(store))
            results[name] = best
        limit = min(results["limit: numcodecs, threads"], results["limit: zarr-python slabs"])
        zarr = results["limit: zarr-python slabs"]
        table(f"zarr, {mode} page cache:", nbytes, results, limit, zarr)
        if "xarray+dask float64" in results:
            speedup = results["xarray+dask float64"] / results["wxstats compute (command)"]
            print(f"  wxstats compute is {speedup:.1f}x xarray+dask float64")
    if not args.no_netcdf:
        for compressed, title in ((False, "netCDF (one file, warm):"),
                                  (True, "netCDF, zlib + shuffle (one file, warm):")):  # fmt: skip
            nc = netcdf_copy(store, compressed)
            results = {}
            for name, fn in (("limit: netCDF4-python slabs", limit_netcdf4),
                             ("wxstats", run_wxstats)):  # fmt: skip
                results[name] = min(fn(nc) for _ in range(args.repeat))
            table(title, nbytes, results, results["limit: netCDF4-python slabs"])
    if not args.no_s3:
        s3_rows(store, nbytes, args.repeat)
    if not args.no_ranks:
        ranks(store, args.dir, nbytes)
    ours, base = startup(args.dir)
    print(
        f"start-up: wxstats compute tiny.zarr {ours:.2f} s; import numpy, xarray {base:.2f} s; "
        f"ratio {ours / base:.2f}"
    )
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
