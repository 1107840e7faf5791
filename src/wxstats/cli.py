"""Command-line interface: argument parsing only; the work is in the library.

Errors about the input (:class:`~wxstats.errors.WxstatsError`) are printed on
one line, without a traceback, and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from wxstats import __version__
from wxstats.errors import Interrupted, WxstatsError

COMPUTE_EPILOG = """\
examples:
  wxstats compute data/meps.datastore.yaml
  wxstats compute data/meps.datastore.yaml --split train --step-length 3 --summary stats.json
  wxstats compute data/meps.datastore.yaml --overwrite --level-weights 2=1,0=0.1,65=0.065
  wxstats compute era5.zarr --split train=2019-03-01/2019-03-20 --split val=2019-03-21/2019-03-31
  wxstats compute era5.nc --split train=2019-03-01T00:00/2019-03-20T23:00 --diff-steps 1,3,6
  wxstats compute 'era5_*.nc' --variables t2m,z --feature-dims level --summary stats.json
  wxstats compute danra.zarr --write-into      # mllam-data-prep store: replace its statistics
  wxstats compute data/meps.datastore.yaml --checkpoint ck/   # killed? add --resume

outputs (neural-lam MEPS datastore): <datastore dir>/static/parameter_mean.pt,
parameter_std.pt, diff_mean.pt, diff_std.pt, flux_stats.pt, parameter_weights.npy
and wxstats_stats.nc (all statistics in float64, self-describing).
outputs (zarr/netCDF): --output FILE.nc with {variable}__{split}__{op} like
mllam-data-prep (default ./<dataset>.stats.nc), --summary FILE.json, --write-into.
"""

EXAMPLE_EPILOG = """\
examples:
  wxstats example                 # writes ./wxstats-example and computes its statistics
  wxstats example /tmp/meps --times 6 --grid 64 80
"""

REPORT_EPILOG = """\
examples:
  wxstats report data/static/wxstats_stats.nc -o report/   # our statistics file
  wxstats report stats.json                                # a --summary JSON
  wxstats report data/static                               # a neural-lam static/ folder
  wxstats report dataset.zarr --split train                # an mllam-data-prep zarr

writes DIR/wxstats_report.png and DIR/wxstats_report.html (self-contained, the
figure inlined), replacing an earlier report there; prints the warnings found.
"""

COMPARE_EPILOG = """\
examples:
  wxstats compare old/static/wxstats_stats.nc new/static/wxstats_stats.nc
  wxstats compare data/static data/static/wxstats_stats.nc --rtol 1e-6
  wxstats compare dataset.zarr data/static --rtol 1e-3

A and B may each be a wxstats .nc or .json, a neural-lam static/ folder (names
from the datastore YAML beside it) or an mllam-data-prep zarr. Variables are
matched by name (by position, with a warning, when one side has no names).
exit status: 0 same within --rtol, 1 different, 2 unreadable input.
"""

INSPECT_EPILOG = """\
examples:
  wxstats inspect data/meps.datastore.yaml
  wxstats inspect data/meps.datastore.yaml --split val --threads 16

