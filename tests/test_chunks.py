"""The zarr chunk reader (storage/chunks.py): the raw values of any slab
equal xarray's (the reference, read through its own indexing), for each codec
and layout it decodes and those it leaves to zarr; whole runs are byte-identical
to the xarray path; missing chunk objects are never silent numbers."""

from __future__ import annotations

import shutil
import threading
from collections import Counter

import numpy as np
import pytest
import xarray as xr
import zarr
from gridded_data import gridded, slab_dataset, summary_text
from numcodecs import Blosc

from wxstats.core.errors import InputError
from wxstats.runtime.run import compute, compute_source
from wxstats.sources.kinds import Selection
from wxstats.sources.xarray import XarraySource
from wxstats.storage.chunks import SlabRequest
from wxstats.storage.shared import SharedChunks
from wxstats.storage.zarrchunks import ZarrChunkReader, chunk_codec


def _dataset(n_time=23):
    return slab_dataset(n_time, seed=5, q_dtype="f4")


LAYOUTS = {
    "v3-zstd": dict(zarr_format=3, encoding={}),
    "v3-gzip": dict(zarr_format=3, encoding={"compressors": [zarr.codecs.GzipCodec()]}),
    "v3-blosc": dict(zarr_format=3, encoding={"compressors": [zarr.codecs.BloscCodec()]}),
    "v3-raw": dict(zarr_format=3, encoding={"compressors": None}),
    "v3-sharded": dict(zarr_format=3, encoding={"shards": (8, 2, 6, 4)}),
    "v2-blosc": dict(zarr_format=2, encoding={"compressors": Blosc()}),
    "v2-big-endian": dict(zarr_format=2, encoding={"dtype": ">f4"}),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_slabs_equal_xarray(tmp_path, layout):
    spec = LAYOUTS[layout]
    ds = _dataset()
    chunks = {"a": (4, 2, 3, 4), "p": (4, 3, 4), "q": (2, 4, 4)}  # edge chunks everywhere
    enc = {}
    for v in ("a", "p", "q"):
        enc[v] = {"chunks": chunks[v], **spec["encoding"]}
        if layout == "v3-sharded" and v != "a":
            enc[v]["shards"] = {"p": (8, 3, 4), "q": (2, 8, 4)}[v]
        if layout == "v2-big-endian" and v == "p":
            enc[v]["dtype"] = ">i2"
    path = tmp_path / "s.zarr"
    ds.to_zarr(path, zarr_format=spec["zarr_format"], encoding=enc, consolidated=False)
    reader = ZarrChunkReader(str(path), {}, threads=3)
    assert (chunk_codec(reader.group["a"]) is None) == (layout == "v3-sharded")
    ref = xr.open_dataset(
        path, engine="zarr", mask_and_scale=False, chunks=None, consolidated=False
    )
    try:
        for start, stop in ((0, 23), (3, 9), (22, 23), (5, 6)):
            reqs = [
                SlabRequest("a", start, stop, (0, 2, 3, 1), False),
                SlabRequest("p", start, stop, (0, 2, 1), False),
                SlabRequest("q", start, stop, (1, 2, 0), False),
            ]
            got = reader.read(reqs)
            want_a = ref["a"].isel(time=slice(start, stop)).transpose("time", "y", "x", "level")
            want_p = ref["p"].isel(time=slice(start, stop)).transpose("time", "x", "y")
            np.testing.assert_array_equal(got["a"], want_a.values, strict=False)
            np.testing.assert_array_equal(got["p"], want_p.values)
            want_q = ref["q"].isel(time=slice(start, stop)).transpose("time", "x", "level")
            np.testing.assert_array_equal(got["q"], want_q.values)
            assert got["a"].flags.c_contiguous and got["a"].dtype.isnative
        assert reader.read([]) == {}  # no chunk: no run of chunks to submit
    finally:
        reader.close()


def _bytes(source):
    return summary_text(compute_source(source, threads=2))


def test_whole_run_identical_to_the_xarray_path(tmp_path):
    ds, _ = gridded(n_time=40)
    ds.to_zarr(tmp_path / "g.zarr", encoding={v: {"chunks": None} for v in ds.data_vars})
    opts = Selection(diff_steps=(1, 3), block_bytes=4000)
    fast = XarraySource(tmp_path / "g.zarr", opts)
    slow = XarraySource(tmp_path / "g.zarr", opts)
    assert fast._chunks is not None
    slow._chunks.close()
    slow._chunks = None  # xarray's own indexing (the reading before the chunk reader)
    assert _bytes(fast) == _bytes(slow)


def _store_with_missing_chunk(tmp_path, fill_attr: bool):
    ds = _dataset(n_time=12)
    enc = {"a": {"chunks": (4, 3, 5, 7)}, "p": {"chunks": (4, 5, 7)}}
    if not fill_attr:
        ds["a"].encoding["_FillValue"] = None
        enc["a"]["fill_value"] = 0.0
        enc["a"]["_FillValue"] = None
    path = tmp_path / "m.zarr"
    ds.to_zarr(path, encoding=enc, consolidated=False)
    shutil.rmtree(path / "a" / "c" / "1")  # the chunk of steps 4..7
    return path


def test_missing_chunk_with_a_number_fill_is_an_error_naming_the_key(tmp_path):
    path = _store_with_missing_chunk(tmp_path, fill_attr=False)
    with pytest.raises(
        InputError, match=r"m\.zarr: variable a: chunk object a/c/1/0/0/0 is missing"
    ):
        compute(path, variables=["a"])


@pytest.mark.filterwarnings("ignore:.*is missing from the store:UserWarning")  # the refusal's
def test_missing_chunk_with_nan_fill_is_never_a_silent_number(tmp_path):
    path = _store_with_missing_chunk(tmp_path, fill_attr=True)
    with pytest.raises(InputError, match="variable a.*NaN values"):
        compute(path, variables=["a"])
    with pytest.warns(UserWarning, match=r"variable a: chunk object a/c/1/0/0/0 is missing"):
        stats = compute(path, variables=["a"], skipna=True)
    stream = stats.streams["a__train"]
    assert list(stream.nan_count) == [4 * 5 * 7] * 3  # the missing chunk, counted as missing
    want = _dataset(n_time=12)["a"].values.astype(np.float64)
    kept = np.concatenate([want[:4], want[8:]])
    np.testing.assert_allclose(stream.mean, kept.mean(axis=(0, 2, 3)), rtol=1e-12)


def test_corrupt_chunk_names_the_object(tmp_path):
    path = tmp_path / "c.zarr"
    _dataset(n_time=8).to_zarr(path, encoding={"a": {"chunks": (4, 3, 5, 7)}}, consolidated=False)
    (path / "a" / "c" / "1" / "0" / "0" / "0").write_bytes(b"not zstd")
    with pytest.raises(InputError, match=r"chunk object a/c/1/0/0/0: cannot decode"):
        compute(path, variables=["a"])


def _decoded_keys(monkeypatch) -> list[str]:
    """Every chunk object the reader decompresses, in order (a recording wrapper)."""
    keys: list[str] = []
    real = ZarrChunkReader._decoded

    def recording(self, fetched, req, key):
        keys.append(key)
        return real(self, fetched, req, key)

    monkeypatch.setattr(ZarrChunkReader, "_decoded", recording)
    return keys


@pytest.mark.parametrize("threads", [1, 3])
def test_each_chunk_is_decoded_once_though_two_blocks_read_it(tmp_path, monkeypatch, threads):
    """A block's difference halo is the previous block's last steps: its chunks
    are decompressed once for both blocks, and the statistics are still those
    of xarray's own reading, byte for byte."""
    ds, _ = gridded(n_time=40)
    enc = {v: {"chunks": (3, *ds[v].shape[1:])} for v in ds.data_vars if "time" in ds[v].dims}
    ds.to_zarr(tmp_path / "g.zarr", encoding=enc)
    opts = Selection(diff_steps=(1, 2), block_bytes=1)  # one chunk (3 steps) per block
    slow = XarraySource(tmp_path / "g.zarr", opts)
    slow._chunks.close()
    slow._chunks = None  # xarray's own indexing: the reference
    want = _bytes(slow)
    fast = XarraySource(tmp_path / "g.zarr", opts)
    keys = _decoded_keys(monkeypatch)
    assert len(fast) == 14  # 40 steps in chunks of 3
    stats = compute_source(fast, threads=threads)
    blocks = Counter(keys)  # every step is its own reference: nothing is read before
    assert len(blocks) == 3 * 14  # t2m, z, msl: one chunk object per 3 steps
    assert set(blocks.values()) == {1}
    assert summary_text(stats) == want


def test_a_halo_longer_than_a_block_is_still_read_right(tmp_path):
    """Differences over 5 steps with blocks of 3: a chunk is read by three
    blocks (the third decodes it again); the numbers are xarray's."""
    ds, _ = gridded(n_time=30)
    enc = {v: {"chunks": (3, *ds[v].shape[1:])} for v in ds.data_vars if "time" in ds[v].dims}
    ds.to_zarr(tmp_path / "g.zarr", encoding=enc)
    opts = Selection(diff_steps=(1, 5), block_bytes=1)
    fast = XarraySource(tmp_path / "g.zarr", opts)
    slow = XarraySource(tmp_path / "g.zarr", opts)
    slow._chunks.close()
    slow._chunks = None
    assert _bytes(fast) == _bytes(slow)


def test_shared_chunks_decode_once_wait_and_fail_together():
    shared = SharedChunks(limit=10**6)
    calls = []

    def decode():
        calls.append(1)
        return np.arange(4.0)

    first = shared.take("k", decode)
    second = shared.take("k", decode)
    assert second is first and len(calls) == 1
    assert shared.take("k", decode) is not first and len(calls) == 2  # a third reader decodes
    # the second reader waits while the first decodes, and shares its failure
    started, release = threading.Event(), threading.Event()

    def slow_bad():
        started.set()
        release.wait(5)
        raise InputError("s.zarr: chunk object b: cannot decode")

    errors = []

    def reader(decode_fn):
        try:
            shared.take("b", decode_fn)
        except InputError as exc:
            errors.append(str(exc))

    one = threading.Thread(target=reader, args=(slow_bad,))
    one.start()
    started.wait(5)
    two = threading.Thread(target=reader, args=(decode,))
    two.start()
    release.set()
    one.join(5)
    two.join(5)
    assert errors == ["s.zarr: chunk object b: cannot decode"] * 2
    assert len(calls) == 2  # the waiting reader did not decode


def test_shared_chunks_never_wanted_again_are_dropped_beyond_the_limit():
    """A block whose neighbour runs on another rank leaves its last chunks
    unclaimed: the oldest are dropped beyond the byte limit."""
    shared = SharedChunks(limit=3 * 80)
    for i in range(10):
        shared.take(f"c{i}", lambda: np.zeros(10))  # 80 bytes each
    assert sorted(shared._entries) == ["c7", "c8", "c9"]
    assert shared._bytes == 3 * 80


def test_a_blocks_chunk_plan_is_made_once_for_its_read_ahead_and_its_read(tmp_path, monkeypatch):
    ds, _ = gridded(n_time=40)
    enc = {v: {"chunks": (3, *ds[v].shape[1:])} for v in ds.data_vars if "time" in ds[v].dims}
    ds.to_zarr(tmp_path / "g.zarr", encoding=enc)
    source = XarraySource(tmp_path / "g.zarr", Selection(diff_steps=(1,), block_bytes=1))
    planned = []
    real = ZarrChunkReader._plan

    def recording(self, req):
        planned.append((req.name, req.start, req.stop))
        return real(self, req)

    monkeypatch.setattr(ZarrChunkReader, "_plan", recording)
    compute_source(source, threads=2)
    assert len(source) == 14 and len(planned) >= 3 * 14
    assert set(Counter(planned).values()) == {1}  # read-ahead and read share each plan


def test_object_store_only_where_obstore_reads_as_fsspec_would(monkeypatch):
    """obstore fetches the chunk objects only with credentials and a region it can
    use as botocore would; profiles, unknown options, no region (s3fs finds the
    bucket's) or other protocols stay with fsspec, which reads them all."""
    pytest.importorskip("obstore")
    from wxstats.storage.urls import object_store

    env = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION")
    for name in env:
        monkeypatch.delenv(name, raising=False)
    keys = {"key": "k", "secret": "s"}
    region = {"client_kwargs": {"region_name": "eu-west-1"}}
    assert object_store("gs://bucket/a.zarr", keys) is None
    assert object_store("s3://bucket/a.zarr", region) is None  # botocore's chain
    assert object_store("s3://bucket/a.zarr", {**keys, **region, "profile": "p"}) is None
    assert object_store("s3://bucket/a.zarr", keys) is None  # the region unknown
    store, prefix = object_store("s3://bucket/dir/a.zarr/", {**keys, **region})
    assert prefix == "dir/a.zarr" and store.config["region"] == "eu-west-1"
    store, _ = object_store("s3://b/a.zarr", {"anon": True, "endpoint_url": "http://h:9"})
    assert store.config["skip_signature"] and store.client_options["allow_http"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    assert object_store("s3://bucket/a.zarr", {}) is None  # no secret: botocore's chain
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    assert object_store("s3://bucket/a.zarr", {})[0].config["region"] == "us-west-2"


class _RemoteFolder:
    """A zarr folder served as an object store would be (``local`` False): each
    object counted as it is requested; the first ``fetch`` (a block's read-ahead)
    answers when ``release`` is set, the others at once."""

    local = False

    def __init__(self, folder) -> None:
        self.folder, self.requested = folder, Counter()
        self.release = threading.Event()

    def get_many(self, keys, sizes=None):
        self.requested.update(keys)
        return {k: (self.folder / k).read_bytes() for k in keys}

    def fetch(self, keys, sizes=None, arrived=None):
        from concurrent.futures import Future

        found, gate = Future(), self.release if not self.requested else None
        values = self.get_many(keys)

        def answer():
            if gate is not None:
                gate.wait(30)
            found.set_result(
                {
                    k: v if arrived is None else arrived(i, v)
                    for i, (k, v) in enumerate(values.items())
                }
            )

        threading.Thread(target=answer, daemon=True).start()
        return found

    def will_need(self, keys, spans=()):
        pass

    def close(self):
        pass


def test_a_block_decoding_its_halo_first_waits_for_the_block_before_requests(tmp_path):
    """Blocks are read two at once: a block whose halo (the block before's last
    step, left to that block's requests) is decoded before the block before gets
    to it takes its bytes from those requests, still in flight, and never
    requests it again (one request each, and in a 100 ms store, sequential round
    trips at the end of a run); the slabs are the stored values."""
    values = np.random.default_rng(7).standard_normal((8, 3, 4)).astype("f4")
    xr.Dataset({"t": (("time", "y", "x"), values)}).to_zarr(
        tmp_path / "s.zarr", encoding={"t": {"chunks": (1, 3, 4)}}
    )
    reader = ZarrChunkReader(str(tmp_path / "s.zarr"), {}, threads=2)
    remote = reader.store = _RemoteFolder(tmp_path / "s.zarr")
    first = SlabRequest("t", 0, 4, (0, 1, 2), False, shared=((3, 4),))
    second = SlabRequest("t", 3, 8, (0, 1, 2), False, shared=((3, 4),))
    reader.will_need([first])  # its requests answer when released
    reader.will_need([second])  # without the halo step 3: the first block fetches it
    assert remote.requested["t/c/3/0/0"] == 1  # by the first block only
    out = {}
    read = threading.Thread(target=lambda: out.update(second=reader.read([second])["t"]))
    read.start()  # decodes step 3 first, waiting for the first block's requests
    remote.release.set()
    read.join(30)
    assert not read.is_alive()
    got_first = reader.read([first])["t"]
    reader.close()
    assert remote.requested == Counter(f"t/c/{i}/0/0" for i in range(8)), remote.requested
    assert np.array_equal(got_first, values[0:4]) and np.array_equal(out["second"], values[3:8])
