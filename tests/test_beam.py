"""The exact partial as an Apache Beam combiner (:mod:`wxstats.runtime.beam`):
``wxstats.compute``'s bytes for any chunking along time and any grouping of the
merges; a chunk added twice or never refused in one line. The pipeline tests run
on Beam's DirectRunner where apache-beam and xarray-beam are installed."""

from __future__ import annotations

import random

import pytest
from gridded_data import assert_stream_matches, gridded, reference

import wxstats
from wxstats.core.errors import WxstatsError
from wxstats.runtime.beam import chunk_state, final, join

STEPS = (1, 3, 6)
OPTIONS = {"diff_steps": STEPS}


@pytest.fixture(scope="module")
def data():
    ds, truth = gridded()
    ds = ds[["t2m", "z", "orog"]]
    want = wxstats.compute(ds, **OPTIONS).to_xarray()
    return ds, truth, {v: want[v].values.tobytes() for v in want.data_vars}


def _chunks(ds, size: int) -> list:
    n = ds.sizes["time"]
    return [ds.isel(time=slice(a, min(a + size, n))) for a in range(0, n, size)]


def _bytes(stats) -> dict[str, bytes]:
    out = stats.to_xarray()
    return {v: out[v].values.tobytes() for v in out.data_vars}


@pytest.mark.parametrize("size", [7, 5])
def test_chunks_joined_in_any_grouping_give_the_bytes_of_compute(data, size):
    ds, truth, want = data
    states = [chunk_state(c, OPTIONS) for c in _chunks(ds, size)]
    random.Random(size).shuffle(states)  # Beam merges in any order and grouping
    half = len(states) // 2
    stats = final(join([join(states[:half]), join(states[half:])]))
    assert _bytes(stats) == want
    assert_stream_matches(stats.streams["t2m__train"], reference(truth["t2m"], 0, 50, STEPS))


def test_a_chunk_twice_or_never_is_refused_in_one_line(data):
    ds, _, _ = data
    states = [chunk_state(c, OPTIONS) for c in _chunks(ds, 10)]
    with pytest.raises(WxstatsError) as twice:
        join([*states, states[2]])
    assert "may be counted once" in str(twice.value) and "\n" not in str(twice.value)
    with pytest.raises(WxstatsError) as gap:
        final(join(states[:2] + states[3:]))
    assert "leave a gap" in str(gap.value) and "\n" not in str(gap.value)
    with pytest.raises(WxstatsError, match="no chunk was added"):
        final(join([]))


def test_an_xarray_beam_pipeline_on_the_direct_runner(data):
    import apache_beam as beam  # the test extra installs Beam: this test runs in CI
    import xarray_beam as xbeam
    from apache_beam.testing.util import assert_that

    from wxstats.runtime.beam import statistics_combiner

    ds, _, want = data

    def same(results):
        [stats] = results
        assert _bytes(stats) == want

    for size in (7, 5):
        with beam.Pipeline() as p:
            chunks = p | xbeam.DatasetToChunks(ds, chunks={"time": size})
            assert_that(chunks | beam.CombineGlobally(statistics_combiner(**OPTIONS)), same)
    with pytest.raises(Exception, match="leave a gap"), beam.Pipeline() as p:
        chunks = p | xbeam.DatasetToChunks(ds, chunks={"time": 7})
        kept = chunks | beam.Filter(lambda kv: kv[0].offsets.get("time") != 14)
        _ = kept | beam.CombineGlobally(statistics_combiner(**OPTIONS))
