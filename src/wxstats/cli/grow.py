"""The command line of statistics that grow: ``compute --state``, ``update``, ``merge``.

Kept apart from :mod:`wxstats.cli.parser` so that each module stays short;
the parser calls :func:`add_grow_commands`. Their options are those declared
for them (:mod:`wxstats.runtime.options`); ``update`` takes the selection of
the data from the state, never from its command line.
The work is :mod:`wxstats.runtime.grow` and :mod:`wxstats.runtime.merge`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

UPDATE_EPILOG = """\
examples:
  wxstats compute era5-1979-2019.zarr --state era5.wxstate --output era5.stats.nc
  wxstats update era5.wxstate era5-2020.zarr --state era5-2020.wxstate --output era5.stats.nc
  wxstats update era5.wxstate era5-2020.zarr --nproc 4 --state era5.wxstate --overwrite
  wxstats compute meps.datastore.yaml --state meps.wxstate
  wxstats update meps.wxstate bigger/meps.datastore.yaml --state bigger.wxstate

The statistics are the same bytes as one compute run over all the data. The new
data must start one time step after the state's last time (a gap is refused
unless --allow-gap) and have the state's variables, units and grid. The options
that select data (variables, steps, --skipna, --by, --weights, --pool...) are
taken from the state: a file it records (--weights FILE:VAR) is recorded with
its absolute path. A neural-lam datastore's update reads only the
samples that are not in the state, and writes what compute writes: neural-lam's
static files and wxstats_stats.nc, in the datastore's static/ or --output-dir.
"""

MERGE_EPILOG = """\
examples:
  wxstats compute y2019.zarr --state 2019.wxstate
  wxstats compute y2020.zarr --state 2020.wxstate    # elsewhere, at the same time
  wxstats merge 2020.wxstate 2019.wxstate --output all.stats.nc --state all.wxstate
  wxstats merge meps-a.wxstate meps-b.wxstate --output-dir static

States of disjoint time ranges, computed anywhere and in any order; differences
across adjacent ranges are counted once. Byte-identical to one run over all the
data: every time step is summed relative to its own reference. States of a
neural-lam datastore hold disjoint sets of samples; their statistics are
neural-lam's static files and wxstats_stats.nc, written in --output-dir.
"""


def add_grow_commands(commands: argparse._SubParsersAction) -> None:
    """The ``update`` and ``merge`` commands (their options: those declared for them)."""
    from wxstats.cli.compute_args import add_options

    update = commands.add_parser(
        "update",
        help="add new time steps or samples to a statistics state (same bytes as a full run)",
        description="Read only the new time steps (and the state's last steps for the "
        "differences across the boundary), or a datastore's samples not in the state, and "
        "write the statistics of all the data.",
        epilog=UPDATE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    update.add_argument("base", type=Path, metavar="STATE", help="a .wxstate file")
    update.add_argument(
        "dataset",
        help="the new data: zarr store, netCDF file, quoted glob or neural-lam datastore YAML",
    )
    add_options(update, "update")
    update.add_argument(
        "--only-new",
        action="store_true",
        help="DATASET may hold the state's times too (a store appended in place): use only "
        "the times after the state's last; its last time steps must be found unchanged (a "
        "datastore's update always reads only the samples not in the state)",
    )

    merge = commands.add_parser(
        "merge",
        help="join statistics states of disjoint time ranges or sets of samples",
        description="Join states computed separately (e.g. one per year, or per batch of "
        "samples of a neural-lam datastore) into the statistics of all their data.",
        epilog=MERGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    merge.add_argument("states", type=Path, nargs="+", metavar="STATE", help=".wxstate files")
    add_options(merge, "merge")


def run_update(args: argparse.Namespace, argv: list[str]) -> int:
    from wxstats.cli.commands import run_compute
    from wxstats.cli.compute_args import given_options
    from wxstats.runtime.merge import update_options

    options = update_options(
        args.base,
        args.dataset,
        only_new=args.only_new,
        argv=tuple(argv),
        **given_options(args, "update"),
    )
    return run_compute(options)


def run_merge(args: argparse.Namespace) -> int:
    from wxstats.cli.compute_args import given_options
    from wxstats.parallel.progress import plural
    from wxstats.runtime.merge import merge_states
    from wxstats.tools.report import format_table

    given = given_options(args, "merge")
    given.pop("quiet", None)
    stats, written = merge_states(args.states, **given)
    for note in stats.warnings:
        print(f"wxstats: warning: {note}", file=sys.stderr)
    if not args.quiet:
        print(format_table(stats))
        print(f"wrote {plural(len(written), 'file')}: " + ", ".join(str(p) for p in written))
    return 0
