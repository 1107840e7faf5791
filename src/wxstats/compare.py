"""Compare two statistics sets variable by variable: did the statistics change?

The relative difference of two values ``a`` and ``b`` is
``|a - b| / max(|a|, |b|, spread)``, where the spread is the std for a mean,
min or max and the difference std for a difference mean, so that a value near
zero (the mean of a wind component, a mean difference) is measured against the
variable's own scale rather than blowing up. Counts must match exactly
(relative difference 0). Differences are compared on the raw scale when both
sets hold it, else on the standardized scale (``diff_std / std``, what
neural-lam stores).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field

import numpy as np

from wxstats.readers import VALUE_OPS, StatsSet, StreamSet


@dataclass(frozen=True)
class Entry:
    """One compared value."""

    category: str
    variable: str
    quantity: str
    a: float
    b: float
    rel: float


@dataclass
class Comparison:
    """The outcome of :func:`compare`."""

    a: StatsSet
    b: StatsSet
    rtol: float
    entries: list[Entry] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    """Structural differences (variables in one set only): always a failure."""
    notes: list[str] = field(default_factory=list)
    """What could not be compared, and how variables were matched."""

    @property
    def above(self) -> list[Entry]:
        return [e for e in self.entries if not e.rel <= self.rtol]

    @property
    def equal(self) -> bool:
        return not self.mismatches and not self.above

    @property
    def exit_code(self) -> int:
        return 0 if self.equal else 1


def relative_difference(a: float, b: float, spread: float = 0.0) -> float:
    """``|a - b| / max(|a|, |b|, spread)``; 0 for equal values (NaN included)."""
    if a == b or (math.isnan(a) and math.isnan(b)):
        return 0.0
    if math.isnan(a) or math.isnan(b):
        return math.inf
    scale = max(abs(a), abs(b), abs(spread) if math.isfinite(spread) else 0.0)
    return abs(a - b) / scale if scale > 0 else math.inf


def _match(a: StreamSet, b: StreamSet, result: Comparison) -> list[tuple[int, int, str]]:
    """Pairs of indices (in a, in b) and the name to show."""
    category = a.category
    if a.names is not None and b.names is not None:
        index_b = {n: i for i, n in enumerate(b.names)}
        only_a = [n for n in a.names if n not in index_b]
        only_b = [n for n in b.names if n not in set(a.names)]
        if only_a:
            result.mismatches.append(f"{category}: only in A: {', '.join(only_a)}")
        if only_b:
            result.mismatches.append(f"{category}: only in B: {', '.join(only_b)}")
        return [(i, index_b[n], n) for i, n in enumerate(a.names) if n in index_b]
    if len(a) != len(b):
        result.mismatches.append(
            f"{category}: A has {len(a)} variables, B has {len(b)} (no names to match them)"
        )
        return []
    names = a.names if a.names is not None else b.names
    result.notes.append(
        f"warning: {category}: {'A' if a.names is None else 'B'} has no variable names; "
        "variables matched by position"
    )
    return [(i, i, names[i] if names else f"#{i}") for i in range(len(a))]


def _steps(a: StreamSet, b: StreamSet, result: Comparison) -> list[tuple[object, object, str]]:
    common = [k for k in a.diff if k in b.diff]
    if common:
        return [(k, k, f"diff{k if k is not None else ''}") for k in common]
    if len(a.diff) == 1 and len(b.diff) == 1:
        ka, kb = next(iter(a.diff)), next(iter(b.diff))
        result.notes.append(
            f"{a.category}: comparing difference statistics of step {ka} (A) with step {kb} (B), "
            "the only ones each set has"
        )
        return [(ka, kb, f"diff{ka if ka is not None else kb}")]
    if a.diff or b.diff:
        result.notes.append(
            f"{a.category}: no common difference step (A: {sorted(a.diff, key=str)}, "
            f"B: {sorted(b.diff, key=str)})"
        )
    return []


def _native(stream: StreamSet, step: object) -> bool:
    """Whether the file itself holds raw-scale difference statistics for ``step``."""
    label = f"diff{step if step is not None else ''}"
    ops = stream.diff[step]
    return all(op in ops and f"{label} {op}" not in stream.derived for op in ("mean", "std"))


def _compare_stream(a: StreamSet, b: StreamSet, result: Comparison) -> None:
    pairs = _match(a, b, result)
    std_a, std_b = a.values.get("std"), b.values.get("std")
    quantities: list[tuple[str, np.ndarray, np.ndarray, np.ndarray | None]] = []
    one_sided: dict[str, list[str]] = {"A": [], "B": []}
    for op in VALUE_OPS:
        if op in a.values and op in b.values:
            spread = None
            if op in ("mean", "min", "max") and std_a is not None and std_b is not None:
                spread = np.maximum(
                    std_a[[i for i, _, _ in pairs]], std_b[[j for _, j, _ in pairs]]
                )
            quantities.append((op, a.values[op], b.values[op], spread))
        elif op in a.values or op in b.values:
            one_sided["A" if op in a.values else "B"].append(op)
    for side, ops in one_sided.items():
        if ops:
            result.notes.append(f"{a.category}: {', '.join(ops)} only in {side}, not compared")
    for ka, kb, label in _steps(a, b, result):
        da, db = a.diff[ka], b.diff[kb]
        if _native(a, ka) and _native(b, kb):
            mean_op, std_op, suffix = "mean", "std", ""
        else:
            mean_op, std_op, suffix = "mean_standardized", "std_standardized", "/std"
        if "count" in da and "count" in db:
            quantities.append((f"{label} count", da["count"], db["count"], None))
        if std_op in da and std_op in db:
            spread = np.maximum(
                da[std_op][[i for i, _, _ in pairs]], db[std_op][[j for _, j, _ in pairs]]
            )
            quantities.append((f"{label} mean{suffix}", da[mean_op], db[mean_op], spread))
            quantities.append((f"{label} std{suffix}", da[std_op], db[std_op], None))
    for quantity, va, vb, spread in quantities:
        for n, (i, j, name) in enumerate(pairs):
            s = float(spread[n]) if spread is not None else 0.0
            rel = relative_difference(float(va[i]), float(vb[j]), s)
            result.entries.append(
                Entry(a.category, name, quantity, float(va[i]), float(vb[j]), rel)
            )


def compare(a: StatsSet, b: StatsSet, rtol: float = 1e-6) -> Comparison:
    """Every statistic both sets hold, per variable (see module docstring)."""
    result = Comparison(a, b, rtol)
    for category, stream in a.streams.items():
        if category in b.streams:
            _compare_stream(stream, b.streams[category], result)
        else:
            result.notes.append(f"{category}: only in A, not compared")
    for category in b.streams:
        if category not in a.streams:
            result.notes.append(f"{category}: only in B, not compared")
    return result


def _rel_text(rel: float, rtol: float) -> str:
    text = "0" if rel == 0 else f"{rel:.1e}"
    return text + (" !" if not rel <= rtol else "")


def format_comparison(result: Comparison, max_lines: int = 40) -> str:
    """A variables x quantities table of relative differences, then the verdict."""
    from rich.console import Console
    from rich.table import Table

    buffer = io.StringIO()
    console = Console(file=buffer, width=200, force_terminal=False, color_system=None)
    console.print(f"A: {result.a.path} ({result.a.kind})")
    console.print(f"B: {result.b.path} ({result.b.kind})")
    console.print("relative difference = |A - B| / max(|A|, |B|, spread of the variable)")
    for category in dict.fromkeys(e.category for e in result.entries):
        entries = [e for e in result.entries if e.category == category]
        quantities = list(dict.fromkeys(e.quantity for e in entries))
        table = Table(
            title=f"{category}: relative differences ('!' above {result.rtol:g})",
            title_justify="left",
        )
        table.add_column("variable")
        for q in quantities:
            table.add_column(q, justify="right")
        cells: dict[str, dict[str, str]] = {}
        for e in entries:
            cells.setdefault(e.variable, {})[e.quantity] = _rel_text(e.rel, result.rtol)
        for variable, row in cells.items():
            table.add_row(variable, *(row.get(q, "") for q in quantities))
        console.print(table)
    for note in result.notes:
        console.print(note)
    above = sorted(result.above, key=lambda e: -e.rel)
    for e in above[:max_lines]:
        console.print(
            f"DIFFERS {e.category} {e.variable} {e.quantity}: A={e.a:.10g} B={e.b:.10g} "
            f"relative difference {e.rel:.3g}"
        )
    if len(above) > max_lines:
        console.print(f"... and {len(above) - max_lines} more")
    for mismatch in result.mismatches:
        console.print(f"DIFFERS {mismatch}")
    n_vars = len({(e.category, e.variable) for e in result.entries})
    if result.equal:
        console.print(
            f"same within rtol {result.rtol:g}: {len(result.entries)} values of {n_vars} variables"
        )
    else:
        names = list(dict.fromkeys(e.variable for e in above))
        shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
        console.print(
            f"DIFFERENT: {len(above)} of {len(result.entries)} values above rtol "
            f"{result.rtol:g}"
            + (f" ({shown})" if names else "")
            + (f"; {len(result.mismatches)} structural difference(s)" if result.mismatches else "")
        )
    return buffer.getvalue().rstrip()
