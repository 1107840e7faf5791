"""Statistics that grow with the data: ``compute --state``, ``update`` and ``merge``.

A state is a :class:`~wxstats.core.partial.Partial` on disk, so :func:`combine`
is :meth:`Partial.merge <wxstats.core.partial.Partial.merge>` of the states'
partials plus, where two time ranges meet, the *seam*: the differences from
the earlier range's last into the later range's first ``max(diff_steps)``
steps (:func:`seam`, from the edges every state keeps). Time ranges are
placed on one grid of steps first; a MEPS datastore's samples are units of
their own (no difference crosses two). Refused before anything is written:
other data, a unit counted twice, a gap unless allowed. :class:`Growth` is
what a ``compute`` or ``update`` run does with states: check the new data
against the state before reading it (an update of samples reads only those
not in the state), and after the all-reduce join the new sums to the state's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.accumulator import RunMoments
from wxstats.core.conventions import stream_name
from wxstats.core.errors import WxstatsError
from wxstats.core.kernels import Block
from wxstats.core.partial import Edges, Partial, Seam
from wxstats.core.stats import Stats
from wxstats.io.atomic import Writer
from wxstats.runtime.engine import blocks_accumulator
from wxstats.runtime.state import (
    COVERAGES,
    TIME,
    SampleCoverage,
    State,
    TimeCoverage,
    coverage_of,
    identity_of,
    refuse_mismatch,
    source_name,
    spans,
    state_of_run,
)
from wxstats.sources.base import Source, TimeAxisSource


def seam(state: State, tail: Edges, head: Edges, before: Any, after: Any, where: str) -> RunMoments:
    """The exact sums of the differences from the steps of ``tail`` (the last at
    time ``before``) into those of ``head`` (the first at time ``after``): the
    seam of two adjacent ranges of data like ``state``'s."""
    blocks = {}
    split = state.identity["split"]
    for var, last in tail.items():
        first = head[var]
        n_t, n_h = last.shape[0], first.shape[0]
        array = np.concatenate([last, first.astype(np.result_type(last, first))])
        diffs = {}
        for k in state.identity["diff_steps"]:
            lo, hi = max(n_t, k), min(n_t + k, n_t + n_h)
            diffs[k] = (lo, hi) if lo < hi else (0, 0)
        channels = np.arange(array.shape[2], dtype=np.int64)
        groups = _edge_groups(state, before, after, n_t, n_h)
        weights = state.weights.get(var)
        blocks[stream_name(var, split)] = Block(array, channels, (0, 0), diffs, groups, weights)
    return blocks_accumulator(state.specs, blocks, where=where, skipna=state.identity["skipna"])


def _edge_groups(state: State, before: Any, after: Any, n_t: int, n_h: int) -> np.ndarray | None:
    """A climatology's group of each step of a seam's tail then head."""
    by = state.identity.get("by")
    if not by:
        return None
    from wxstats.sources.xarray.timeaxis import group_index

    step = int(after - before)
    ns = [before - step * (n_t - 1 - i) for i in range(n_t)] + [
        after + step * i for i in range(n_h)
    ]
    return group_index(by, np.array(ns, dtype=np.int64).astype("datetime64[ns]"))


def _time_streams(acc: RunMoments, static: list[str]) -> RunMoments:
    return RunMoments({n: s for n, s in acc.streams.items() if n not in static})


def _same(a: TimeCoverage, x: int | float, y: int | float, step: int | float) -> bool:
    """Equal times or steps (a float axis: to 1e-9 of a step, as the sources
    check that times are regular)."""
    if np.dtype(a.dtype).kind == "f":
        return abs(x - y) <= 1e-9 * abs(step)
    return x == y


def _next_step(a: TimeCoverage, first: int | float, step: int | float) -> bool:
    """Whether ``first`` is the time step after ``a``."""
    return _same(a, first, a.last + step, step)


