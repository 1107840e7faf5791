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
from wxstats.errors import WxstatsError

COMPUTE_EPILOG = """\
examples:
  wxstats compute data/meps.datastore.yaml
  wxstats compute data/meps.datastore.yaml --split train --step-length 3 --summary stats.json
  wxstats compute data/meps.datastore.yaml --overwrite --level-weights 2=1,0=0.1,65=0.065

outputs (neural-lam MEPS datastore): <datastore dir>/static/parameter_mean.pt,
parameter_std.pt, diff_mean.pt, diff_std.pt, flux_stats.pt, parameter_weights.npy
and wxstats_stats.nc (all statistics in float64, self-describing).
"""

EXAMPLE_EPILOG = """\
examples:
  wxstats example                 # writes ./wxstats-example and computes its statistics
  wxstats example /tmp/meps --times 6 --grid 64 80
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
    return parser


def add_compute_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dataset", type=Path, help="neural-lam datastore YAML (npyfilesmeps)")
    p.add_argument("--split", default="train", help="split to compute over (default: train)")
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
        split=args.split,
        step_length=args.step_length,
        skipna=args.skipna,
        threads=args.threads or _default_threads(),
        output_dir=args.output_dir,
        summary=args.summary,
        overwrite=args.overwrite,
        level_weights=args.level_weights,
    )


def run_compute(args: argparse.Namespace) -> int:
    from wxstats import preload
    from wxstats.api import check_outputs, compute_source, open_source, write_outputs
    from wxstats.report import format_table

    options = options_from_args(args)
    source = open_source(args.dataset, options)
    check_outputs(source, options)
    # import the writers' libraries while the (GIL-free) kernel reads the data
    stats = compute_source(
        source, skipna=options.skipna, threads=options.threads, on_sample=preload.after_first()
    )
    written = write_outputs(source, stats, options)
    for note in stats.warnings:
        print(f"wxstats: warning: {note}", file=sys.stderr)
    if not args.quiet:
        print(format_table(stats))
        print(f"wrote {len(written)} files: " + ", ".join(str(p) for p in written))
    return 0


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


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.formatwarning = lambda message, *a, **k: f"wxstats: warning: {message}\n"
            if args.command == "compute":
                return run_compute(args)
            if args.command == "example":
                return run_example(args)
    except WxstatsError as exc:
        print(f"wxstats: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wxstats: interrupted; no output was written", file=sys.stderr)
        return 130
    return 1
