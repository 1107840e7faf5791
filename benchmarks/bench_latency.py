"""wxstats on an object store with a cloud's latency, against the limit measured in the same run.

An ERA5-like zarr store (as ``bench_zarr.py``'s: t, u, z on 13 levels, t2m, msl, a
121 x 240 grid, one time step and level per chunk: 41 chunk objects of ~116 KB a
step) is
uploaded to moto's S3 server (a child process on localhost), and read through
``latency_proxy.py``, which holds each request ``--delays`` ms (30 and 100 by
default: a cloud region and across an ocean). For each delay, ``--repeat``
interleaved rounds, min and median:

- ``limit``: every chunk object fetched with N requests in flight (obstore's
  GETs on one event loop, a semaphore of N; s3fs's ``_cat_file`` without
  obstore), each decompressed (numcodecs) and summed in threads as it arrives:
  nothing else, the most a reader can get from this store with N in flight.
  N is the most requests wxstats had in flight in the same round (counted by
  the proxy), so the ratio compares like with like;
- ``wxstats``: ``wxstats.compute`` of the store (every statistic, step-1
  differences, the requests in flight chosen by the rate the store gives);
- ``zarr-python``: every array read by zarr (its own concurrency), summed;
- ``xarray+dask``: ``xr.open_zarr`` and a float64 mean, std and std of the
  step-1 difference per level, one ``dask.compute``;

(the peers once, at the first delay only: 40-130 s at 100 ms). wxstats' row is
also given from its first chunk request ("after opening": the metadata objects
before it, one round trip, which the proxy counts; every coordinate's chunk
objects then leave with the first block's), as the limit starts with the list
of keys in hand. With
``--xarray-opening``, each round also runs wxstats opening the store as it did
before (xarray alone: the metadata, then each coordinate one after the other,
and the chunk reader's own opening of the group: ~8 round trips), interleaved.
Each round's chunk requests beyond one per object are counted too (a block's
difference halo requested again costs a round trip each).

Then the curve: the limit and wxstats with the requests in flight fixed at
each of ``--in-flight`` (``wxstats.storage.urls.REQUESTS_IN_FLIGHT``), once each.

    python benchmarks/bench_latency.py                      # 984 chunk objects, 2-4 min
    python benchmarks/bench_latency.py --steps 8 --delays 30 --in-flight 8 64 --repeat 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bench_zarr import GRID, LEVELS  # noqa: E402
from latency_proxy import DelayProxy  # noqa: E402

THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
BUCKET = "bench"
VARIABLES = ("t", "u", "z", "t2m", "msl")
CHUNKS_PER_STEP = 3 * len(LEVELS) + 2
PER_STEP = CHUNKS_PER_STEP * GRID[0] * GRID[1] * 4

MOTO = """
import sys
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=int(sys.argv[1]), verbose=False)
server.start()
print("ready", flush=True)
sys.stdin.read()
server.stop()
"""


def write_store(path: Path, steps: int) -> None:
    """The ERA5-like store, a chunk object per step and level (``bench_zarr.py``'s
    has one per step and variable: 5 a step, where this one needs many)."""
    import xarray as xr

    rng = np.random.default_rng(0)
    lat = np.linspace(-1, 1, GRID[0])[:, None]
    lon = np.linspace(-np.pi, np.pi, GRID[1])[None, :]
    phase = 2 * np.pi * np.arange(steps)[:, None, None] / 40
    lev = np.asarray(LEVELS, dtype=np.float32)[None, :, None, None] / 1000

    def field(base: float, amp: float, noise: float, levels: bool):
        smooth = (base + amp * np.cos(3 * lat + phase) * np.sin(lon))[:, None]
        shape = (steps, len(LEVELS) if levels else 1, *GRID)
        values = smooth * (1 + lev if levels else 1) + noise * rng.standard_normal(shape)
        values = np.round(values, 2).astype(np.float32)
        if levels:
            return ("time", "level", "lat", "lon"), values
        return ("time", "lat", "lon"), values[:, 0]

    times = np.datetime64("2000-01-01T00", "h") + 6 * np.arange(steps).astype("timedelta64[h]")
    ds = xr.Dataset(
        {
            "t": field(230, 20, 1.0, True),
            "u": field(5, 15, 3.0, True),
            "z": field(50000, 5000, 50.0, True),
            "t2m": field(285, 10, 1.0, False),
            "msl": field(101325, 800, 100.0, False),
        },
        coords={
            "time": times,
            "level": LEVELS,
            "lat": np.linspace(90, -90, GRID[0]),
            "lon": np.arange(GRID[1]) * 1.5,
        },  # fmt: skip
    )
    enc = {v: {"chunks": (1,) * (ds[v].ndim - 2) + GRID} for v in VARIABLES}
    ds.to_zarr(path, mode="w", encoding=enc, consolidated=True)


def chunk_keys(path: Path) -> list[str]:
    """The chunk objects of the data variables (not the coordinates)."""
    return sorted(
        str(p.relative_to(path))
        for v in VARIABLES
        for p in (path / v).rglob("*")
        if p.is_file() and p.name[0] not in ".z"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Store:
    """The store on moto (a child process: its Python does not share the GIL with
    the clients measured here), and the delaying proxy in front of it."""

    def __init__(self, local: Path) -> None:
        import logging

        import s3fs

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        port = free_port()
        self.server = subprocess.Popen(
            [sys.executable, "-c", MOTO, str(port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.server.stdout.readline().strip() == "ready"
        direct = {
            "endpoint_url": f"http://127.0.0.1:{port}",
            "key": "bench",
            "secret": "bench",
            "client_kwargs": {"region_name": "eu-west-1"},
        }
        fs = s3fs.S3FileSystem(**direct)
        fs.mkdir(BUCKET)
        started = time.perf_counter()
        fs.put(str(local), f"{BUCKET}/store.zarr", recursive=True)
        self.keys = chunk_keys(local)
        print(
            f"uploaded {len(self.keys)} chunk objects to moto in "
            f"{time.perf_counter() - started:.0f} s"
        )
        self.proxy = DelayProxy(("127.0.0.1", port))
        self.options = {**direct, "endpoint_url": self.proxy.endpoint}
        self.url = f"s3://{BUCKET}/store.zarr"

    def stop(self) -> None:
        self.proxy.close()
        self.server.stdin.close()
        self.server.wait(timeout=30)


def limit(store: Store, in_flight: int) -> float:
    """Seconds to fetch every chunk object with ``in_flight`` requests at once,
    each decompressed and summed in threads as it arrives."""
    from numcodecs import Zstd

    codec = Zstd()
    fetch = _fetcher(store)

    def decode(data) -> float:
        return float(np.frombuffer(codec.decode(data), "f4").sum(dtype=np.float32))

    async def run(pool: ThreadPoolExecutor) -> None:
        loop = asyncio.get_running_loop()
        slots = asyncio.Semaphore(in_flight)

        async def one(key: str):
            async with slots:
                data = await fetch(key)
            return await loop.run_in_executor(pool, decode, data)

        await asyncio.gather(*(one(k) for k in store.keys))

    start = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        asyncio.run(run(pool))
    return time.perf_counter() - start


def _fetcher(store: Store):
    """A coroutine function: one chunk object's bytes (obstore, else s3fs)."""
    try:
        import obstore
        from obstore.store import S3Store
    except ImportError:
        import s3fs

        fs = s3fs.S3FileSystem(**store.options, asynchronous=True, skip_instance_cache=True)

        async def by_s3fs(key: str):
            await fs.set_session()
            return await fs._cat_file(f"{BUCKET}/store.zarr/{key}")

        return by_s3fs
    objects = S3Store(
        BUCKET,
        endpoint=store.options["endpoint_url"],
        access_key_id="bench",
        secret_access_key="bench",
        region="eu-west-1",
        client_options={"allow_http": True},
    )

    async def by_obstore(key: str):
        return await (await obstore.get_async(objects, f"store.zarr/{key}")).bytes_async()

    return by_obstore


