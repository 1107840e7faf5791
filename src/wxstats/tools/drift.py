"""Convergence and drift of per-year statistics (``compute --by year``).

A training set's statistics are trusted once adding a year no longer moves
them. For every variable (and level) of a per-year statistics set this module
gives the per-year mean and std, the cumulative estimate as the years are
added in order, whether the last years lie outside the spread of the earlier
ones (:func:`drift_rule`), and how much the cumulative mean and std moved over
the last years. :func:`wxstats.tools.report.write_report` draws and tabulates it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wxstats.core.errors import InputError
from wxstats.core.stats import Stats, StreamStats

YEAR_DIM = "year"
SIGMAS = 2.0
"""Half-width of the band of the drift rule, in year-to-year scatters (:func:`band`)."""
PARTIAL = 0.9
"""A last year with fewer values than this fraction of a typical earlier year is
marked partial (its mean carries a seasonal bias, e.g. a year cut in March)."""


@dataclass
class YearSeries:
    """One variable (one level of it) year by year, the years with data only."""

    stream: str
    """The statistics stream it comes from (``z__train``)."""
    variable: str
    """The feature without its year (``z_500``)."""
    units: str
    years: np.ndarray  # int64
    count: np.ndarray  # int64 values per year
    mean: np.ndarray  # float64 per-year mean
    std: np.ndarray  # float64 per-year std (population)
    cum_mean: np.ndarray  # float64 mean of the years up to and including each one
    cum_std: np.ndarray
    last: int
    """N: the last years assessed."""
    flags: list[str]
    """Why the last years lie outside the earlier ones' spread (empty: they do not)."""
    note: str = ""
    """Why the rule could not be applied, or a caveat (a partial last year)."""
    assessed: bool = True
    """Whether there were enough years (N + 2) for the rule."""

    @property
    def flagged(self) -> bool:
        return bool(self.flags)

    def change(self) -> tuple[float, float, float]:
        """Change of the cumulative estimate over the last N years: (Δmean/|mean|,
        Δmean/std, Δstd/std), relative to the estimate before them (NaN when
        there is no year before them)."""
        if len(self.years) <= self.last:
            return (np.nan, np.nan, np.nan)
        m0, s0 = self.cum_mean[-1 - self.last], self.cum_std[-1 - self.last]
        dm, ds = self.cum_mean[-1] - m0, self.cum_std[-1] - s0
        with np.errstate(divide="ignore", invalid="ignore"):
            return (
                float(dm / abs(m0)) if m0 else np.nan,
                float(dm / s0) if s0 else np.nan,
                float(ds / s0) if s0 else np.nan,
            )


