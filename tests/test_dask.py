"""``wxstats.compute`` on a Dask cluster (:mod:`wxstats.runtime.cluster`): each
sample's exact partial on the workers, merged there. The CLI's bytes on the same
store, with 1 and 3 worker processes and two chunkings (the store's, read by the
workers' own chunk readers, and another, computed from the Dataset's dask graph),
an independent float64 two-pass reference, a worker killed mid-run, and a partial
counted twice or never refused in one line."""

from __future__ import annotations

import os
import pickle
import signal
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from gridded_data import assert_stream_matches, gridded, reference, write_zarr

import wxstats
from wxstats.cli import main
from wxstats.core.errors import WxstatsError
from wxstats.core.partial import Coverage
from wxstats.runtime import cluster
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.outputs import open_source

SPLITS = ("train=2021-01-01T00:00/2021-01-02T05:00", "val=2021-01-02T06/2021-01-03T01")
TRAIN, VAL = (0, 30), (30, 50)
STEPS = (1, 3, 6)
NAMES = ["t2m", "z"]  # untransformed by open_zarr: the workers' chunk readers read them
OPTIONS = {"splits": list(SPLITS), "diff_steps": STEPS, "variables": NAMES, "block_mb": 1e-4}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A zarr store of 50 hourly steps in chunks of 8, and the CLI's statistics file of it."""
    root = tmp_path_factory.mktemp("dask")
    ds, truth = gridded()
    store = write_zarr(ds, root / "g.zarr")
    out = root / "cli.nc"
    argv = ["compute", str(store), "--diff-steps", "1,3,6", "--variables", "t2m,z"]
    argv += [a for s in SPLITS for a in ("--split", s)]
    assert main([*argv, "--output", str(out), "--quiet"]) == 0
    with xr.open_dataset(out) as written:
        cli = written.load()
    return store, truth, cli


@contextmanager
def _client(n_workers: int):
    """A client of a LocalCluster of ``n_workers`` processes, closed after."""
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            memory_limit="1GiB",
            dashboard_address=None,
        ) as lc,
        distributed.Client(lc) as client,
    ):
        yield client


def _same_bytes(stats, cli: xr.Dataset) -> None:
    """Every statistic's float64 bytes as in the CLI's file, and the file's layout."""
    out = stats.to_xarray()
    assert sorted(out.data_vars) == sorted(cli.data_vars)
    for name in cli.data_vars:
        assert out[name].values.tobytes() == cli[name].values.tobytes(), name
    xr.testing.assert_equal(out, cli)


def _against_reference(stats, truth) -> None:
    for var in NAMES:
        for split, (a, b) in (("train", TRAIN), ("val", VAL)):
            assert_stream_matches(
                stats.streams[f"{var}__{split}"], reference(truth[var], a, b, STEPS)
            )


def _source(given):
    return open_source(ComputeOptions.of("", **OPTIONS), given)


@pytest.mark.slow
@pytest.mark.parametrize("n_workers", [1, 3])
def test_the_cli_bytes_for_any_workers_and_chunking(data, n_workers):
    store, truth, cli = data
    storage_chunks = xr.open_zarr(store, consolidated=False)
    other_chunks = storage_chunks.chunk(time=5)
    # the workers read the store's chunks themselves: nothing to compute for them but the plan
    assert _source(storage_chunks).worker_inputs(1) == {}
    assert _source(other_chunks)._chunks is None  # computed from the dask graph
    with _client(n_workers) as client:
        assert len(set(client.run(os.getpid).values())) == n_workers
        assert set(client.run(_wxstats_file).values()) == {wxstats.__file__}  # this checkout's
        for given in (storage_chunks, other_chunks):
            stats = wxstats.compute(given, client=client, **OPTIONS)
            assert stats.run["engine"] == "dask" and stats.run["workers"] == n_workers
            assert stats.run["samples"] > n_workers  # several samples per worker
            _same_bytes(stats, cli)
            _against_reference(stats, truth)
        if n_workers == 3:  # a path, and the current client chosen for a dask-backed Dataset
            _same_bytes(wxstats.compute(str(store), engine="dask", **OPTIONS), cli)
            _same_bytes(wxstats.compute(other_chunks, **OPTIONS), cli)


