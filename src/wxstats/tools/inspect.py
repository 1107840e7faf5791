"""What ``wxstats compute`` would do, without doing it (``wxstats inspect``).

Lists the source kind, samples, variables and bytes to read, the files a run
would write (and which exist already), and estimates the run time from two
rates measured now on this machine with the first sample:

- the raw-read rate: reading the sample's arrays and summing them in float32
  (the limit any tool reaching every byte has); measured on the first touch,
  so it is the disk's rate unless the file is already in the page cache;
- the compute rate of one thread: the real per-sample kernel, timed on a
  second pass over the same (now cached) sample.

estimate = total bytes / min(raw-read rate, compute rate × threads). The
raw read is measured single-threaded, so on a parallel file system the run
can be faster than the estimate; on a cold, slow disk the first-touch rate is
what the whole run sees.

On ``--nodes N`` (each with this machine's threads) the projection is
bytes / min(storage, N × compute rate × threads), the storage being
``--storage-gbps`` in total where given (a shared file system's aggregate
bandwidth), else N × the raw-read rate measured here (each node reading as
this one does), and it names the smaller, the limit. A sample is one node's
work, so at most as many nodes as samples get any.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wxstats.core.errors import InputError, WxstatsError
from wxstats.runtime.options import ComputeOptions
from wxstats.sources.base import Source, sample_sizes


@dataclass
class Inspection:
    """The answer of :func:`inspect_dataset`."""

    path: Path
    kind: str
    split: str
    samples: int
    streams: list[tuple[str, list[str]]]
    total_bytes: int
    first_sample: str
    outputs: list[tuple[Path, bool]] = field(default_factory=list)
    into: list[str] = field(default_factory=list)
    """``--write-into``: the arrays the run would write into the dataset's store."""
    read_gbps: float | None = None
    compute_gbps: float | None = None
    threads: int = 1
    notes: list[str] = field(default_factory=list)
    nodes: int = 1
    """``--nodes``: the nodes of the projection, each with ``threads`` threads."""
    storage_gbps: float | None = None
    """``--storage-gbps``: the storage's total bandwidth for all nodes (None: each
    node reads at ``read_gbps``, as measured here)."""
    measured_bytes: int = 0
    """The bytes of the sample the rates were measured on."""

    @property
    def estimate_s(self) -> float | None:
        if not self.read_gbps or not self.compute_gbps:
            return None
        return self.total_bytes / (min(self.read_gbps, self.compute_gbps * self.threads) * 1e9)

    def projection(self) -> tuple[float, str] | None:
        """(seconds, limit) on ``nodes`` nodes: see :func:`projection`."""
        if not self.read_gbps or not self.compute_gbps:
            return None
        return projection(
            self.total_bytes, self.read_gbps, self.compute_gbps, self.threads,
            min(self.nodes, max(1, self.samples)), self.storage_gbps,
        )  # fmt: skip


def projection(
    total_bytes: int,
    read_gbps: float,
    compute_gbps: float,
    threads: int,
    nodes: int,
    storage_gbps: float | None = None,
) -> tuple[float, str]:
    """(seconds, ``"storage"`` or ``"CPU"``) to read and compute ``total_bytes`` on
    ``nodes`` nodes of ``threads`` threads at ``compute_gbps`` each, the storage
    giving ``storage_gbps`` in total (None: ``read_gbps`` to each node)."""
    cpu = compute_gbps * threads * nodes
    storage = storage_gbps if storage_gbps else read_gbps * nodes
    if storage < cpu:
        return total_bytes / (storage * 1e9), "storage"
    return total_bytes / (cpu * 1e9), "CPU"


def _raw_read_seconds(source: Source, index: int) -> float:
    started = time.perf_counter()
    total = 0.0
    for block in source.read(index).values():
        total += float(np.sum(block.array, dtype=np.float32))
    return time.perf_counter() - started


def _running_threads(requested: int | None) -> int:
    """The threads a run computes with at once: ``--threads`` (by default the
    command's own default), never more than the CPUs this process may use."""
    from wxstats.core.machine import available_cpus
    from wxstats.runtime.run import default_threads

    return max(1, min(requested or default_threads(), available_cpus()))


def measure(source: Source, skipna: bool, notes: list[str]) -> tuple[float | None, float | None]:
    """(raw-read GB/s, one-thread compute GB/s) on sample 0 (see module docstring)."""
    from wxstats.runtime.engine import cell_references, sample_accumulator

    nbytes = source.nbytes(0)
    read_s = _raw_read_seconds(source, 0)
    try:
        cells = cell_references(source)
        sample_accumulator(source, 0, skipna, cells)  # warm-up: loads the compiled kernel
        started = time.perf_counter()
        sample_accumulator(source, 0, skipna, cells)
        compute_s = time.perf_counter() - started
    except InputError as exc:
        raise InputError(f"the first sample fails, and so would the run: {exc}") from None
    read = nbytes / read_s / 1e9 if read_s > 0 else None
    compute = nbytes / compute_s / 1e9 if compute_s else None
    return read, compute


def _refuse_unwritable(folder: Path) -> None:
    """What ``compute`` would refuse up front, found without creating anything:
    the nearest existing ancestor of ``folder`` must be a writable folder."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise WxstatsError(f"{folder}: output folder cannot be made: {existing} is a file")
    if not os.access(existing, os.W_OK):
        raise WxstatsError(f"{folder}: output folder is not writable ({existing})")


def _arrays_into(source: Source) -> list[str]:
    """The arrays ``--write-into`` would write (replace or add) in the dataset's store."""
    if source.capabilities.anemoi_statistics:
        from wxstats.io.formats.anemoi import OPS

        tendencies = [
            f"statistics_tendencies_{delta}_{op}" for delta in source.deltas.values() for op in OPS
        ]
        return [*OPS, *tendencies]
    from wxstats.io.formats.mdp import planned_variables

    return list(planned_variables(source.streams))


