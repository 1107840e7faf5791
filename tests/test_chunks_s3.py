"""zarr stores on an object store: a real S3 endpoint (moto's server, started
here on localhost) with injected latency and server errors. Statistics match
the float64 reference; a block's chunk objects are requested concurrently; a
server error mid-run is one line naming the object and nothing is written."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import xarray as xr
from gridded_data import assert_stream_matches, hourly, reference

from wxstats.cli import main
from wxstats.io.read import read_stats

pytest.importorskip("s3fs")
moto_server = pytest.importorskip("moto.server")
serving = pytest.importorskip("werkzeug.serving")

BUCKET = "wxstats-test"


class Faults:
    """WSGI middleware around moto: an error for chosen keys, and the most GETs
    that were in flight at once. With ``gather`` set, GETs are held until that
    many are in flight together (then all go on): concurrency shown by an event,
    not by a latency that a busy machine may or may not overlap."""

    def __init__(self, app):
        self.app = app
        self.gather = 0
        self.gathered = threading.Event()
        self.timed_out = False
        self.fail: str | None = None
        self.in_flight = self.most = 0
        self.heads: list[str] = []  # HEAD requests of objects, by path
        self.agents: set[str] = set()  # the clients that sent GETs (User-Agent)
        self.lock = threading.Lock()

    def __call__(self, environ, start_response):
        get = environ["REQUEST_METHOD"] == "GET"
        if environ["REQUEST_METHOD"] == "HEAD":
            with self.lock:
                self.heads.append(environ.get("PATH_INFO", ""))
        if get:
            with self.lock:
                self.agents.add(environ.get("HTTP_USER_AGENT", "").split("/")[0])
        if get and self.fail and environ.get("PATH_INFO", "").endswith(self.fail):
            start_response("500 Internal Server Error", [("Content-Type", "application/xml")])
            return [b"<Error><Code>InternalError</Code><Message>injected</Message></Error>"]
        if not get or not self.gather:
            return self.app(environ, start_response)
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            if self.most >= self.gather:
                self.gathered.set()
        try:
            # a hang guard only: a client that never has `gather` GETs in flight
            # gets through after it (once: later GETs are not held) and fails the test
            if not self.gathered.wait(timeout=30):
                self.timed_out = True
                self.gathered.set()
            return self.app(environ, start_response)
        finally:
            with self.lock:
                self.in_flight -= 1


@pytest.fixture(scope="module")
def s3():
    app = Faults(moto_server.DomainDispatcherApplication(moto_server.create_backend_app))
    server = serving.make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{server.server_port}"
    options = {
        "endpoint_url": endpoint,
        "key": "testing",
        "secret": "testing",
        "client_kwargs": {"region_name": "eu-west-1"},
        "config_kwargs": {"retries": {"max_attempts": 2, "mode": "standard"}},
    }
    import s3fs

    s3fs.S3FileSystem(**options).mkdir(BUCKET)
    yield app, options
    server.shutdown()


@pytest.fixture(params=["obstore", "fsspec"], autouse=True)
def client(request, s3, monkeypatch):
    """Each test with each client of the chunk objects: obstore where it is installed
    (the GETs then come from its Rust client), and fsspec's batched ``cat``."""
    app, _ = s3
    if request.param == "obstore":
        pytest.importorskip("obstore")
    else:
        monkeypatch.setattr("wxstats.storage.zarrchunks.object_store", lambda *a: None)
    app.agents = set()
    yield request.param
    if request.param == "obstore":  # chunk objects came from obstore, not from a fallback
        assert "object_store" in app.agents, app.agents


def _cli_options(options):
    """``--storage-option KEY=VALUE`` for each option (JSON for non-strings)."""
    out = []
    for key, value in options.items():
        text = value if isinstance(value, str) else json.dumps(value)
        out += ["--storage-option", f"{key}={text}"]
    return out


def _many_small_chunks(url, options, n_time=64):
    rng = np.random.default_rng(11)
    values = (250 + 20 * rng.standard_normal((n_time, 2, 3, 4))).astype(np.float32)
    ds = xr.Dataset(
        {"t": (("time", "level", "y", "x"), values)},
        coords={"time": hourly(n_time), "level": [500, 850]},
    )
    enc = {"t": {"chunks": (1, 1, 3, 4)}}
    ds.to_zarr(url, storage_options=options, encoding=enc, mode="w", consolidated=False)
    return values.astype(np.float64).transpose(0, 2, 3, 1).reshape(n_time, 12, 2)


def test_many_small_chunks_match_the_reference_with_requests_in_flight(s3, tmp_path, capsys):
    app, options = s3
    url = f"s3://{BUCKET}/small.zarr"
    truth = _many_small_chunks(url, options)
    out = tmp_path / "s.nc"
    app.gather, app.most = 4, 0  # GETs wait until 4 are in flight together
    app.gathered.clear()
    try:
        argv = ["compute", url, "--output", str(out), "--diff-steps", "1,4", "--quiet"]
        argv += ["--block-mb", "0.0005", "--threads", "2"]  # 13 blocks, fetched ahead
        assert main([*argv, *_cli_options(options)]) == 0, capsys.readouterr().err
    finally:
        app.gather = 0
    assert app.most >= 4 and not app.timed_out, f"at most {app.most} GETs in flight"
    stream = read_stats(out).streams["t__train"]
    assert_stream_matches(stream, reference(truth, 0, truth.shape[0], (1, 4)))


