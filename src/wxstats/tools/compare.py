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

from wxstats.core.stats import VALUE_OPS, Stats, StreamStats


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

    a: Stats
    b: Stats
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


def _match(
    category: str, a: StreamStats, b: StreamStats, result: Comparison
) -> list[tuple[int, int, str]]:
    """Pairs of indices (in a, in b) and the name to show."""
    if a.named and b.named:
        index_b = {n: i for i, n in enumerate(b.features)}
        only_a = [n for n in a.features if n not in index_b]
        only_b = [n for n in b.features if n not in set(a.features)]
        if only_a:
            result.mismatches.append(f"{category}: only in A: {', '.join(only_a)}")
        if only_b:
            result.mismatches.append(f"{category}: only in B: {', '.join(only_b)}")
        return [(i, index_b[n], n) for i, n in enumerate(a.features) if n in index_b]
    if len(a.features) != len(b.features):
        result.mismatches.append(
            f"{category}: A has {len(a.features)} variables, B has {len(b.features)} "
            "(no names to match them)"
        )
        return []
    names = a.features if a.named else b.features
    result.notes.append(
        f"warning: {category}: {'B' if a.named else 'A'} has no variable names; "
        "variables matched by position"
    )
    return [(i, i, names[i]) for i in range(len(a.features))]


def _same_difference(a: StreamStats, ka: object, b: StreamStats, kb: object) -> bool:
    """Whether step ``ka`` of A and ``kb`` of B are the same quantity: the same
    time span when both sets know it (MEPS counts hours, zarr/netCDF steps), else
    the same step."""
    sa, sb = a.diff_span.get(ka), b.diff_span.get(kb)
    return sa == sb if sa and sb else ka == kb


def _pair_label(a: StreamStats, ka: object, b: StreamStats, kb: object) -> str:
    """``diff 6h``: the span one set knows, else ``diff 3 steps``."""
    return a.diff_label(ka) if a.diff_span.get(ka) or not b.diff_span.get(kb) else b.diff_label(kb)


def _named(stream: StreamStats, step: object) -> str:
    """``diff 6h``, or ``step 3`` for a set that does not know the span."""
    if stream.diff_span.get(step):
        return stream.diff_label(step)
    return f"step {step}" if step is not None else "a step the file does not name"


def _steps(
    category: str, a: StreamStats, b: StreamStats, result: Comparison
) -> list[tuple[object, object, str]]:
    """The difference steps of A and B that are the same quantity (see
    :func:`_same_difference`), with the label of their rows."""
    pairs, taken = [], set()
    for ka in sorted(a.diff, key=lambda k: (k is None, k or 0)):
        same = [k for k in b.diff if k not in taken and _same_difference(a, ka, b, k)]
        if same:
            taken.add(same[0])
            pairs.append((ka, same[0], _pair_label(a, ka, b, same[0])))
    if pairs:
        return pairs
    if len(a.diff) == 1 and len(b.diff) == 1:
        ka, kb = next(iter(a.diff)), next(iter(b.diff))
        if not (a.diff_span.get(ka) and b.diff_span.get(kb)):  # a set without spans
            result.notes.append(
                f"{category}: comparing difference statistics of {_named(a, ka)} (A) with "
                f"{_named(b, kb)} (B), the only ones each set has"
            )
            return [(ka, kb, _pair_label(a, ka, b, kb))]
    if a.diff or b.diff:
        result.notes.append(
            f"{category}: no common difference span (A: "
            f"{', '.join(_named(a, k) for k in sorted(a.diff, key=str)) or 'none'}, B: "
            f"{', '.join(_named(b, k) for k in sorted(b.diff, key=str)) or 'none'})"
        )
    return []


def _tag(step: object) -> str:
    """``diff3``: how a file's difference statistics of ``step`` are named."""
    return f"diff{step if step is not None else ''}"


def _native(stream: StreamStats, step: object) -> bool:
    """Whether the file itself holds raw-scale difference statistics for ``step``."""
    return all(f"{_tag(step)} {op}" not in stream.derived for op in ("mean", "std"))


def _lacks_mean(stream: StreamStats, step: object) -> bool:
    """The set does not hold the difference mean of ``step`` (GraphCast-style files)."""
    return f"{_tag(step)} mean" in stream.missing


def _diff_scale(stream: StreamStats, step: object, native: bool) -> tuple[np.ndarray, np.ndarray]:
    if native:
        return stream.diff[step].mean, stream.diff[step].std
    return stream.standardized_diff(step)


def _compare_stream(category: str, a: StreamStats, b: StreamStats, result: Comparison) -> None:
    pairs = _match(category, a, b, result)
    rows_a, rows_b = [i for i, _, _ in pairs], [j for _, j, _ in pairs]
    quantities: list[tuple[str, np.ndarray, np.ndarray, np.ndarray | None]] = []
    one_sided: dict[str, list[str]] = {"A": [], "B": []}
    for op in VALUE_OPS:
        va, vb = a.op(op), b.op(op)
        if va is not None and vb is not None:
            spread = None
            if op in ("mean", "min", "max"):
                spread = np.maximum(a.std[rows_a], b.std[rows_b])
            quantities.append((op, va, vb, spread))
        elif va is not None or vb is not None:
            one_sided["A" if va is not None else "B"].append(op)
    for side, ops in one_sided.items():
        if ops:
            result.notes.append(f"{category}: {', '.join(ops)} only in {side}, not compared")
    for ka, kb, label in _steps(category, a, b, result):
        native = _native(a, ka) and _native(b, kb)
        suffix = "" if native else "/std"
        mean_a, std_a = _diff_scale(a, ka, native)
        mean_b, std_b = _diff_scale(b, kb, native)
        count_a, count_b = a.diff[ka].count, b.diff[kb].count
        if count_a is not None and count_b is not None:
            quantities.append((f"{label} count", count_a, count_b, None))
        spread = np.maximum(std_a[rows_a], std_b[rows_b])
        lacking = [s for s, stream, k in (("A", a, ka), ("B", b, kb)) if _lacks_mean(stream, k)]
        if not lacking:
            quantities.append((f"{label} mean{suffix}", mean_a, mean_b, spread))
        elif len(lacking) == 1:
            other = "B" if lacking == ["A"] else "A"
            result.notes.append(f"{category}: {label} mean only in {other}, not compared")
        quantities.append((f"{label} std{suffix}", std_a, std_b, None))
    for quantity, va, vb, spread in quantities:
        for n, (i, j, name) in enumerate(pairs):
            s = float(spread[n]) if spread is not None else 0.0
            rel = relative_difference(float(va[i]), float(vb[j]), s)
            result.entries.append(Entry(category, name, quantity, float(va[i]), float(vb[j]), rel))


def compare(a: Stats, b: Stats, rtol: float = 1e-6) -> Comparison:
    """Every statistic both sets hold, per variable (see module docstring)."""
    result = Comparison(a, b, rtol)
    groups_a, groups_b = a.by_category(), b.by_category()
    for category, stream in groups_a.items():
        if category in groups_b:
            _compare_stream(category, stream, groups_b[category], result)
        else:
            result.notes.append(f"{category}: only in A, not compared")
    for category in groups_b:
        if category not in groups_a:
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
    console.print(f"A: {result.a.origin} ({result.a.source_kind})")
    console.print(f"B: {result.b.origin} ({result.b.source_kind})")
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
