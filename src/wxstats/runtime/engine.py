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

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext

import numpy as np

from wxstats.core.accumulator import RunMoments
from wxstats.core.cellsums import CellRangeError, add_steps, cell_reference
from wxstats.core.combine import NonFiniteSums
from wxstats.core.errors import InputError
from wxstats.core.kernels import Block, BlockSums, block_sums
from wxstats.core.stats import StreamSpec
from wxstats.sources.base import Source

SAMPLES_AHEAD: int | None = None
"""Samples (blocks) announced to the source's ``prefetch`` beyond the one being
handed out; ``None``: one per thread (with threads, up to ``2 * threads`` more
are queued or computing, so the hints lead the kernel by 2-3 per thread).
Measured cold on a 2-core VM (``benchmarks/bench_cold.py --ahead 1 2 4``, two
runs, medians of 3, docs/benchmarks.md): 1, 2 and 4 were within each other's
spread for MEPS (1.39-1.66 s), zarr (3.4-4.7 s) and netCDF (2.0-2.7 s), none
better than the default in both runs; what did matter was that the hint read
the whole sample (:mod:`wxstats.sources.readahead`)."""


def cell_references(source: Source) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The fixed point of each stream that sums per grid point (time means): shift
    and scale from the first time step of its reference block, the same on every
    rank, in every run over the same data (:mod:`wxstats.core.cellsums`)."""
    wanted = [spec for spec in source.streams if spec.cell_grid_points]
    if not wanted:
        return {}
    blocks = source.reference_blocks()
    out = {}
    for spec in wanted:
        block = blocks[spec.name]
        rows = np.asarray(block.array[block.value_range[0] : block.value_range[1]])
        out[spec.name] = cell_reference(rows[:, :, block.channels], len(spec.features))
    return out


def empty_accumulator(source: Source) -> RunMoments:
    return RunMoments.create(source.streams, cell_references(source))


def _refuse_bad_values(
    where: str, spec: StreamSpec, sums: BlockSums, skipna: bool, at: int = 0
) -> None:
    for f in range(sums.inf_count.shape[0]):
        name = spec.features[at + f]
        if sums.inf_count[f]:
            raise InputError(
                f"{where}: variable {name}: {int(sums.inf_count[f])} infinite values; "
                "infinities are never valid statistics input, fix or mask the data"
            )
        if sums.nan_count[f] and not skipna:
            raise InputError(
                f"{where}: variable {name}: {int(sums.nan_count[f])} NaN values; "
                "rerun with --skipna to leave them out of the statistics"
            )


def blocks_accumulator(
    specs: list[StreamSpec],
    blocks: dict[str, Block],
    *,
    where: str,
    skipna: bool,
    cell_refs: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> RunMoments:
    """The exact accumulator of the ``blocks`` of some streams (those absent
    stay empty): a sample, or the differences across the seam of two time
    ranges (:mod:`wxstats.runtime.state`). Every time step is summed with its
    own reference, so the result depends on the blocks' data alone."""
    acc = RunMoments.create(specs, cell_refs)
    for spec in specs:
        if spec.name not in blocks:
            continue
        for block, at in group_runs(blocks[spec.name]):
            sums = block_sums(block)
            here = block.origin or where  # the file holding these values
            _refuse_bad_values(here, spec, sums, skipna, at)
            stream = acc.streams[spec.name]
            if stream.cells is not None and stream.cell_reference is not None:
                t0, t1 = block.value_range
                shift, scale = stream.cell_reference
                part = slice(at, at + len(block.channels))
                try:
                    add_steps(
                        stream.cells,
                        block.array[t0:t1][:, :, block.channels],
                        shift[part],
                        scale[part],
                    )
                except CellRangeError:
                    raise InputError(
                        f"{here}: variable(s) {', '.join(spec.features)}: values more than "
                        "2**20 times their first time step's spread away from it; time means "
                        "(makani's time_means, ACE's time-mean.nc) cannot be summed exactly"
                    ) from None
            try:
                acc.add(spec.name, sums, at)
            except NonFiniteSums as exc:
                bad = ", ".join(spec.features[f] for f in exc.features)
                raise InputError(
                    f"{here}: variable(s) {bad}: values span too wide a range for float64 "
                    "sums of one time step"
                ) from None
    return acc


def group_runs(block: Block) -> list[tuple[Block, int]]:
    """A block as (block, first feature) pieces: itself, or for a climatology
    (``block.groups``) one piece per run of time rows of one group, each
    counting its rows' values and the differences ending at them. Every time
    step is summed on its own either way (the zarr/netCDF summation unit), so
    cutting changes no bit."""
    if block.groups is None:
        return [(block, 0)]
    ranges = [r for r in (block.value_range, *block.diff_ranges.values()) if r[0] < r[1]]
    lo = min((a for a, _ in ranges), default=0)
    hi = max((b for _, b in ranges), default=0)
    width = len(block.channels)
    out = []
    t = lo
    while t < hi:
        g = block.groups[t]
        end = t + 1
        while end < hi and block.groups[end] == g:
            end += 1

        def cut(r: tuple[int, int], t0: int = t, t1: int = end) -> tuple[int, int]:
            a, b = max(r[0], t0), min(r[1], t1)
            return (a, b) if a < b else (0, 0)

        piece = Block(
            block.array,
            block.channels,
            cut(block.value_range),
            {k: cut(r) for k, r in block.diff_ranges.items()},
            weights=block.weights,
            origin=block.origin,
        )
        out.append((piece, int(g) * width))
        t = end
    return out


def sample_accumulator(
    source: Source,
    index: int,
    skipna: bool,
    cell_refs: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> RunMoments:
    """The exact accumulator of one sample (deterministic, whoever runs it)."""
    return blocks_accumulator(
        source.streams,
        source.read(index),
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
) -> RunMoments:
    """Merge the accumulators of ``indices`` (in any order; the result is exact).
    Each merge and its ``on_sample`` run under ``guard`` (a checkpoint's lock:
    outside it the accumulator matches the samples reported)."""
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
            merged(i, sample_accumulator(source, i, skipna, cell_refs))
        return total
    pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="wxstats")
    try:
        # keep at most 2 * threads samples in flight: bounded memory
        window = 2 * threads
        pending = []
        for n, i in enumerate(indices):
            hint(n + ahead)
            pending.append((i, pool.submit(sample_accumulator, source, i, skipna, cell_refs)))
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
