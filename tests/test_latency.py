"""An object store with a cloud's latency: moto's S3 server behind a proxy that
holds each request (``benchmarks/latency_proxy.py``). The statistics match the
float64 reference with either client, the chunk requests are in flight together
(counted by the proxy, shown by an event: it holds them until that many came),
opening the store waits for two round trips (the proxy counts them),
and the requests in flight are chosen by the rate the store gives
(:class:`wxstats.storage.urls.InFlight`, on a simulated store)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from gridded_data import assert_stream_matches, hourly, reference

from wxstats.core.kernel import step_bytes
from wxstats.runtime.run import compute
from wxstats.storage.urls import FIRST_IN_FLIGHT, MOST_IN_FLIGHT, InFlight

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from latency_proxy import DelayProxy  # noqa: E402

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")
serving = pytest.importorskip("werkzeug.serving")

BUCKET = "wxstats-latency"
DELAY_S = 0.03
BLOCK_MB = 4.5 * (30 * 3 * 4 + step_bytes(3, 3)) / 2**20
"""Blocks of 4 steps: a step's float32 values and what the kernel holds for it."""


@pytest.fixture(scope="module")
def store():
    """A zarr store of 240 chunk objects (one step and level per chunk) on moto,
    and the proxy in front of it; the float64 truth."""
    import s3fs

    app = moto_server.DomainDispatcherApplication(moto_server.create_backend_app)
    server = serving.make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    direct = {
        "endpoint_url": f"http://127.0.0.1:{server.server_port}",
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"region_name": "eu-west-1"},
    }
    s3fs.S3FileSystem(**direct).mkdir(BUCKET)
    rng = np.random.default_rng(36)
    values = (250 + 20 * rng.standard_normal((80, 3, 5, 6))).astype(np.float32)
    ds = xr.Dataset(
        {"t": (("time", "level", "y", "x"), values)},
        coords={"time": hourly(80), "level": [500, 700, 850]},
    )
    url = f"s3://{BUCKET}/era.zarr"
    enc = {"t": {"chunks": (1, 1, 5, 6)}}
    ds.to_zarr(url, storage_options=direct, encoding=enc, mode="w", consolidated=False)
    proxy = DelayProxy(("127.0.0.1", server.server_port), DELAY_S)
    delayed = {**direct, "endpoint_url": proxy.endpoint}
    truth = values.astype(np.float64).transpose(0, 2, 3, 1).reshape(80, 30, 3)
    yield proxy, url, delayed, truth
    proxy.close()
    server.shutdown()


@pytest.mark.parametrize("client", ["obstore", "fsspec"])
def test_delayed_store_matches_the_reference_with_requests_in_flight(store, client, monkeypatch):
    proxy, url, options, truth = store
    if client == "obstore":
        pytest.importorskip("obstore")
    else:
        monkeypatch.setattr("wxstats.storage.zarrchunks.object_store", lambda *a: None)
    proxy.reset(gather=8, gather_only="/era.zarr/t/c/")  # chunk GETs held until 8 came
    stats = compute(
        url, diff_steps=(1, 3), threads=2, block_mb=BLOCK_MB, storage_options=options
    )  # 20 blocks of 4 steps, requested ahead while the kernel sums
    assert proxy.most >= 8 and not proxy.timed_out, f"at most {proxy.most} requests in flight"
    assert proxy.requests >= 240  # each chunk object delayed, kept-alive connections too
    assert_stream_matches(stats.streams["t__train"], reference(truth, 0, 80, (1, 3)))


def test_each_chunk_object_is_requested_once(store):
    """A block's difference halo (its first steps, the block before's last) is
    fetched by the block before and its values shared, not requested again: one
    GET per chunk object (one thread: each block is asked for, ahead, before the
    block before it is read, so this does not depend on timing)."""
    from collections import Counter

    proxy, url, options, truth = store
    proxy.reset()
    stats = compute(url, diff_steps=(1, 3), threads=1, block_mb=BLOCK_MB, storage_options=options)
    gets = Counter(
        line.split()[1] for _, line in proxy.lines if "/era.zarr/t/c/" in line
    )  # fmt: skip
    assert len(gets) == 240 and max(gets.values()) == 1, gets.most_common(3)
    assert_stream_matches(stats.streams["t__train"], reference(truth, 0, 80, (1, 3)))


