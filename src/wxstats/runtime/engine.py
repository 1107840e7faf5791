"""Samples in, exact accumulator out: what one rank does with its share.

For each sample: read its blocks, run the kernel, refuse NaN/Inf/overflow
(naming the file and variable), add the per-step sums to the exact combiner.
Samples are processed by a small thread pool (the kernel releases the GIL and
reading overlaps with computing) and merged exactly, so the thread count and
the completion order never change a bit. Sources are asked to start reading
(``prefetch``) a few samples ahead, so that on a cold page cache the disk works
while the kernel computes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from wxstats.core import cellsums
from wxstats.core.accumulator import RunMoments
from wxstats.core.blocks import Block, group_runs, restrict
from wxstats.core.cellsums import CellRangeError, add_block
from wxstats.core.combine import NonFiniteSums
from wxstats.core.errors import InputError
from wxstats.core.kernel import BlockSums, block_sums
from wxstats.core.streams import StreamSpec
from wxstats.sources.base import Source

if TYPE_CHECKING:  # the numbers are core's: the engine only passes arrays on
    import numpy as np

SAMPLES_AHEAD: int | None = None
"""Samples (blocks) announced to the source's ``prefetch`` beyond the one being
handed out; ``None``: one per thread (with threads, up to ``2 * threads`` more
are queued or computing, so the hints lead the kernel by 2-3 per thread).
Measured cold on a 2-core VM (``benchmarks/bench_cold.py --ahead 1 2 4``, two
runs, medians of 3, docs/benchmarks.md): 1, 2 and 4 were within each other's
spread for MEPS (1.39-1.66 s), zarr (3.4-4.7 s) and netCDF (2.0-2.7 s), none
better than the default in both runs; what did matter was that the hint read
the whole sample (:mod:`wxstats.storage.readahead`)."""


def cell_references(source: Source) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The fixed point of each stream that sums per grid point (time means), from
    the source's reference blocks (:func:`wxstats.core.cellsums.cell_references`),
    which are read only when a stream needs them."""
    if not any(spec.cell_grid_points for spec in source.streams):
        return {}
    return cellsums.cell_references(source.streams, source.reference_blocks())


def empty_accumulator(source: Source) -> RunMoments:
    return RunMoments.create(source.streams, cell_references(source))


def _refuse_bad_values(where: str, spec: StreamSpec, sums: BlockSums, skipna: bool) -> None:
    # the totals per feature of the stream (a climatology's groups: g * F + f)
    nans, infs = sums.nan_count.ravel(), sums.inf_count.ravel()
    for f in range(infs.shape[0]):
        name = spec.features[f]
        if infs[f]:
            raise InputError(
                f"{where}: variable {name}: {int(infs[f])} infinite values; "
                "infinities are never valid statistics input, fix or mask the data"
            )
        if nans[f] and not skipna:
            raise InputError(
                f"{where}: variable {name}: {int(nans[f])} NaN values; "
                "rerun with --skipna to leave them out of the statistics"
            )


