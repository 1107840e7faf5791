"""The exact partial: some summation units' exact sums, which units they are, and
what data they are of, so that any two partials of the same data merge exactly.

A :class:`Coverage` is the set of summation units (time steps) a partial holds:
sorted, disjoint ``[start, stop)`` ranges of integer positions per *series* (a
split's time axis, a MEPS sample file, ...; the caller names the series and
places the positions). A :class:`Partial` is exact sums
(:class:`~wxstats.core.accumulator.RunMoments`) with their coverage, the
identity of the data (a JSON-like dict, compared whole) and the *edges*: the
first and last ``reach`` decoded steps of each range, from which the
differences across a seam (one partial's range ending where another's
begins) are summed. Every unit is summed with its own reference, so merging
is exact, associative and commutative: any partials of disjoint units merge
to the bytes of one run over all of them.

The checkpoint's parts and the state files are partials on disk
(:mod:`wxstats.io.formats.wxstate`); the runtime only places units on
positions and words the refusals.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wxstats.core.accumulator import RunMoments
from wxstats.core.stats import Stats
from wxstats.core.streams import StreamSpec
from wxstats.core.untrusted import parse_json

Span = tuple[int, int]
Edges = dict[str, np.ndarray]
"""Variable name -> decoded steps (step, grid, feature) at one end of a range."""


class CoverageOverlap(ValueError):
    """Two coverages share units: ``series`` and the first shared ``span``."""

    def __init__(self, series: str, span: Span) -> None:
        super().__init__(f"{series}: steps [{span[0]}, {span[1]}) are held twice")
        self.series, self.span = series, span


class PartialMismatch(ValueError):
    """Partials of different data (identity or reach) do not merge."""


def _normal(spans: Iterable[Span]) -> tuple[Span, ...]:
    """Sorted spans with touching (or repeated) ones joined; empty ones dropped.
    :meth:`Coverage.union` refuses overlaps before."""
    out: list[Span] = []
    for a, b in sorted((int(a), int(b)) for a, b in spans if a < b):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(b, out[-1][1]))
        else:
            out.append((a, b))
    return tuple(out)


@dataclass(frozen=True)
class Coverage:
    """The summation units some exact sums hold (see module docstring)."""

    ranges: Mapping[str, tuple[Span, ...]] = field(default_factory=dict)

    @staticmethod
    def of(pieces: Iterable[tuple[str, int, int]]) -> Coverage:
        """The units of ``(series, start, stop)`` pieces; a unit given twice is
        refused (:class:`CoverageOverlap`)."""
        by: dict[str, list[Span]] = {}
        for series, start, stop in pieces:
            if start < stop:
                by.setdefault(series, []).append((int(start), int(stop)))
        for series, spans in by.items():
            spans.sort()  # an overlap shows between neighbours once sorted
            for (_, b), (c, d) in zip(spans[:-1], spans[1:], strict=True):
                if c < b:
                    raise CoverageOverlap(series, (c, min(b, d)))
        return Coverage({s: tuple(spans) for s, spans in by.items()})

    def __post_init__(self) -> None:
        normal = {s: _normal(r) for s, r in sorted(self.ranges.items())}
        object.__setattr__(self, "ranges", {s: r for s, r in normal.items() if r})

    def __len__(self) -> int:
        """The number of units held."""
        return sum(b - a for spans in self.ranges.values() for a, b in spans)

    def spans(self) -> list[tuple[str, int, int]]:
        """Every range as ``(series, start, stop)``, sorted."""
        return [(s, a, b) for s in sorted(self.ranges) for a, b in self.ranges[s]]

    def overlap(self, other: Coverage) -> tuple[str, Span] | None:
        """The first units held by both (series, span), or None."""
        small, large = sorted((self.ranges, other.ranges), key=len)
        for series in sorted(s for s in small if s in large):
            for a, b in small[series]:
                for c, d in large[series]:
                    if a < d and c < b:
                        return series, (max(a, c), min(b, d))
        return None

    def union(self, other: Coverage) -> Coverage:
        """Both sets of units; shared units are refused (:class:`CoverageOverlap`).
        Only the series ``other`` holds are rebuilt (a run adds a sample at a time)."""
        shared = self.overlap(other)
        if shared is not None:
            raise CoverageOverlap(*shared)
        ranges = dict(self.ranges)
        for series, spans in other.ranges.items():
            ranges[series] = _normal(ranges.get(series, ()) + spans)
        out = object.__new__(Coverage)
        object.__setattr__(out, "ranges", ranges)
        return out

    def missing(self, series: str, start: int, stop: int) -> list[Span]:
        """The ranges of ``[start, stop)`` of ``series`` not held."""
        out, at = [], start
        for a, b in self.ranges.get(series, ()):
            if b <= at or a >= stop:
                continue
            if a > at:
                out.append((at, a))
            at = max(at, b)
        if at < stop:
            out.append((at, stop))
        return out

    def difference(self, other: Coverage) -> Coverage:
        """The units held here and not in ``other`` (what ``other`` lacks of these)."""
        return Coverage(
            {
                s: tuple(g for a, b in spans for g in other.missing(s, a, b))
                for s, spans in self.ranges.items()
            }
        )

    def to_json(self) -> dict[str, list[list[int]]]:
        return {s: [list(r) for r in self.ranges[s]] for s in sorted(self.ranges)}

    @staticmethod
    def from_json(data: Any) -> Coverage:
        """Refuses (ValueError) what is not a mapping of series to disjoint ranges."""
        if isinstance(data, str):
            data = parse_json(data, "coverage")
        if not isinstance(data, dict):
            raise ValueError("not a mapping of series to ranges")
        pieces = []
        for series, spans in data.items():
            for span in spans:
                a, b = span
                if not (isinstance(a, int) and isinstance(b, int)) or a >= b:
                    raise ValueError(f"bad ranges of {series}")
                pieces.append((series, a, b))
        return Coverage.of(pieces)


Seam = Callable[[str, int, Edges, Edges], RunMoments]
"""``(series, position, tail before it, head from it)`` -> the exact sums of the
differences that cross from one range into the next at ``position``."""


def _join_edges(a: Edges, b: Edges, reach: int, end: str) -> Edges:
    """Edges of two adjacent ranges as one range's (a short range's edges reach
    into its neighbour's)."""
    cut = slice(None, reach) if end == "head" else slice(-reach, None)
    return {v: np.concatenate([a[v], b[v]])[cut] for v in a}


