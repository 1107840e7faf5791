"""The one result model: labelled statistics per stream, whoever computed or wrote them.

A run produces a :class:`Stats` (from the exact combiner, every statistic
present); every reader of a statistics file (``wxstats.io.formats``) gives one
back, with what the file holds (a neural-lam ``static/`` folder has no counts or
extremes: those are ``None``). Reports, comparisons and writers all take this
one model.

A stream is one group of features reduced together: the MEPS ``state`` and its
TOA flux, or one variable of one split of a zarr/netCDF dataset, labelled by its
:class:`~wxstats.core.streams.StreamLayout` (what the data says, never a file's
layout). A stream's statistics are flat along its features (C order of the
dimensions); :meth:`StreamStats.to_xarray` gives them back along the labels,
differences along ``diff_step``. File names (``{variable}__{split}__{op}``) are
the writers' business (``wxstats.io``), derived from these labels;
:meth:`Stats.by_category` joins the streams of one
split per category, the shape of the JSON summary and of comparisons.
Everything describing the run rather than the data lives in ``Stats.run``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from wxstats.core.conventions import (
    ROLES,
    diff_label,
    span_name,
    step_text,
)
from wxstats.core.finalize import DIFF_STATISTICS, STATISTICS
from wxstats.core.streams import (
    POOLED_ATTR,
    StreamLayout,
    listed_features,
    with_feature_units,
)

VALUE_OPS = tuple(s.name for s in STATISTICS)
"""The per-feature statistics of a stream, as named in files (declared in
:data:`wxstats.core.finalize.STATISTICS`)."""
DIFF_OPS = tuple(
    op
    for s in DIFF_STATISTICS
    for op in (s.name, *(("mean_standardized", "std_standardized") if s.name == "std" else ()))
)
"""The per-feature statistics of a stream's differences, as named in files (after
``diff_``): the declared ones, and after ``std`` neural-lam's scale (derived)."""
_FIELD = {s.name: s.field for s in STATISTICS} | {
    "mean_standardized": "mean_standardized",
    "std_standardized": "std_standardized",
}
DIFF_DIM = "diff_step"
"""The dimension of difference statistics in a labelled view (steps as the source counts them)."""
DIFF_SPAN = "diff_span"
"""The time span of each difference step (``6h``), a string coordinate along ``diff_step``."""


def stat_fields(ops: dict[str, Any], diffs: bool = False) -> dict[str, Any]:
    """The declared statistics found in ``ops`` (by the names files give them) as
    :class:`StreamStats` (``diffs``: :class:`DiffStats`) fields: what readers build from."""
    declared = DIFF_STATISTICS if diffs else STATISTICS
    return {s.field: ops[s.name] for s in declared if s.name in ops}


def weighting(attrs: dict[str, Any]) -> str:
    """How the statistics of a run were weighted, for a file's ``method``: the
    source's ``weights`` attribute (``--weights``), or ``unweighted``."""
    weights = str(attrs.get("weights", ""))
    if not weights or weights.startswith("none"):
        return "unweighted"
    return f"weighted by grid point (sum(w x) / sum(w)), weights: {weights}"


@dataclass
class DiffStats:
    """Statistics of ``x[t] - x[t-k]``, per feature, on the raw scale.

    ``mean_standardized``/``std_standardized`` are set only when a file holds
    that scale itself (neural-lam's ``diff_*.pt``); otherwise they are derived
    from the std by :meth:`StreamStats.standardized_diff`. ``minimum`` and
    ``maximum`` (anemoi's tendency extremes) are exact, like the values'."""

    mean: np.ndarray
    std: np.ndarray
    count: np.ndarray | None = None
    mean_standardized: np.ndarray | None = None
    std_standardized: np.ndarray | None = None
    minimum: np.ndarray | None = None
    maximum: np.ndarray | None = None
    skewness: np.ndarray | None = None
    excess_kurtosis: np.ndarray | None = None