def blocks_accumulator(
    specs: list[StreamSpec],
    blocks: Mapping[str, Block | list[Block]],
    *,
    where: str,
    skipna: bool,
    cell_refs: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> RunMoments:
    """The exact accumulator of the ``blocks`` of some streams (those absent
    stay empty): a sample, or the differences across the seam of two time
    ranges (:mod:`wxstats.runtime.state`). Every time step is summed with its
    own reference, so the result depends on the blocks' data alone. A stream
    may have several blocks (a sample restricted to the steps a checkpoint
    lacks, :func:`sample_blocks`); a climatology's block is summed whole, each
    step's sums going to its group's features (the kernel takes the groups)."""
    acc = RunMoments.create(specs, cell_refs)
    for spec in specs:
        given = blocks.get(spec.name, [])
        pieces = [given] if isinstance(given, Block) else given
        for block in pieces:
            sums = block_sums(block, order=spec.order)
            here = block.origin or where  # the file holding these values
            _refuse_bad_values(here, spec, sums, skipna)
            stream = acc.streams[spec.name]
            if stream.cells is not None and stream.cell_reference is not None:
                try:
                    for piece, at in group_runs(block):
                        add_block(stream.cells, piece, *stream.cell_reference, at)
                except CellRangeError:
                    raise InputError(
                        f"{here}: variable(s) {', '.join(spec.features)}: values more than "
                        "2**20 times their first time step's spread away from it; time means "
                        "(makani's time_means, ACE's time-mean.nc) cannot be summed exactly"
                    ) from None
            try:
                acc.add(spec.name, sums)
            except NonFiniteSums as exc:
                bad = ", ".join(spec.features[f] for f in exc.features)
                raise InputError(
                    f"{here}: variable(s) {bad}: values span too wide a range for float64 "
                    "sums of one time step"
                ) from None
    return acc


Steps = dict[str, list[tuple[int, int]]]
"""Absolute time steps ``[start, stop)`` by unit
(see :class:`~wxstats.sources.base.SampleSteps`)."""


def sample_blocks(
    source: Source, index: int, steps: Steps | None = None
) -> dict[str, Block] | dict[str, list[Block]]:
    """The blocks of sample ``index``; with ``steps``, each stream's block
    restricted to those steps (:func:`~wxstats.core.blocks.restrict`), so a
    sample partly summed already (a resume with another block size) adds only
    the rest."""
    blocks = source.read(index)
    if steps is None:
        return blocks
    spans = source.covers(index)
    out = {}
    for name, block in blocks.items():
        span = spans[name]
        rows = [(a - span.first, b - span.first) for a, b in steps.get(span.unit, ())]
        out[name] = restrict(block, rows)
    return out


def sample_accumulator(
    source: Source,
    index: int,
    skipna: bool,
    cell_refs: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
    steps: Steps | None = None,
) -> RunMoments:
    """The exact accumulator of one sample, or of its ``steps`` only
    (deterministic, whoever runs it)."""
    return blocks_accumulator(
        source.streams,
        sample_blocks(source, index, steps),
        where=source.describe(index),
        skipna=skipna,
        cell_refs=cell_refs,
    )


def accumulate(
    source: Source,
    indices: Iterable[int],
    *,
    skipna: bool = False,
    threads: int = 1,
    on_sample: Callable[[int], None] | None = None,
    into: RunMoments | None = None,
    guard: AbstractContextManager | None = None,
    steps: Mapping[int, Steps] | None = None,
) -> RunMoments:
    """Merge the accumulators of ``indices`` (in any order; the result is exact);
    of a sample in ``steps``, only of those steps.
    Each merge and its ``on_sample`` run under ``guard`` (a checkpoint's lock:
    outside it the accumulator matches the samples reported)."""
    only = steps or {}
    total = into if into is not None else empty_accumulator(source)
    cell_refs = {
        name: s.cell_reference for name, s in total.streams.items() if s.cell_reference is not None
    }
    indices = list(indices)
    ahead = SAMPLES_AHEAD or max(1, threads)

    def hint(position: int) -> None:
        if position < len(indices):
            source.prefetch(indices[position])

    def merged(index: int, acc: RunMoments) -> None:
        with guard if guard is not None else nullcontext():
            total.merge(acc)
            if on_sample:
                on_sample(index)

    for n in range(min(ahead, len(indices))):
        hint(n)
    if threads <= 1:
        for n, i in enumerate(indices):
            hint(n + ahead)
            merged(i, sample_accumulator(source, i, skipna, cell_refs, only.get(i)))
        return total
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="wxstats")
    try:
        # keep at most 2 * threads samples in flight: bounded memory
        window = 2 * threads
        pending = []
        for n, i in enumerate(indices):
            hint(n + ahead)
            job = pool.submit(sample_accumulator, source, i, skipna, cell_refs, only.get(i))
            pending.append((i, job))
            if len(pending) >= window:
                j, fut = pending.pop(0)
                merged(j, fut.result())
        for j, fut in pending:
            merged(j, fut.result())
    except BaseException:
        # Ctrl-C, a failed sample, a stopped job: the queued samples never start and
        # the running ones end with their block, rather than all of the window
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return total