@dataclass
class Partial:
    """Exact sums with their coverage, identity and edges (see module docstring).

    ``heads[(series, start)]`` and ``tails[(series, stop)]``: the first and last
    ``min(reach, length)`` decoded steps of each range (none when ``reach`` is 0:
    no difference crosses two ranges, e.g. MEPS samples or a checkpoint)."""

    sums: RunMoments
    coverage: Coverage = field(default_factory=Coverage)
    identity: dict[str, Any] = field(default_factory=dict)
    reach: int = 0
    heads: dict[tuple[str, int], Edges] = field(default_factory=dict)
    tails: dict[tuple[str, int], Edges] = field(default_factory=dict)

    @staticmethod
    def empty(template: RunMoments, identity: dict[str, Any], reach: int = 0) -> Partial:
        """No units yet, of ``template``'s layout."""
        return Partial(template.empty_like(), Coverage(), identity, reach)

    def merge(self, other: Partial, seam: Seam | None = None) -> Partial:
        """Both partials as one (a new one; neither changes): sums added, and
        where one's range ends at another's start, the seam's differences
        (``seam``, given the edges there) added once. Refused first, changing
        nothing: another identity (:class:`PartialMismatch`), then shared units
        (:class:`CoverageOverlap`, by :meth:`Coverage.union`)."""
        if _canonical(self.identity) != _canonical(other.identity) or self.reach != other.reach:
            raise PartialMismatch("partials of different data or options do not merge")
        coverage = self.coverage.union(other.coverage)
        sums = self.sums.empty_like()
        sums.merge(self.sums)
        sums.merge(other.sums)
        heads, tails = {**self.heads, **other.heads}, {**self.tails, **other.tails}
        for series, a, b, c in _seams(self.coverage, other.coverage):
            if self.reach and seam is not None:
                sums.merge(seam(series, b, tails[(series, b)], heads[(series, b)]))
            if self.reach:  # the joined range [a, c)'s edges
                heads[(series, a)] = _join_edges(
                    heads[(series, a)], heads.pop((series, b)), self.reach, "head"
                )
                tails[(series, c)] = _join_edges(
                    tails.pop((series, b)), tails[(series, c)], self.reach, "tail"
                )
        return Partial(sums, coverage, self.identity, self.reach, heads, tails)

    def moved(self, series: str, to: Mapping[int, int]) -> Partial:
        """The same sums with each range ``[a, b)`` of ``series`` (and its edges)
        at ``to[a]`` (partials of different origins placed on one grid)."""
        by = {}
        for a, b in self.coverage.ranges.get(series, ()):
            by[a] = by[b] = to[a] - a  # ranges never touch: a start is no stop

        def at(key: tuple[str, int]) -> tuple[str, int]:
            return (series, key[1] + by[key[1]]) if key[0] == series else key

        ranges = {**self.coverage.ranges}
        ranges[series] = tuple((a + by[a], b + by[a]) for a, b in ranges.get(series, ()))
        heads = {at(k): e for k, e in self.heads.items()}
        tails = {at(k): e for k, e in self.tails.items()}
        return Partial(self.sums, Coverage(ranges), self.identity, self.reach, heads, tails)

    def extract(self, specs: list[StreamSpec], kind: str, time_splits: bool) -> Stats:
        """The statistics, rounded once (:meth:`RunMoments.extract`)."""
        return self.sums.extract(specs, kind, time_splits)


def _canonical(identity: dict[str, Any]) -> str:
    """An identity as JSON (tuples and lists alike, as a file gives them back)."""
    return json.dumps(identity, sort_keys=True, default=str)


def _seams(x: Coverage, y: Coverage) -> list[tuple[str, int, int, int]]:
    """Where a range of one coverage ends at a range of the other's start: as
    ``(series, a, b, c)``, the ranges ``[a, b)`` and ``[b, c)`` joined in order
    (``a``: the start of what is already joined to the left)."""
    out = []
    for series in sorted(set(x.ranges) & set(y.ranges)):
        spans = sorted(x.ranges[series] + y.ranges[series])
        start = spans[0][0]
        for (_, b), (c, d) in zip(spans[:-1], spans[1:], strict=True):
            if b == c:
                out.append((series, start, b, d))
            else:
                start = c
    return out
