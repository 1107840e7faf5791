"""The public entry points: open a dataset, compute its statistics, write them.

Data flows one way: source → kernel → exact accumulator → (gather across
ranks) → finalize → writers. :func:`compute` is what a notebook calls;
:func:`run` is what ``wxstats compute`` calls (it also writes files).
"""

from __future__ import annotations

import getpass
import os
import platform
import socket
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from wxstats import __version__
from wxstats.accumulate import RunAccumulator
from wxstats.atomic import Writer, check_writable, write_all
from wxstats.engine import accumulate, empty_accumulator, references
from wxstats.errors import WxstatsError
from wxstats.sources.base import Source
from wxstats.stats import Stats, finalize


class Communicator(Protocol):
    """How a run shares work and results between ranks (see distributed.py)."""

    rank: int
    world_size: int

    def allreduce(self, acc: RunAccumulator) -> RunAccumulator: ...


@dataclass
class ComputeOptions:
    """Everything that selects data or changes results (and how to run)."""

    split: str = "train"
    step_length: int | None = None
    skipna: bool = False
    threads: int = 1
    output_dir: Path | None = None
    summary: Path | None = None
    overwrite: bool = False
    level_weights: dict[str, float] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def open_source(path: str | Path, options: ComputeOptions) -> Source:
    """The source for ``path``: a neural-lam datastore YAML, else xarray."""
    text = str(path)
    if text.endswith((".yaml", ".yml")):
        from wxstats.sources.npyfilesmeps import MepsSource

        return MepsSource(path, split=options.split, step_length=options.step_length)
    raise WxstatsError(
        f"{path}: unknown dataset kind; expected a neural-lam datastore YAML (*.yaml)"
    )


def partition(n_samples: int, rank: int, world_size: int) -> range:
    """Contiguous, balanced ranges: every sample exactly once, no padding."""
    base, extra = divmod(n_samples, world_size)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))


def compute_source(
    source: Source,
    *,
    skipna: bool = False,
    threads: int = 1,
    comm: Communicator | None = None,
    on_sample=None,
) -> Stats:
    """Statistics of ``source``; with ``comm``, this rank's share plus the exact
    all-reduce. Byte-identical results for any split of the work."""
    started = time.time()
    rank, world = (comm.rank, comm.world_size) if comm else (0, 1)
    refs = references(source)
    mine = partition(len(source), rank, world)
    acc = accumulate(
        source,
        mine,
        refs,
        skipna=skipna,
        threads=threads,
        on_sample=on_sample,
        into=empty_accumulator(source),
    )
    if comm is not None:
        acc = comm.allreduce(acc)
    stats = finalize(acc, source.streams, refs, source.kind)
    stats.attrs = dict(source.attrs)
    stats.attrs["skipna"] = int(skipna)
    stats.run = {
        "wxstats_version": __version__,
        "started": datetime.fromtimestamp(started, timezone.utc).isoformat(),
        "seconds": round(time.time() - started, 3),
        "host": socket.gethostname(),
        "user": _user(),
        "python": platform.python_version(),
        "world_size": world,
        "threads_per_rank": threads,
        "samples": len(source),
        "bytes": int(sum(source.nbytes(i) for i in range(len(source)))),
    }
    return stats


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def compute(path: str | Path, **options: Any) -> Stats:
    """Statistics of the dataset at ``path`` (one process), for notebooks.

    >>> stats = wxstats.compute("meps.datastore.yaml", split="train")
    >>> stats.state.mean, stats.state.diff[3].std
    """
    opts = ComputeOptions(**options)
    source = open_source(path, opts)
    return compute_source(source, skipna=opts.skipna, threads=opts.threads)


def planned_outputs(
    source: Source, stats: Stats | None, options: ComputeOptions
) -> dict[Path, Writer | None]:
    """The files a run writes (writers need ``stats``; ``None`` only lists paths)."""
    from wxstats.sources.npyfilesmeps import FLUX_NAME, MepsSource
    from wxstats.writers.netcdf import netcdf_writer
    from wxstats.writers.neurallam import DEFAULT_LEVEL_WEIGHTS, NEURALLAM_FILES, neurallam_outputs
    from wxstats.writers.summary import summary_writer

    outputs: dict[Path, Writer | None] = {}
    if isinstance(source, MepsSource):
        static = options.output_dir or source.static_dir
        if stats is None:
            outputs.update({static / name: None for name in NEURALLAM_FILES})
        else:
            outputs.update(
                neurallam_outputs(
                    stats,
                    static,
                    source.step_length,
                    FLUX_NAME,
                    source.levels(),
                    options.level_weights or DEFAULT_LEVEL_WEIGHTS,
                )
            )
        outputs[static / "wxstats_stats.nc"] = (
            netcdf_writer(stats, options.split) if stats else None
        )
    if options.summary is not None:
        outputs[Path(options.summary)] = summary_writer(stats) if stats else None
    return outputs


def check_outputs(source: Source, options: ComputeOptions) -> None:
    """Refuse up front (before hours of work) outputs that exist or cannot be written."""
    check_writable(list(planned_outputs(source, None, options)), options.overwrite)


def write_outputs(source: Source, stats: Stats, options: ComputeOptions) -> list[Path]:
    outputs = planned_outputs(source, stats, options)
    write_all({p: w for p, w in outputs.items() if w is not None}, options.overwrite)
    return list(outputs)
