"""Human-readable views of statistics: the terminal table, and the report
(a PNG figure and a self-contained HTML page) of any statistics set.

The report reads files through :mod:`wxstats.io.read`, so it works on what
users have: wxstats' netCDF (of any source) or JSON summary, a neural-lam
``static/`` folder or an mllam-data-prep zarr (showing what each of them holds).
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import numpy as np

from wxstats.core.stats import VALUE_OPS, Stats, StreamStats
from wxstats.tools.labels import feature_labels, with_labels

REPORT_NAMES = ("wxstats_report.png", "wxstats_report.html")
DRIFT_NAME = "wxstats_drift.png"
"""Written beside them for a per-year set (``compute --by year``)."""


def _g(value: float) -> str:
    return f"{value:.6g}"


def format_table(stats: Stats) -> str:
    """One table per split with every variable of it (state, forcing and static
    streams, one row per feature, a climatology's group said in words), as plain
    text wide enough that no number or header is cut."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=100_000, force_terminal=False, color_system=None)
    splits = stats.splits() or [None]
    for split in splits:
        streams = [s for s in stats.streams.values() if s.split in (split, None)]
        where = f", split {split}" if split else ""
        console.print(_rich_table(streams, f"wxstats: {stats.source_kind}{where}"))
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()).rstrip()


def _rich_table(streams: list[StreamStats], title: str):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    values = [
        op for op in ("mean", "std", "min", "max") if any(s.op(op) is not None for s in streams)
    ]
    for column in ("variable", "units", *values):
        table.add_column(column, justify="left" if column in ("variable", "units") else "right",
                         no_wrap=True)  # fmt: skip
    labels = {}  # one set of columns per time span (or step), in order
    for stream in streams:
        for k in sorted(stream.diff, key=lambda k: (k is None, k or 0)):
            labels.setdefault(stream.diff_label(k), None)
    for label in labels:
        for what in ("mean", "std", "std/std"):
            table.add_column(f"{label} {what}", justify="right", no_wrap=True)
    empty = 0
    for stream in streams:
        by_label = {stream.diff_label(k): k for k in stream.diff}
        ratios = {k: stream.standardized_diff(k)[1] for k in stream.diff}
        for f, name in enumerate(feature_labels(stream)):
            if stream.count is not None and stream.count[f] == 0:
                empty += 1  # a climatology's group without data: NaN throughout
                continue
            row = [name, stream.units[f]]
            row += [_g(stream.op(op)[f]) if stream.op(op) is not None else "" for op in values]
            for label in labels:
                k = by_label.get(label, ...)
                if k is ...:
                    row += ["", "", ""]
                    continue
                d = stream.diff[k]
                row += [_g(d.mean[f]), _g(d.std[f]), _g(ratios[k][f])]
            table.add_row(*row)
    if empty:
        table.caption = f"{empty} rows without data left out (count 0)"
        table.caption_justify = "left"
    return table


