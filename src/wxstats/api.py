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
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from wxstats import __version__
from wxstats.accumulate import RunAccumulator
from wxstats.atomic import Writer, check_writable, write_all
from wxstats.engine import accumulate, empty_accumulator, references
from wxstats.errors import WxstatsError
from wxstats.sources.base import Source, sample_sizes
from wxstats.stats import Stats, finalize

if TYPE_CHECKING:
    from wxstats.checkpoint import Resumable


class Communicator(Protocol):
    """How a run shares work and results between ranks (see distributed.py)."""

    rank: int
    world_size: int

    def allreduce(self, acc: RunAccumulator) -> RunAccumulator: ...

    def broadcast_bytes(self, key: str, payload: bytes) -> bytes:
        """Rank 0's ``payload``, on every rank (``--checkpoint``: the finished samples)."""
        ...


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
    # zarr / netCDF datasets (sources/xarray.py)
    splits: list[str] = field(default_factory=list)  # NAME=START/END, or a store's NAME
    variables: list[str] | None = None
    time_dim: str = "time"
    diff_steps: tuple[int, ...] | None = None  # default (1,)
    feature_dims: list[str] | None = None
    output: Path | None = None
    write_into: bool = False
    block_mb: float | None = None
    # --checkpoint DIR, --checkpoint-interval SECONDS, --resume (checkpoint.py)
    checkpoint: Path | None = None
    checkpoint_interval: float = 60.0
    resume: bool = False

    def resumable(self) -> Resumable | None:
        """The checkpoint use these options ask for (``None``: no checkpoint)."""
        from wxstats.checkpoint import Resumable

        if self.checkpoint is None:
            if self.resume:
                raise WxstatsError("--resume needs --checkpoint DIR (the folder to resume from)")
            return None
        return Resumable(self.checkpoint, resume=self.resume, interval=self.checkpoint_interval)


def open_source(path: str | Path, options: ComputeOptions) -> Source:
    """The source for ``path``: a neural-lam datastore YAML, else xarray
    (zarr store, netCDF file, glob of netCDF files)."""
    text = str(path)
    if text.endswith((".yaml", ".yml")):
        from wxstats.sources.npyfilesmeps import MepsSource

        if len(options.splits) > 1:
            raise WxstatsError(f"{path}: a neural-lam datastore takes one --split per run")
        _refuse_xarray_options(path, options)
        return MepsSource(path, split=options.split, step_length=options.step_length)
    return _open_xarray(path, options)


# -- zarr / netCDF (sources/xarray.py, writers/gridded.py, writers/mdp.py) --------
def _open_xarray(path: str | Path, options: ComputeOptions) -> Source:
    from wxstats.sources.xarray import DEFAULT_BLOCK_BYTES, XarrayOptions, XarraySource

    if options.step_length is not None:
        raise WxstatsError(
            "--step-length is for neural-lam datastores; for zarr/netCDF give --diff-steps "
            "(in time steps)"
        )
    specs = list(options.splits) or ([options.split] if options.split != "train" else [])
    block = DEFAULT_BLOCK_BYTES if options.block_mb is None else int(options.block_mb * 2**20)
    return XarraySource(
        path,
        XarrayOptions(
            splits=tuple(specs),
            variables=tuple(options.variables) if options.variables else None,
            time_dim=options.time_dim,
            diff_steps=tuple(options.diff_steps) if options.diff_steps else None,
            feature_dims=None if options.feature_dims is None else tuple(options.feature_dims),
            block_bytes=block,
        ),
    )


def _refuse_xarray_options(path: str | Path, options: ComputeOptions) -> None:
    given = {
        "--variables": options.variables,
        "--time-dim": options.time_dim != "time",
        "--diff-steps": options.diff_steps,
        "--feature-dims": options.feature_dims is not None,
        "--output": options.output,
        "--write-into": options.write_into,
        "--block-mb": options.block_mb,
    }
    flags = [flag for flag, value in given.items() if value]
    if flags:
        raise WxstatsError(f"{path}: {', '.join(flags)} apply to zarr/netCDF datasets only")


def _xarray_outputs(source, stats: Stats | None, options: ComputeOptions) -> dict:
    from wxstats.sources.xarray import output_stem
    from wxstats.writers.gridded import gridded_outputs

    output = options.output
    if output is None and options.summary is None and not options.write_into:
        output = Path(options.output_dir or ".") / f"{output_stem(source.path)}.stats.nc"
    return gridded_outputs(stats, source.layout, output, options.summary)


def _write_into(source, stats: Stats | None) -> None:
    """Check (``stats`` None) or write mllam-data-prep's variables into the store."""
    from wxstats.writers.mdp import check_store, mdp_values, planned_variables, write_into_store

    if not getattr(source, "is_mdp", False):
        raise WxstatsError(f"{source.path}: --write-into needs an mllam-data-prep zarr store")
    planned = planned_variables(source.streams, source.layout)
    if stats is None:
        check_store(source.path, planned)
    else:
        write_into_store(source.path, mdp_values(stats, planned), planned)


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
    checkpoint: Resumable | None = None,
) -> Stats:
    """Statistics of ``source``; with ``comm``, this rank's share plus the exact
    all-reduce. Byte-identical results for any split of the work.

    With ``checkpoint``, only the samples no earlier run finished are shared
    out, progress is saved as it goes, and rank 0 adds the earlier runs' exact
    sums before the all-reduce: the same bytes as one uninterrupted run."""
    started = time.time()
    rank, world = (comm.rank, comm.world_size) if comm else (0, 1)
    refs = references(source)
    todo, carried = range(len(source)), None
    if checkpoint is not None:
        todo, carried = checkpoint.start(source, skipna=skipna, comm=comm)
    mine = [todo[i] for i in partition(len(todo), rank, world)]
    acc = empty_accumulator(source)
    tracking = checkpoint.tracking(acc, on_sample) if checkpoint else nullcontext(on_sample)
    with tracking as after_sample:
        accumulate(
            source,
            mine,
            refs,
            skipna=skipna,
            threads=threads,
            on_sample=after_sample,
            into=acc,
        )
        if checkpoint is not None:
            checkpoint.finish()
        if carried is not None:
            acc.merge(carried)
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
        "bytes": sum(sample_sizes(source)),
    }
    if checkpoint is not None:
        stats.run["resumed_samples"] = checkpoint.done_before
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
    from wxstats.sources.xarray import XarraySource
    from wxstats.writers.netcdf import netcdf_writer
    from wxstats.writers.neurallam import DEFAULT_LEVEL_WEIGHTS, NEURALLAM_FILES, neurallam_outputs
    from wxstats.writers.summary import summary_writer

    if isinstance(source, XarraySource):
        return _xarray_outputs(source, stats, options)
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
    if options.write_into:
        _write_into(source, None)


def write_outputs(source: Source, stats: Stats, options: ComputeOptions) -> list[Path]:
    outputs = planned_outputs(source, stats, options)
    write_all({p: w for p, w in outputs.items() if w is not None}, options.overwrite)
    if options.write_into:
        _write_into(source, stats)
        return [*outputs, Path(source.path)]
    return list(outputs)
