"""The command line: the commands and their arguments, nothing else.

:func:`build_parser` defines every command; the ``compute`` arguments and
their validation come from the declaration of options
(:mod:`wxstats.runtime.options`, turned into arguments by :mod:`wxstats.cli.compute_args`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from wxstats import __version__
from wxstats.cli.compute_args import (
    add_compute_arguments,
    compute_options,
    positive_int,
)
from wxstats.cli.examples import (
    COMPARE_EPILOG,
    COMPUTE_EPILOG,
    EXAMPLE_EPILOG,
    INSPECT_EPILOG,
    REPORT_EPILOG,
)
from wxstats.cli.grow import add_grow_commands
from wxstats.runtime.option import positive_float

__all__ = ["build_parser", "compute_options"]


class OneLineParser(argparse.ArgumentParser):
    """A refused argument is one line, ``wxstats COMMAND: error: ...``, status 2:
    the usage block argparse prints first buries the reason (``--help`` has it)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
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
    add_grow_commands(commands)

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
        type=positive_int,
        default=3,
        help="analysis times in the train split (default 3)",
    )
    example.add_argument("--members", type=positive_int, default=2, help="ensemble members (2)")
    example.add_argument(
        "--grid",
        type=positive_int,
        nargs=2,
        default=(32, 40),
        metavar=("NY", "NX"),
        help="grid size (default 32 40)",
    )
    example.add_argument(
        "--overwrite",
        action="store_true",
        help="write into a DIRECTORY that is not empty (files of the same names are replaced) "
        "and replace statistics already in DIRECTORY/static; without it a non-empty DIRECTORY "
        "is refused, unless it holds this same example, which is reused",
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
    report.add_argument(
        "--last-years",
        type=int,
        default=2,
        metavar="N",
        help="per-year statistics (compute --by year): flag a variable whose last N years' "
        "average yearly mean (std) lies outside the earlier years' average ± 2 × their "
        "year-to-year scatter, and tabulate the change of the cumulative mean and std over "
        "the last N years (default 2)",
    )

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

    doctor = commands.add_parser(
        "doctor",
        help="versions, torch build, backends and launcher: what a bug report needs",
        description="Print the versions of wxstats and its libraries, the torch build (CPU or "
        "CUDA) with its gloo/NCCL backends, the CPUs available and the launcher detected.",
    )
    doctor.add_argument("--json", action="store_true", help="as JSON")

    inspect = commands.add_parser(
        "inspect",
        help="say what 'compute' would do, without doing it",
        description="Take the arguments of a 'compute' command and say what it would do: "
        "source kind, samples, variables, bytes to read, files to write, and an estimated "
        "run time from rates measured now on the first sample. What compute refuses before "
        "reading (outputs, options, every sample file's header and size) is refused here too.",
        epilog=INSPECT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_compute_arguments(inspect, "inspect")
    inspect.add_argument("--no-measure", action="store_true", help="skip the timing (no estimate)")
    inspect.add_argument(
        "--nodes", type=positive_int, default=1, metavar="N",
        help="also project the time on N nodes like this one (default 1)",
    )  # fmt: skip
    inspect.add_argument(
        "--storage-gbps", type=positive_float, default=None, metavar="GBPS",
        help="the storage's total bandwidth for all nodes (default: each node reads at "
        "the rate measured here)",
    )  # fmt: skip
    return parser