def _check_axis(prev: State, nxt: State, verb: str) -> int | float | None:
    """Refuse another kind of time axis or another step; the step."""
    a, b = prev.coverage, nxt.coverage
    if a.dtype != b.dtype:
        raise WxstatsError(
            f"{nxt.name}: cannot {verb} {prev.name}: its time axis holds {b.dtype} values, "
            f"the state's {a.dtype}"
        )
    step = a.step if a.step is not None else b.step
    if a.step is not None and b.step is not None and not _same(a, a.step, b.step, a.step):
        raise WxstatsError(
            f"{nxt.name}: cannot {verb} {prev.name}: its time step differs "
            f"({b.delta(b.step)} vs {a.delta(a.step)})"
        )
    return step


def _gap(later: State, earlier: State, first: Any, last: Any, step: Any) -> WxstatsError:
    """``later`` starts at ``first``, not the step after ``earlier``'s ``last``."""
    cov = earlier.coverage
    expected = cov.label(last + step) if step is not None else "the next time step"
    return WxstatsError(
        f"{later.name}: leaves a gap after {earlier.name}: it starts at {cov.label(first)}, "
        f"the next time step is {expected}; pass --allow-gap to accept a gap (no "
        "differences are counted across it)"
    )


def check_next(prev: State, nxt: State, allow_gap: bool, verb: str) -> bool:
    """Refuse what cannot follow ``prev``; True when the ranges are adjacent."""
    a, b = prev.coverage, nxt.coverage
    step = _check_axis(prev, nxt, verb)
    if b.first <= a.last:
        raise WxstatsError(
            f"{nxt.name}: overlaps {prev.name}: {b.text} vs {a.text}; each time step may be "
            "counted once: give only data after the state's last time"
        )
    if step is None or not _next_step(a, b.first, step):
        if not allow_gap:
            raise _gap(nxt, prev, b.first, a.last, step)
        if min(a.n, b.n) < prev.reach:
            raise WxstatsError(
                f"{nxt.name}: cannot join across a gap a range shorter than the largest "
                f"difference step ({prev.reach})"
            )
        return False
    return True


def combine(states: list[State], allow_gap: bool = False, verb: str = "merge with") -> State:
    """One state of disjoint ``states`` (any order), as one run over all of them:
    their partials merged (:meth:`~wxstats.core.partial.Partial.merge`, with the
    seams' differences where time ranges meet). Refused before anything is
    written: other data, a unit counted twice, a gap unless allowed."""
    if all(isinstance(s.coverage, TimeCoverage) for s in states):  # compared in time order
        states = sorted(states, key=lambda s: s.coverage.first)
    first = states[0]
    for other in states[1:]:
        refuse_mismatch(first, other.identity, other.name, verb)
    if isinstance(first.coverage, SampleCoverage):
        return _combine_samples(states)
    return _combine_ranges(states, allow_gap, verb)


def _merged(states: list[State], partials: list[Partial], seam: Seam | None = None) -> Partial:
    """The partials merged, a unit counted twice refused naming both states."""
    for i, j in combinations(range(len(states)), 2):
        shared = partials[i].coverage.overlap(partials[j].coverage)
        if shared is not None:
            a, b = states[i], states[j]
            what = f"both count sample {shared[0]} (" if shared[0] != TIME else ""
            unit = "sample" if shared[0] != TIME else "time step"
            raise WxstatsError(
                f"{b.name}: overlaps {a.name}: {what}{b.coverage.text} vs {a.coverage.text}"
                f"{')' if what else ''}; each {unit} may be counted once"
            )
    return reduce(lambda x, y: x.merge(y, seam), partials)


def _combine_samples(states: list[State]) -> State:
    """Sets of samples: no difference crosses two samples, so their sums add."""
    total = _merged(states, [s.partial() for s in states])
    ordered = sorted(states, key=lambda s: s.coverage.samples[0])
    return State(
        identity=states[0].identity,
        specs=states[0].specs,
        coverage=SampleCoverage(tuple(total.coverage.ranges)),
        acc=total.sums,
        datasets=[d for s in ordered for d in s.datasets],
        attrs=dict(ordered[0].attrs),
        path=states[0].path,
    )