@pytest.mark.parametrize("client", ["obstore", "fsspec"])
def test_opening_the_store_waits_two_round_trips(store, client, monkeypatch):
    """Opening the store takes two round trips: the metadata objects, then every
    coordinate's chunk objects, in flight together (the proxy holds them until
    all four came: an event, not a timing), each object requested once; the
    first chunk requests leave with the second at the latest (with the
    coordinates': the test below). xarray alone reads each coordinate one after the
    other and the time coordinate three times, and the chunk reader opened the
    group again: 8 round trips."""
    import pickle
    from collections import Counter

    from wxstats.sources.xarray.open import open_one, remote_zarr

    proxy, _, options, _ = store
    if client == "obstore":
        pytest.importorskip("obstore")
    else:
        monkeypatch.setattr("wxstats.storage.zarrchunks.object_store", lambda *a: None)
    url = f"s3://{BUCKET}/coords.zarr"
    rng = np.random.default_rng(2)
    values = (280 + 5 * rng.standard_normal((12, 2, 4, 5))).astype(np.float32)
    ds = xr.Dataset(
        {"t": (("time", "level", "lat", "lon"), values)},
        coords={
            "time": hourly(12),
            "level": [500, 850],
            "lat": np.linspace(60.0, 45.0, 4),
            "lon": np.arange(5) * 1.5,
        },
    )
    enc = {"t": {"chunks": (1, 1, 4, 5)}}
    ds.to_zarr(url, storage_options=options, encoding=enc, mode="w", consolidated=True)
    # the four coordinates' single chunk objects (time/c/0...), not t's (t/c/0/0/0/0)
    proxy.reset(gather=4, gather_only="/c/0 HTTP")
    stats = compute(url, diff_steps=(1,), threads=2, storage_options=options)
    assert not proxy.timed_out, "the coordinates' objects were not in flight together"
    # (the first block's objects leave with the coordinates': before or after them)
    sent = [(line.split()[1], r) for (_, line), r in zip(proxy.lines, proxy.rounds, strict=True)]
    opening = [(get, r) for get, r in sent if "/coords.zarr/t/c/" not in get]
    gets = Counter(get for get, _ in opening)
    assert max(gets.values()) == 1, gets.most_common(3)
    coords = {f"/{BUCKET}/coords.zarr/{c}/c/0" for c in ("time", "level", "lat", "lon")}
    assert coords <= set(gets) and all(r <= 2 for get, r in opening if get in coords), opening
    first = min(r for get, r in sent if "/coords.zarr/t/c/" in get)
    assert first - 1 <= 2, sent[:12]
    truth = values.astype(np.float64).transpose(0, 2, 3, 1).reshape(12, 20, 2)
    assert_stream_matches(stats.streams["t__train"], reference(truth, 0, 12, (1,)))
    # a dask graph of a variable so opened is pickled to a cluster's workers, and read there
    opened = remote_zarr(url, options, "time")
    assert opened is not None
    lazy = open_one(url, options, opened).variables["t"].chunk().data
    assert np.array_equal(pickle.loads(pickle.dumps(lazy)).compute(), values)


def _simulate(latency: float, per_second: float, in_flight: InFlight, requests: int) -> None:
    """A store answering each request after ``latency`` s, at most ``per_second``
    requests a second, with a client that always has requests waiting."""
    import heapq

    now, free_at, done = 0.0, 0.0, []
    for _ in range(in_flight.limit):
        free_at = max(free_at + 1 / per_second, now + latency)
        heapq.heappush(done, free_at)
    for _ in range(requests):
        now = heapq.heappop(done)
        in_flight.completed(True, now)
        while len(done) < in_flight.limit:
            free_at = max(free_at + 1 / per_second, now + latency)
            heapq.heappush(done, free_at)


