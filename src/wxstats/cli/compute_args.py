"""The ``compute`` command's arguments, their value types and validation.

:func:`add_compute_arguments` defines them (``inspect`` shares the source
options); :func:`compute_options` turns the parsed arguments into the frozen
:class:`~wxstats.runtime.options.ComputeOptions` that travels down. A value
that cannot be right is refused here, by argparse, before anything is read.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from wxstats.core.errors import WxstatsError
from wxstats.core.untrusted import parse_json
from wxstats.runtime.options import ComputeOptions


def level_weights(text: str) -> dict[str, float]:
    from wxstats.io.formats.neurallam import parse_level_weights

    try:
        return parse_level_weights(text)
    except WxstatsError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_float(text: str) -> float:
    """A finite number > 0 (``nan`` and ``inf`` are floats too, and no good)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0.0 < value < math.inf):
        raise argparse.ArgumentTypeError(f"expects a finite number > 0 (got {text!r})")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
        if value < 1:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    return value


def names(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def steps(text: str) -> tuple[int, ...]:
    try:
        return tuple(positive_int(item) for item in text.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"--diff-steps expects positive whole numbers such as 1,3,6 (got {text!r})"
        ) from None


def add_compute_arguments(p: argparse.ArgumentParser) -> None:
    # the target table imports numpy: not before the command has set numpy's
    # environment (OPENBLAS_NUM_THREADS) and paused the collector (wxstats.cli.console)
    from wxstats.runtime.targets import FORMATS, format_help

    p.add_argument(
        "dataset",
        help="neural-lam datastore YAML (npyfilesmeps), or a zarr store (folder or URL), "
        "a netCDF file, or a quoted glob of netCDF files opened as one dataset",
    )
    p.add_argument(
        "--split",
        action="append",
        metavar="SPLIT",
        help="datastore YAML: the split folder (default: train); zarr/netCDF: "
        "NAME=START/END, an inclusive ISO 8601 interval, repeatable (default: one split "
        "'train' over all times, or an mllam-data-prep store's own splits)",
    )
    p.add_argument(
        "--period",
        metavar="START/END",
        help="compute the statistics over these times only (an inclusive ISO 8601 interval, "
        "e.g. 1979/2015: every split cut to it; a datastore's analysis times), distinct from "
        "the splits that name the outputs; recorded in every statistics file; for an anemoi "
        "dataset: its statistics window (default: its statistics_start/end_date, else "
        "anemoi's rule)",
    )
    p.add_argument(
        "--step-length",
        type=positive_int,
        metavar="HOURS",
        help="time step of the differences (default: the config's step_length)",
    )
    p.add_argument(
        "--summary",
        type=Path,
        metavar="FILE.json",
        help="also write the statistics as JSON (exact float64 values)",
    )
    p.add_argument(
        "--output-dir",
        type=Path,
        metavar="DIR",
        help="write the statistics here instead of <datastore dir>/static (the train split) "
        "or <datastore dir>/static/SPLIT (any other split: never where neural-lam loads its "
        "training normalization)",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace existing outputs (never done without it)"
    )
    p.add_argument(
        "--level-weights",
        type=level_weights,
        metavar="LEVEL=W,...",
        help="loss weight per vertical level for parameter_weights.npy "
        "(default 2=1,0=0.1,65=0.065,1000=0.1,850=0.05,500=0.03)",
    )
    p.add_argument(
        "--min-std",
        type=positive_float,
        metavar="VALUE",
        help="write max(std, VALUE) for every std neural-lam divides by (parameter_std.pt, "
        "diff_std.pt, the flux std; a --write-into store's std and diff_std); without it a "
        "std of 0 (a constant field) is refused. Choose VALUE far below any real std (e.g. "
        "1e-6): a constant field standardizes to 0 whatever it is. wxstats_stats.nc keeps "
        "the true values. Checked as stored: a std, or VALUE, that is 0 or subnormal in the "
        "file's dtype (float32 for .pt) counts as 0",
    )
    p.add_argument(
        "--skipna",
        action="store_true",
        help="leave NaN values out (counted in nan_count) instead of failing",
    )
    p.add_argument(
        "--moments",
        type=int,
        choices=(2, 4),
        default=2,
        help="the highest power of the values summed: 2 (default) the mean and std; 4 also "
        "the skewness and excess kurtosis of values and differences (exact like the rest; "
        "in the statistics file and the summary, not in a trainer's files)",
    )
    p.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="threads reading and reducing samples in this process "
        "(default: the CPUs available, at most 8)",
    )
    p.add_argument("--quiet", action="store_true", help="print only errors and warnings")
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="text: a progress bar on a terminal, else a line every --log-interval seconds; "
        "json: a JSON progress line every --log-interval seconds on stderr, for batch jobs",
    )
    p.add_argument(
        "--log-interval",
        type=seconds,
        default=30.0,
        metavar="SECONDS",
        help="seconds between progress lines when there is no terminal (default 30)",
    )
    z = p.add_argument_group("zarr / netCDF datasets")
    z.add_argument(
        "--variables",
        type=names,
        metavar="A,B",
        help="variables to use (default: every numeric variable with the time dimension)",
    )
    z.add_argument("--time-dim", default="time", help="the time dimension (default: time)")
    z.add_argument(
        "--by",
        choices=("month", "hour", "year"),
        help="a climatology: mean, std, extremes and differences per month of the year "
        "(or hour of the day) of each split, along a month (hour) dimension, in one pass; "
        "year: the same per calendar year of the data, along a year dimension (wxstats "
        "report then shows the drift: per-year and cumulative mean and std)",
    )
    z.add_argument(
        "--weights",
        metavar="coslat|VAR|FILE:VAR|none",
        help="area-weighted statistics of values, differences and forcings: coslat weights "
        "each grid point by the cosine of its latitude coordinate; VAR by a field of the "
        "dataset (a cell area), FILE:VAR by one of another file; none: unweighted (the "
        "default, but for --format makani: coslat); recorded in every output",
    )
    z.add_argument(
        "--diff-steps",
        type=steps,
        metavar="K,...",
        help="time-difference steps, in time steps (default: 1)",
    )
    z.add_argument(
        "--feature-dims",
        type=names,
        metavar="DIM,...",
        help="dimensions whose entries are separate features, e.g. level -> z_500 (default: "
        "*_feature and vertical-level dimensions; '' for none); all others are reduced",
    )
    z.add_argument(
        "--pool",
        type=names,
        action="append",
        metavar="DIM,...",
        help="also the statistics of each variable over all entries of these feature "
        "dimensions together (e.g. level: one mean and std per variable, as anemoi's joint "
        "normalizer), exact whatever the counts per level; written as {var}_pooled__{split}__"
        "{op} and in the summary",
    )
    z.add_argument(
        "--output", type=Path, metavar="FILE.nc", help="the statistics file (netCDF, float64)"
    )
    z.add_argument(
        "--format",
        dest="output_format",
        choices=FORMATS,
        default="netcdf",
        help=format_help(),
    )
    z.add_argument(
        "--write-into",
        action="store_true",
        help="mllam-data-prep store: replace its {category}__{split}__{mean,std,diff_mean,"
        "diff_std} variables with the exact values; anemoi dataset: its mean, stdev, minimum, "
        "maximum and statistics_tendencies_* arrays and statistics dates",
    )
    z.add_argument(
        "--block-mb",
        type=positive_float,
        metavar="MB",
        help="memory per block of time steps (default 32; at least one storage chunk)",
    )
    z.add_argument(
        "--storage-option",
        type=storage_option,
        action="append",
        metavar="KEY=VALUE",
        help="an fsspec option for a URL (s3://, gs://...), repeatable: endpoint_url=URL, "
        "anon=true, profile=NAME; VALUE is read as JSON when it parses (true, 64, {...}); "
        "credentials otherwise come from the environment (AWS_ACCESS_KEY_ID...)",
    )
    add_checkpoint_arguments(p)
    add_parallel_arguments(p)