def _combine_ranges(states: list[State], allow_gap: bool, verb: str) -> State:
    """Time ranges: placed on one grid of time steps (:meth:`State.partial`),
    merged with a seam where two meet (a state may fill another's gap); a gap
    elsewhere is refused unless allowed or inside a state's own gap."""
    ordered = sorted(states, key=lambda s: s.coverage.first)
    first = ordered[0]
    static = first.static_streams
    ruler = first  # the first state with a time step (more than one step) gives it
    for other in ordered[1:]:
        _check_axis(ruler, other, verb)
        ruler = ruler if ruler.coverage.step is not None else other
        for name in static:
            if not np.array_equal(
                np.concatenate(_packed(first.acc, name)), np.concatenate(_packed(other.acc, name))
            ):
                raise WxstatsError(
                    f"{other.name}: the static variable {name.split('__')[0]} differs from "
                    f"{first.name}'s; a static field must be the same in every range"
                )
    cov, step = first.coverage, ruler.coverage.step
    singles = sorted({s.coverage.first for s in ordered})  # no step: one step each

    def place(state: State, value: int | float) -> int:
        """A time's position on the grid of steps from the earliest time."""
        if step is None:
            return 2 * singles.index(value)  # never adjacent
        if np.dtype(cov.dtype).kind != "f" and (value - cov.first) % step:
            raise WxstatsError(
                f"{state.name}: its times are not on the time steps of {first.name} "
                f"({cov.delta(step)} apart from {cov.label(cov.first)})"
            )
        return int(np.rint((value - cov.first) / step))

    partials, starts, ends, time = [], {}, {}, {}
    for state in ordered:
        part = state.partial(lambda v, s=state: place(s, v))
        if state is not first:  # a static field is counted once
            part.sums = _time_streams(part.sums, static)
        partials.append(part)
        for (a, b), span in zip(part.coverage.ranges[TIME], spans(state), strict=True):
            starts[a], ends[b], time[a], time[b - 1] = state, state, span.first, span.last

    def seam_at(series: str, at: int, tail: Edges, head: Edges) -> RunMoments:
        where = f"{starts[at].name}: the differences across {cov.label(time[at])}"
        return seam(first, tail, head, time[at - 1], time[at], where)

    total = _merged(ordered, partials, seam_at)
    ranges = total.coverage.ranges[TIME]
    gaps = [(b, c) for (_, b), (c, _) in zip(ranges[:-1], ranges[1:], strict=True)]
    for b, c in gaps:
        inside = any(s.coverage.first < time[c] and s.coverage.last > time[b - 1] for s in ordered)
        if not (allow_gap or inside):
            raise _gap(starts[c], ends[b], time[c], time[b - 1], step)
    joined = [[time[a], time[b - 1], b - a] for a, b in ranges]
    n = sum(r[2] for r in joined)
    return State(
        identity=first.identity,
        specs=first.specs,
        coverage=TimeCoverage(
            cov.dtype, joined[0][0], joined[-1][1], n, step, joined if gaps else None
        ),
        acc=total.sums,
        head={
            v: np.concatenate([total.heads[(TIME, a)][v] for a, _ in ranges]) for v in first.head
        },
        tail={
            v: np.concatenate([total.tails[(TIME, b)][v] for _, b in ranges]) for v in first.tail
        },
        weights=first.weights,
        datasets=[d for s in ordered for d in s.datasets],
        attrs={
            **first.attrs,
            "gaps": [[cov.label(time[b - 1]), cov.label(time[c])] for b, c in gaps],
        },
        path=first.path,
    )


def _packed(acc: RunMoments, stream: str) -> tuple[np.ndarray, ...]:
    return RunMoments({stream: acc.streams[stream]}).pack()


def state_stats(state: State, *, warnings: list[str] | None = None) -> Stats:
    """The statistics of a state, attributes saying what it covers."""
    stats = state.acc.extract(state.specs, state.identity["kind"])
    cov = state.coverage
    stats.attrs = dict(state.attrs)
    stats.attrs.pop("gaps", None)
    stats.attrs.pop("statistics_period", None)  # of the first range only: splits says all
    split = state.identity["split"]
    stats.attrs["dataset"] = "; ".join(dict.fromkeys(d[0] for d in state.datasets))
    stats.attrs["splits"] = cov.split_text(split)
    stats.attrs["skipna"] = int(state.identity["skipna"])
    stats.attrs["grown_from"] = "; ".join(f"{d[0]}: {d[1]} to {d[2]}" for d in state.datasets)
    if state.attrs.get("gaps"):
        stats.attrs["gaps"] = "; ".join(f"{a} to {b}" for a, b in state.attrs["gaps"])
    stats.warnings.extend(warnings or [])
    return stats


