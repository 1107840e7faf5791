"""What a statistics state is of, and when two states may become one.

A :class:`State` is a :class:`~wxstats.core.partial.Partial` (exact sums, the
identity of the data, the units counted and each time range's edge steps)
plus what it is of, for messages and the file: a zarr/netCDF dataset's time
ranges (:class:`TimeCoverage`: the times of the partial's positions) or a
neural-lam MEPS datastore's samples (a unit each, named by file: no
difference crosses two samples), the datasets, weights and attributes. How
states join is :mod:`wxstats.runtime.grow`; the file format is
:mod:`wxstats.io.formats.wxstate`; here the contents are given meaning, and
mismatches are refused in one line that says what differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wxstats import __version__
from wxstats.core.accumulator import RunMoments
from wxstats.core.conventions import long_name_coord, units_coord
from wxstats.core.errors import WxstatsError
from wxstats.core.partial import Coverage, Partial
from wxstats.core.streams import Pooling, StreamLayout, StreamSpec, with_feature_units
from wxstats.io.atomic import Writer
from wxstats.io.formats.wxstate import StateFile, read_state_file, state_writer
from wxstats.runtime.identity import VERSION, first_difference, run_identity
from wxstats.sources.base import Source, TimeAxisSource, time_axis


@dataclass(frozen=True)
class TimeCoverage:
    """The time steps a state of a zarr/netCDF dataset covers: ``n`` steps
    from ``first`` to ``last`` (datetimes as int64 nanoseconds), ``step`` apart
    (None for one step); with gaps (``--allow-gap``), ``ranges`` lists the
    contiguous ranges as ``[first, last, n]`` (None: one range), so a later
    merge may fill a gap."""

    dtype: str
    first: int | float
    last: int | float
    n: int
    step: int | float | None
    ranges: list[list[int | float]] | None = None

    @property
    def spans(self) -> list[list[int | float]]:
        """``[first, last, n]`` of each contiguous range, in time order."""
        return self.ranges or [[self.first, self.last, self.n]]

    def label(self, value: int | float) -> str:
        from wxstats.core.times import fmt_time

        if self.dtype.startswith("datetime64"):
            return fmt_time(np.datetime64(int(value), "ns"))
        return fmt_time(np.asarray(value, dtype=self.dtype)[()])

    def delta(self, step: int | float) -> str:
        from wxstats.core.times import fmt_delta

        if self.dtype.startswith("datetime64"):
            return fmt_delta(np.timedelta64(int(step), "ns"))
        return fmt_delta(step)

    @property
    def text(self) -> str:
        return f"{self.label(self.first)} to {self.label(self.last)} ({self.n} steps)"

    @property
    def bounds(self) -> tuple[str, str]:
        return self.label(self.first), self.label(self.last)

    def split_text(self, split: str) -> str:
        """The ``splits`` attribute of the statistics of a state."""
        return f"{split}={self.label(self.first)}/{self.label(self.last)} ({self.n} steps)"

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("dtype", "first", "last", "n", "step", "ranges")}

    @staticmethod
    def of_source(source: TimeAxisSource) -> TimeCoverage:
        """The time steps of the one split of a run over ``source`` (the state's
        target holds one split: the pre-flight refused several)."""
        split = source.splits[0]
        times = source.times[split.start : split.stop]
        if times.dtype.kind not in "Miuf":
            raise WxstatsError(
                f"{source.path}: a statistics state needs a datetime64 or numeric time axis "
                f"(this one holds {times.dtype} values, e.g. cftime dates)"
            )
        dtype = "datetime64[ns]" if times.dtype.kind == "M" else times.dtype.str
        items = [v.item() for v in TimeCoverage.values_of(times)]
        step = items[1] - items[0] if len(items) > 1 else None
        return TimeCoverage.of_spans(dtype, [[items[0], items[-1], len(items)]], step)

    @staticmethod
    def of_spans(dtype: str, spans: list[list[Any]], step: int | float | None) -> TimeCoverage:
        """Ranges ``[first, last, n]`` in time order, ``step`` apart within each."""
        n = sum(int(span[2]) for span in spans)
        return TimeCoverage(dtype, spans[0][0], spans[-1][1], n, step, spans if spans[1:] else None)

    def place(self, value: int | float) -> int:
        """The position of a time of this coverage on its steps from its first
        time (no step: the range's number, twice, so ranges never touch)."""
        if self.step is None:
            return 2 * [span[0] for span in self.spans].index(value)
        return int(np.rint((value - self.first) / self.step))

    @staticmethod
    def values_of(times: np.ndarray) -> np.ndarray:
        """Times as a coverage holds them (datetimes: int64 nanoseconds)."""
        if times.dtype.kind == "M":
            return times.astype("datetime64[ns]").astype(np.int64)
        return times


TIME = "time"
"""The one series of a time coverage's units."""


def _plain(value: Any) -> Any:
    """A coordinate attribute as JSON takes it."""
    return value.tolist() if hasattr(value, "tolist") else value


def _layout_json(layout: StreamLayout, units: list[str], long_names: list[str]) -> dict[str, Any]:
    """The JSON of a stream's labels, in the keys of state files before labels
    were named for what they mean (``prefix`` is the variable, ``category`` the
    role, ``unit_attribute`` not :attr:`~StreamLayout.units_per_feature`), and a
    stack of variables' units and long names as coordinates, as files wrote them:
    a state file's bytes do not change with the names of the code's fields."""
    full = with_feature_units(layout, units, long_names)
    coords = {
        name: [list(c[0]), np.asarray(c[1]).tolist(), np.asarray(c[1]).dtype.str]
        + ([{k: _plain(v) for k, v in c[2].items()}] if len(c) > 2 else [])
        for name, c in full.coords.items()
    }
    return {
        "prefix": layout.variable,
        "split": layout.split,
        "feature_dims": list(layout.feature_dims),
        "feature_shape": list(layout.feature_shape),
        "coords": coords,
        "category": layout.role,
        "unit_attribute": not layout.units_per_feature,
        **({"attrs": dict(layout.attrs)} if layout.attrs else {}),
    }


def _layout_of(lay: dict[str, Any]) -> StreamLayout:
    """The labels :func:`_layout_json` wrote (a stack of variables' unit and long
    name coordinates left out: they are the spec's ``units`` and ``long_names``)."""
    per_feature = not bool(lay["unit_attribute"])
    dims = tuple(lay["feature_dims"])
    derived = set()
    if per_feature and len(dims) == 1:
        derived = {units_coord(dims[0]), long_name_coord(dims[0])}
    coords = {
        name: (tuple(c[0]), np.asarray(c[1], dtype=np.dtype(c[2])), *c[3:])
        for name, c in lay["coords"].items()
        if name not in derived
    }
    return StreamLayout(
        variable=lay["prefix"],
        split=lay["split"],
        feature_dims=dims,
        feature_shape=tuple(lay["feature_shape"]),
        coords=coords,
        role=lay["category"],
        units_per_feature=per_feature,
        attrs=dict(lay.get("attrs", {})),
    )


def _spec_json(spec: StreamSpec) -> dict[str, Any]:
    assert spec.layout is not None
    out = {
        "name": spec.name,
        "features": list(spec.features),
        "units": list(spec.units),
        "diff_steps": list(spec.diff_steps),
        "diff_span": {str(k): v for k, v in spec.diff_span.items()},
        "long_names": list(spec.long_names),
        "weighted": bool(spec.weighted),
        "layout": _layout_json(spec.layout, spec.units, spec.long_names),
    }
    if spec.order != 2:  # --moments 4; absent in the states before it
        out["order"] = spec.order
    pool = spec.pooled
    if pool is not None:  # a state merged or updated later writes the pooled statistics too
        out["pooled"] = {
            "name": pool.name,
            "dims": list(pool.dims),
            "groups": [list(g) for g in pool.groups],
            "features": list(pool.features),
            "units": list(pool.units),
            "long_names": list(pool.long_names),
            "layout": _layout_json(pool.layout, pool.units, pool.long_names),
        }
    return out


def _spec_of(d: dict[str, Any]) -> StreamSpec:
    p = d.get("pooled")
    pooled = None
    if p is not None:
        pooled = Pooling(
            p["name"],
            tuple(p["dims"]),
            tuple(tuple(int(f) for f in g) for g in p["groups"]),
            list(p["features"]),
            list(p["units"]),
            list(p["long_names"]),
            _layout_of(p["layout"]),
        )
    return StreamSpec(
        d["name"],
        list(d["features"]),
        list(d["units"]),
        tuple(d["diff_steps"]),
        list(d["long_names"]),
        _layout_of(d["layout"]),
        bool(d.get("weighted", False)),
        diff_span={int(k): int(v) for k, v in d.get("diff_span", {}).items()},
        pooled=pooled,
        order=int(d.get("order", 2)),
    )


@dataclass
class State:
    """A statistics state (see module docstring): ``partial``'s time positions are
    the steps of ``times`` (:meth:`TimeCoverage.place`); a state of samples has
    no ``times`` and a unit per sample. ``path``: where it was read."""

    partial: Partial
    specs: list[StreamSpec]
    times: TimeCoverage | None = None
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    """Variable name -> its grid-point weights (a weighted state, ``--weights``)."""
    datasets: list[list[str]] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    path: str = ""

    @property
    def identity(self) -> dict[str, Any]:
        return self.partial.identity

    @property
    def name(self) -> str:
        return self.path or "the new data"

    @property
    def samples(self) -> tuple[str, ...]:
        """A state of samples: their file names (``nwp_YYYYMMDDHH_mbrNNN.npy``), sorted."""
        return tuple(self.partial.coverage.ranges)

    @property
    def text(self) -> str:
        if self.times is not None:
            return self.times.text
        return f"{len(self.samples)} samples, {self.samples[0]} to {self.samples[-1]}"

    def split_text(self, split: str) -> str:
        """The ``splits`` attribute of the statistics of a state."""
        return self.times.split_text(split) if self.times else f"{split}: {self.text}"

    # -- the file ---------------------------------------------------------------
    def writer(self) -> Writer:
        ints, minimum, maximum = self.partial.sums.pack()
        meta = {
            "identity": self.identity,
            "coverage": self.times.to_json() if self.times else {"samples": list(self.samples)},
            "streams": [_spec_json(s) for s in self.specs],
            "datasets": self.datasets,
            "attrs": self.attrs,
        }
        ranges = self.partial.coverage.ranges.get(TIME, ())
        heads = [self.partial.heads[(TIME, a)] for a, _ in ranges]
        tails = [self.partial.tails[(TIME, b)] for _, b in ranges]
        edges = {  # each range's edges, one range after the other
            v: (np.concatenate([h[v] for h in heads]), np.concatenate([t[v] for t in tails]))
            for v in (heads[0] if heads else {})
        }
        data = StateFile(meta, ints, minimum, maximum, edges, weights=dict(self.weights))
        return state_writer(data, __version__)

    @staticmethod
    def read(path: str) -> State:
        data = read_state_file(path)
        try:
            meta = data.meta
            if meta["identity"].get("version") != VERSION:
                raise WxstatsError(
                    f"{path}: a state written by wxstats {data.wxstats_version or '< 0'}, "
                    "whose identity lacks the grid's coordinate values; recompute it with this "
                    "wxstats (its grid cannot be checked against new data)"
                )
            specs = [_spec_of(s) for s in meta["streams"]]
            acc = RunMoments.create(specs)
            acc.unpack_like(data.sums, data.minimum, data.maximum)
            cov = meta["coverage"]
            times = None if "samples" in cov else TimeCoverage(**cov)
            edges = [{v: e[i] for v, e in data.edges.items()} for i in (0, 1)]
            partial = _partial(acc, meta["identity"], times, cov.get("samples", ()), *edges)
            return State(
                partial, specs, times, data.weights, meta["datasets"], meta["attrs"], str(path)
            )
        except (KeyError, ValueError, TypeError, IndexError) as exc:
            raise WxstatsError(
                f"{path}: not a usable wxstats state file (its contents do not fit together: "
                f"{exc}); nothing was written"
            ) from None


def _partial(
    acc: RunMoments,
    identity: dict[str, Any],
    times: TimeCoverage | None,
    samples: Any,
    head: dict[str, np.ndarray],
    tail: dict[str, np.ndarray],
) -> Partial:
    """A state's partial: each sample a unit of its own; or each time range on
    the steps of ``times``, with its edges (the first and last ``min(reach, n)``
    steps of each range, one range after the other in ``head`` and ``tail``)."""
    if times is None:
        return Partial(acc, Coverage({name: ((0, 1),) for name in samples}), identity)
    reach = max(identity["diff_steps"])
    heads, tails, ranges, at = {}, {}, [], 0
    for first, _, n in times.spans:
        a = times.place(first)
        b, m = a + int(n), min(reach, int(n))
        heads[(TIME, a)] = {v: e[at : at + m] for v, e in head.items()}
        tails[(TIME, b)] = {v: e[at : at + m] for v, e in tail.items()}
        ranges.append((a, b))
        at += m
    return Partial(acc, Coverage({TIME: tuple(ranges)}), identity, reach, heads, tails)


# -- what a source is, for a state -----------------------------------------------------
def identity_of(source: Source, skipna: bool) -> dict[str, Any]:
    """The identity two states must share to be combined: the ``data`` section of
    the run's identity (:mod:`wxstats.runtime.identity`)."""
    return run_identity(source, skipna, who="state")["data"]


def source_name(source: Source) -> str:
    """The data a source reads, for messages and the state's ``datasets``."""
    return str(source.path)


def state_of_run(
    source: Source, acc: RunMoments, identity: dict[str, Any], edges: bool = True
) -> State:
    """The state of a run over ``source`` (with ``edges``, reads its edge time steps)."""
    times = coverage_of(source)
    head: dict[str, np.ndarray] = {}
    tail: dict[str, np.ndarray] = {}
    if times is not None and edges:
        split, n = source.splits[0], min(max(identity["diff_steps"]), times.n)
        head = source.steps(split.start, split.start + n)
        tail = source.steps(split.stop - n, split.stop)
    samples = sorted(source.sample_names) if times is None else []
    axis = time_axis(source)
    return State(
        _partial(acc, identity, times, samples, head, tail),
        list(source.streams),
        times,
        weights={v.name: v.weights for v in axis.vars if v.weights is not None} if axis else {},
        datasets=[[source_name(source), *(times.bounds if times else (samples[0], samples[-1]))]],
        attrs=dict(source.attrs),
        path=source_name(source),
    )


def coverage_of(source: Source) -> TimeCoverage | None:
    """The time steps of a run over ``source`` (refused: times not datetimes or
    numbers); None for data of samples (its capabilities say)."""
    return TimeCoverage.of_source(source) if source.capabilities.state == "time ranges" else None


def refuse_mismatch(
    first: State, other_identity: dict[str, Any], other_name: str, verb: str
) -> None:
    change = first_difference(other_identity, first.identity, other_name, first.name)
    if change:
        raise WxstatsError(
            f"{other_name}: cannot {verb} {first.name}: {change} "
            "(a state grows only with data of the same variables, units, grid and options)"
        )
