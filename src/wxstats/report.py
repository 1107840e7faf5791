"""Human-readable views of statistics: the terminal table (plots come later)."""

from __future__ import annotations

import io

from wxstats.stats import Stats


def _g(value: float) -> str:
    return f"{value:.6g}"


def format_table(stats: Stats) -> str:
    """A table of the state (and forcing) statistics, as plain text; without a
    "state" stream (zarr/netCDF runs), one table per stream."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=160, force_terminal=False, color_system=None)
    if "state" not in stats.streams:
        for name, stream in stats.streams.items():
            console.print(_stream_table(stream, f"wxstats: {name}"))
        return buffer.getvalue().rstrip()
    console.print(_stream_table(stats.state, f"wxstats: {stats.source_kind} state statistics"))
    for stream in stats.forcing.values():
        for f, feature in enumerate(stream.features):
            console.print(
                f"forcing {feature}: mean {_g(stream.mean[f])} std {_g(stream.std[f])} "
                f"min {_g(stream.minimum[f])} max {_g(stream.maximum[f])} "
                f"count {int(stream.count[f])}"
            )
    return buffer.getvalue().rstrip()


def _stream_table(state, title: str):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in ("variable", "units", "mean", "std", "min", "max"):
        table.add_column(column, justify="left" if column in ("variable", "units") else "right")
    steps = sorted(state.diff)
    for k in steps:
        table.add_column(f"diff{k} mean", justify="right")
        table.add_column(f"diff{k} std", justify="right")
        table.add_column(f"diff{k} std/std", justify="right")
    for f, name in enumerate(state.features):
        row = [
            name,
            state.units[f],
            _g(state.mean[f]),
            _g(state.std[f]),
            _g(state.minimum[f]),
            _g(state.maximum[f]),
        ]
        for k in steps:
            _, std_ratio = state.standardized_diff(k)
            row += [_g(state.diff[k].mean[f]), _g(state.diff[k].std[f]), _g(std_ratio[f])]
        table.add_row(*row)
    return table
