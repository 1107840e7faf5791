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

from dataclasses import dataclass, field, replace
from functools import reduce
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.accumulator import RunMoments
from wxstats.core.conventions import stream_name
from wxstats.core.errors import WxstatsError
from wxstats.core.kernel import Block
from wxstats.core.partial import Coverage, Edges, Partial
from wxstats.core.stats import Stats
from wxstats.io.atomic import Writer
from wxstats.runtime.engine import blocks_accumulator
from wxstats.runtime.state import (
    TIME,
    State,
    TimeCoverage,
    identity_of,
    refuse_mismatch,
    source_name,
    state_of_run,
)
from wxstats.sources.base import Source, TimeAxisSource
from wxstats.sources.kinds import capabilities_of


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
    from wxstats.core.times import group_index

    step = int(after - before)
    ns = [before - step * (n_t - 1 - i) for i in range(n_t)] + [
        after + step * i for i in range(n_h)
    ]
    return group_index(by, np.array(ns, dtype=np.int64).astype("datetime64[ns]"))


def _check_axis(prev: State, nxt: State, verb: str) -> None:
    """Refuse another kind of time axis or another step (a float axis: to 1e-9
    of a step, as the sources check that times are regular)."""
    a, b = prev.times, nxt.times
    if a.dtype != b.dtype:
        raise WxstatsError(
            f"{nxt.name}: cannot {verb} {prev.name}: its time axis holds {b.dtype} values, "
            f"the state's {a.dtype}"
        )
    if a.step is None or b.step is None:
        return
    if abs(a.step - b.step) > (1e-9 * abs(a.step) if np.dtype(a.dtype).kind == "f" else 0):
        raise WxstatsError(
            f"{nxt.name}: cannot {verb} {prev.name}: its time step differs "
            f"({b.delta(b.step)} vs {a.delta(a.step)})"
        )


@dataclass
class Placed:
    """States as partials on one grid of units (:func:`placed`): in order, and for
    time ranges which state starts a range at a position and the time there (of
    each range's first and last step)."""

    states: list[State]
    partials: list[Partial]
    starts: dict[int, State] = field(default_factory=dict)
    ends: dict[int, State] = field(default_factory=dict)
    time: dict[int, Any] = field(default_factory=dict)


def placed(states: list[State], allow_gap: bool, verb: str) -> Placed:
    """``states`` placed as partials, refused before any sum is added: other data,
    another time axis or step, times off the grid of steps, a unit counted twice,
    a gap unless allowed (or inside a state's own gap). The one rule of
    :func:`combine` and of an update's check before it reads the data (a state
    of the new data without sums: :meth:`Growth.check`)."""
    states = sorted(states, key=lambda s: s.times.first if s.times else s.samples[0])
    first = states[0]
    for other in states[1:]:
        refuse_mismatch(first, other.identity, other.name, verb)
    if first.times is None:  # no difference crosses two samples
        out = Placed(states, [s.partial for s in states])
    else:
        out = _on_grid(states, verb)
    for i, j in combinations(range(len(states)), 2):
        shared = out.partials[i].coverage.overlap(out.partials[j].coverage)
        if shared is not None:
            a, b = states[i], states[j]
            what = f"both count sample {shared[0]} (" if shared[0] != TIME else ""
            unit = "sample" if shared[0] != TIME else "time step"
            raise WxstatsError(
                f"{b.name}: overlaps {a.name}: {what}{b.text} vs {a.text}"
                f"{')' if what else ''}; each {unit} may be counted once"
            )
    for b, c in _gaps(out):
        after, before = out.time[c], out.time[b - 1]
        inside = any(s.times.first < after and s.times.last > before for s in states)
        if not (allow_gap or inside):
            raise _gap(out.starts[c], out.ends[b], after, before, _step(states))
    return out


def _step(states: list[State]) -> int | float | None:
    """The time step of the first state with more than one step."""
    return next((s.times.step for s in states if s.times.step is not None), None)