def wxstats(store: Store, in_flight: int | None = None, xarray_opening: bool = False) -> float:
    """Seconds of ``wxstats.compute`` (``xarray_opening``: the store opened by
    xarray alone, as before the two-round-trip opening of ``storage/zarropen.py``)."""
    import wxstats.sources.xarray as source
    from wxstats.runtime.run import compute
    from wxstats.storage import urls

    urls.REQUESTS_IN_FLIGHT = in_flight
    two_round_trips = source.remote_zarr
    if xarray_opening:
        source.remote_zarr = lambda *args: None
    try:
        start = time.perf_counter()
        compute(store.url, diff_steps=(1,), threads=THREADS, storage_options=store.options)
        return time.perf_counter() - start
    finally:
        urls.REQUESTS_IN_FLIGHT = None
        source.remote_zarr = two_round_trips


def zarr_python(store: Store) -> float:
    import zarr

    start = time.perf_counter()
    group = zarr.open_group(store.url, mode="r", storage_options=store.options)
    for name in ("t", "u", "z", "t2m", "msl"):
        np.asarray(group[name][...]).sum(dtype=np.float32)
    return time.perf_counter() - start


def xarray_dask(store: Store) -> float:
    import dask
    import xarray as xr

    start = time.perf_counter()
    ds = xr.open_zarr(store.url, storage_options=store.options).astype("float64")
    dims = ["time", "lat", "lon"]
    dask.compute(ds.mean(dims), ds.std(dims), ds.diff("time").std(dims))
    return time.perf_counter() - start