# -- the report ---------------------------------------------------------------
CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; font-size: 0.85em; margin-bottom: 1.5em; }
th, td { border: 1px solid #ccc; padding: 2px 6px; }
td.num { text-align: right; font-family: monospace; }
tr:nth-child(even) { background: #f4f4f4; }
tr.warn td:first-child { color: #c0392b; font-weight: bold; }
.warn { color: #c0392b; }
img { max-width: 100%; }
"""


def _num(value: float) -> str:
    if not np.isfinite(value):
        return str(value)
    return f"{int(value)}" if float(value).is_integer() and abs(value) < 1e15 else f"{value:.6g}"


def _title(stats: Stats, split: str | None) -> str:
    split = f", split {split}" if split else ""
    return f"wxstats report: {stats.origin} ({stats.source_kind}{split})"


def _run_lines(stats: Stats) -> list[str]:
    keys = ("samples", "bytes", "seconds", "world_size", "wxstats_version", "started", "host")
    return [f"{k}: {stats.run[k]}" for k in keys if k in stats.run]


def _html_stream_table(
    category: str, stream: StreamStats, flags: dict[tuple[str, str], list[str]]
) -> str:
    steps = sorted(stream.diff, key=str)
    shown = ("count", "nan_count", *(op for op in VALUE_OPS if "count" not in op))
    ops = [op for op in shown if stream.op(op) is not None]
    head = ["variable", "units", *ops]
    for k in steps:
        label = stream.diff_label(k)
        head += [f"{label} mean", f"{label} std", f"{label} std/std"]
    head.append("warnings")
    rows = ["<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"]
    diffs = {
        k: (stream.diff[k].mean, stream.diff[k].std, stream.standardized_diff(k)[1]) for k in steps
    }
    for i, name in enumerate(stream.features):
        notes = flags.get((category, name), [])
        cells = [f"<td>{html.escape(name)}</td>", f"<td>{html.escape(stream.units[i])}</td>"]
        for op in ops:
            cells.append(f'<td class="num">{_num(stream.op(op)[i])}</td>')
        for k in steps:
            tag = f"diff{k if k is not None else ''}"
            for op, values in zip(("mean", "std", "std_standardized"), diffs[k], strict=True):
                mark = " †" if f"{tag} {op}" in stream.derived else ""
                cells.append(f'<td class="num">{_num(values[i])}{mark}</td>')
        cells.append(f"<td>{'<br>'.join(html.escape(n) for n in notes)}</td>")
        row_class = ' class="warn"' if notes else ""
        rows.append(f"<tr{row_class}>" + "".join(cells) + "</tr>")
    return "<table>\n" + "\n".join(rows) + "\n</table>"


def _html_drift(series: list, png: bytes) -> str:
    """The drift section: the per-year figure and the table of
    :func:`wxstats.tools.drift.table_rows`, flagged rows marked."""
    from wxstats.tools.drift import HEADER, SIGMAS, table_rows

    last = series[0].last
    encoded = base64.b64encode(png).decode("ascii")
    rows = ["<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in HEADER) + "</tr>"]
    for s, row in zip(series, table_rows(series), strict=True):
        cells = [f"<td>{html.escape(c)}</td>" for c in row[:2]]
        cells += [f'<td class="num">{html.escape(c)}</td>' for c in row[2:-1]]
        cells.append(f"<td>{html.escape(row[-1])}</td>")
        mark = ' class="warn"' if s.flagged else ""
        rows.append(f"<tr{mark}>" + "".join(cells) + "</tr>")
    return "\n".join(
        [
            "<h2>Per year: convergence and drift</h2>",
            f"<p>Δ: change of the cumulative estimate over the last {last} years, relative to "
            f"the estimate before them. Drift: the average of the last {last} yearly means "
            f"(stds) outside the earlier years' average ± {SIGMAS:g} × their year-to-year "
            "scatter (root mean square successive difference / √2).</p>",
            f'<img alt="per-year statistics" src="data:image/png;base64,{encoded}">',
            "<table>",
            *rows,
            "</table>",
        ]
    )


def report_html(
    stats: Stats,
    groups: dict[str, StreamStats],
    flags: dict[tuple[str, str], list[str]],
    png: bytes,
    title: str,
    series: list | None = None,
    drift_png: bytes = b"",
) -> str:
    """A self-contained page: the figure inlined as base64, tables, warnings; for
    a per-year set (``series``, see :mod:`wxstats.tools.drift`) its drift figure
    and table."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    counts = ", ".join(f"{len(s.features)} {c} variable(s)" for c, s in groups.items())
    parts.append(f"<p>{html.escape(counts)}</p>")
    run = _run_lines(stats)
    if run:
        parts.append("<p>" + "<br>".join(html.escape(line) for line in run) + "</p>")
    parts.append(f"<h2>Warnings ({sum(len(v) for v in flags.values())})</h2>")
    if flags:
        items = [
            f"<li><b>{html.escape(name)}</b> ({html.escape(cat)}): {html.escape(msg)}</li>"
            for (cat, name), messages in flags.items()
            for msg in messages
        ]
        parts.append('<ul class="warn">' + "".join(items) + "</ul>")
    else:
        parts.append("<p>none: no constant fields or suspicious ranges</p>")
    if stats.warnings:
        parts.append("<h3>Warnings stored by the run that wrote the file</h3><ul>")
        parts += [f"<li>{html.escape(w)}</li>" for w in stats.warnings]
        parts.append("</ul>")
    encoded = base64.b64encode(png).decode("ascii")
    parts.append(
        f'<h2>Figure</h2><img alt="per-variable statistics" src="data:image/png;base64,{encoded}">'
    )
    if series:
        parts.append(_html_drift(series, drift_png))
    for category, stream in groups.items():
        parts.append(f"<h2>{html.escape(category)}</h2>")
        parts.append(_html_stream_table(category, stream, flags))
    if any(s.derived for s in groups.values()):
        parts.append(
            "<p>† not in the file: derived from the other scale with the std "
            "(raw difference = standardized difference × std)</p>"
        )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_report(
    path: str | Path, out_dir: str | Path, split: str | None = None, last_years: int = 2
) -> tuple[list[Path], list]:
    """Read the statistics at ``path``; write the PNG and HTML report into ``out_dir``.
    Returns the files written and the :class:`~wxstats.tools.checks.Finding` list
    (a per-year set's drift flags among them, see :func:`write_stats_report`).

    Earlier reports of the same name are replaced (atomically: a failed run
    leaves the old ones).
    """
    from wxstats.io.read import read_stats

    written, found, _ = write_stats_report(read_stats(path, split), out_dir, split, last_years)
    return written, found


def write_stats_report(
    stats: Stats, out_dir: str | Path, split: str | None = None, last_years: int = 2
) -> tuple[list[Path], list, list]:
    """:func:`write_report` of statistics already read; also the per-year series
    (:func:`wxstats.tools.drift.year_series`) of a ``compute --by year`` set,
    drawn in ``wxstats_drift.png`` and tabulated in the page (empty otherwise)."""
    from wxstats.io.atomic import write_all
    from wxstats.tools.checks import Finding, findings
    from wxstats.tools.drift import year_series
    from wxstats.tools.figure import render_drift_png, render_png

    chosen = split or (stats.splits()[0] if stats.splits() else None)
    series = year_series(stats, chosen, last_years)  # from the layouts, before relabelling
    stats, empty = with_labels(stats, chosen)
    groups = stats.by_category(chosen)
    found = findings(stats, chosen)
    categories = {name: s.category for name, s in stats.streams.items()}
    drift = [(categories[s.stream], s.variable, flag) for s in series for flag in s.flags]
    found += [Finding(c, v, f"drift: {flag}") for c, v, flag in drift]
    flags: dict[tuple[str, str], list[str]] = {}
    for f in found:
        flags.setdefault((f.category, f.variable), []).append(f.message)
    title = _title(stats, chosen)
    if empty:
        title += f"; {empty} climatology groups without data left out (count 0)"
    png = render_png(groups, flags, title)
    drift_png = render_drift_png(series, f"{title}: per year and cumulative") if series else b""
    page = report_html(stats, groups, flags, png, title, series, drift_png)
    out = Path(out_dir)
    targets = [out / name for name in REPORT_NAMES]
    writers = {targets[0]: lambda p: p.write_bytes(png), targets[1]: lambda p: p.write_text(page)}
    if series:
        targets.append(out / DRIFT_NAME)
        writers[targets[-1]] = lambda p: p.write_bytes(drift_png)
    write_all(writers, overwrite=True)
    return targets, found, series