def storage_option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    try:
        return key.strip(), parse_json(value, text)
    except ValueError:
        return key.strip(), value


def seconds(text: str) -> float:
    try:
        value = float(text)
        if not value >= 0:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}") from None
    return value


def add_checkpoint_arguments(p: argparse.ArgumentParser) -> None:
    """Options of resumable runs (see wxstats.runtime.resumable, docs/parallel.md)."""
    g = p.add_argument_group("resuming after a crash")
    g.add_argument(
        "--checkpoint",
        type=Path,
        metavar="DIR",
        help="save progress in DIR (a new or empty folder; every rank; a shared folder for "
        "several nodes), so that a killed run can be resumed; kept after success",
    )
    g.add_argument(
        "--checkpoint-interval",
        type=seconds,
        default=60.0,
        metavar="SECONDS",
        help="most seconds between saves of each rank's progress (default 60)",
    )
    g.add_argument(
        "--resume",
        action="store_true",
        help="continue the run saved in --checkpoint DIR (any number of ranks, any launcher); "
        "refused if DIR holds no checkpoint, or the data or the options changed",
    )


def add_parallel_arguments(p: argparse.ArgumentParser) -> None:
    """Options of parallel runs (see wxstats.parallel.launch and docs/parallel.md)."""
    g = p.add_argument_group("parallel runs (also under torchrun or srun)")
    g.add_argument(
        "--nproc",
        type=positive_int,
        metavar="N",
        help="start N ranks on this machine (PyTorch Distributed: the torch extra); the results "
        "are identical. "
        "On one machine threads (--threads) are faster (each rank pays the start-up): use "
        "ranks across machines (torchrun, srun) or one per GPU",
    )
    g.add_argument(
        "--backend",
        choices=("auto", "gloo", "nccl"),
        default="auto",
        help="collectives backend (default: nccl on CUDA devices, else gloo)",
    )
    g.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="device of the reduced tensors (default: cuda:LOCAL_RANK if there is a GPU "
        "for every local rank, else cpu)",
    )
    g.add_argument(
        "--timeout",
        type=positive_float,
        default=120.0,
        metavar="SECONDS",
        help="how long to wait for ranks to join, for a silent rank before it is declared "
        "dead, and for ranks to stop after a failure (default 120)",
    )