def _data_chunk(line: str) -> bool:
    """Whether a request line asks for a chunk object of a data variable."""
    return any(f"/store.zarr/{v}/c/" in line for v in VARIABLES)


def _opening(store: Store, started: float, seconds: float) -> tuple[float, int, int]:
    """The seconds from a run's first chunk request to its end, the round trips
    it waited for before that request (counted by the proxy), and the chunk
    requests beyond one per object (a halo fetched again: one round trip each)."""
    first = next(i for i, (_, line) in enumerate(store.proxy.lines) if _data_chunk(line))
    gets = [line.split()[1] for _, line in store.proxy.lines if _data_chunk(line)]
    after = seconds - (store.proxy.lines[first][0] - started)
    return after, store.proxy.rounds[first] - 1, len(gets) - len(set(gets))


def headline(
    store: Store, delay_ms: float, rounds: int, peers: bool, nbytes: int, before: bool = False
) -> dict:
    """The rows at one delay, ``rounds`` interleaved rounds; returns the mins
    (``before``: wxstats with xarray's opening too, see the module doc)."""
    store.proxy.reset(delay=delay_ms / 1000)
    times: dict[str, list[float]] = {}
    most = []
    trips: dict[str, list[int]] = {}
    cpus: dict[str, list[float]] = {}  # CPU-seconds of this process (the proxy's too)
    for round_ in range(rounds):
        store.proxy.reset()
        started = time.monotonic()  # the proxy's clock (its event loop's)
        cpu = time.process_time()
        t = wxstats(store)
        cpus.setdefault("wxstats", []).append(time.process_time() - cpu)
        most.append(store.proxy.most)
        times.setdefault("wxstats (in flight: chosen)", []).append(t)
        data, waited, again = _opening(store, started, t)
        times.setdefault("  its chunks (after opening)", []).append(data)
        trips.setdefault("wxstats", []).append(waited)
        trips.setdefault("again", []).append(again)
        if before:
            store.proxy.reset()
            started = time.monotonic()
            t = wxstats(store, xarray_opening=True)
            times.setdefault("wxstats, xarray's opening", []).append(t)
            data, waited, again = _opening(store, started, t)
            times.setdefault("  its chunks (after opening) ", []).append(data)
            trips.setdefault("before", []).append(waited)
            trips.setdefault("again before", []).append(again)
        n = most[-1]
        cpu = time.process_time()
        times.setdefault("limit (same in flight)", []).append(limit(store, n))
        cpus.setdefault("limit", []).append(time.process_time() - cpu)
        if peers and round_ == 0:  # once: 5-40x slower than the rows compared
            times.setdefault("zarr-python", []).append(zarr_python(store))
            try:
                import dask  # noqa: F401

                times.setdefault("xarray+dask f64", []).append(xarray_dask(store))
            except ImportError:
                pass
    best = min(times["limit (same in flight)"])
    median = statistics.median(times["limit (same in flight)"])
    print(
        f"delay {delay_ms:g} ms per request, {rounds} interleaved rounds; wxstats had "
        f"at most {min(most)}-{max(most)} requests in flight (the limit the same):"
    )
    print(
        f"  {'':30} {'min s':>7} {'median':>7} {'MB/s':>7}  x limit: best  median (peers: 1 round)"
    )
    for name, t in times.items():
        print(
            f"  {name:30} {min(t):7.2f} {statistics.median(t):7.2f} "
            f"{nbytes / min(t) / 1e6:7.1f}  {best / min(t):13.2f} "
            f"{median / statistics.median(t):7.2f}"
        )
    whole, chunks = times["wxstats (in flight: chosen)"], times["  its chunks (after opening)"]
    opening = [a - b for a, b in zip(whole, chunks, strict=True)]
    ours, ref = (statistics.median(cpus[k]) for k in ("wxstats", "limit"))
    print(
        f"  CPU-s of this process (the proxy's included; moto's apart), medians: "
        f"wxstats {ours:.2f}, the limit {ref:.2f}"
    )
    before_text = f"; xarray's opening: {max(trips['before'])}" if before else ""
    again = ", ".join(map(str, trips["again"]))
    again_before = ", ".join(map(str, trips.get("again before", [])))
    print(
        f"  (wxstats opening the store: {min(opening):.2f}-{max(opening):.2f} s before its first "
        f"chunk request, {max(trips['wxstats'])} round trips{before_text})"
    )
    print(
        f"  (chunk objects requested more than once, each round: {again}"
        + (f"; xarray's opening: {again_before})" if before else ")")
    )
    return {name: min(t) for name, t in times.items()}


