"""Samples in, exact accumulators out: the single-process core of a run.

For each sample: read its blocks, run the kernel, check for NaN/Inf/overflow
(naming the file and variable), convert the partial sums exactly. Samples are
processed by a small thread pool (the kernel releases the GIL and reading a
memory map overlaps with computing), and merged exactly, so thread count and
completion order never change a bit.

Two optional source attributes refine this for sources whose samples are
arbitrary groupings of time steps (``sources/xarray.py``):
``exact_per_step = True`` sums each time step of a block on its own before the
exact accumulation, so how time steps are grouped into samples never changes a
bit; ``reference_blocks()`` gives the blocks the shifts and scales are taken
from instead of sample 0.

Sources that can (``prefetch``) are asked to start reading the samples a few
places ahead, so that on a cold page cache the disk works while the kernel
computes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from wxstats.accumulate import Moments, Reference, RunAccumulator, StreamAccumulator
from wxstats.errors import InputError
from wxstats.exact import exact_sum
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
    """Shifts and scales from the first time step of sample 0 (or of the
    source's ``reference_blocks()``): the same on every rank, in every run over
    the same data."""
    reference_blocks = getattr(source, "reference_blocks", None)
    blocks = reference_blocks() if reference_blocks is not None else source.read(0)
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


def _step_views(block: Block) -> Iterator[Block]:
    """One view per time step of ``block`` that has a value or a pair to count."""
    lags = sorted(block.diff_ranges)
    reach = max(lags, default=0)
    t0, t1 = block.value_range
    for t in range(block.array.shape[0]):
        pairs = {k for k in lags if block.diff_ranges[k][0] <= t < block.diff_ranges[k][1]}
        pairs = {k for k in pairs if t - k >= 0}
        if not (t0 <= t < t1) and not pairs:
            continue
        lo = max(0, t - reach)
        here = (t - lo, t - lo + 1)
        yield Block(
            array=block.array[lo : t + 1],
            channels=block.channels,
            value_range=here if t0 <= t < t1 else (0, 0),
            diff_ranges={k: here if k in pairs else (0, 0) for k in lags},
        )


def _steps_accumulator(parts: list, spec: StreamSpec):
    """The exact sum of per-step partials, and their counts (with NaN where a
    float sum was not finite) for :func:`_check`."""
    from wxstats.kernels import _empty_partials

    n_f, lags = len(spec.features), tuple(spec.diff_steps)
    total = _empty_partials(n_f, list(lags))
    acc = StreamAccumulator.empty(n_f, lags)
    if not parts:
        return total, acc

    def stacked(name: str, k: int | None = None) -> np.ndarray:
        return np.stack([getattr(p, name) if k is None else getattr(p, name)[k] for p in parts])

    def exact(values: np.ndarray) -> np.ndarray:
        return exact_sum(np.where(np.isfinite(values), values, 0.0)).sum(axis=0)

    def checked(values: np.ndarray) -> np.ndarray:
        return np.where(np.isfinite(values).all(axis=0), 0.0, np.nan)

    total.nan_count = stacked("nan_count").sum(axis=0)
    total.inf_count = stacked("inf_count").sum(axis=0)
    s1, s2 = stacked("sum1"), stacked("sum2")
    total.sum1, total.sum2 = checked(s1), checked(s2)
    acc.values = Moments(
        count=stacked("count").sum(axis=0),
        sum1=exact(s1),
        sum2=exact(s2),
        minimum=stacked("minimum").min(axis=0),
        maximum=stacked("maximum").max(axis=0),
        nan_count=total.nan_count.copy(),
    )
    for k in lags:
        d1, d2 = stacked("diff_sum1", k), stacked("diff_sum2", k)
        total.diff_sum1[k], total.diff_sum2[k] = checked(d1), checked(d2)
        moments = Moments.empty(n_f)
        moments.count = stacked("diff_count", k).sum(axis=0)
        moments.sum1, moments.sum2 = exact(d1), exact(d2)
        acc.diffs[k] = moments
    return total, acc


def _moments(partials, spec: StreamSpec) -> StreamAccumulator:
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
    return StreamAccumulator(values, diffs)


def sample_accumulator(
    source: Source, index: int, refs: dict[str, StreamReference], skipna: bool
) -> RunAccumulator:
    """The exact accumulator of one sample (deterministic, whoever runs it)."""
    blocks = source.read(index)
    per_step = bool(getattr(source, "exact_per_step", False))
    streams = {}
    for spec in source.streams:
        ref = refs[spec.name]
        views = _step_views(blocks[spec.name]) if per_step else [blocks[spec.name]]
        parts = [
            block_partials(
                view,
                ref.values.shift,
                ref.values.scale,
                {k: r.shift for k, r in ref.diffs.items()},
                {k: r.scale for k, r in ref.diffs.items()},
            )
            for view in views
        ]
        if per_step:
            total, streams[spec.name] = _steps_accumulator(parts, spec)
            _check(source, index, spec, total, skipna)
        else:
            _check(source, index, spec, parts[0], skipna)
            streams[spec.name] = _moments(parts[0], spec)
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