def _wxstats_file() -> str:
    return wxstats.__file__


def _kill_once(block: np.ndarray, marker: str, block_info=None) -> np.ndarray:
    """A dask block function: the first task that reads time step 30 (the val
    split's first) kills its own worker process, once for the whole run
    (``marker`` made exclusively first); run again by Dask, it passes the values on."""
    start = block_info[0]["array-location"][0][0] if block_info else -1
    if start <= 30 < start + block.shape[0]:
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            with open(marker + ".rerun", "w") as f:
                f.write(str(os.getpid()))
            return block
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)
    return block


@pytest.mark.slow
def test_a_worker_killed_mid_run_gives_the_same_bytes(data, tmp_path):
    """A worker process killed while it computes a sample (its partials held there
    are lost with it): Dask runs the lost tasks again; the bytes are the CLI's."""
    store, truth, cli = data
    marker = str(tmp_path / "killed")
    ds = xr.open_zarr(store, consolidated=False).chunk(time=5)
    ds["t2m"] = ds["t2m"].copy(data=ds["t2m"].data.map_blocks(_kill_once, marker, dtype="f4"))
    with _client(3) as client:
        stats = wxstats.compute(ds, client=client, **OPTIONS)
    killed = int(Path(marker).read_text())
    rerun = int(Path(marker + ".rerun").read_text())
    assert killed != rerun  # the killed worker's task ran again in another process
    _same_bytes(stats, cli)


def test_a_partial_counted_twice_or_never_is_refused_in_one_line(data):
    """The merge on the workers refuses a sample's partial twice; the end refuses
    the merged sums missing a planned sample (no cluster needed: the same functions)."""
    store, _, _ = data
    source = _source(xr.open_zarr(store, consolidated=False))
    specs, refs = source.streams, {}
    run = "r"
    first, second = (cluster.sample_partial(source, i, None, False, refs, run) for i in (0, 1))
    with pytest.raises(WxstatsError) as twice:
        cluster.merge_packed(specs, refs, first, first)
    assert "counted twice" in str(twice.value) and "\n" not in str(twice.value)
    plan = cluster.coverage_of(source, 0).union(cluster.coverage_of(source, 1))
    cluster.check_complete(
        cluster.unpack(cluster.merge_packed(specs, refs, first, second), specs, refs), plan
    )
    with pytest.raises(WxstatsError) as never:
        cluster.check_complete(cluster.unpack(first, specs, refs), plan)
    assert "never counted" in str(never.value) and "\n" not in str(never.value)
    with pytest.raises(WxstatsError) as extra:
        cluster.check_complete(cluster.unpack(first, specs, refs), Coverage())
    assert "not planned" in str(extra.value)


def test_a_workers_copy_that_has_read_still_travels(data):
    """Dask may ask a worker to send its copy of the plan to another worker after it
    read a sample with its own chunk reader (threads, open files): the copy is sent
    without the reader, and the other worker reads the same values with its own."""
    store, _, _ = data
    copy = _source(xr.open_zarr(store, consolidated=False)).for_workers()
    first = copy.read(2)
    assert copy._chunks is not None  # opened where it read
    again = pickle.loads(pickle.dumps(copy))
    assert again._chunks is None
    for name, block in again.read(2).items():
        assert block.array.tobytes() == first[name].array.tobytes(), name


def test_engine_choices_are_refused_in_one_line(data):
    store, _, _ = data
    for kw, message in (
        ({"engine": "spark"}, "expected one of auto, threads, dask"),
        ({"engine": "threads", "client": object()}, "leave client out"),
        ({"engine": "dask"}, "needs a distributed.Client"),
    ):
        with pytest.raises(WxstatsError) as err:
            wxstats.compute(str(store), **kw, **OPTIONS)
        assert message in str(err.value) and "\n" not in str(err.value)