def curve(store: Store, delays: list[float], in_flight: list[int]) -> None:
    """The limit and wxstats at each fixed number of requests in flight."""
    print("the curve: seconds against requests in flight (fixed), once each")
    print(
        f"  {'delay':>5} {'in flight':>9} {'limit s':>8} {'wxstats s':>9} {'ratio':>6} "
        f"{'after opening s':>15} {'ratio':>6}"
    )
    for delay in delays:
        store.proxy.reset(delay=delay / 1000)
        for n in in_flight:
            store.proxy.reset()
            started = time.monotonic()
            ours = wxstats(store, n)
            most = store.proxy.most
            first = next(when for when, line in store.proxy.lines if _data_chunk(line))
            data = ours - (first - started)
            ref = limit(store, n)
            print(
                f"  {delay:5g} {n:9d} {ref:8.2f} {ours:9.2f} {ref / ours:6.2f} "
                f"{data:15.2f} {ref / data:6.2f}"
                f"{'' if most <= n else f'  ({most} in flight: the metadata reads beside)'}"
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=24, help="time steps (41 chunk objects each)")
    p.add_argument("--delays", type=float, nargs="+", default=[30, 100], help="ms per request")
    p.add_argument("--in-flight", type=int, nargs="+", default=[8, 16, 32, 64, 128])
    p.add_argument("--repeat", type=int, default=3, help="interleaved rounds (3)")
    p.add_argument("--no-peers", action="store_true", help="skip zarr-python and xarray+dask")
    p.add_argument("--no-curve", action="store_true", help="skip the curve")
    p.add_argument(
        "--xarray-opening",
        action="store_true",
        help="each round also wxstats with the store opened by xarray alone (as before)",
    )
    p.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp dir)")
    args = p.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # rows as they come, into a file too

    work = Path(tempfile.mkdtemp(prefix="wxstats-latency-", dir=args.dir))
    local = work / "store.zarr"
    warnings.filterwarnings("ignore", message="Consolidated metadata", category=UserWarning)
    write_store(local, args.steps)
    steps, nbytes = args.steps, args.steps * PER_STEP
    store = Store(local)
    try:
        load = os.getloadavg()[0]
        print(
            f"store: {steps} steps, {len(store.keys)} chunk objects, {nbytes / 1e6:.0f} MB "
            f"float32; {THREADS} threads; load average {load:.1f}"
        )
        wxstats(store)  # the kernel, imports and first connections, no delay
        limit(store, 8)
        results = {  # the peers at the first delay only: 40-130 s at 100 ms
            delay: headline(
                store, delay, args.repeat, not args.no_peers and i == 0, nbytes, args.xarray_opening
            )
            for i, delay in enumerate(args.delays)
        }
        for delay, rows in results.items():
            ratio = rows["limit (same in flight)"] / rows["wxstats (in flight: chosen)"]
            data = rows["limit (same in flight)"] / rows["  its chunks (after opening)"]
            print(
                f"wxstats / limit at {delay:g} ms: {ratio:.2f} whole run, {data:.2f} after "
                "opening the store (best of each; target >= 0.9)"
            )
            if args.xarray_opening:
                before = rows["limit (same in flight)"] / rows["wxstats, xarray's opening"]
                print(f"  with xarray's opening (before): {before:.2f} whole run")
        if not args.no_curve:
            curve(store, args.delays, args.in_flight)
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        store.stop()
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
