"""Any dataset xarray opens: a zarr store, a netCDF file, a glob of netCDF files.

Each selected variable with the time dimension becomes one stream per split,
named ``{variable}__{split}``; its features are the product of its feature
dimensions (vertical levels, ``*_feature``: ``z_500``, ``z_850``) and every
other dimension (the grid, ensemble members) is reduced.

Samples are contiguous blocks of time: the union of the splits is cut at the
storage chunk boundaries along time and consecutive chunks are grouped up to a
memory budget. Each block also reads the ``max(diff_steps)`` time steps before
its start (inside the split), so that every pair ``(t - k, t)`` with both
times in a split is counted exactly once, attributed to its later time ``t``.
The engine sums each time step on its own before the exact accumulation
(``exact_per_step``) and takes the shifts from the first steps of each split
(``reference_blocks``), so the block size and the number of ranks never change
a bit.

Values are decoded here, not by xarray, and always into float64 when packed:
``raw * scale_factor + add_offset`` with both attributes widened to float64
(exactly); raw values equal to ``_FillValue`` or ``missing_value`` become NaN.
xarray would decode int16 with float32 attributes into float32, rounding every
value; unpacked float32 stays float32 (the kernel widens it exactly).

The time axis must be sorted; each split must be regularly spaced, because a
difference over ``k`` steps must mean the same time lag everywhere. Splits are
``NAME=START/END`` intervals, inclusive, selected like xarray's
``ds.sel(time=slice(START, END))``.

An mllam-data-prep store (``state``/``forcing``/``static`` with
``{category}_feature`` coordinates) is recognised: its categories are the
streams, its feature names and units are used, its ``splits`` variable defines
the splits, and ``static`` (no time) is reduced over the grid only.
"""

from __future__ import annotations

import glob as globlib
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.errors import InputError
from wxstats.kernels import Block
from wxstats.sources.base import StreamLayout, StreamSpec

KIND = "xarray"
DEFAULT_BLOCK_BYTES = 32 * 2**20
"""Decoded bytes per block (at least one storage chunk along time)."""
VERTICAL_DIMS = ("level", "levels", "pressure_level", "isobaricInhPa", "plev", "lev")
"""Dimensions that are features by default (with any ``*_feature`` dimension):
a mean over vertical levels is never a useful normalization."""
MDP_CATEGORIES = ("state", "forcing", "static")
NETCDF_SUFFIXES = (".nc", ".nc4", ".netcdf", ".cdf", ".h5", ".hdf5", ".he5")
_SPLIT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class XarrayOptions:
    """What selects data in a zarr/netCDF dataset (see module docstring)."""

    splits: tuple[str, ...] = ()
    variables: tuple[str, ...] | None = None
    time_dim: str = "time"
    diff_steps: tuple[int, ...] | None = None
    feature_dims: tuple[str, ...] | None = None
    block_bytes: int = DEFAULT_BLOCK_BYTES


@dataclass(frozen=True)
class Split:
    name: str
    start: int  # first time index
    stop: int  # one past the last
    label: str  # the interval as given or resolved


@dataclass(frozen=True)
class _Decoding:
    """How one variable of one file is decoded (see module docstring)."""

    scale: float | None
    offset: float | None
    fills: tuple[Any, ...]
    unsigned: bool
    out_dtype: np.dtype


@dataclass
class _Part:
    path: str
    ds: Any  # xarray.Dataset, opened lazily without decoding
    start: int
    length: int


@dataclass
class _Var:
    name: str
    category: str
    has_time: bool
    grid_dims: tuple[str, ...]
    feature_dims: tuple[str, ...]
    feature_shape: tuple[int, ...]
    n_grid: int
    features: list[str]
    units: list[str]
    long_names: list[str]
    coords: dict[str, tuple[tuple[str, ...], Any]]
    out_dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float64))
    raw_itemsize: int = 8

    @property
    def n_features(self) -> int:
        return len(self.features)


# -- opening --------------------------------------------------------------
def _is_url(text: str) -> bool:
    return "://" in text


def _is_glob(text: str) -> bool:
    return not _is_url(text) and any(c in text for c in "*?[")