@dataclass
class Growth:
    """A run's use of states (see module docstring): ``base`` to update,
    ``output`` to write."""

    output: Path | None = None
    base: State | None = None
    allow_gap: bool = False
    result: State | None = field(default=None, init=False)

    @staticmethod
    def of(options: Any) -> Growth | None:
        if options.state is None and options.base_state is None:
            return None
        base = State.read(str(options.base_state)) if options.base_state else None
        return Growth(options.state, base, bool(options.allow_gap))

    def check(self, source: Source, skipna: bool) -> None:
        """Refuse, before any data is read, what cannot become a state or grow one."""
        # that the data can have a state: the pre-flight (runtime/targets.py) refused before
        base, name = self.base, source_name(source)
        if base is not None:
            kind = base.identity["kind"]  # a kind covered alike: its identity differs below
            if type(base.coverage) is not COVERAGES.get(source.capabilities.state):
                raise WxstatsError(
                    f"{name}: cannot update {base.name}: kind of data {source.kind}, the "
                    f"state's {kind}"
                )
            base.coverage.leave_out(source, base.name)  # before the samples are counted
        identity = identity_of(source, skipna)
        if base is not None:
            refuse_mismatch(base, identity, name, "update")
            if isinstance(base.coverage, TimeCoverage):
                self._check_times(source, identity)

    def _check_times(self, source: TimeAxisSource, identity: dict[str, Any]) -> None:
        """New time steps must follow the state's (earlier ones: merge)."""
        coverage = coverage_of(source)
        if self.base is not None:
            preview = State(identity, source.streams, coverage, self.base.acc, path=source.path)
            base = self.base.coverage
            if coverage.dtype == base.dtype and coverage.last < base.first:
                raise WxstatsError(
                    f"{source.path}: ends at {coverage.label(coverage.last)}, before "
                    f"{self.base.name} ({base.text}); update adds later data "
                    "(compute a state of it and merge the states to join earlier ranges)"
                )
            check_next(self.base, preview, self.allow_gap, "update")
            if source.splits[0].start > 0:  # the data holds the state's times too
                self._check_tail(source)

    def _check_tail(self, source: TimeAxisSource) -> None:
        """``update --only-new`` on data that holds the state's times too: its
        steps before the new ones must be the state's last steps, value for value
        (else the old part changed and the state no longer describes it)."""
        base = self.base
        start = source.splits[0].start
        last = spans(base)[-1].tail  # the edges of the state's last range
        n = next(iter(last.values())).shape[0] if last else 0
        cov = base.coverage
        found = TimeCoverage.values_of(source.times[max(0, start - n) : start])
        expected = [cov.last - (cov.step or 0) * (n - 1 - i) for i in range(n)]
        if found.tolist() != expected:
            raise WxstatsError(
                f"{source.path}: the time steps before its new ones are not {base.name}'s "
                f"last time steps ({cov.text}); give data that continues the state"
            )
        steps = source.steps(start - n, start)
        for var, tail in last.items():
            if not np.array_equal(
                steps[var].astype(np.float64), tail.astype(np.float64), equal_nan=True
            ):
                raise WxstatsError(
                    f"{source.path}: variable {var} differs from {base.name} in the state's "
                    f"last time steps ({cov.label(cov.last)}): the data before the new times "
                    "changed since the state was computed; recompute the state"
                )

    def grown(self, source: Source, acc: RunMoments, skipna: bool) -> Stats:
        """The statistics after the run, keeping the state to write."""
        new = state_of_run(source, acc, skipna)
        if self.base is None:
            self.result = new
            return acc.extract(source.streams, source.kind)
        self.result = combine([self.base, new], self.allow_gap, "update")
        return state_stats(self.result)

    def paths(self) -> list[Path]:
        return [Path(self.output)] if self.output is not None else []

    def writers(self) -> dict[Path, Writer]:
        if self.output is None or self.result is None:
            return {}
        return {Path(self.output): self.result.writer()}