def test_one_request_per_chunk_object(s3, tmp_path, capsys):
    """s3fs sends a HEAD before each GET unless told not to split objects into
    ranges: twice the requests to the store, for chunks and metadata alike."""
    app, options = s3
    url = f"s3://{BUCKET}/heads.zarr"
    truth = _many_small_chunks(url, options, n_time=8)
    out = tmp_path / "s.nc"
    app.heads = []
    argv = ["compute", url, "--output", str(out), "--diff-steps", "1", "--quiet"]
    assert main([*argv, *_cli_options(options)]) == 0, capsys.readouterr().err
    heads = [p for p in app.heads if "/heads.zarr/" in p]
    assert heads == [], f"{len(heads)} HEAD requests: {heads[:3]}"
    stream = read_stats(out).streams["t__train"]
    assert_stream_matches(stream, reference(truth, 0, truth.shape[0], (1,)))


def test_server_error_mid_run_names_the_object_and_writes_nothing(s3, tmp_path, capsys):
    app, options = s3
    url = f"s3://{BUCKET}/failing.zarr"
    _many_small_chunks(url, options, n_time=24)
    app.fail = "failing.zarr/t/c/17/1/0/0"
    out = tmp_path / "s.nc"
    try:
        code = main(["compute", url, "--output", str(out), "--quiet", *_cli_options(options)])
    finally:
        app.fail = None
    err = capsys.readouterr().err
    assert code == 2
    assert "failing.zarr: cannot read object t/c/17/1/0/0" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_deleted_object_is_an_error_not_a_fill_value(s3, tmp_path, capsys):
    app, options = s3
    url = f"s3://{BUCKET}/deleted.zarr"
    _many_small_chunks(url, options, n_time=8)
    import s3fs

    s3fs.S3FileSystem(**options).rm(f"{BUCKET}/deleted.zarr/t/c/5/0/0/0")
    out = tmp_path / "s.nc"
    code = main(["compute", url, "--output", str(out), "--quiet", *_cli_options(options)])
    err = capsys.readouterr().err
    # the fill value is NaN: read as missing, refused without --skipna (never a number)
    assert code == 2 and "variable t_500: 12 NaN values" in err, err
    assert not out.exists()


def test_an_object_larger_than_its_chunk_is_refused_unread(s3, tmp_path, capsys, client):
    """A store serving 1 MB under the name of a 48-byte chunk: refused by its size,
    before its bytes are held (obstore by the size the store gives; fsspec reads
    one byte past the most any codec stores 48 bytes in), in one line naming the
    object; nothing written."""
    _, options = s3
    url = f"s3://{BUCKET}/inflated.zarr"
    _many_small_chunks(url, options, n_time=8)
    import s3fs

    noise = np.random.default_rng(5).bytes(2**20)
    s3fs.S3FileSystem(**options).pipe(f"{BUCKET}/inflated.zarr/t/c/5/1/0/0", noise)
    out = tmp_path / "s.nc"
    code = main(["compute", url, "--output", str(out), "--quiet", *_cli_options(options)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    stored = "1048576" if client == "obstore" else f"more than {48 + 6 + 2**16}"
    assert (
        f"inflated.zarr: cannot read object t/c/5/1/0/0: is stored in {stored} bytes, "
        "more than any codec takes for its declared 48 bytes" in err
    ), err
    assert not out.exists()


def test_metadata_larger_than_metadata_is_refused_not_read_another_way(
    s3, tmp_path, capsys, monkeypatch
):
    """A metadata object past the bound is one line; the store is not then opened
    by xarray, which would read it whole (the bound lowered here to 10 bytes)."""
    _, options = s3
    url = f"s3://{BUCKET}/bigmeta.zarr"
    _many_small_chunks(url, options, n_time=4)
    monkeypatch.setattr("wxstats.storage.decompress.METADATA_BYTES", 10)
    out = tmp_path / "s.nc"
    code = main(["compute", url, "--output", str(out), "--quiet", *_cli_options(options)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "bigmeta.zarr: cannot read object zarr.json: is stored in" in err, err
    assert "more than a metadata object may be (10 bytes)" in err, err
    assert not out.exists()


def test_an_arrays_metadata_past_the_bound_is_refused_too(s3, tmp_path, capsys, monkeypatch):
    """A store without consolidated metadata: each array's ``zarr.json`` is read
    when the store is opened, after the first objects, within the same bound."""
    import s3fs

    _, options = s3
    url = f"s3://{BUCKET}/arraymeta.zarr"
    _many_small_chunks(url, options, n_time=4)  # consolidated=False
    fs = s3fs.S3FileSystem(**options)
    root, array = (fs.size(f"{BUCKET}/arraymeta.zarr/{k}") for k in ("zarr.json", "t/zarr.json"))
    assert root + 10 < array
    monkeypatch.setattr("wxstats.storage.decompress.METADATA_BYTES", root + 10)
    out = tmp_path / "s.nc"
    code = main(["compute", url, "--output", str(out), "--quiet", *_cli_options(options)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "arraymeta.zarr: cannot read object " in err and "/zarr.json: is stored in more" in err
    assert f"more than a metadata object may be ({root + 10} bytes)" in err, err
    assert not out.exists()
