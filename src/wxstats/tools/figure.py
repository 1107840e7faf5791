"""The report figure: one row per variable, standardized quantities side by side.

Variables of very different magnitude (pressure ~1e5 Pa, humidity ~0.8) only
compare on scales without units, so every panel is dimensionless: the reach of
min and max in std from the mean, the change per step ``diff_std / std`` (what
drives neural-lam's loss weighting), the relative spread ``std / |mean|``
(how much float32 storage loses) and the NaN fraction. The numbers with units
are in the row labels. The height grows with the number of variables, so 17
or 100 rows stay readable.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from wxstats.core.stats import StreamStats
from wxstats.tools.checks import standardized_range

if TYPE_CHECKING:
    from wxstats.tools.drift import YearSeries

ROW_INCHES = 0.2
LABEL_PT = 8
GAP_INCHES = 0.5
"""Between panels: room for half an edge tick label of each (``8×10⁻³`` of a log axis)."""
LEGEND_ROW_INCHES = 0.2
WARN_COLOR = "#c0392b"
SIGMA_TICKS = sorted([s * v for v in (1e4, 1e3, 100, 10, 3) for s in (-1, 1)] + [0])


@dataclass
class Rows:
    """The figure's rows, top to bottom, with the per-row numbers of each panel."""

    labels: list[str]
    flagged: list[bool]
    z_min: np.ndarray
    z_max: np.ndarray
    ratios: dict[str, np.ndarray]
    spread: np.ndarray
    nan_percent: np.ndarray


def _label(name: str, unit: str, mean: float | None, std: float | None, widths: tuple) -> str:
    """``name  mean ± std unit`` padded to fixed widths: monospace columns line up."""
    numbers = f"{mean:>10.4g} ± {std:<9.3g}" if mean is not None and std is not None else ""
    return f"{name:<{widths[0]}} {numbers:<22} {unit:<{widths[1]}}"


def collect_rows(groups: dict[str, StreamStats], flags: dict[tuple[str, str], list[str]]) -> Rows:
    """The rows of the categories ``groups`` (see :meth:`Stats.by_category`)."""
    labels, flagged = [], []
    z_min, z_max, spread, nan_pct = [], [], [], []
    steps = sorted({k for s in groups.values() for k in s.diff}, key=lambda k: (k is None, k or 0))
    named = {k: next(s.step_text(k) for s in groups.values() if k in s.diff) for k in steps}
    ratios: dict[str, list[float]] = {named[k] or "step": [] for k in steps}
    shown_names = [n if c == "state" else f"{c}:{n}" for c, s in groups.items() for n in s.features]
    units = [u for s in groups.values() for u in s.units]
    widths = (max(len(n) for n in shown_names), max([len(u) for u in units] + [1]))
    for category, stream in groups.items():
        rng = standardized_range(stream)
        mean, std = stream.mean, stream.std
        count, nans = stream.count, stream.nan_count
        standardized = {k: stream.standardized_diff(k)[1] for k in stream.diff}
        for i, name in enumerate(stream.features):
            shown = name if category == "state" else f"{category}:{name}"
            m = float(mean[i]) if mean is not None else None
            s = float(std[i]) if std is not None else None
            labels.append(_label(shown, stream.units[i], m, s, widths))
            flagged.append((category, name) in flags)
            z_min.append(rng[0][i] if rng else np.nan)
            z_max.append(rng[1][i] if rng else np.nan)
            spread.append(s / abs(m) if m and s is not None else np.nan)
            if nans is not None and count is not None and count[i] + nans[i] > 0:
                nan_pct.append(100.0 * nans[i] / (count[i] + nans[i]))
            else:
                nan_pct.append(np.nan)
            for k, key in zip(steps, ratios, strict=True):
                value = standardized.get(k)
                ratios[key].append(float(value[i]) if value is not None else np.nan)
    return Rows(
        labels,
        flagged,
        np.array(z_min, dtype=float),
        np.array(z_max, dtype=float),
        {k: np.array(v, dtype=float) for k, v in ratios.items()},
        np.array(spread, dtype=float),
        np.array(nan_pct, dtype=float),
    )


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", color="0.4")


def render_png(
    groups: dict[str, StreamStats], flags: dict[tuple[str, str], list[str]], title: str
) -> bytes:
    """The figure as PNG bytes (matplotlib's Agg backend, no display needed)."""
    buffer = io.BytesIO()
    render_figure(groups, flags, title).savefig(buffer, format="png")
    return buffer.getvalue()