@dataclass
class StreamStats:
    """Statistics of one stream (see module docstring); ``None``: not known."""

    name: str
    features: list[str]
    units: list[str]
    mean: np.ndarray
    std: np.ndarray
    count: np.ndarray | None = None
    minimum: np.ndarray | None = None
    maximum: np.ndarray | None = None
    nan_count: np.ndarray | None = None
    diff: dict[int | None, DiffStats] = field(default_factory=dict)
    """Per step (``None``: a file that does not say its step)."""
    long_names: list[str] = field(default_factory=list)
    layout: StreamLayout | None = None
    named: bool = True
    """False when the file has no feature names (they are then ``#0, #1, ...``)."""
    derived: set[str] = field(default_factory=set)
    """Entries computed from the other scale, not read (e.g. ``"diff3 mean"``)."""
    missing: set[str] = field(default_factory=set)
    """Entries the file does not hold, NaN here (``"diff2 mean"``: GraphCast-style
    files keep only the difference std); ``compare`` leaves them out."""
    time_mean: np.ndarray | None = None
    """(G, F): the mean over time of every grid point (a run that asked for it)."""
    skewness: np.ndarray | None = None
    excess_kurtosis: np.ndarray | None = None
    """``m3 / m2**1.5`` and ``m4 / m2**2 - 3`` (population): a run of ``--moments 4``."""
    diff_span: dict[int | None, int] = field(default_factory=dict)
    """Seconds each ``diff`` step spans, where known: the keys count hours for MEPS,
    time steps for zarr/netCDF and anemoi; only the span says what a difference is."""

    def diff_label(self, step: int | None) -> str:
        """``diff 6h`` (``diff 3 steps``): a difference in tables, messages and files."""
        return diff_label(step, self.diff_span.get(step))

    def step_text(self, step: int | None) -> str:
        """``6h`` (``3 steps`` without a known span; ``""``: no step known)."""
        return step_text(step, self.diff_span.get(step))

    def diff_span_name(self, step: int | None) -> str | None:
        """``6h``: the span of ``step`` as files write it, None when not known."""
        return span_name(self.diff_span[step]) if self.diff_span.get(step) else None

    @property
    def category(self) -> str:
        return self.layout.role if self.layout is not None else "state"

    @property
    def split(self) -> str | None:
        return (self.layout.split or None) if self.layout is not None else None

    def op(self, name: str) -> np.ndarray | None:
        """A statistic by its file name (``min`` is :attr:`minimum`...)."""
        return getattr(self, _FIELD[name])

    @property
    def labels(self) -> StreamLayout:
        """The stream's labels: its layout when that labels every feature, else
        its features along ``{role}_feature`` (a file that keeps flat names only);
        units and long names of a stack of variables as coordinates."""
        lay = self.layout
        n = len(self.features)
        if lay is None or int(np.prod(lay.feature_shape)) != n:
            flat = listed_features(self.category, self.split or "", self.features)
            lay = replace(flat, variable=lay.variable if lay is not None else self.name)
        units = list(self.units) if len(self.units) == n else [""] * n
        names = list(self.long_names) if len(self.long_names) == n else []
        return with_feature_units(lay, units, names)

    def diff_steps(self) -> list[int | None]:
        """The difference steps, in order (``None``: a file that does not say its step)."""
        return sorted(self.diff, key=lambda k: (k is None, k or 0))

    def labelled(self) -> tuple[dict[str, tuple[Any, ...]], dict[str, tuple[Any, ...]]]:
        """The statistics along their labels as ``(variables, coords)``:
        ``op -> (dims, values)`` for every statistic present (``mean``, ...,
        ``diff_std`` along :data:`DIFF_DIM`, ``diff_mean_standardized``...), the
        labels' coordinates, the steps and their spans (``diff_span``) along
        ``diff_step``. What writers name and lay out (see module docstring)."""
        lay = self.labels
        dims = tuple(lay.feature_dims)
        variables: dict[str, tuple[Any, ...]] = {}
        coords: dict[str, tuple[Any, ...]] = dict(lay.coords)
        for op in VALUE_OPS:
            values = self.op(op)
            if values is not None:
                variables[op] = (dims, lay.shaped(values))
        steps = self.diff_steps()
        if steps:
            if None not in steps:
                coords[DIFF_DIM] = ((DIFF_DIM,), np.array(steps, dtype=np.int64))
            spans = [self.diff_span_name(k) or "" for k in steps]
            if any(spans):
                attrs = {"long_name": "time span of each difference step"}
                coords[DIFF_SPAN] = ((DIFF_DIM,), np.asarray(spans, dtype=object), attrs)
            scaled = [self.standardized_diff(k) for k in steps]
            for op in DIFF_OPS:
                if op in ("mean_standardized", "std_standardized"):
                    values = [pair[op == "std_standardized"] for pair in scaled]
                else:
                    values = [getattr(self.diff[k], _FIELD[op]) for k in steps]
                if all(v is not None for v in values):
                    variables[f"diff_{op}"] = ((DIFF_DIM, *dims), lay.shaped(values, (len(steps),)))
        return variables, coords

    def to_xarray(self) -> Any:
        """The stream's statistics as a labelled ``xarray.Dataset``: one variable
        per statistic (``mean``, ``std``, ..., ``diff_std`` along ``diff_step``)
        along the stream's feature dimensions with their coordinates
        (``level``, a climatology's ``month``), so ``.sel(level=850, month=2)``
        picks a feature by its labels. Core's own view, named by no file."""
        import xarray as xr

        variables, coords = self.labelled()
        lay = self.labels
        attrs = {"variable": lay.variable, "split": lay.split, "category": lay.role}
        if lay.pooled_dims:
            attrs[POOLED_ATTR] = ", ".join(lay.pooled_dims)
        return xr.Dataset(variables, coords=coords, attrs=attrs)

    def standardized_diff(self, step: int | None) -> tuple[np.ndarray, np.ndarray]:
        """(diff_mean / std, diff_std / std): neural-lam's scale, the statistics
        of the difference of standardized fields."""
        d = self.diff[step]
        # a constant field (std 0, warned about) has only zero differences:
        # write 0 rather than 0/0; a feature without data (std NaN) stays NaN
        safe = np.where(self.std > 0, self.std, 1.0)
        other = np.where(self.std == 0, 0.0, np.nan)
        mean = d.mean_standardized
        std = d.std_standardized
        if mean is None:
            mean = np.where(self.std > 0, d.mean / safe, other)
        if std is None:
            std = np.where(self.std > 0, d.std / safe, other)
        return mean, std