def inspect_dataset(
    options: ComputeOptions,
    run_measure: bool = True,
    nodes: int = 1,
    storage_gbps: float | None = None,
) -> Inspection:
    """The plan of a ``compute`` run with ``options``: refused as ``compute``
    refuses, by the same pre-flight (:mod:`wxstats.runtime.preflight`)."""
    from wxstats.runtime.grow import Growth
    from wxstats.runtime.outputs import open_source, plan_outputs
    from wxstats.runtime.run import resumable

    resumable(options)  # --resume without --checkpoint
    growth = Growth.of(options)
    source = open_source(options)
    planned = plan_outputs(source, options)
    if growth is not None:
        growth.check(source, options.skipna)
    plan = Inspection(
        path=Path(options.dataset),
        kind=source.kind,
        split=", ".join(options.splits) or "train",
        samples=len(source),
        streams=[(s.name, list(s.features)) for s in source.streams],
        total_bytes=sum(sample_sizes(source)),
        first_sample=source.describe(0),
        threads=_running_threads(options.threads),
        nodes=max(1, nodes),
        storage_gbps=storage_gbps,
    )
    if options.threads and options.threads > plan.threads:
        plan.notes.append(
            f"--threads {options.threads} on {plan.threads} CPUs: the estimate counts "
            f"{plan.threads}, the threads that can run at once"
        )
    paths = list(planned.files) + planned.stores  # a store: an anemoi statistics store
    for folder in sorted({p.parent for p in paths}):
        _refuse_unwritable(folder)
    if options.checkpoint is not None:
        _refuse_unwritable(Path(options.checkpoint))
    plan.outputs = [(p, p.exists()) for p in paths]
    if options.write_into:
        plan.into = _arrays_into(source)
    existing = [p for p, exists in plan.outputs if exists]
    if existing and not options.overwrite:
        plan.notes.append(
            f"{len(existing)} output(s) exist: compute would refuse without --overwrite"
        )
    if source.capabilities.maps_samples:
        for index in range(len(source)):
            source.read(index)  # memory maps: every header and size checked, nothing read
    if run_measure:
        plan.read_gbps, plan.compute_gbps = measure(source, options.skipna, plan.notes)
        plan.measured_bytes = source.nbytes(0)
    return plan


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.2g} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def format_plan(plan: Inspection) -> str:
    lines = [
        f"dataset:   {plan.path}",
        f"kind:      {plan.kind}, split {plan.split}",
        f"samples:   {plan.samples} (first: {plan.first_sample})",
        f"to read:   {_size(plan.total_bytes)} ({plan.total_bytes} bytes)",
    ]
    for name, features in plan.streams:
        shown = ", ".join(features[:20]) + (", ..." if len(features) > 20 else "")
        lines.append(f"stream {name}: {len(features)} variable(s): {shown}")
    lines.append("would write:")
    for path, exists in plan.outputs:
        lines.append(f"  {path}{'  (exists)' if exists else ''}")
    if plan.into:
        shown = ", ".join(plan.into[:12]) + (", ..." if len(plan.into) > 12 else "")
        lines.append(f"  into {plan.path} ({len(plan.into)} arrays): {shown}")
    if plan.read_gbps is not None:
        lines.append(
            f"measured now on sample 0: raw read {plan.read_gbps:.3g} GB/s, "
            + (
                f"compute {plan.compute_gbps:.3g} GB/s per thread"
                if plan.compute_gbps
                else "compute not measured"
            )
        )
    if plan.estimate_s is not None:
        lines.append(
            f"estimated time: {_duration(plan.estimate_s)} with {plan.threads} thread(s) "
            "(bytes / min(raw read, compute x threads))"
        )
    else:
        lines.append("estimated time: not measured")
    lines += _projection_lines(plan)
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines)


def _projection_lines(plan: Inspection) -> list[str]:
    """The ``--nodes`` projection: its time, its limit, and what it assumed."""
    found = plan.projection()
    if found is None:
        return []
    seconds, limit = found
    nodes = min(plan.nodes, max(1, plan.samples))
    per_node_cpu = plan.compute_gbps * plan.threads
    storage = (
        f"{plan.storage_gbps:.3g} GB/s in total (--storage-gbps)"
        if plan.storage_gbps
        else f"{plan.read_gbps:.3g} GB/s to each node, as measured here"
    )
    lines = [
        f"projected on {nodes} node(s) x {plan.threads} thread(s): {_duration(seconds)}, "
        f"limited by {limit}",
        f"  CPU {per_node_cpu:.3g} GB/s per node; storage {storage}",
        f"  measured on sample 0 only ({_size(plan.measured_bytes)}): the compute rate "
        "once, with one thread (threads assumed to scale), the storage's by its first "
        "read (the disk's rate unless the file was cached)",
    ]
    if plan.nodes > nodes:
        lines.append(f"  only {nodes} of the {plan.nodes} nodes get a sample")
    if plan.storage_gbps and limit == "storage":
        useful = max(1, math.ceil(plan.storage_gbps / per_node_cpu))
        lines.append(f"  beyond {useful} node(s) the storage is the limit: more do not help")
    return lines