def _on_grid(ordered: list[State], verb: str) -> Placed:
    """Time ranges on one grid of time steps from the earliest time (each
    state's partial moved there, :meth:`~wxstats.core.partial.Partial.moved`)."""
    first = ordered[0]
    ruler = first  # the first state with a time step (more than one step) gives it
    for other in ordered[1:]:
        _check_axis(ruler, other, verb)
        ruler = ruler if ruler.times.step is not None else other
    cov, step = first.times, ruler.times.step
    # no step known (every range a single step): each range's first time is its own
    # place, two apart so that none is adjacent to another
    singles = sorted({t for s in ordered for t, _, _ in s.times.spans})

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

    out = Placed(ordered, [])
    for state in ordered:
        spans = list(zip(state.partial.coverage.ranges[TIME], state.times.spans, strict=True))
        moved = state.partial.moved(TIME, {a: place(state, t) for (a, _), (t, _, _) in spans})
        out.partials.append(moved)
        for (a, b), (_, (first_time, last_time, _)) in zip(
            moved.coverage.ranges[TIME], spans, strict=True
        ):
            out.starts[a], out.ends[b] = state, state
            out.time[a], out.time[b - 1] = first_time, last_time
    return out


def _gaps(at: Placed) -> list[tuple[int, int]]:
    """Where the placed ranges leave steps out: ``(end, next start)`` positions."""
    if not at.time:
        return []
    ranges = reduce(Coverage.union, (p.coverage for p in at.partials)).ranges[TIME]
    return [(b, c) for (_, b), (c, _) in zip(ranges[:-1], ranges[1:], strict=True)]


def _gap(later: State, earlier: State, first: Any, last: Any, step: Any) -> WxstatsError:
    """``later`` starts at ``first``, not the step after ``earlier``'s ``last``."""
    cov = earlier.times
    expected = cov.label(last + step) if step is not None else "the next time step"
    return WxstatsError(
        f"{later.name}: leaves a gap after {earlier.name}: it starts at {cov.label(first)}, "
        f"the next time step is {expected}; pass --allow-gap to accept a gap (no "
        "differences are counted across it)"
    )


def combine(states: list[State], allow_gap: bool = False, verb: str = "merge with") -> State:
    """One state of disjoint ``states`` (any order), as one run over all of them:
    their partials merged (:meth:`~wxstats.core.partial.Partial.merge`, with the
    seams' differences where time ranges meet). Refused before anything is
    written: what :func:`placed` refuses, a static field that differs."""
    at = placed(states, allow_gap, verb)
    ordered, first = at.states, at.states[0]
    datasets = [d for s in ordered for d in s.datasets]
    if first.times is None:
        total = reduce(Partial.merge, at.partials)
        return State(
            total, first.specs, datasets=datasets, attrs=dict(first.attrs), path=first.path
        )
    static = [s.name for s in first.specs if not s.diff_steps]
    for other, partial in zip(ordered[1:], at.partials[1:], strict=True):
        for name in static:
            one, two = (
                RunMoments({name: s.partial.sums.streams[name]}).pack() for s in (first, other)
            )
            if not np.array_equal(np.concatenate(one), np.concatenate(two)):
                raise WxstatsError(
                    f"{other.name}: the static variable {name.split('__')[0]} differs from "
                    f"{first.name}'s; a static field must be the same in every range"
                )
        time_streams = {n: s for n, s in partial.sums.streams.items() if n not in static}
        partial.sums = RunMoments(time_streams)  # a static field is counted once
    cov, time = first.times, at.time

    def seam_at(series: str, pos: int, tail: Edges, head: Edges) -> RunMoments:
        where = f"{at.starts[pos].name}: the differences across {cov.label(time[pos])}"
        return seam(first, tail, head, time[pos - 1], time[pos], where)

    total = reduce(lambda x, y: x.merge(y, seam_at), at.partials)
    gaps = _gaps(at)
    joined = [[time[a], time[b - 1], b - a] for a, b in total.coverage.ranges[TIME]]
    times = TimeCoverage.of_spans(cov.dtype, joined, _step(ordered))
    gap_labels = [[cov.label(time[b - 1]), cov.label(time[c])] for b, c in gaps]
    return State(
        total,
        first.specs,
        times,
        first.weights,
        datasets,
        {**first.attrs, "gaps": gap_labels},
        first.path,
    )