@dataclass
class Stats:
    """All statistics of a run or of a file (see module docstring)."""

    source_kind: str
    streams: dict[str, StreamStats]
    attrs: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    origin: str = ""
    """Where a read set came from (path and format), for reports."""
    time_splits: bool = False
    """Whether the splits are intervals of a time axis the run chose (``--split`` of a
    zarr/netCDF run): the JSON summary lists each; a datastore's split folder or an
    anemoi dataset's one window is no such choice, nor a set read back from files."""

    @property
    def state(self) -> StreamStats:
        """The ``state`` stream (a MEPS run), else the state category of the first split."""
        if "state" in self.streams:
            return self.streams["state"]
        return self.by_category()["state"]

    @property
    def forcing(self) -> dict[str, StreamStats]:
        return {k: v for k, v in self.streams.items() if k != "state"}

    def splits(self) -> list[str]:
        """The splits of the streams, in order (``[]`` when none is named)."""
        return list(dict.fromkeys(s.split for s in self.streams.values() if s.split))

    def by_category(self, split: str | None = None) -> dict[str, StreamStats]:
        """The streams of ``split`` (default: the first) joined per category,
        in the order state, forcing, static (features one after the other)."""
        splits = self.splits()
        chosen = split if split is not None else (splits[0] if splits else None)
        groups: dict[str, list[StreamStats]] = {}
        for stream in self.streams.values():
            if stream.split in (chosen, None):
                category = stream.category if stream.category in ROLES else "state"
                groups.setdefault(category, []).append(stream)
        return {c: concatenate(c, groups[c], chosen) for c in ROLES if c in groups}


def concatenate(name: str, streams: list[StreamStats], split: str | None = None) -> StreamStats:
    """Several streams as one, features one after the other. A statistic one of
    them lacks is absent; a difference step one of them lacks has count 0 and
    NaN values there."""
    if len(streams) == 1 and streams[0].name == name:
        return streams[0]

    def cat(attr: str) -> np.ndarray | None:
        parts = [getattr(s, attr) for s in streams]
        if any(p is None for p in parts):
            return None
        return np.concatenate([np.asarray(p) for p in parts]) if parts else np.zeros(0)

    steps = sorted({k for s in streams for k in s.diff}, key=lambda k: (k is None, k or 0))
    diff = {}
    for k in steps:
        parts = []
        for s in streams:
            if k in s.diff:
                parts.append(s.diff[k])
            else:  # no pairs for this stream: count 0, no values
                n = len(s.features)
                none = {d.field: np.full(n, np.nan) for d in DIFF_STATISTICS}
                parts.append(DiffStats(**none | {"count": np.zeros(n, dtype=np.int64)}))

        def join(attr: str, parts: list[DiffStats] = parts) -> np.ndarray | None:
            values = [getattr(p, attr) for p in parts]
            return None if any(v is None for v in values) else np.concatenate(values)

        diff[k] = DiffStats(**{f.name: join(f.name) for f in fields(DiffStats)})
    first = streams[0].layout if streams else None
    layout = StreamLayout(variable=name, split=split or "", role=name) if first else None
    return StreamStats(
        name=name,
        features=[f for s in streams for f in s.features],
        units=[u for s in streams for u in s.units],
        **{s.field: cat(s.field) for s in STATISTICS},
        diff=diff,
        long_names=[n for s in streams for n in (s.long_names or s.features)],
        layout=layout,
        named=all(s.named for s in streams),
        derived={d for s in streams for d in s.derived},
        missing={m for s in streams for m in s.missing},
        diff_span={k: v for s in streams for k, v in s.diff_span.items()},
    )


def with_layout(stream: StreamStats, layout: StreamLayout) -> StreamStats:
    """``stream`` placed elsewhere (another split or variable)."""
    return replace(stream, layout=layout)
