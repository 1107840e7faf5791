"""Exact statistics on a Dask cluster: each sample's exact partial computed on the
workers, next to the data, and the partials merged exactly in a tree.

``wxstats.compute(ds, client=...)`` (or ``engine="dask"``, or a dask-backed
``ds`` while a ``distributed.Client`` is current) sends a copy of the source's
plan to the workers (:meth:`~wxstats.sources.base.WorkerSource.for_workers`:
blocks, variables, decodings; no open file), then one task per sample: it reads
the sample there (a chunk reader of its own on the same store or file, or the
values the Dataset's dask graph computes there) and returns its
:class:`~wxstats.core.partial.Partial` packed as the gather, the checkpoints and
the states pack it (int64 limbs and float64 extremes, with the coverage as
ranges). Merge tasks join pairs of partials up to one; only partials travel,
never the data.

Every time step is summed with its own reference and the sums are exact
integers, so any worker count, chunking, task order or merge tree gives the
CLI's bytes. A worker lost mid-run is recovered by Dask (its tasks run again);
a partial counted twice is refused by the coverage's union, and one never
counted by the check of the merged coverage against the plan: never a wrong
number.
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

from wxstats.core.accumulator import RunMoments
from wxstats.core.errors import WxstatsError
from wxstats.core.partial import Coverage, CoverageOverlap, Partial, PartialMismatch
from wxstats.core.streams import StreamSpec
from wxstats.runtime.engine import blocks_accumulator, cell_references
from wxstats.sources.base import Source, WorkerSource, on_workers

ENGINES = ("auto", "threads", "dask")

Packed = tuple[Any, Any, Any, dict[str, list[list[int]]], str]
"""A partial as it travels: int64 sums, float64 minima, float64 maxima (the
accumulator's packing), its coverage as ranges and the run it belongs to."""


def _current_client() -> Any:
    """The ``distributed.Client`` the caller made current, or None (distributed is
    not imported when the caller did not import it)."""
    if "distributed" not in sys.modules:
        return None
    from distributed import default_client

    try:
        return default_client()
    except ValueError:  # no client
        return None


def _dask_backed(given: Any) -> bool:
    variables = getattr(given, "variables", {})
    return any(getattr(v, "chunks", None) for v in variables.values())


def choose_client(engine: str | None, client: Any, given: Any) -> Any:
    """The client to compute on, or None (threads in this process, as without Dask).

    ``client`` given: that cluster. ``engine="dask"``: the current client (one line
    when there is none). ``"threads"``: this process. ``"auto"`` (the default): the
    current client for a dask-backed Dataset, else this process."""
    engine = engine or "auto"
    if engine not in ENGINES:
        raise WxstatsError(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
    if engine == "threads":
        if client is not None:
            raise WxstatsError("engine='threads' computes in this process: leave client out")
        return None
    if client is not None:
        return client
    current = _current_client()
    if engine == "dask" and current is None:
        raise WxstatsError(
            "engine='dask' needs a distributed.Client: make one (Client(...)) or pass client="
        )
    if engine == "auto" and not _dask_backed(given):
        return None
    return current


def _series(stream: str, unit: str) -> str:
    return f"{stream} | {unit}"


def coverage_of(source: Source, index: int) -> Coverage:
    """The time steps sample ``index`` sums, per stream: what its partial holds."""
    return Coverage.of(
        (_series(name, s.unit), s.start, s.stop) for name, s in source.covers(index).items()
    )


def pack(partial: Partial, run: str) -> Packed:
    ints, low, high = partial.sums.pack()
    return ints, low, high, partial.coverage.to_json(), run


def unpack(packed: Packed, specs: list[StreamSpec], cell_refs: dict) -> Partial:
    ints, low, high, coverage, run = packed
    sums = RunMoments.create(specs, cell_refs)
    sums.unpack_like(ints, low, high)
    return Partial(sums, Coverage.from_json(coverage), {"run": run})


def sample_partial(
    source: WorkerSource, index: int, given: Any, skipna: bool, cell_refs: dict, run: str
) -> Packed:
    """On a worker: sample ``index``'s exact partial, packed."""
    sums = blocks_accumulator(
        source.streams,
        source.read(index, given),
        where=source.describe(index),
        skipna=skipna,
        cell_refs=cell_refs,
    )
    return pack(Partial(sums, coverage_of(source, index), {"run": run}), run)


def merge_packed(specs: list[StreamSpec], cell_refs: dict, a: Packed, b: Packed) -> Packed:
    """On a worker: two partials as one; refused (one line) when they share a time
    step (a sample counted twice) or belong to another run."""
    try:
        merged = unpack(a, specs, cell_refs).merge(unpack(b, specs, cell_refs))
    except CoverageOverlap as exc:
        raise WxstatsError(
            f"a partial counted twice on the cluster ({exc}): refused, no statistics"
        ) from None
    except PartialMismatch:
        raise WxstatsError("partials of another run met on the cluster: refused") from None
    return pack(merged, a[4])


def check_complete(merged: Partial, plan: Coverage) -> None:
    """Refuse, in one line, sums missing a planned time step or holding an unplanned one."""
    for what, spans in (
        ("never counted", plan.difference(merged.coverage)),
        ("not planned", merged.coverage.difference(plan)),
    ):
        if len(spans):
            series, a, b = spans.spans()[0]
            raise WxstatsError(
                f"{series}: steps [{a}, {b}) {what} by the cluster's partials "
                f"({len(spans)} steps in all): refused, no statistics"
            )


def _tree(items: list[Any], merge: Any) -> Any:
    """Pairwise merges up to one (a balanced tree: depth log2 of the samples)."""
    while len(items) > 1:
        pairs = [merge(items[i], items[i + 1]) for i in range(0, len(items) - 1, 2)]
        items = pairs + ([items[-1]] if len(items) % 2 else [])
    return items[0]


def compute_on_cluster(source: Source, client: Any, *, skipna: bool) -> tuple[RunMoments, int]:
    """The exact sums of every sample of ``source``, computed on ``client``'s
    workers (see module docstring), and the number of workers."""
    spread = on_workers(source)
    if spread is None:
        raise WxstatsError(
            f"{source.path}: {source.capabilities.what} is read in this process or by ranks, "
            "not on a Dask cluster (engine='dask' reads zarr/netCDF datasets and xarray.Datasets)"
        )
    import dask

    run = uuid.uuid4().hex  # partials of another run (a stale result) never merge into this one
    cell_refs = cell_references(source)
    specs = source.streams
    plan = Coverage()
    for i in range(len(source)):
        plan = plan.union(coverage_of(source, i))
    shipped = dask.delayed(spread.for_workers(), pure=True, traverse=False)
    partial = dask.delayed(sample_partial, pure=True)
    merge = dask.delayed(merge_packed, pure=True)
    leaves = [
        partial(shipped, i, spread.worker_inputs(i), skipna, cell_refs, run)
        for i in range(len(source))
    ]
    if not leaves:
        raise WxstatsError(f"{source.path}: no samples to compute")
    root = _tree(leaves, lambda a, b: merge(specs, cell_refs, a, b))
    workers = len(client.nthreads())
    packed = client.compute(root, sync=True)
    merged = unpack(packed, specs, cell_refs)
    if packed[4] != run:
        raise WxstatsError("the cluster returned another run's partial: refused")
    check_complete(merged, plan)
    return merged.sums, workers
