"""Exact statistics as an Apache Beam combiner, for xarray-beam pipelines.

:func:`statistics_combiner` returns a ``beam.CombineFn`` whose accumulator is a
statistics state (:class:`~wxstats.runtime.state.State`: a
:class:`~wxstats.core.partial.Partial` with the time steps it covers and the
edge steps of each range): ``add_input`` sums one chunk of time steps (an
``xarray.Dataset``, or xarray-beam's ``(Key, Dataset)``) as ``compute`` would,
``merge_accumulators`` joins states as ``wxstats merge`` does (the differences
across two adjacent chunks summed from their edges, a step counted twice
refused), and ``extract_output`` refuses a gap (a chunk never added) and rounds
once. Every step is summed with its own reference into exact integers, so any
chunking and any order of Beam's merges give ``wxstats.compute``'s bytes.
"""

from __future__ import annotations

from typing import Any

from wxstats.core.errors import WxstatsError
from wxstats.io.result import Result
from wxstats.runtime.engine import accumulate
from wxstats.runtime.grow import combine, state_stats
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.outputs import open_source
from wxstats.runtime.state import State, identity_of, state_of_run

CHUNK_OPTIONS = ("diff_steps", "variables", "time_dim", "feature_dims", "weights", "skipna")
"""What a chunk is summed with (the whole time axis is one split: ``train``)."""


def chunk_state(chunk: Any, options: dict[str, Any]) -> State:
    """The statistics state of one chunk of time steps (a Dataset)."""
    opts = ComputeOptions.of("", **options)
    source = open_source(opts, chunk)
    try:
        sums = accumulate(source, range(len(source)), skipna=opts.skipna)
        return state_of_run(source, sums, identity_of(source, opts.skipna))
    finally:
        source.close()


def join(states: list[State | None]) -> State | None:
    """The states as one (a gap allowed: Beam merges chunks in any grouping)."""
    given = [s for s in states if s is not None]
    if len(given) <= 1:
        return given[0] if given else None
    return combine(given, allow_gap=True, verb="combine with")


def final(state: State | None) -> Result:
    """The statistics of every chunk added; refused (one line) with none, or a gap."""
    if state is None:
        raise WxstatsError("no chunk was added: no statistics")
    if state.attrs.get("gaps"):
        a, b = state.attrs["gaps"][0]
        raise WxstatsError(f"the chunks leave a gap from {a} to {b}: refused, no statistics")
    return Result.of(state_stats(state))


def statistics_combiner(**options: Any) -> Any:
    """A ``beam.CombineFn`` of exact statistics (see module docstring); ``options``:
    ``diff_steps``, ``variables``, ``time_dim``, ``feature_dims``, ``weights``,
    ``skipna``, as for :func:`wxstats.compute`."""
    import apache_beam as beam

    unknown = sorted(set(options) - set(CHUNK_OPTIONS))
    if unknown:
        raise WxstatsError(
            f"the Beam combiner takes {', '.join(CHUNK_OPTIONS)}, not {', '.join(unknown)}"
        )

    class ExactStatistics(beam.CombineFn):
        def create_accumulator(self) -> State | None:
            return None

        def add_input(self, acc: State | None, element: Any) -> State:
            chunk = element[1] if isinstance(element, tuple) else element
            return join([acc, chunk_state(chunk, options)])

        def merge_accumulators(self, accumulators: Any) -> State | None:
            return join(list(accumulators))

        def extract_output(self, acc: State | None) -> Result:
            return final(acc)

    return ExactStatistics()