def _is_zarr(text: str) -> bool:
    stripped = text.rstrip("/")
    if stripped.endswith(".zarr"):
        return True
    if _is_url(text):
        return not stripped.lower().endswith(NETCDF_SUFFIXES)
    path = Path(text)
    return path.is_dir() and any(
        (path / name).exists() for name in (".zgroup", ".zmetadata", "zarr.json", ".zarray")
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _open_one(text: str):
    import xarray as xr

    kwargs = {"mask_and_scale": False, "decode_timedelta": False, "cache": False, "chunks": None}
    if not _is_url(text) and not Path(text).exists():
        raise InputError(f"{text}: dataset not found")
    if not _is_url(text) and Path(text).is_dir() and not _is_zarr(text):
        raise InputError(f"{text}: a folder that is not a zarr store (no .zgroup or zarr.json)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if _is_zarr(text):
                return xr.open_dataset(text, engine="zarr", **kwargs)
            return xr.open_dataset(text, **kwargs)
    except ImportError as exc:
        raise InputError(
            f"{text}: opening it needs the Python package {exc.name or 'for its protocol'} "
            "(e.g. fsspec and s3fs/gcsfs for remote stores)"
        ) from None
    except Exception as exc:  # backends raise many kinds; the user needs one line
        raise InputError(f"{text}: cannot open with xarray: {_first_line(exc)}") from None


def _open_parts(text: str) -> list[tuple[str, Any]]:
    if _is_glob(text):
        files = sorted(globlib.glob(text))
        if not files:
            raise InputError(f"{text}: no files match this pattern")
        return [(f, _open_one(f)) for f in files]
    return [(text, _open_one(text))]


# -- time axis and splits -------------------------------------------------
def _fmt_time(value: Any) -> str:
    if isinstance(value, np.datetime64):
        import pandas as pd

        return pd.Timestamp(value).isoformat()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, (np.integer, int)):
        return str(int(value))
    return repr(float(value)) if isinstance(value, (np.floating, float)) else str(value)


def _time_values(ds: Any, time_dim: str, where: str) -> np.ndarray:
    if time_dim not in ds.dims:
        raise InputError(
            f"{where}: no dimension {time_dim!r} (dimensions: {', '.join(map(str, ds.dims))}); "
            "name the time dimension with --time-dim"
        )
    if time_dim in ds.indexes:
        return np.asarray(ds.indexes[time_dim])
    return np.arange(ds.sizes[time_dim])


def _later(values: np.ndarray) -> np.ndarray:
    """values[i + 1] > values[i], for datetimes, numbers and cftime objects."""
    if values.dtype == object:
        return np.array([b > a for a, b in zip(values[:-1], values[1:], strict=True)], dtype=bool)
    return values[1:] > values[:-1]


def _check_sorted(values: np.ndarray, time_dim: str, where_of) -> None:
    ok = _later(values)
    if not ok.all():
        i = int(np.argmin(ok)) + 1
        raise InputError(
            f"{where_of(i)}: {time_dim} is not sorted: {time_dim}[{i}] = "
            f"{_fmt_time(values[i])} does not come after {time_dim}[{i - 1}] = "
            f"{_fmt_time(values[i - 1])}; sort the dataset by time and drop duplicates"
        )


def _check_regular(values: np.ndarray, split: Split, time_dim: str, where_of) -> None:
    v = values[split.start : split.stop]
    if v.shape[0] < 3:
        return
    if v.dtype == object:
        steps = [b - a for a, b in zip(v[:-1], v[1:], strict=True)]
        bad = [j for j, s in enumerate(steps) if s != steps[0]]
    else:
        steps = np.diff(v)
        if v.dtype.kind == "f":
            same = np.isclose(steps, steps[0], rtol=1e-9, atol=0.0)
        else:
            same = steps == steps[0]
        bad = np.flatnonzero(~same).tolist()
    if bad:
        i = split.start + bad[0] + 1
        raise InputError(
            f"{where_of(i)}: {time_dim} is irregular in split {split.name}: {time_dim}[{i}] = "
            f"{_fmt_time(values[i])} comes {_fmt_delta(steps[bad[0]])} after the previous "
            f"step, but the split starts with steps of {_fmt_delta(steps[0])}; differences "
            "over k steps need equally spaced times (choose split bounds inside a regular part)"
        )


def _fmt_delta(delta: Any) -> str:
    if isinstance(delta, np.timedelta64):
        import pandas as pd

        return str(pd.Timedelta(delta))
    return str(delta)


def _time_index(values: np.ndarray):
    import pandas as pd

    if values.dtype == object:
        import xarray as xr

        return xr.CFTimeIndex(values)
    return pd.Index(values)


def _parse_split(spec: str) -> tuple[str, str | None, str | None]:
    name, sep, interval = spec.partition("=")
    name = name.strip()
    if not _SPLIT_NAME.match(name) or "__" in name:
        raise InputError(
            f"--split {spec!r}: the split name must be letters, digits, '_', '-' or '.' "
            "(no '__', which separates the parts of the output names)"
        )
    if not sep:
        return name, None, None
    start, slash, end = interval.partition("/")
    if not slash or not start.strip() or not end.strip():
        raise InputError(
            f"--split {spec!r}: expected NAME=START/END, an inclusive ISO 8601 interval such as "
            "train=2019-03-01T00:00/2019-03-20T23:00"
        )
    return name, start.strip(), end.strip()


def _select(index, values: np.ndarray, name: str, start: str, end: str, time_dim: str) -> slice:
    try:
        if values.dtype.kind in "iuf":
            lo, hi = float(start), float(end)
            return slice(
                int(np.searchsorted(values, lo, "left")), int(np.searchsorted(values, hi, "right"))
            )
        found = index.slice_indexer(start, end)
        return slice(
            int(found.start or 0), int(values.shape[0] if found.stop is None else found.stop)
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise InputError(
            f"split {name}: cannot read {start!r}/{end!r} as times of {time_dim} "
            f"({values.dtype}): {_first_line(exc)}"
        ) from None


# -- decoding -------------------------------------------------------------
def _scalar(value: Any) -> float | None:
    if value is None:
        return None
    return float(np.asarray(value, dtype=np.float64).ravel()[0])


def _decoding(var: Any, where: str) -> _Decoding:
    raw = np.dtype(var.dtype)
    if raw.kind not in "iuf":
        raise InputError(f"{where}: dtype {raw} is not numeric; leave it out of --variables")
    attrs = var.attrs
    scale, offset = _scalar(attrs.get("scale_factor")), _scalar(attrs.get("add_offset"))
    unsigned = raw.kind == "i" and str(attrs.get("_Unsigned", "")).lower() == "true"
    raw_view = np.dtype(f"u{raw.itemsize}") if unsigned else raw
    fills = []
    candidates = [attrs.get("_FillValue")] + list(np.atleast_1d(attrs.get("missing_value", [])))
    for fill in candidates:
        if fill is None:
            continue
        f = np.asarray(fill).ravel()
        if f.size == 0 or (f.dtype.kind == "f" and np.isnan(f[0])):
            continue  # NaN is already missing (and cannot mark an integer)
        value = f[0]
        if raw_view.kind in "iu":
            if float(value) != round(float(value)):
                continue
            info = np.iinfo(raw_view)
            if not info.min <= int(value) <= info.max:
                continue
            fills.append(raw_view.type(int(value)))
        else:
            fills.append(raw_view.type(value))
    packed = scale is not None or offset is not None or raw.kind in "iu"
    if packed:
        out = np.dtype(np.float64)
    else:
        out = np.dtype(np.float32) if raw.itemsize <= 4 else np.dtype(np.float64)
    return _Decoding(scale, offset, tuple(fills), unsigned, out)


def _decode_into(raw: np.ndarray, dec: _Decoding, out: np.ndarray) -> None:
    """Decoded values of ``raw`` into ``out`` (same shape), as in the module doc."""
    if dec.unsigned:
        raw = raw.view(f"u{raw.dtype.itemsize}")
    mask = None
    for fill in dec.fills:
        hit = raw == fill
        mask = hit if mask is None else mask | hit
    out[...] = raw
    if dec.scale is not None:
        out *= dec.scale
    if dec.offset is not None:
        out += dec.offset
    if mask is not None and mask.any():
        out[mask] = np.nan


# -- the source -------------------------------------------------------------
def _label(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, (np.floating, float)) and float(value).is_integer():
        return str(int(value))
    if isinstance(value, np.generic):
        return str(value.item())
    return str(value)


def _bound(value: Any) -> str:
    """A split bound of an mllam-data-prep ``splits`` variable as a string."""
    v = np.asarray(value)
    if v.dtype.kind == "M":
        return _fmt_time(v[()])
    return _label(v.item())


class XarraySource:
    """Time blocks of a zarr/netCDF dataset, for every split (see module doc)."""

    kind = KIND
    exact_per_step = True

    def __init__(self, path: str | Path, options: XarrayOptions | None = None) -> None:
        self.options = options or XarrayOptions()
        self.path = str(path)
        self.time_dim = self.options.time_dim
        self.parts = self._parts(_open_parts(self.path))
        first = self.parts[0].ds
        self.is_mdp = "state" in first.data_vars and "state_feature" in first["state"].dims
        self.times = np.concatenate([_time_values(p.ds, self.time_dim, p.path) for p in self.parts])
        _check_sorted(self.times, self.time_dim, self._where)
        self.n_times = int(self.times.shape[0])
        self.diff_steps = self._diff_steps()
        self.splits = self._splits()
        self.vars = self._variables()
        self._decodings = {
            (i, v.name): _decoding(p.ds.variables[v.name], f"{p.path}: variable {v.name}")
            for i, p in enumerate(self.parts)
            for v in self.vars
            if v.has_time or i == 0
        }
        for v in self.vars:
            decs = [d for (i, name), d in self._decodings.items() if name == v.name]
            v.out_dtype = max((d.out_dtype for d in decs), key=lambda d: d.itemsize)
            v.raw_itemsize = int(self.parts[0].ds.variables[v.name].dtype.itemsize)
        self.blocks = self._blocks()
        self.streams, self.layout = self._streams()
        self.attrs = self._attrs()

    # -- construction -----------------------------------------------------
    def _parts(self, opened: list[tuple[str, Any]]) -> list[_Part]:
        time_dim = self.options.time_dim
        starts = []
        for path, ds in opened:
            values = _time_values(ds, time_dim, path)
            if values.shape[0]:
                starts.append((values[0], path, ds, values.shape[0]))
        if not starts:
            raise InputError(f"{self.path}: the {time_dim} dimension is empty")
        if len(starts) > 1:
            starts.sort(key=lambda s: s[0])
        parts, offset = [], 0
        for _, path, ds, length in starts:
            parts.append(_Part(path, ds, offset, int(length)))
            offset += int(length)
        return parts

    def _where(self, time_index: int) -> str:
        """The file holding a time index (for messages)."""
        for p in self.parts:
            if p.start <= time_index < p.start + p.length:
                return p.path
        return self.path

    def _diff_steps(self) -> tuple[int, ...]:
        steps = self.options.diff_steps if self.options.diff_steps is not None else (1,)
        if not steps or any(int(k) < 1 for k in steps):
            raise InputError(f"--diff-steps {steps}: steps must be positive whole numbers")
        return tuple(sorted({int(k) for k in steps}))

    def _mdp_splits(self) -> dict[str, tuple[str, str]]:
        ds = self.parts[0].ds
        if "splits" not in ds.variables or set(ds["splits"].dims) != {"split_name", "split_part"}:
            return {}
        da = ds["splits"].load()
        out = {}
        for name in da["split_name"].values:
            row = da.sel(split_name=name)
            out[_label(name)] = tuple(
                _bound(row.sel(split_part=part).values) for part in ("start", "end")
            )
        return out

    def _splits(self) -> list[Split]:
        defined = self._mdp_splits() if self.is_mdp else {}
        specs = list(self.options.splits)
        if not specs and defined:
            ds = self.parts[0].ds
            with_stats = [
                n for n in defined if any(re.match(rf"^\w+__{re.escape(n)}__", str(v)) for v in ds)
            ]
            specs = with_stats or list(defined)
        resolved: list[tuple[str, str | None, str | None]] = []
        for spec in specs:
            name, start, end = _parse_split(spec)
            if start is None:
                if name not in defined:
                    known = f" (the store defines {', '.join(defined)})" if defined else ""
                    raise InputError(f"--split {name}: give the interval as NAME=START/END{known}")
                start, end = defined[name]
            resolved.append((name, start, end))
        if not resolved:
            resolved = [("train", None, None)]
        names = [r[0] for r in resolved]
        if len(set(names)) != len(names):
            raise InputError(f"--split: split names must differ (got {', '.join(names)})")
        index = _time_index(self.times)
        first, last = _fmt_time(self.times[0]), _fmt_time(self.times[-1])
        splits = []
        for name, start, end in resolved:
            if start is None:
                split = Split(name, 0, self.n_times, f"{first}/{last}")
            else:
                found = _select(index, self.times, name, start, end, self.time_dim)
                if found.stop <= found.start:
                    raise InputError(
                        f"{self.path}: split {name} ({start}/{end}) selects no time steps: "
                        f"{self.time_dim} runs from {first} to {last}"
                    )
                split = Split(name, found.start, found.stop, f"{start}/{end}")
            _check_regular(self.times, split, self.time_dim, self._where)
            n = split.stop - split.start
            if n == 1:
                warnings.warn(
                    f"split {name} has one time step ({_fmt_time(self.times[split.start])}): "
                    "no differences; its difference statistics are absent",
                    stacklevel=2,
                )
            splits.append(split)
        return splits

    def _feature_dims_of(self, name: str, dims: tuple[str, ...]) -> tuple[str, ...]:
        chosen = self.options.feature_dims
        if self.is_mdp and name in MDP_CATEGORIES:
            extra = chosen or ()
            return tuple(d for d in dims if d == f"{name}_feature" or d in extra)
        if chosen is None:
            return tuple(d for d in dims if d.endswith("_feature") or d in VERTICAL_DIMS)
        return tuple(d for d in dims if d in chosen)

    def _variables(self) -> list[_Var]:
        ds = self.parts[0].ds
        time_dim = self.time_dim
        wanted = self.options.variables
        if wanted is None:
            if self.is_mdp:
                names = [c for c in MDP_CATEGORIES if c in ds.data_vars]
            else:
                names = [
                    str(n)
                    for n, v in ds.data_vars.items()
                    if time_dim in v.dims and np.dtype(v.dtype).kind in "iuf"
                ]
                if _is_zarr(str(self.path)):
                    # a zarr 3 store without consolidated metadata lists its arrays
                    # in no fixed order: alphabetical, so that every run agrees
                    names.sort()
            if not names:
                raise InputError(
                    f"{self.path}: no numeric variable has the dimension {time_dim!r}; "
                    "name the time dimension with --time-dim"
                )
        else:
            names = list(dict.fromkeys(wanted))
            for name in names:
                if name not in ds.data_vars:
                    raise InputError(
                        f"{self.path}: no variable {name!r} (variables: "
                        f"{', '.join(map(str, ds.data_vars))})"
                    )
                static_ok = self.is_mdp and name == "static"
                if time_dim not in ds[name].dims and not static_ok:
                    raise InputError(
                        f"{self.path}: variable {name} has no {time_dim} dimension (dimensions: "
                        f"{', '.join(ds[name].dims)}); statistics are over time and splits, "
                        "leave it out of --variables"
                    )
        chosen = self.options.feature_dims
        if chosen:
            present = {d for n in names for d in ds[n].dims}
            missing = [d for d in chosen if d not in present]
            if missing:
                raise InputError(
                    f"{self.path}: --feature-dims {', '.join(missing)}: no selected variable has "
                    "such a dimension"
                )
        out = [self._variable(ds, name) for name in names]
        for p in self.parts[1:]:
            for v in out:
                if not v.has_time:
                    continue
                if v.name not in p.ds.data_vars:
                    raise InputError(f"{p.path}: variable {v.name} is missing from this file")
                other = p.ds[v.name]
                same = other.dims == ds[v.name].dims and all(
                    other.sizes[d] == ds[v.name].sizes[d] for d in other.dims if d != time_dim
                )
                if not same:
                    raise InputError(
                        f"{p.path}: variable {v.name} has dimensions {dict(other.sizes)}, but "
                        f"{self.parts[0].path} has {dict(ds[v.name].sizes)}"
                    )
        return out

    def _variable(self, ds: Any, name: str) -> _Var:
        da = ds[name]
        where = f"{self.path}: variable {name}"
        if np.dtype(da.dtype).kind not in "iuf":
            raise InputError(f"{where}: dtype {da.dtype} is not numeric")
        has_time = self.time_dim in da.dims
        fdims = self._feature_dims_of(name, tuple(map(str, da.dims)))
        gdims = tuple(str(d) for d in da.dims if d != self.time_dim and d not in fdims)
        shape = tuple(int(da.sizes[d]) for d in fdims)
        n_grid = int(np.prod([da.sizes[d] for d in gdims], dtype=np.int64))
        labels = []
        coords: dict[str, tuple[tuple[str, ...], Any]] = {}
        for d in fdims:
            if d in ds.coords and ds[d].dims == (d,):
                values = np.asarray(ds[d].values)
                coords[d] = ((d,), values)
            else:
                values = np.arange(da.sizes[d])
            labels.append([_label(x) for x in values])
        category = name if self.is_mdp and name in MDP_CATEGORIES else "state"
        prefixed = not any(d.endswith("_feature") for d in fdims)
        features, units, long_names = [], [], []
        base_units = str(da.attrs.get("units", ""))
        base_long = str(da.attrs.get("long_name", name))
        for combo in np.ndindex(*shape) if shape else [()]:
            parts = [labels[i][j] for i, j in enumerate(combo)]
            features.append("_".join(([name] if prefixed else []) + parts) if parts else name)
            units.append(base_units)
            where_in = ", ".join(
                f"{d}={labels[i][j]}" for i, (d, j) in enumerate(zip(fdims, combo, strict=True))
            )
            long_names.append(f"{base_long} ({where_in})" if where_in else base_long)
        if self.is_mdp and category in MDP_CATEGORIES and len(fdims) == 1:
            dim = fdims[0]
            for suffix in ("units", "long_name"):
                coord = f"{dim}_{suffix}"
                if coord in ds.coords and ds[coord].dims == (dim,):
                    values = [_label(x) for x in np.asarray(ds[coord].values)]
                    coords[coord] = ((dim,), np.asarray(values, dtype=object))
                    if suffix == "units":
                        units = values
                    else:
                        long_names = values
        if len(set(features)) != len(features):
            raise InputError(f"{where}: feature names repeat ({', '.join(features[:6])}, ...)")
        if n_grid == 0 or not features:
            raise InputError(f"{where}: has no values (a dimension of size 0)")
        return _Var(
            name=name,
            category=category,
            has_time=has_time,
            grid_dims=gdims,
            feature_dims=fdims,
            feature_shape=shape,
            n_grid=n_grid,
            features=features,
            units=units,
            long_names=long_names,
            coords=coords,
        )

    def _chunk_bounds(self) -> set[int]:
        bounds = set()
        for p in self.parts:
            bounds.update((p.start, p.start + p.length))
            for v in self.vars:
                if not v.has_time:
                    continue
                var = p.ds.variables[v.name]
                enc = var.encoding
                size = (enc.get("preferred_chunks") or {}).get(self.time_dim)
                if enc.get("contiguous"):
                    size = 1  # any slice reads only what it needs
                elif size is None:
                    chunks = enc.get("chunks") or enc.get("chunksizes")
                    if chunks is not None:
                        size = chunks[var.dims.index(self.time_dim)]
                if size:
                    bounds.update(range(p.start, p.start + p.length, int(size)))
        return bounds

    def _blocks(self) -> list[tuple[int, int, int]]:
        """(first value step, one past the last, first step read) per sample."""
        per_step = sum(
            v.n_grid * v.n_features * v.out_dtype.itemsize for v in self.vars if v.has_time
        )
        budget = max(1, int(self.options.block_bytes))
        intervals: list[list[int]] = []
        for s in sorted(self.splits, key=lambda s: s.start):
            if intervals and s.start <= intervals[-1][1]:
                intervals[-1][1] = max(intervals[-1][1], s.stop)
            else:
                intervals.append([s.start, s.stop])
        bounds = sorted(self._chunk_bounds())
        reach = max(self.diff_steps)
        blocks = []
        for a, b in intervals:
            cuts = sorted({a, b, *[x for x in bounds if a < x < b]})
            start = a
            for i, cut in enumerate(cuts[1:], start=1):
                nxt = cuts[i + 1] if i + 1 < len(cuts) else None
                if nxt is None or (nxt - start) * per_step > budget:
                    blocks.append((start, cut))
                    start = cut
        out = []
        for b0, b1 in blocks:
            inside = [s.start for s in self.splits if s.start < b1 and s.stop > b0]
            out.append((b0, b1, max(b0 - reach, min(inside))))
        return out

    def _streams(self) -> tuple[list[StreamSpec], dict[str, StreamLayout]]:
        streams, layout = [], {}
        for split in self.splits:
            for v in self.vars:
                name = f"{v.name}__{split.name}"
                steps = self.diff_steps if v.has_time else ()
                streams.append(StreamSpec(name, v.features, v.units, steps, v.long_names))
                layout[name] = StreamLayout(
                    prefix=v.name,
                    split=split.name,
                    feature_dims=v.feature_dims,
                    feature_shape=v.feature_shape,
                    coords=v.coords,
                    category=v.category,
                )
        return streams, layout

    def _attrs(self) -> dict[str, Any]:
        return {
            "source": self.kind,
            "dataset": self.path,
            "layout": "mllam-data-prep" if self.is_mdp else "generic",
            "time_dim": self.time_dim,
            "splits": "; ".join(
                f"{s.name}={s.label} ({s.stop - s.start} steps from {self.time_dim}[{s.start}])"
                for s in self.splits
            ),
            "diff_steps": ",".join(map(str, self.diff_steps)),
            "variables": ",".join(v.name for v in self.vars),
            "feature_dims": ",".join(sorted({d for v in self.vars for d in v.feature_dims})),
            "reduced_dims": ",".join(sorted({d for v in self.vars for d in v.grid_dims})),
            "decoding": "packed integers decoded in float64 as raw * scale_factor + add_offset; "
            "_FillValue and missing_value are NaN",
            "diff_definition": "x[t] - x[t-k] over pairs with both times inside the split",
        }

    # -- reading ----------------------------------------------------------
    def _read(self, v: _Var, r0: int, r1: int) -> np.ndarray:
        shape = (r1 - r0, v.n_grid, v.n_features)
        order = (self.time_dim, *v.grid_dims, *v.feature_dims)
        out = None
        for i, p in enumerate(self.parts):
            a, b = max(r0, p.start), min(r1, p.start + p.length)
            if a >= b:
                continue
            var = p.ds.variables[v.name]
            try:
                piece = var.isel({self.time_dim: slice(a - p.start, b - p.start)})
                raw = np.asarray(piece.transpose(*order).values)
            except Exception as exc:  # storage errors of any backend
                raise InputError(
                    f"{p.path}: variable {v.name}: cannot read {self.time_dim} steps "
                    f"{a - p.start}..{b - p.start - 1}: {_first_line(exc)}"
                ) from None
            raw = raw.reshape(b - a, v.n_grid, v.n_features)
            dec = self._decodings[(i, v.name)]
            plain = dec == _Decoding(None, None, (), False, raw.dtype) and raw.dtype == v.out_dtype
            if plain and (a, b) == (r0, r1):
                return np.ascontiguousarray(raw)  # nothing to decode: usually no copy
            if out is None:
                out = np.empty(shape, dtype=v.out_dtype)
            _decode_into(raw, dec, out[a - r0 : b - r0])
        return out

    def _read_static(self, v: _Var) -> np.ndarray:
        out = np.empty((1, v.n_grid, v.n_features), dtype=v.out_dtype)
        var = self.parts[0].ds.variables[v.name]
        try:
            raw = np.asarray(var.transpose(*v.grid_dims, *v.feature_dims).values)
        except Exception as exc:  # storage errors of any backend
            raise InputError(
                f"{self.parts[0].path}: variable {v.name}: cannot read: {_first_line(exc)}"
            ) from None
        _decode_into(raw.reshape(1, v.n_grid, v.n_features), self._decodings[(0, v.name)], out)
        return out

    def _channels(self, v: _Var) -> np.ndarray:
        return np.arange(v.n_features, dtype=np.int64)

    def read(self, index: int) -> dict[str, Block]:
        b0, b1, r0 = self.blocks[index]
        arrays = {v.name: self._read(v, r0, b1) for v in self.vars if v.has_time}
        out = {}
        for v in self.vars:
            if not v.has_time:
                array = (
                    self._read_static(v)
                    if index == 0
                    else np.empty((0, v.n_grid, v.n_features), dtype=v.out_dtype)
                )
                for split in self.splits:
                    out[f"{v.name}__{split.name}"] = Block(
                        array, self._channels(v), (0, array.shape[0])
                    )
                continue
            for split in self.splits:
                lo, hi = max(b0, split.start), min(b1, split.stop)
                values = (lo - r0, hi - r0) if lo < hi else (0, 0)
                diffs = {}
                for k in self.diff_steps:
                    d0 = max(b0, split.start + k)
                    diffs[k] = (d0 - r0, hi - r0) if d0 < hi else (0, 0)
                out[f"{v.name}__{split.name}"] = Block(
                    arrays[v.name], self._channels(v), values, diffs
                )
        return out

    def reference_blocks(self) -> dict[str, Block]:
        """The first steps of each split: shifts and scales that do not depend
        on the block size (see the engine)."""
        reach = max(self.diff_steps)
        out = {}
        static = {v.name: self._read_static(v) for v in self.vars if not v.has_time}
        for split in self.splits:
            stop = min(split.stop, split.start + reach + 1)
            for v in self.vars:
                name = f"{v.name}__{split.name}"
                if not v.has_time:
                    out[name] = Block(static[v.name], self._channels(v), (0, 1))
                    continue
                array = self._read(v, split.start, stop)
                diffs = {k: (k, k + 1) if k < array.shape[0] else (0, 0) for k in self.diff_steps}
                out[name] = Block(array, self._channels(v), (0, 1), diffs)
        return out

    def __len__(self) -> int:
        return len(self.blocks)

    def describe(self, index: int) -> str:
        b0, b1, r0 = self.blocks[index]
        files = sorted({self._where(t) for t in (r0, b1 - 1)})
        return (
            f"{', '.join(files)}: {self.time_dim} {_fmt_time(self.times[b0])} to "
            f"{_fmt_time(self.times[b1 - 1])} (steps {b0}..{b1 - 1})"
        )

    def nbytes(self, index: int) -> int:
        b0, b1, r0 = self.blocks[index]
        per_step = sum(v.n_grid * v.n_features * v.raw_itemsize for v in self.vars if v.has_time)
        static = sum(v.n_grid * v.n_features * v.raw_itemsize for v in self.vars if not v.has_time)
        return (b1 - r0) * per_step + (static if index == 0 else 0)

    def identity(self) -> dict[str, Any]:
        files = []
        for p in self.parts:
            if _is_url(p.path):
                files.append([p.path, None, None])
                continue
            stat = os.stat(p.path)
            files.append([p.path, stat.st_size, stat.st_mtime_ns])
        return {
            "kind": self.kind,
            "files": files,
            "times": [_fmt_time(self.times[0]), _fmt_time(self.times[-1]), self.n_times],
            "splits": [[s.name, s.start, s.stop] for s in self.splits],
            # sorted: an unconsolidated zarr 3 store lists its arrays in no fixed order
            "variables": sorted([v.name, list(v.features)] for v in self.vars),
            "diff_steps": list(self.diff_steps),
        }

    def close(self) -> None:
        for p in self.parts:
            p.ds.close()


def output_stem(path: str | Path) -> str:
    """A file name stem for the statistics of ``path`` (``era5.nc`` -> ``era5``)."""
    name = str(path).rstrip("/").rsplit("/", 1)[-1]
    for suffix in (".zarr", *NETCDF_SUFFIXES):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    name = re.sub(r"[*?\[\]]", "", name).strip("._-")
    return name or "dataset"
