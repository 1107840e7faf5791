"""Samples in, exact accumulators out: the single-process core of a run.

For each sample: read its blocks, run the kernel, check for NaN/Inf/overflow
(naming the file and variable), convert the partial sums exactly. Samples are
processed by a small thread pool (the kernel releases the GIL and reading a
memory map overlaps with computing), and merged exactly, so thread count and
completion order never change a bit. Sources that can (``prefetch``) are asked
to start reading the samples a few places ahead, so that on a cold page cache
the disk works while the kernel computes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from wxstats.accumulate import Moments, Reference, RunAccumulator, StreamAccumulator
from wxstats.errors import InputError
from wxstats.kernels import Block, block_partials
from wxstats.sources.base import Source, StreamSpec


@dataclass(frozen=True)
class StreamReference:
    values: Reference
    diffs: dict[int, Reference]


def _first_pair(block: Block, lag: int) -> np.ndarray:
    start = max(block.diff_ranges[lag][0], lag)
    if start >= min(block.diff_ranges[lag][1], block.array.shape[0]):
        return np.zeros((1, len(block.channels)))
    later = np.asarray(block.array[start][:, block.channels], dtype=np.float64)
    earlier = np.asarray(block.array[start - lag][:, block.channels], dtype=np.float64)
    return later - earlier


def references(source: Source) -> dict[str, StreamReference]:
    """Shifts and scales from the first time step of sample 0: the same on
    every rank, in every run over the same data."""
    blocks = source.read(0)
    refs = {}
    for spec in source.streams:
        block = blocks[spec.name]
        first = np.asarray(block.array[block.value_range[0]][:, block.channels])
        refs[spec.name] = StreamReference(
            values=Reference.from_values(first),
            diffs={k: Reference.from_values(_first_pair(block, k)) for k in spec.diff_steps},
        )
    return refs


def empty_accumulator(source: Source) -> RunAccumulator:
    return RunAccumulator(
        {s.name: StreamAccumulator.empty(len(s.features), s.diff_steps) for s in source.streams}
    )


def _check(source: Source, index: int, spec: StreamSpec, partials, skipna: bool) -> None:
    where = source.describe(index)
    for f, name in enumerate(spec.features):
        if partials.inf_count[f]:
            raise InputError(
                f"{where}: variable {name}: {int(partials.inf_count[f])} infinite values; "
                "infinities are never valid statistics input, fix or mask the data"
            )
        if partials.nan_count[f] and not skipna:
            raise InputError(
                f"{where}: variable {name}: {int(partials.nan_count[f])} NaN values; "
                "rerun with --skipna to leave them out of the statistics"
            )
    sums = [
        partials.sum1,
        partials.sum2,
        *partials.diff_sum1.values(),
        *partials.diff_sum2.values(),
    ]
    if not all(np.isfinite(s).all() for s in sums):
        bad = [
            name for f, name in enumerate(spec.features) if not all(np.isfinite(s[f]) for s in sums)
        ]
        raise InputError(
            f"{where}: variable(s) {', '.join(bad)}: values span too wide a range for float64 "
            "sums (relative to the first time step of the first sample)"
        )


def sample_accumulator(
    source: Source, index: int, refs: dict[str, StreamReference], skipna: bool
) -> RunAccumulator:
    """The exact accumulator of one sample (deterministic, whoever runs it)."""
    blocks = source.read(index)
    streams = {}
    for spec in source.streams:
        ref = refs[spec.name]
        partials = block_partials(
            blocks[spec.name],
            ref.values.shift,
            ref.values.scale,
            {k: r.shift for k, r in ref.diffs.items()},
            {k: r.scale for k, r in ref.diffs.items()},
        )
        _check(source, index, spec, partials, skipna)
        values = Moments.from_partials(
            partials.count,
            partials.sum1,
            partials.sum2,
            partials.minimum,
            partials.maximum,
            partials.nan_count,
        )
        n_f = len(spec.features)
        diffs = {
            k: Moments.from_partials(
                partials.diff_count[k],
                partials.diff_sum1[k],
                partials.diff_sum2[k],
                np.full(n_f, np.inf),
                np.full(n_f, -np.inf),
                np.zeros(n_f, dtype=np.int64),
            )
            for k in spec.diff_steps
        }
        streams[spec.name] = StreamAccumulator(values, diffs)
    return RunAccumulator(streams)


def accumulate(
    source: Source,
    indices: Iterable[int],
    refs: dict[str, StreamReference],
    *,
    skipna: bool = False,
    threads: int = 1,
    on_sample: Callable[[int], None] | None = None,
    into: RunAccumulator | None = None,
) -> RunAccumulator:
    """Merge the accumulators of ``indices`` (in any order; the result is exact)."""
    total = into if into is not None else empty_accumulator(source)
    indices = list(indices)
    prefetch = getattr(source, "prefetch", None)
    ahead = max(1, threads)

    def hint(position: int) -> None:
        if prefetch is not None and position < len(indices):
            prefetch(indices[position])

    if threads <= 1:
        hint(0)
        for n, i in enumerate(indices):
            hint(n + 1)
            total.merge(sample_accumulator(source, i, refs, skipna))
            if on_sample:
                on_sample(i)
        return total
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="wxstats") as pool:
        # keep at most 2 * threads samples in flight: bounded memory
        window = 2 * threads
        pending = []
        for n in range(min(ahead, len(indices))):
            hint(n)
        for n, i in enumerate(indices):
            hint(n + ahead)
            pending.append((i, pool.submit(sample_accumulator, source, i, refs, skipna)))
            if len(pending) >= window:
                j, fut = pending.pop(0)
                total.merge(fut.result())
                if on_sample:
                    on_sample(j)
        for j, fut in pending:
            total.merge(fut.result())
            if on_sample:
                on_sample(j)
    return total