@pytest.mark.parametrize(
    ("latency", "per_second", "lowest", "highest"),
    [
        (0.1, 1e6, MOST_IN_FLIGHT, MOST_IN_FLIGHT),  # far: as many as allowed
        (0.1, 400.0, 32, 64),  # 100 ms x 400/s: the pipe holds 40
        (0.03, 400.0, FIRST_IN_FLIGHT, FIRST_IN_FLIGHT),  # 30 ms x 400/s: 12, fewer than the start
        (0.05, 10_000.0, 256, 256),  # 50 ms x 10,000/s: 500, more than allowed
        (0.002, 100.0, FIRST_IN_FLIGHT, FIRST_IN_FLIGHT),  # slow store: never more
    ],
)
def test_requests_in_flight_grow_while_the_rate_grows(latency, per_second, lowest, highest):
    chosen = InFlight()
    _simulate(latency, per_second, chosen, 20_000)
    assert chosen.settled or chosen.limit == MOST_IN_FLIGHT, chosen.rates
    assert lowest <= chosen.limit <= highest, (chosen.limit, chosen.rates)


def test_a_window_without_waiting_requests_says_nothing():
    """Completions while no request waited for a slot (the client asked for fewer)
    never grow nor settle the requests in flight."""
    chosen = InFlight()
    for i in range(10_000):
        chosen.completed(False, i * 0.001)
    assert chosen.limit == FIRST_IN_FLIGHT and not chosen.settled and not chosen.rates


def test_a_fixed_number_is_kept():
    chosen = InFlight(8)
    _simulate(0.1, 1e6, chosen, 1000)
    assert chosen.limit == 8


def test_an_object_corrupt_on_arrival_is_one_line_naming_it(store):
    """Chunk objects read ahead are decoded as they arrive (in the reading
    threads): a corrupt one is still the error of the block that reads it."""
    import s3fs

    from wxstats.core.errors import InputError

    proxy, _, options, _ = store
    url = f"s3://{BUCKET}/corrupt.zarr"
    values = np.arange(40 * 2 * 3, dtype=np.float32).reshape(40, 2, 3)
    ds = xr.Dataset({"t": (("time", "y", "x"), values)}, coords={"time": hourly(40)})
    ds.to_zarr(url, storage_options=options, encoding={"t": {"chunks": (1, 2, 3)}}, mode="w")
    s3fs.S3FileSystem(**options).pipe(f"{BUCKET}/corrupt.zarr/t/c/30/0/0", b"not zstd at all")
    proxy.reset()
    with pytest.raises(InputError) as caught:
        compute(url, threads=2, block_mb=0.0001, storage_options=options)
    message = str(caught.value)
    assert "corrupt.zarr: variable t: chunk object t/c/30/0/0: cannot decode" in message
    assert len(message.splitlines()) == 1, message


def test_requests_go_out_in_the_order_they_were_submitted(monkeypatch):
    """A block requested ahead queues behind the block before it: every request of
    the first block goes out before any of the next, whatever the completions
    interleave (a woken request once went to the back of the queue, behind later
    blocks', and the first block was the last whole)."""
    import asyncio

    from wxstats.storage import urls
    from wxstats.storage.requests import Requests

    monkeypatch.setattr(urls, "REQUESTS_IN_FLIGHT", 4)
    sent: list[str] = []

    async def fetch(name: str, nbytes: int | None) -> bytes:
        sent.append(name)
        for _ in range(len(name) % 3):  # completions in another order than sent
            await asyncio.sleep(0)
        return name.encode()

    requests = Requests(fetch)
    try:
        blocks = [[f"{b}/{i}" for i in range(300)] for b in "abc"]
        futures = [requests.submit(names, [None] * len(names)) for names in blocks]
        for names, fut in zip(blocks, futures, strict=True):
            assert fut.result(timeout=60) == [n.encode() for n in names]
    finally:
        requests.close()
    assert sent == [n for names in blocks for n in names]
    assert requests._active == 0