def compute_options(args: argparse.Namespace, argv: list[str]) -> ComputeOptions:
    """The options of a ``compute`` command line (``argv`` for ``--nproc``)."""
    return ComputeOptions(
        dataset=args.dataset,
        splits=tuple(args.split or ()),
        period=args.period,
        by=args.by,
        weights=args.weights,
        variables=args.variables,
        time_dim=args.time_dim,
        diff_steps=args.diff_steps,
        feature_dims=args.feature_dims,
        pool=tuple(dict.fromkeys(d for group in args.pool or () for d in group if d)),
        moments=getattr(args, "moments", 2),
        output=args.output,
        write_into=args.write_into,
        output_format=args.output_format,
        block_mb=args.block_mb,
        storage_options=tuple(args.storage_option or ()),
        step_length=args.step_length,
        skipna=args.skipna,
        threads=args.threads,
        output_dir=args.output_dir,
        summary=args.summary,
        overwrite=args.overwrite,
        level_weights=args.level_weights,
        min_std=args.min_std,
        checkpoint=args.checkpoint,
        checkpoint_interval=args.checkpoint_interval,
        resume=args.resume,
        state=getattr(args, "state", None),
        nproc=args.nproc,
        backend=args.backend,
        device=args.device,
        timeout=args.timeout,
        quiet=args.quiet,
        log_format=args.log_format,
        log_interval=args.log_interval,
        argv=tuple(argv),
    )