def state_stats(state: State, *, warnings: list[str] | None = None) -> Stats:
    """The statistics of a state, attributes saying what it covers."""
    kind = state.identity["kind"]
    stats = state.partial.extract(state.specs, kind, capabilities_of(kind).time_splits)
    stats.attrs = dict(state.attrs)
    stats.attrs.pop("gaps", None)
    stats.attrs.pop("statistics_period", None)  # of the first range only: splits says all
    split = state.identity["split"]
    stats.attrs["dataset"] = "; ".join(dict.fromkeys(d[0] for d in state.datasets))
    stats.attrs["splits"] = state.split_text(split)
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
    identity: dict[str, Any] | None = field(default=None, init=False)
    """The new data's state identity, found once by :meth:`check` (a MEPS
    source's lists every sample file) and kept for :meth:`grown`."""

    @staticmethod
    def of(options: Any) -> Growth | None:
        if options.state is None and options.base_state is None:
            return None
        base = State.read(str(options.base_state)) if options.base_state else None
        return Growth(options.state, base, bool(options.allow_gap))

    def check(self, source: Source, skipna: bool) -> None:
        """Refuse, before any data is read, what cannot become a state or grow one:
        the state and the new data (a state without sums) as :func:`combine`
        places them, so an update takes whatever a merge of their states takes."""
        # that the data can have a state: the pre-flight (runtime/preflight.py) refused before
        base, name = self.base, source_name(source)
        identity = self.identity = identity_of(source, skipna)
        if base is None:
            return
        kinds = {"time ranges": True, "samples": False}  # of times, or of samples
        if kinds.get(source.capabilities.state) != (base.times is not None):
            raise WxstatsError(
                f"{name}: cannot update {base.name}: kind of data {source.kind}, the "
                f"state's {base.identity['kind']}"
            )
        if base.times is None:  # an update adds the samples not counted yet
            source.leave_out(set(base.samples))
            if len(source) == 0:
                raise WxstatsError(
                    f"{name}: every sample of its {source.split} split is in {base.name} "
                    "already; nothing to add"
                )
        refuse_mismatch(base, identity, name, "update")
        placed(
            [base, state_of_run(source, RunMoments({}), identity, False)], self.allow_gap, "update"
        )
        if base.times is not None and source.splits[0].start > 0:
            self._check_tail(source)  # the data holds the state's times too

    def _check_tail(self, source: TimeAxisSource) -> None:
        """``update --only-new`` on data that holds the state's times too: its
        steps before the new ones must be the state's last steps, value for value
        (else the old data changed and the state no longer describes it)."""
        base = self.base
        start = source.splits[0].start
        cov, end = base.times, base.partial.coverage.ranges[TIME][-1][1]
        last = base.partial.tails[(TIME, end)]  # the last range's last steps
        n = len(next(iter(last.values()))) if last else 0
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
        identity = self.identity if self.identity is not None else identity_of(source, skipna)
        new = state_of_run(source, acc, identity)
        if self.base is None:
            self.result = new
            return acc.extract(source.streams, source.kind, source.capabilities.time_splits)
        grown = combine([self.base, new], self.allow_gap, "update")
        # what describes the data (a datastore's config, where its files go) is the
        # data updated from, as a run over all of it says; the ranges joined are combine's
        self.result = replace(grown, attrs={**grown.attrs, **new.attrs})
        return state_stats(self.result)

    def writers(self) -> dict[Path, Writer]:
        if self.output is None or self.result is None:
            return {}
        return {Path(self.output): self.result.writer()}