Reads only the first sample (twice: a raw read and one timed computation) to
measure this machine; writes nothing.
"""


def _level_weights(text: str) -> dict[str, float]:
    weights = {}
    for item in text.split(","):
        level, sep, weight = item.partition("=")
        try:
            if not sep:
                raise ValueError
            weights[level.strip()] = float(weight)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--level-weights expects LEVEL=WEIGHT,... (got {item!r})"
            ) from None
    return weights


def _positive_int(text: str) -> int:
    try:
        value = int(text)
        if value < 1:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wxstats",
        description="Exact, fast, parallel normalization statistics for weather ML datasets.",
    )
    parser.add_argument("--version", action="version", version=f"wxstats {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    compute = commands.add_parser(
        "compute",
        help="compute the statistics of a dataset and write them",
        description="Compute mean, std, min, max and time-difference statistics in one pass, "
        "exactly (float64, the same bits for any parallel layout).",
        epilog=COMPUTE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_compute_arguments(compute)

    example = commands.add_parser(
        "example",
        help="write a small MEPS-like dataset and compute its statistics",
        description="Write a small dataset in neural-lam's MEPS layout (realistic magnitudes, "
        "two ensemble members) and run 'compute' on it, printing a table.",
        epilog=EXAMPLE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    example.add_argument(
        "directory",
        nargs="?",
        default="wxstats-example",
        type=Path,
        help="where to write the dataset (default: ./wxstats-example)",
    )
    example.add_argument(
        "--times",
        type=_positive_int,
        default=3,
        help="analysis times in the train split (default 3)",
    )
    example.add_argument("--members", type=_positive_int, default=2, help="ensemble members (2)")
    example.add_argument(
        "--grid",
        type=_positive_int,
        nargs=2,
        default=(32, 40),
        metavar=("NY", "NX"),
        help="grid size (default 32 40)",
    )
    example.add_argument(
        "--overwrite", action="store_true", help="replace statistics already in DIRECTORY/static"
    )

    report = commands.add_parser(
        "report",
        help="draw a statistics set: PNG figure and HTML page",
        description="Write a figure and a self-contained HTML page of a statistics set: per "
        "variable mean and std with units, min/max, diff_std/std per step, counts, NaN counts "
        "and warnings (constant fields, suspicious ranges).",
        epilog=REPORT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    report.add_argument("stats", type=Path, help="statistics file or folder (see examples)")
    report.add_argument(
        "-o", "--output-dir", type=Path, default=Path("."), metavar="DIR", help="(default: .)"
    )
    report.add_argument("--split", help="split to show when the file holds several")

    compare = commands.add_parser(
        "compare",
        help="compare two statistics sets variable by variable",
        description="Relative differences of every statistic two sets share; exit 1 above "
        "--rtol. The tool to check old statistics against new ones.",
        epilog=COMPARE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    compare.add_argument("a", type=Path, metavar="A", help="statistics file or folder")
    compare.add_argument("b", type=Path, metavar="B", help="statistics file or folder")
    compare.add_argument(
        "--rtol",
        type=float,
        default=1e-6,
        help="largest relative difference accepted (default 1e-6: float32 files pass)",
    )
    compare.add_argument("--split", help="split to read when a file holds several")

    inspect = commands.add_parser(
        "inspect",
        help="say what 'compute' would do, without doing it",
        description="Source kind, samples, variables, bytes to read, files to write, and an "
        "estimated run time from rates measured now on the first sample.",
        epilog=INSPECT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    inspect.add_argument("dataset", type=Path, help="neural-lam datastore YAML (npyfilesmeps)")
    inspect.add_argument("--split", default="train", help="split (default: train)")
    inspect.add_argument("--step-length", type=_positive_int, metavar="HOURS")
    inspect.add_argument("--output-dir", type=Path, metavar="DIR")
    inspect.add_argument("--threads", type=_positive_int, help="threads the run would use")
    inspect.add_argument("--skipna", action="store_true", help="as for compute")
    inspect.add_argument("--no-measure", action="store_true", help="skip the timing (no estimate)")
    return parser


def _names(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _steps(text: str) -> tuple[int, ...]:
    try:
        return tuple(_positive_int(item) for item in text.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"--diff-steps expects positive whole numbers such as 1,3,6 (got {text!r})"
        ) from None


def add_compute_arguments(p: argparse.ArgumentParser) -> None:
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
        "--step-length",
        type=_positive_int,
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
        help="write the statistics here instead of <datastore dir>/static",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace existing outputs (never done without it)"
    )
    p.add_argument(
        "--level-weights",
        type=_level_weights,
        metavar="LEVEL=W,...",
        help="loss weight per vertical level for parameter_weights.npy "
        "(default 2=1,0=0.1,65=0.065,1000=0.1,850=0.05,500=0.03)",
    )
    p.add_argument(
        "--skipna",
        action="store_true",
        help="leave NaN values out (counted in nan_count) instead of failing",
    )
    p.add_argument(
        "--threads",
        type=_positive_int,
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
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="seconds between progress lines when there is no terminal (default 30)",
    )
    z = p.add_argument_group("zarr / netCDF datasets")
    z.add_argument(
        "--variables",
        type=_names,
        metavar="A,B",
        help="variables to use (default: every numeric variable with the time dimension)",
    )
    z.add_argument("--time-dim", default="time", help="the time dimension (default: time)")
    z.add_argument(
        "--diff-steps",
        type=_steps,
        metavar="K,...",
        help="time-difference steps, in time steps (default: 1)",
    )
    z.add_argument(
        "--feature-dims",
        type=_names,
        metavar="DIM,...",
        help="dimensions whose entries are separate features, e.g. level -> z_500 (default: "
        "*_feature and vertical-level dimensions; '' for none); all others are reduced",
    )
    z.add_argument(
        "--output", type=Path, metavar="FILE.nc", help="the statistics file (netCDF, float64)"
    )
    z.add_argument(
        "--write-into",
        action="store_true",
        help="mllam-data-prep store: replace its {category}__{split}__{mean,std,diff_mean,"
        "diff_std} variables with the exact values",
    )
    z.add_argument(
        "--block-mb",
        type=float,
        metavar="MB",
        help="memory per block of time steps (default 32; at least one storage chunk)",
    )
    add_checkpoint_arguments(p)
    add_parallel_arguments(p)


def _seconds(text: str) -> float:
    try:
        value = float(text)
        if not value >= 0:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}") from None
    return value


def add_checkpoint_arguments(p: argparse.ArgumentParser) -> None:
    """Options of resumable runs (see checkpoint.py and README "Resuming after a crash")."""
    g = p.add_argument_group("resuming after a crash")
    g.add_argument(
        "--checkpoint",
        type=Path,
        metavar="DIR",
        help="save progress in DIR (every rank; a shared folder for several nodes), so that "
        "a killed run can be resumed; kept after success",
    )
    g.add_argument(
        "--checkpoint-interval",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="most seconds between saves of each rank's progress (default 60)",
    )
    g.add_argument(
        "--resume",
        action="store_true",
        help="continue the run saved in --checkpoint DIR (any number of ranks, any launcher); "
        "refused if the data or the options changed",
    )


def add_parallel_arguments(p: argparse.ArgumentParser) -> None:
    """Options of parallel runs (see distributed.py and README "Running in parallel")."""
    g = p.add_argument_group("parallel runs (also under torchrun or srun)")
    g.add_argument(
        "--nproc",
        type=_positive_int,
        metavar="N",
        help="start N ranks on this machine (PyTorch Distributed); the results are identical",
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
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="how long to wait for ranks to join, for a silent rank before it is declared "
        "dead, and for ranks to stop after a failure (default 120)",
    )


def _default_threads() -> int:
    import os

    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 8))


def options_from_args(args: argparse.Namespace):
    from wxstats.api import ComputeOptions

    return ComputeOptions(
        split=args.split[0] if args.split else "train",
        splits=list(args.split or []),
        variables=args.variables,
        time_dim=args.time_dim,
        diff_steps=args.diff_steps,
        feature_dims=args.feature_dims,
        output=args.output,
        write_into=args.write_into,
        block_mb=args.block_mb,
        step_length=args.step_length,
        skipna=args.skipna,
        threads=args.threads or _default_threads(),
        output_dir=args.output_dir,
        summary=args.summary,
        overwrite=args.overwrite,
        level_weights=args.level_weights,
        checkpoint=args.checkpoint,
        checkpoint_interval=args.checkpoint_interval,
        resume=args.resume,
    )


def progress_for(args: argparse.Namespace, source):
    """The progress reporter --log-format / --quiet ask for."""
    from wxstats.progress import ProgressReporter

    mode = "json" if args.log_format == "json" else ("none" if args.quiet else "bar")
    from wxstats.sources.base import sample_sizes

    sizes = sample_sizes(source)
    return ProgressReporter(len(source), sizes.__getitem__, sum(sizes), mode, args.log_interval)


def run_compute(args: argparse.Namespace) -> int:
    from wxstats import preload
    from wxstats.api import check_outputs, compute_source, open_source, write_outputs
    from wxstats.checkpoint import resume_hint
    from wxstats.report import format_table

    if getattr(args, "nproc", None) or _launched_as_rank():
        return _run_parallel(args)
    options = options_from_args(args)
    checkpoint = options.resumable()
    source = open_source(args.dataset, options)
    check_outputs(source, options)
    # import the writers' libraries while the (GIL-free) kernel reads the data
    after_first = preload.after_first()
    with progress_for(args, source) as progress:

        def on_sample(index: int) -> None:
            progress.update(index)
            after_first(index)

        try:
            stats = compute_source(
                source,
                skipna=options.skipna,
                threads=options.threads,
                on_sample=on_sample,
                checkpoint=checkpoint,
            )
        except WxstatsError as exc:
            if checkpoint is not None and checkpoint.started and not isinstance(exc, Interrupted):
                print(f"wxstats: error: {exc}", file=sys.stderr)
                print(f"wxstats: {resume_hint(checkpoint.directory)}", file=sys.stderr)
                return 2
            raise
    written = write_outputs(source, stats, options)
    for note in stats.warnings:
        print(f"wxstats: warning: {note}", file=sys.stderr)
    if not args.quiet:
        print(format_table(stats))
        print(f"wrote {len(written)} files: " + ", ".join(str(p) for p in written))
    return 0


def _launched_as_rank() -> bool:
    from wxstats.distributed import detect_launch

    return detect_launch() is not None


def _run_parallel(args: argparse.Namespace) -> int:
    from wxstats import distributed

    launch = distributed.detect_launch()
    if args.nproc:
        if launch is not None and launch.world_size > 1:
            raise WxstatsError(
                "--nproc starts ranks itself: do not combine it with torchrun or srun -n N>1"
            )
        return distributed.launch_local(
            distributed.strip_nproc(args.argv), args.nproc, args.timeout
        )
    return distributed.run_rank(args, launch)


def run_example(args: argparse.Namespace) -> int:
    import time

    from wxstats.example import ExampleSpec, write_example

    started = time.perf_counter()
    spec = ExampleSpec(analysis_times=args.times, members=args.members, grid=tuple(args.grid))
    config = write_example(args.directory, spec)
    print(f"wrote example dataset: {config}")
    compute_args = build_parser().parse_args(
        ["compute", str(config)] + (["--overwrite"] if args.overwrite else [])
    )
    status = run_compute(compute_args)
    print(f"example finished in {time.perf_counter() - started:.1f} s")
    return status


def run_report(args: argparse.Namespace) -> int:
    from wxstats.report import write_report

    written, found = write_report(args.stats, args.output_dir, args.split)
    for f in found:
        print(f"warning: {f.category} {f.variable}: {f.message}")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def run_compare(args: argparse.Namespace) -> int:
    from wxstats.compare import compare, format_comparison
    from wxstats.readers import read_stats

    if not args.rtol >= 0:
        raise WxstatsError(f"--rtol must be a number >= 0, got {args.rtol}")
    result = compare(read_stats(args.a, args.split), read_stats(args.b, args.split), args.rtol)
    print(format_comparison(result))
    return result.exit_code


def run_inspect(args: argparse.Namespace) -> int:
    from wxstats.api import ComputeOptions
    from wxstats.inspection import format_plan, inspect_dataset

    options = ComputeOptions(
        split=args.split,
        step_length=args.step_length,
        skipna=args.skipna,
        threads=args.threads or _default_threads(),
        output_dir=args.output_dir,
    )
    print(format_plan(inspect_dataset(args.dataset, options, not args.no_measure)))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            # zarr's note that v3 has no consolidated metadata concerns its authors, not
            # our users (mllam-data-prep stores are consolidated; we keep them so)
            warnings.filterwarnings("ignore", message="Consolidated metadata is currently not")
            warnings.formatwarning = lambda message, *a, **k: f"wxstats: warning: {message}\n"
            if args.command == "compute":
                return run_compute(args)
            if args.command == "example":
                return run_example(args)
            if args.command == "report":
                return run_report(args)
            if args.command == "compare":
                return run_compare(args)
            if args.command == "inspect":
                return run_inspect(args)
    except Interrupted as exc:
        print(f"wxstats: {exc}", file=sys.stderr)
        return exc.code
    except WxstatsError as exc:
        print(f"wxstats: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wxstats: interrupted; no output was written", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of our output went away (`wxstats compare A B | head`): stop quietly,
        # pointing stdout at /dev/null so the interpreter's final flush cannot fail again
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return 1