def _two_variables(options: dict, name: str) -> tuple[str, np.ndarray]:
    """A store of t and u (12 steps, 2 levels, a chunk object per step and level)."""
    url = f"s3://{BUCKET}/{name}.zarr"
    rng = np.random.default_rng(3)
    values = (280 + 5 * rng.standard_normal((2, 12, 2, 4, 5))).astype(np.float32)
    dims = ("time", "level", "lat", "lon")
    ds = xr.Dataset(
        {"t": (dims, values[0]), "u": (dims, values[1])},
        coords={
            "time": hourly(12),
            "level": [500, 850],
            "lat": np.arange(4.0),
            "lon": np.arange(5.0),
        },
    )
    enc = {v: {"chunks": (1, 1, 4, 5)} for v in ("t", "u")}
    ds.to_zarr(url, storage_options=options, encoding=enc, mode="w", consolidated=True)
    return url, values


@pytest.mark.parametrize("variables", [None, ("t",)])
def test_the_first_blocks_objects_leave_with_the_coordinates(store, variables):
    """The first time chunk of each array read needs no coordinate value: its
    objects are requested with the coordinates' (the proxy holds the four
    coordinates' and those until all are in flight together: an event, not a
    timing), each object once, and only the variables the run reads."""
    from collections import Counter

    proxy, _, options, _ = store
    url, values = _two_variables(options, f"early{len(variables or ())}")
    read = variables or ("t", "u")
    early = {f"/{BUCKET}/{url.rsplit('/', 1)[1]}/{v}/c/0/{k}/0/0" for v in read for k in (0, 1)}
    # the coordinates' objects (time/c/0...) and every array's first time chunk (t/c/0/...)
    proxy.reset(gather=4 + len(early), gather_only="/c/0")
    stats = compute(url, diff_steps=(1,), threads=2, variables=variables, storage_options=options)
    assert not proxy.timed_out, "the first block's objects did not leave with the coordinates'"
    gets = [line.split()[1] for _, line in proxy.lines]
    assert max(Counter(gets).values()) == 1, Counter(gets).most_common(3)
    rounds = dict(zip(gets, proxy.rounds, strict=True))
    assert {rounds[g] for g in early} == {rounds[f"/{BUCKET}/{url.rsplit('/', 1)[1]}/time/c/0"]}
    assert not any("/u/c/" in g for g in gets) if variables else True
    for i, v in enumerate(("t", "u")):
        if v in read:
            truth = values[i].astype(np.float64).transpose(0, 2, 3, 1).reshape(12, 20, 2)
            assert_stream_matches(stats.streams[f"{v}__train"], reference(truth, 0, 12, (1,)))


def test_a_run_that_starts_later_waits_for_the_times(store):
    """With a period the first block is known only from the time values: no data
    object is requested before the coordinates came (their round, then one more)."""
    proxy, _, options, _ = store
    url, values = _two_variables(options, "later")
    proxy.reset()
    stats = compute(
        url,
        diff_steps=(1,),
        threads=2,
        period="2021-01-01T03/2021-01-01T11",
        storage_options=options,
    )
    data = [r for (_, line), r in zip(proxy.lines, proxy.rounds, strict=True) if "/t/c/" in line]
    assert min(data) >= 3, data
    assert "/t/c/0/" not in " ".join(line for _, line in proxy.lines)
    truth = values[0].astype(np.float64).transpose(0, 2, 3, 1).reshape(12, 20, 2)
    assert_stream_matches(stats.streams["t__train"], reference(truth, 3, 12, (1,)))


def test_objects_requested_early_that_no_block_reads_are_dropped(store):
    """A reader whose first block is another (a rank, a cluster's worker) holds no
    bytes requested early: its first fetch drops them, and each fetch returns
    what it named."""
    from wxstats.storage.zarrchunks import ChunkStore

    _, url, options, _ = store
    chunks = ChunkStore(url, options)
    try:
        chunk = 5 * 6 * 4  # float32 (5, 6)
        chunks.request_early(["t/c/0/0/0/0", "t/c/0/1/0/0"], [chunk, chunk])
        got = chunks.get_many(["t/c/5/0/0/0", "t/c/0/1/0/0"], [chunk, chunk])
        assert set(got) == {"t/c/5/0/0/0", "t/c/0/1/0/0"} and all(got.values())
        assert chunks._early == {}
        assert chunks.get_many(["t/c/0/0/0/0"], [chunk])["t/c/0/0/0/0"]  # requested again
    finally:
        chunks.close()
