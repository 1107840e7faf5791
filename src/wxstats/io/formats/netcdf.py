"""The statistics file: ``{prefix}__{split}__{op}`` variables in netCDF (or zarr).

wxstats writes every statistic in float64, named like mllam-data-prep's
(``state__train__mean``, ``t2m__train__diff_std``, ``z__val__max`` along
``level``), with feature names, units and long names as coordinates,
difference statistics along a ``diff_step`` dimension (raw and standardized
scale), and attributes saying how the numbers were computed. netCDF because
every weather tool opens it; :func:`read_stats_file` reads it back into the
same :class:`~wxstats.core.stats.Stats`, and reads mllam-data-prep's zarr
stores the same way (their differences are of one time step, on the raw scale).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.conventions import (
    ROLES,
    RUN_ATTR,
    coord_label,
    feature_names,
    span_seconds,
    stream_name,
)
from wxstats.core.errors import InputError
from wxstats.core.stats import (
    DIFF_DIM,
    DIFF_OPS,
    DIFF_SPAN,
    VALUE_OPS,
    DiffStats,
    Stats,
    StreamStats,
    stat_fields,
    weighting,
)
from wxstats.core.streams import POOLED_ATTR, StreamLayout
from wxstats.core.untrusted import parse_json
from wxstats.io.atomic import Writer
from wxstats.io.formats.ncwrite import write_netcdf

TITLE = "wxstats normalization statistics"
METHOD = (
    "population mean and standard deviation (ddof=0) in float64; per-sample sums of "
    "shifted, power-of-two-scaled values combined by exact (integer) summation and "
    "rounded once; diff statistics over x[t] - x[t-k]; *_standardized = diff / std"
)
OPS = VALUE_OPS + tuple(f"diff_{op}" for op in DIFF_OPS)
_NAME = re.compile(
    r"^(?P<prefix>.+)__(?P<split>(?:(?!__)[^/])+)__(?P<op>"
    + "|".join(sorted(OPS, key=len, reverse=True))
    + r")$"
)


# -- writing ------------------------------------------------------------------------
def stat_name(labels: StreamLayout, op: str) -> str:
    """The file's name of statistic ``op`` of a stream, from its labels:
    ``{variable}__{split}__{op}`` (mllam-data-prep's; ``state__train__mean``)."""
    return f"{stream_name(labels.variable, labels.split)}__{op}"


def parse_stat_name(name: str) -> tuple[str, str, str] | None:
    """``(variable, split, op)`` of a statistic named by :func:`stat_name`, else None."""
    match = _NAME.match(name)
    return (match["prefix"], match["split"], match["op"]) if match else None


def _diff_dim(stream: StreamStats, prefix: str, all_steps: set, coords: dict) -> str:
    """``diff_step``, or a dimension of the stream's own where a short split
    lacks some steps (absent, rather than NaN-filled by alignment) or where its
    steps span other times (a split on another time step)."""
    shared = coords.get(DIFF_SPAN)
    if set(stream.diff) != all_steps or (shared and list(shared[1]) != _spans(stream)):
        return f"{prefix}{DIFF_DIM}"
    return DIFF_DIM


def _spans(stream: StreamStats) -> list[str]:
    """The span name of each step of ``stream`` (``""``: not known)."""
    return [stream.diff_span_name(k) or "" for k in sorted(stream.diff)]


def _span_coord(diff_dim: str) -> str:
    return diff_dim[: -len(DIFF_DIM)] + DIFF_SPAN


_PLAIN = ("count", "nan_count", "diff_count", "diff_mean_standardized", "diff_std_standardized")
"""Statistics without the variable's unit (counts, and differences over the std)."""


def stats_variables(stats: Stats) -> tuple[dict, dict[str, Any], dict[str, Any]]:
    """The statistics as ``(data_vars, coords, attrs)`` (see module docstring):
    every stream's labelled statistics (:meth:`StreamStats.labelled`) named by
    :func:`stat_name`, a stream's own ``diff_step`` where it must have one."""
    data_vars = {}
    coords: dict[str, Any] = {}
    all_steps = {k for stream in stats.streams.values() for k in stream.diff}
    for stream in stats.streams.values():
        lay = stream.labels
        prefix = stat_name(lay, "")
        variables, labels = stream.labelled()
        diff_dim = _diff_dim(stream, prefix, all_steps, coords) if stream.diff else DIFF_DIM
        renamed = {DIFF_DIM: diff_dim, DIFF_SPAN: _span_coord(diff_dim)}
        for name, (dims, *rest) in labels.items():
            dims = tuple(renamed.get(d, d) for d in dims) if name in renamed else dims
            coords[renamed.get(name, name)] = (dims, *rest)
        # one unit for the stream: an attribute; a stack of variables has a unit
        # coordinate (its labels) instead
        same_unit = len(set(stream.units)) == 1 and not lay.units_per_feature
        unit = {"units": stream.units[0]} if same_unit else {}
        unit.update(lay.attrs)
        for op, (dims, values) in variables.items():
            dims = tuple(diff_dim if d == DIFF_DIM else d for d in dims)
            attrs = dict(lay.attrs) if op in _PLAIN else unit
            data_vars[prefix + op] = (dims, values, attrs)
    attrs = {
        "title": TITLE,
        "method": f"{METHOD}; {weighting(stats.attrs)}",
        "source_kind": stats.source_kind,
        "split": ",".join(stats.splits()),
        "warnings": json.dumps(stats.warnings),
        RUN_ATTR: json.dumps(stats.run, sort_keys=True),
    }
    attrs.update({f"source_{k}": v for k, v in stats.attrs.items()})
    return data_vars, coords, attrs


def stats_dataset(stats: Stats):
    """The statistics as an ``xarray.Dataset`` (see module docstring): what
    :meth:`wxstats.io.result.Result.to_xarray` returns, and what :func:`netcdf_writer` writes."""
    import xarray as xr

    data_vars, coords, attrs = stats_variables(stats)
    return xr.Dataset(data_vars, coords=coords, attrs=attrs)


def netcdf_writer(stats: Stats) -> Writer:
    """Writes with netCDF4 directly: an ``xarray.Dataset`` would import dask."""
    data_vars, coords, attrs = stats_variables(stats)

    def write(path: Path) -> None:
        write_netcdf(path, data_vars, coords, attrs)

    return write


# -- reading ------------------------------------------------------------------------
def _open(path: Path, engine: str | None):
    import xarray as xr

    try:
        if engine == "zarr":
            return xr.open_zarr(path, consolidated=None, decode_timedelta=False)
        return xr.open_dataset(path, decode_timedelta=False)
    except Exception as exc:  # xarray raises many kinds for unreadable files
        raise InputError(f"{path}: cannot open as {engine or 'netCDF'}: {exc}") from None


def _step_hours(ds: Any) -> int | None:
    """The time step of a dataset (mllam-data-prep differences are one step)."""
    if "time" not in ds.coords or ds.sizes.get("time", 0) < 2:
        return None
    times = ds["time"].values[:2]
    try:
        hours = (times[1] - times[0]) / np.timedelta64(1, "h")
    except TypeError:
        return None
    return int(hours) if float(hours).is_integer() and hours > 0 else None


def pick_split(splits: list[str], wanted: str | None, where: str) -> str:
    """The split to read: ``wanted``, else ``train``, else the only one."""
    if wanted is not None:
        if wanted not in splits:
            raise InputError(f"{where}: no statistics for split {wanted!r} (has {sorted(splits)})")
        return wanted
    if "train" in splits or len(splits) == 1:
        return "train" if "train" in splits else splits[0]
    raise InputError(f"{where}: statistics for several splits {sorted(splits)}; choose one")


def recorded_split(recorded: Any, wanted: str | None, where: str) -> str:
    """The split of a set that holds one (GraphCast's, makani's, ACE's, Aurora's
    files): the one its files record, which ``wanted`` must then be; ``wanted``
    where they record none (another tool's files); else ``""`` (not known). What
    names its statistics in :meth:`~wxstats.core.stats.Stats.to_xarray`
    (``state__train__mean``)."""
    if recorded:
        return pick_split([str(recorded)], wanted, where)
    return wanted or ""


def _text(ds: Any, name: str, dim: str) -> list[str] | None:
    if name in ds.variables and ds[name].dims == (dim,):
        return [str(v) for v in np.asarray(ds[name].values).reshape(-1)]
    return None


def _features(ds: Any, prefix: str, dims: tuple[str, ...]) -> tuple[list[str], bool]:
    """Feature names along ``dims`` (named like the zarr/netCDF source names
    them) and whether the file names them."""
    if len(dims) == 1 and dims[0].endswith("_feature"):
        names = _text(ds, dims[0], dims[0])
        if names is None:
            return [f"#{i}" for i in range(ds.sizes[dims[0]])], False
        return names, True
    labels = []
    for d in dims:
        values = ds[d].values if d in ds.coords else np.arange(ds.sizes[d])
        labels.append([coord_label(v) for v in np.asarray(values)])
    return feature_names(prefix, labels), True


def _stream(ds: Any, prefix: str, split: str, ops: dict[str, str], step: int | None):
    anchor = ds[ops.get("mean") or ops.get("std")]
    dims = tuple(str(d) for d in anchor.dims)
    features, named = _features(ds, prefix, dims)
    n = len(features)
    units = None
    if len(dims) == 1:
        units = _text(ds, f"{dims[0]}_units", dims[0])
    if units is None:
        units = [str(anchor.attrs.get("units", ""))] * n
    long_names = (_text(ds, f"{dims[0]}_long_name", dims[0]) if len(dims) == 1 else None) or []
    coords = {
        str(c): (ds[c].dims, np.asarray(ds[c].values))
        for c in ds.coords
        if ds[c].dims and set(ds[c].dims) <= set(dims)
    }

    def flat(name: str) -> np.ndarray:
        return np.asarray(ds[name].values).reshape(-1)

    values = {op: flat(ops[op]) for op in VALUE_OPS if op in ops}
    for op, array in values.items():
        if array.shape[0] != n:
            raise InputError(
                f"{prefix}__{split}__{op} has {array.shape[0]} values for {n} features"
            )
    if "mean" not in values or "std" not in values:
        raise InputError(f"{prefix}__{split}: the file holds no mean and std")
    diff_vars = {op[5:]: v for op, v in ops.items() if op.startswith("diff_")}
    diff: dict[int | None, DiffStats] = {}
    spans: dict[int | None, int] = {}
    derived: set[str] = set()
    if diff_vars:
        some = ds[next(iter(diff_vars.values()))]
        diff_dims = [d for d in some.dims if d not in dims]
        if diff_dims:
            steps = [int(s) for s in ds[diff_dims[0]].values]
            spans = _read_spans(ds, diff_dims[0], steps)
            rows = {op: ds[v].transpose(diff_dims[0], ...).values for op, v in diff_vars.items()}
            per_step = [
                {op: np.asarray(a[i]).reshape(-1) for op, a in rows.items()}
                for i in range(len(steps))
            ]
        else:
            steps = [step]
            per_step = [{op: flat(v) for op, v in diff_vars.items()}]
            if step is not None:  # an mllam-data-prep store: one time step of `step` hours
                spans = {step: step * 3600}
        std = values["std"]
        for k, got in zip(steps, per_step, strict=True):
            tag = f"diff{k if k is not None else ''}"
            mean, dstd = got.get("mean"), got.get("std")
            if mean is None and "mean_standardized" in got:
                mean = got["mean_standardized"] * std
                derived.add(f"{tag} mean")
            if dstd is None and "std_standardized" in got:
                dstd = got["std_standardized"] * std
                derived.add(f"{tag} std")
            if mean is None or dstd is None:
                continue
            for op in ("mean_standardized", "std_standardized"):
                if op not in got:
                    derived.add(f"{tag} {op}")
            diff[k] = DiffStats(
                **stat_fields(got, diffs=True) | {"mean": mean, "std": dstd},
                mean_standardized=got.get("mean_standardized"),
                std_standardized=got.get("std_standardized"),
            )
    role = prefix if prefix in ROLES else "state"
    pooled = anchor.attrs.get(POOLED_ATTR)
    layout = StreamLayout(
        variable=prefix,
        split=split,
        feature_dims=dims,
        feature_shape=tuple(int(ds.sizes[d]) for d in dims),
        coords=coords,
        role=role,
        attrs={POOLED_ATTR: str(pooled)} if pooled else {},
    )
    return StreamStats(
        name=stream_name(prefix, split),
        features=features,
        units=units,
        **stat_fields(values)
        | {"mean": values["mean"].astype(np.float64), "std": values["std"].astype(np.float64)},
        diff=diff,
        long_names=long_names,
        layout=layout,
        named=named,
        derived=derived,
        diff_span={k: v for k, v in spans.items() if k in diff},
    )


def _read_spans(ds: Any, diff_dim: str, steps: list[int]) -> dict[int | None, int]:
    """The seconds of each step's span (``diff_span``; none in older files)."""
    name = _span_coord(diff_dim)
    if name not in ds.variables or ds[name].dims != (diff_dim,):
        return {}
    spans = {}
    for k, text in zip(steps, ds[name].values, strict=True):
        text = text.decode() if isinstance(text, bytes) else str(text)
        seconds = span_seconds(text)
        if text and seconds is None:
            raise InputError(f"{name} {text!r} is not a time span such as 6h")
        if seconds:
            spans[k] = seconds
    return spans


def read_stats_file(path: Path, split: str | None = None, engine: str | None = None) -> Stats:
    """Statistics of one split from a ``{prefix}__{split}__{op}`` file (see module doc)."""
    ds = _open(path, engine)
    try:
        found: dict[tuple[str, str], dict[str, str]] = {}
        for var in ds.data_vars:
            parsed = parse_stat_name(str(var))
            if parsed:
                found.setdefault(parsed[:2], {})[parsed[2]] = str(var)
        found = {k: ops for k, ops in found.items() if "mean" in ops or "std" in ops}
        if not found:
            raise InputError(
                f"{path}: no statistics variables named like state__train__mean or "
                "t2m__train__mean (is this a statistics file?)"
            )
        chosen = pick_split(list(dict.fromkeys(s for _, s in found)), split, str(path))
        step = _step_hours(ds) if engine == "zarr" else None
        streams = {}
        for (prefix, var_split), ops in found.items():
            if var_split == chosen:
                try:
                    stream = _stream(ds, prefix, var_split, ops, step)
                except InputError as exc:
                    raise InputError(f"{path}: {exc}") from None
                streams[stream.name] = stream
        try:
            stored = parse_json(ds.attrs.get("warnings", "[]"), "warnings")
        except (TypeError, ValueError):
            stored = []
        try:
            run = parse_json(ds.attrs.get(RUN_ATTR, "{}"), RUN_ATTR)
        except (TypeError, ValueError):
            run = {}
        is_wxstats = str(ds.attrs.get("title", "")).startswith("wxstats")
        kind = "wxstats-netcdf" if is_wxstats else ("mllam-zarr" if engine == "zarr" else "netcdf")
        attrs = {k: ds.attrs[k] for k in ds.attrs if isinstance(ds.attrs[k], (str, int, float))}
        return Stats(
            source_kind=kind,
            streams=streams,
            attrs=attrs,
            run=run if isinstance(run, dict) else {},
            warnings=list(stored) if isinstance(stored, list) else [],
            origin=str(path),
        )
    finally:
        ds.close()
