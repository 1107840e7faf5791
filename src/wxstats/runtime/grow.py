"""Statistics that grow with the data: ``compute --state``, ``update`` and ``merge``.

A full run over a split sums every time step on its own and every difference
``x[t] - x[t-k]`` at its later time ``t``, then adds the exact sums. Two
adjacent time ranges therefore give the full run's sums as: the sums of the
first range, plus those of the second, plus the differences whose earlier
time is in the first range and later time in the second (the *seam*:
computed from the first range's last and the second range's first
``max(diff_steps)`` steps, which every state keeps). Every time step is
summed relative to its own reference (:mod:`wxstats.core.unit_reference`), so
states computed apart, on any machines and in any order, join to the same
bytes as the full run. A neural-lam MEPS datastore's samples are independent
(no difference crosses two), so their states join by adding the sums of
disjoint sets of samples.

:func:`combine` joins states as their coverage is: time ranges in time order
(refusing overlaps, gaps unless allowed, other data), sets of samples in any
order (refusing a sample counted twice, other data); :class:`Growth` is what
a ``compute`` or ``update`` run does with states: check the new data against
the state before reading it (an update of samples reads only those not in the
state), and after the all-reduce join the new sums to the state's and keep the
result to write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.accumulator import RunMoments
from wxstats.core.errors import WxstatsError
from wxstats.core.kernels import Block
from wxstats.core.stats import Stats
from wxstats.io.atomic import Writer
from wxstats.runtime.engine import blocks_accumulator
from wxstats.runtime.state import (
    COVERAGES,
    SampleCoverage,
    State,
    TimeCoverage,
    coverage_of,
    identity_of,
    refuse_mismatch,
    source_name,
    state_of_run,
)
from wxstats.sources.base import Source, TimeAxisSource


@dataclass
class Span:
    """One contiguous range of a state's coverage with its edge steps (``owner``:
    the index of its state among those being combined)."""

    first: int | float
    last: int | float
    n: int
    head: dict[str, np.ndarray]
    tail: dict[str, np.ndarray]
    owner: int = 0


def spans(state: State, owner: int = 0) -> list[Span]:
    """The contiguous ranges of ``state``, each with its own edges."""
    out, at = [], 0
    for first, last, n in state.coverage.spans:
        m = min(state.reach, int(n))
        edges = [{v: e[at : at + m] for v, e in side.items()} for side in (state.head, state.tail)]
        out.append(Span(first, last, int(n), *edges, owner))
        at += m
    return out


def seam(state: State, earlier: Span, later: Span, where: str) -> RunMoments:
    """The exact sums of the differences whose earlier time is in ``earlier``
    and later time in ``later`` (adjacent ranges of states like ``state``)."""
    blocks = {}
    split = state.identity["split"]
    for var, tail in earlier.tail.items():
        head = later.head[var]
        n_t, n_h = tail.shape[0], head.shape[0]
        array = np.concatenate([tail, head.astype(np.result_type(tail, head))])
        diffs = {}
        for k in state.identity["diff_steps"]:
            lo, hi = max(n_t, k), min(n_t + k, n_t + n_h)
            diffs[k] = (lo, hi) if lo < hi else (0, 0)
        channels = np.arange(array.shape[2], dtype=np.int64)
        groups = _edge_groups(state, earlier, later, n_t, n_h)
        weights = state.weights.get(var)
        blocks[f"{var}__{split}"] = Block(array, channels, (0, 0), diffs, groups, weights)
    return blocks_accumulator(
        state.specs,
        blocks,
        where=where,
        skipna=state.identity["skipna"],
    )


def _edge_groups(state: State, earlier: Span, later: Span, n_t: int, n_h: int) -> np.ndarray | None:
    """A climatology's group of each step of ``earlier``'s tail then ``later``'s head."""
    by = state.identity.get("by")
    if not by:
        return None
    from wxstats.sources.xarray.timeaxis import group_index

    step = int(later.first - earlier.last)
    ns = [earlier.last - step * (n_t - 1 - i) for i in range(n_t)] + [
        later.first + step * i for i in range(n_h)
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
            expected = a.label(a.last + step) if step is not None else "the next time step"
            raise WxstatsError(
                f"{nxt.name}: leaves a gap after {prev.name}: it starts at {b.label(b.first)}, "
                f"the next time step is {expected}; pass --allow-gap to accept a gap (no "
                "differences are counted across it)"
            )
        if min(a.n, b.n) < prev.reach:
            raise WxstatsError(
                f"{nxt.name}: cannot join across a gap a range shorter than the largest "
                f"difference step ({prev.reach})"
            )
        return False
    return True


def _join(prev: Span, nxt: Span, reach: int) -> Span:
    """Adjacent ranges as one (edges of ``reach`` steps reaching across a short one)."""
    head = {v: np.concatenate([prev.head[v], nxt.head[v]])[:reach] for v in prev.head}
    tail = {v: np.concatenate([prev.tail[v], nxt.tail[v]])[-reach:] for v in nxt.tail}
    return Span(prev.first, nxt.last, prev.n + nxt.n, head, tail, prev.owner)


def combine(states: list[State], allow_gap: bool = False, verb: str = "merge with") -> State:
    """One state of disjoint ``states`` (any order), as one run over all of them,
    joined as their kind of coverage is (:data:`JOINS`)."""
    for other in states[1:]:
        if type(other.coverage) is not type(states[0].coverage):  # another kind of data
            refuse_mismatch(states[0], other.identity, other.name, verb)
    return JOINS[type(states[0].coverage)](states, allow_gap, verb)


def combine_ranges(states: list[State], allow_gap: bool, verb: str) -> State:
    """Time ranges: in time order, a seam where two meet (a state may fill
    another's gap), a gap elsewhere (refused unless allowed, or inside a state's gap)."""
    ordered = sorted(states, key=lambda s: s.coverage.first)
    first = ordered[0]
    acc = first.acc.empty_like()
    acc.merge(first.acc)
    static = first.static_streams
    ruler = first  # the first state with a time step (more than one step) gives it
    for other in ordered[1:]:
        refuse_mismatch(first, other.identity, other.name, verb)
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
        acc.merge(_time_streams(other.acc, static))
    cov, step = first.coverage, ruler.coverage.step
    pieces = sorted((p for i, s in enumerate(ordered) for p in spans(s, i)), key=lambda p: p.first)
    joined = [pieces[0]]
    for nxt in pieces[1:]:
        prev = joined[-1]
        a, b = ordered[prev.owner], ordered[nxt.owner]
        if nxt.first <= prev.last:
            raise WxstatsError(
                f"{b.name}: overlaps {a.name}: {b.coverage.text} vs {a.coverage.text}; each "
                "time step may be counted once"
            )
        if step is not None and _same(cov, nxt.first, prev.last + step, step):
            where = f"{b.name}: the differences across {cov.label(nxt.first)}"
            acc.merge(seam(first, prev, nxt, where))
            joined[-1] = _join(prev, nxt, first.reach)
            continue
        inside = any(s.coverage.first < nxt.first and s.coverage.last > prev.last for s in ordered)
        if not (allow_gap or inside):
            expected = cov.label(prev.last + step) if step is not None else "the next time step"
            raise WxstatsError(
                f"{b.name}: leaves a gap after {a.name}: it starts at {cov.label(nxt.first)}, "
                f"the next time step is {expected}; pass --allow-gap to accept a gap (no "
                "differences are counted across it)"
            )
        joined.append(nxt)
    ranges = [[p.first, p.last, p.n] for p in joined]
    gaps = [
        [cov.label(p.last), cov.label(q.first)]
        for p, q in zip(joined[:-1], joined[1:], strict=True)
    ]
    return State(
        identity=first.identity,
        specs=first.specs,
        coverage=TimeCoverage(
            cov.dtype,
            ranges[0][0],
            ranges[-1][1],
            sum(r[2] for r in ranges),
            step,
            ranges if len(ranges) > 1 else None,
        ),
        acc=acc,
        head={v: np.concatenate([p.head[v] for p in joined]) for v in first.head},
        tail={v: np.concatenate([p.tail[v] for p in joined]) for v in first.tail},
        weights=first.weights,
        datasets=[d for s in ordered for d in s.datasets],
        attrs={**first.attrs, "gaps": gaps},
        path=first.path,
    )


def combine_samples(states: list[State], allow_gap: bool, verb: str) -> State:
    """Sets of samples: no difference crosses two samples, so their exact sums
    add; refused before anything is written: other data, a sample in two states."""
    first = states[0]
    owner: dict[str, State] = {}
    for state in states:
        if state is not first:
            refuse_mismatch(first, state.identity, state.name, verb)
        for name in state.coverage.samples:
            if name in owner:
                raise WxstatsError(
                    f"{state.name}: overlaps {owner[name].name}: both count sample {name} "
                    f"({state.coverage.text} vs {owner[name].coverage.text}); each sample may "
                    "be counted once"
                )
            owner[name] = state
    acc = first.acc.empty_like()
    for state in states:
        acc.merge(state.acc)
    ordered = sorted(states, key=lambda s: s.coverage.samples[0])
    return State(
        identity=first.identity,
        specs=first.specs,
        coverage=SampleCoverage(tuple(owner)),
        acc=acc,
        datasets=[d for s in ordered for d in s.datasets],
        attrs=dict(ordered[0].attrs),
        path=first.path,
    )


JOINS = {TimeCoverage: combine_ranges, SampleCoverage: combine_samples}
"""How the states of each kind of coverage join (:data:`wxstats.runtime.state.COVERAGES`)."""


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