def render_figure(
    groups: dict[str, StreamStats], flags: dict[tuple[str, str], list[str]], title: str
):
    """The report figure (a matplotlib ``Figure`` on the Agg canvas). Margins, gaps and
    the legend's place below its panel are computed in inches, not searched for
    (constrained layout takes seconds at 100 rows), so that no text covers a bar or
    runs into the next panel."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator
    from matplotlib.transforms import blended_transform_factory

    rows = collect_rows(groups, flags)
    n = len(rows.labels)
    y = np.arange(n)
    entries = len(rows.ratios) + 1  # the steps and the √2 line
    legend_cols = min(entries, 3)
    legend_inches = (-(-entries // legend_cols) * LEGEND_ROW_INCHES + 0.15) if rows.ratios else 0
    bottom = 0.45 + legend_inches
    height = 1.45 + bottom + ROW_INCHES * max(n, 8)
    label_inches = 0.3 + max(len(label) for label in rows.labels) * LABEL_PT * 0.6 / 72
    width = 12.5 + label_inches
    right = 0.35  # half the last tick label ("1.00") of the NaN panel
    panels = width - label_inches - right
    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(
        left=label_inches / width,
        right=1 - right / width,
        top=1 - 0.75 / height,
        bottom=bottom / height,
        wspace=GAP_INCHES / ((panels - 3 * GAP_INCHES) / 4),
    )
    axes = fig.subplots(1, 4, sharey=True, gridspec_kw={"width_ratios": [1.3, 1.2, 1.0, 0.7]})
    fig.suptitle(title, x=0.01, y=1 - 0.12 / height, ha="left", va="top", fontsize=11)
    for ax in axes:
        for row in range(0, n, 2):
            ax.axhspan(row - 0.5, row + 0.5, color="0.94", zorder=0, lw=0)
        ax.grid(axis="x", color="0.85", lw=0.6, zorder=0)
        ax.tick_params(axis="y", length=0)
        ax.set_ylim(n - 0.5, -0.5)

    ax = axes[0]
    if np.isfinite(rows.z_min).any():
        ax.hlines(y, rows.z_min, rows.z_max, color="#2c7fb8", lw=3, zorder=2)
        ax.plot(np.zeros(n), y, "|", color="k", ms=8, zorder=3)
        low = min(-5.0, 1.2 * float(np.nanmin(rows.z_min)))
        high = max(5.0, 1.2 * float(np.nanmax(rows.z_max)))
        ax.set_xscale("symlog", linthresh=5)
        ax.set_xlim(low, high)
        ticks = [t for t in SIGMA_TICKS if low <= t <= high]
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.axvline(0, color="0.3", lw=0.8)
    else:
        _no_data(ax, "no min/max in this file")
    ax.set_title("min … max, in std from the mean", fontsize=10)
    ax.set_yticks(y, rows.labels, fontsize=LABEL_PT, fontfamily="monospace")
    for tick, bad in zip(ax.get_yticklabels(), rows.flagged, strict=True):
        if bad:
            tick.set_color(WARN_COLOR)
            tick.set_fontweight("bold")

    ax = axes[1]
    if rows.ratios:
        height_each = 0.8 / len(rows.ratios)
        handles = []
        for j, (key, values) in enumerate(rows.ratios.items()):
            offset = -0.4 + height_each * (j + 0.5)
            handles.append(ax.barh(y + offset, values, height=height_each, label=key, zorder=2))
        sqrt2 = "√2: uncorrelated steps"
        handles.append(ax.axvline(np.sqrt(2), color=WARN_COLOR, lw=0.8, ls="--", label=sqrt2))
        # below the panel's tick labels, never over its bars; the steps in order
        under = blended_transform_factory(ax.transAxes, fig.dpi_scale_trans)
        ax.legend(
            handles=handles,
            fontsize=8,
            loc="upper center",
            bbox_to_anchor=(0.5, bottom - 0.3),
            bbox_transform=under,
            ncol=legend_cols,
            frameon=False,
        )
    else:
        _no_data(ax, "no difference statistics")
    ax.set_title("diff_std / std per step (loss weighting)", fontsize=10)

    ax = axes[2]
    if np.isfinite(rows.spread).any():
        ax.barh(y, np.where(rows.spread > 0, rows.spread, np.nan), color="#41ab5d", zorder=2)
        ax.set_xscale("log")
    else:
        _no_data(ax, "no mean/std")
    ax.set_title("std / |mean| (log)", fontsize=10)

    ax = axes[3]
    if np.isfinite(rows.nan_percent).any() and np.nanmax(rows.nan_percent) > 0:
        ax.barh(y, rows.nan_percent, color="#fe9929", zorder=2)
    else:
        _no_data(ax, "no NaN" if np.isfinite(rows.nan_percent).any() else "no NaN counts")
    ax.set_title("NaN %", fontsize=10)
    return fig


DRIFT_ROW_INCHES = 1.5


def render_drift_png(series: list[YearSeries], title: str) -> bytes:
    """Per-year statistics (``compute --by year``) as PNG bytes: one row per
    variable, its per-year mean (left) and std (right) as points and the
    cumulative estimate as the years are added as a line; the band of the
    drift rule (earlier years' average ± SIGMAS × their year-to-year scatter)
    shaded; a flagged variable's titles in red."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    from wxstats.tools.drift import SIGMAS, band

    n = max(len(series), 1)
    height = 0.8 + DRIFT_ROW_INCHES * n
    fig = Figure(figsize=(11.0, height), dpi=90)
    fig.subplots_adjust(
        left=0.08, right=0.98, top=1 - 0.55 / height, bottom=0.35 / height, hspace=0.55
    )
    fig.suptitle(title, x=0.01, y=1 - 0.1 / height, ha="left", va="top", fontsize=11)
    axes = fig.subplots(n, 2, squeeze=False)
    if not series:
        _no_data(axes[0][0], "no per-year statistics")
    for s, row in zip(series, axes, strict=False):
        color = WARN_COLOR if s.flagged else "k"
        for ax, yearly, cum, what in (
            (row[0], s.mean, s.cum_mean, "mean"),
            (row[1], s.std, s.cum_std, "std"),
        ):
            if s.assessed:
                c, scatter = band(yearly[: -s.last])
                ax.axhspan(c - SIGMAS * scatter, c + SIGMAS * scatter, color="0.9", lw=0, zorder=0)
            ax.plot(s.years, yearly, "o", ms=3.5, color="#2c7fb8", label=f"per year {what}")
            ax.plot(s.years, cum, "-", lw=1.5, color="#d95f0e", label="cumulative")
            if s.assessed and len(s.years) > s.last:
                ax.axvline(s.years[-s.last] - 0.5, color="0.5", lw=0.7, ls=":")
            ax.set_title(f"{s.variable} {what} ({s.units})", fontsize=9, color=color, loc="left")
            ax.tick_params(labelsize=7)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.yaxis.get_major_formatter().set_useOffset(False)
        if s is series[0]:
            row[0].legend(fontsize=7, loc="best")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()