def cumulative(
    count: np.ndarray, mean: np.ndarray, std: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and population std of years ``0..i`` for every ``i``, the years
    merged in order by the parallel-variance formula (Chan, Golub and LeVeque)
    in float64: ``n = na + nb``, ``d = mb - ma``, ``m = ma + d nb / n``,
    ``M2 = M2a + M2b + d^2 na nb / n`` with ``M2 = count std^2``.

    Why from mean/std/count and not from the exact sums: a statistics file
    holds the former, so the report works on any per-year file (and its JSON
    summary). Each merge is exact algebra rounded once per operation, so the
    cumulative values carry a relative error of a few ulp per year (about
    1e-14 after decades), far below any drift the rule flags. The counts weigh
    the years: with ``--weights`` that is exact while every year has the same
    missing values (none), as each value then carries the same mean weight.
    """
    n_years = len(count)
    cm, cs = np.empty(n_years), np.empty(n_years)
    n, m, m2 = 0.0, 0.0, 0.0
    for i in range(n_years):
        nb, mb = float(count[i]), float(mean[i])
        m2b = nb * float(std[i]) ** 2
        if n == 0:
            n, m, m2 = nb, mb, m2b
        else:
            total = n + nb
            d = mb - m
            m = m + d * (nb / total)
            m2 = m2 + m2b + d * d * (n * nb / total)
            n = total
        cm[i], cs[i] = m, np.sqrt(m2 / n)
    return cm, cs


def band(earlier: np.ndarray) -> tuple[float, float]:
    """The centre and spread of the earlier years' values (:func:`drift_rule`):
    their average ``c`` and their year-to-year scatter
    ``s = sqrt(sum((v[i+1] - v[i])^2) / (2 (E - 1)))`` (von Neumann's mean
    square successive difference; ``E`` earlier years)."""
    c = float(np.mean(earlier))
    s = float(np.sqrt(np.sum(np.diff(earlier) ** 2) / (2 * (len(earlier) - 1))))
    return c, s


def drift_rule(values: np.ndarray, last: int, what: str, sigmas: float = SIGMAS) -> str | None:
    """The drift rule on one yearly series (``mean`` or ``std`` per year, the
    years with data, in order; at least ``last + 2`` of them): with ``c`` and
    ``s`` the :func:`band` of the earlier years and ``a`` the average of the
    last ``last`` years' values, flag when ``|a - c| > sigmas * s``. Years
    count equally (a year's scatter is what is measured, not its number of
    values).

    Why successive differences and not the plain std of the earlier values: a
    trend inflates the plain std, so much that a steady linear trend never
    leaves mean ± 2 std (the ratio tends to √3); the successive differences
    see only the year-to-year scatter (for independent years both estimate
    the same spread). A warning, not a test at a set level: independent
    normal yearly values are flagged about 3 % of the time with 12 earlier
    years and N = 2, 1 % with 30, 12 % with 4 (simulated); a trend of 0.3
    scatters a year over 14 years, about half the time."""
    c, s = band(values[:-last])
    a = float(np.mean(values[-last:]))
    if abs(a - c) > sigmas * s:
        sig = f"{abs(a - c) / s:.3g}" if s > 0 else "inf"
        return (
            f"last {last} years' {what} {a:.6g} outside the earlier {len(values) - last} "
            f"years' {c:.6g} ± {sigmas:g} × {s:.3g} ({sig} × their year-to-year scatter)"
        )
    return None


def _series(stream: StreamStats, last: int, weighted: bool = False) -> list[YearSeries]:
    if stream.count is None:
        raise InputError(f"{stream.name}: per-year statistics without counts: cannot combine")
    import xarray as xr

    view = stream.to_xarray()  # along the labels: (..., year, level), by name not position
    rest = [d for d in view["mean"].dims if d != YEAR_DIM]
    years = np.asarray(view[YEAR_DIM].values, dtype=np.int64)

    def by_year(values: xr.DataArray) -> np.ndarray:
        return values.transpose(YEAR_DIM, *rest).values.reshape(len(years), -1)

    count, mean, std = by_year(view["count"]), by_year(view["mean"]), by_year(view["std"])
    nans = by_year(view["nan_count"]) if "nan_count" in view else np.zeros_like(count)
    lay = stream.labels
    units_along = lay.shaped(np.asarray(stream.units, dtype=object))
    units = by_year(xr.DataArray(units_along, dims=lay.feature_dims))
    labels = []
    for index in np.ndindex(*[view.sizes[d] for d in rest]):
        parts = [lay.variable]
        for d, i in zip(rest, index, strict=True):
            parts.append(str(view[d].values[i]) if d in view.coords else str(i))
        labels.append("_".join(parts))
    out = []
    for f, label in enumerate(labels):
        has = count[:, f] > 0
        n, m, s = count[has, f], mean[has, f], std[has, f]
        cm, cs = cumulative(n, m, s)
        series = YearSeries(
            stream.name, label, str(units[0, f]), years[has], n, m, s, cm, cs, last, []
        )
        if len(n) < last + 2:
            series.assessed = False
            series.note = f"{len(n)} year(s) with data: the rule needs {last} + 2 or more"
        else:
            series.flags = [
                msg for v, w in ((m, "mean"), (s, "std")) if (msg := drift_rule(v, last, w))
            ]
            typical = float(np.median(n[:-last]))
            recent = zip(years[has][-last:], n[-last:], strict=True)
            short = [int(y) for y, k in recent if k < PARTIAL * typical]
            if short:
                series.note = (
                    f"partial year(s) {', '.join(map(str, short))} (fewer values than "
                    "a typical earlier year: a seasonal bias is possible)"
                )
        if weighted and nans[has, f].any():  # see cumulative(): the counts weigh the years
            series.note = "; ".join(
                filter(None, [series.note, "weighted, values missing: cumulative approximate"])
            )
        out.append(series)
    return out


def year_series(stats: Stats, split: str | None, last: int = 2) -> list[YearSeries]:
    """Every variable of ``split`` (default: the first) with a ``year`` dimension,
    year by year (empty when the set is not per year). ``last``: the N of
    :func:`drift_rule`."""
    if last < 1:
        raise InputError(f"--last-years {last}: must be 1 or more")
    splits = stats.splits()
    split = split if split is not None else (splits[0] if splits else None)
    weights = str(stats.attrs.get("weights", stats.attrs.get("source_weights", "")))
    weighted = bool(weights) and not weights.startswith("none")
    out: list[YearSeries] = []
    for stream in stats.streams.values():
        layout = stream.layout
        if stream.split not in (split, None) or layout is None:
            continue
        if YEAR_DIM in layout.feature_dims and YEAR_DIM in layout.coords:
            out.extend(_series(stream, last, weighted))
    return out


HEADER = (
    "variable",
    "units",
    "years",
    "cum mean",
    "cum std",
    "Δmean/|mean|",
    "Δmean/std",
    "Δstd/std",
    "drift",
)


def table_rows(series: list[YearSeries]) -> list[list[str]]:
    """One row per variable: the cumulative estimate over every year, its
    relative change over the last N years, and the drift rule's verdict."""
    rows = []
    for s in series:
        dm_rel, dm_std, ds_rel = s.change()
        verdict = "; ".join(s.flags) if s.flags else ("-" if s.assessed else "not assessed")
        if s.note:
            verdict += f" [{s.note}]"
        rows.append(
            [
                s.variable,
                s.units,
                f"{s.years[0]}-{s.years[-1]} ({len(s.years)})" if len(s.years) else "none",
                f"{s.cum_mean[-1]:.6g}" if len(s.years) else "nan",
                f"{s.cum_std[-1]:.6g}" if len(s.years) else "nan",
                *(f"{x:+.2e}" for x in (dm_rel, dm_std, ds_rel)),
                verdict,
            ]
        )
    return rows


def format_drift(series: list[YearSeries]) -> str:
    """The drift table as plain text for the terminal."""
    import io

    from rich.console import Console
    from rich.table import Table

    last = series[0].last if series else 2
    table = Table(
        title=f"drift: change of the cumulative estimate over the last {last} years",
        title_justify="left",
    )
    for h in HEADER:
        table.add_column(h, justify="left" if h in ("variable", "units", "drift") else "right")
    for row in table_rows(series):
        table.add_row(*row)
    buffer = io.StringIO()
    Console(file=buffer, width=100_000, force_terminal=False, color_system=None).print(table)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()).rstrip()
