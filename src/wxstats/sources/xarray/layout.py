"""Which variables, and how their dimensions split into features and grid.

Each selected variable with the time dimension becomes one stream per split
(keyed by core's ``stream_name``), labelled by its feature dimensions and their
coordinate values (vertical levels, ``*_feature``; flat names ``z_500``,
``z_850`` from core's ``feature_names``); every other dimension (the grid,
ensemble members) is reduced. No file names here: writers derive them. An mllam-data-prep
store (``state``/``forcing``/``static`` with ``{category}_feature``
coordinates) is recognised: its categories are the streams, with its feature
names and units, and ``static`` (no time) is reduced over the grid only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wxstats.core.conventions import (
    ROLES,
    feature_dim,
    feature_names,
    lists_features,
    long_name_coord,
    stream_name,
    units_coord,
)
from wxstats.core.errors import InputError
from wxstats.core.streams import POOLED_ATTR, Pooling, StreamLayout, StreamSpec
from wxstats.sources.xarray.open import is_zarr
from wxstats.sources.xarray.timeaxis import Split, TimeFile, label

VERTICAL_DIMS = ("level", "levels", "pressure_level", "isobaricInhPa", "plev", "lev")
"""Dimensions that are features by default (with any ``*_feature`` dimension):
a mean over vertical levels is never a useful normalization."""


def is_mdp(ds: Any) -> bool:
    """An mllam-data-prep store: a ``state`` variable along ``state_feature``."""
    return "state" in ds.data_vars and feature_dim("state") in ds["state"].dims


@dataclass
class Variable:
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
    coords: dict[str, tuple[Any, ...]]
    out_dtype: np.dtype = field(default_factory=lambda: np.dtype(np.float64))
    raw_itemsize: int = 8
    grid_sizes: dict[str, int] = field(default_factory=dict)
    weights: np.ndarray | None = None
    """float64 (n_grid,): the weight of each grid point (``--weights``), else None."""

    @property
    def n_features(self) -> int:
        return len(self.features)


def _feature_dims_of(
    name: str, dims: tuple[str, ...], chosen: tuple[str, ...] | None, mdp: bool
) -> tuple[str, ...]:
    if mdp and name in ROLES:
        extra = chosen or ()
        return tuple(d for d in dims if d == feature_dim(name) or d in extra)
    if chosen is None:
        return tuple(d for d in dims if lists_features((d,)) or d in VERTICAL_DIMS)
    return tuple(d for d in dims if d in chosen)


def select_variables(
    time_files: list[TimeFile],
    path: str,
    time_dim: str,
    wanted: tuple[str, ...] | None,
    feature_dims: tuple[str, ...] | None,
) -> list[Variable]:
    """The variables to reduce, checked against every file of the dataset."""
    ds = time_files[0].ds
    mdp = is_mdp(ds)
    if wanted is None:
        if mdp:
            names = [c for c in ROLES if c in ds.data_vars]
        else:
            names = [
                str(n)
                for n, v in ds.data_vars.items()
                if time_dim in v.dims and np.dtype(v.dtype).kind in "iuf"
            ]
            if is_zarr(str(path)):
                # a zarr 3 store without consolidated metadata lists its arrays
                # in no fixed order: alphabetical, so that every run agrees
                names.sort()
        if not names:
            raise InputError(
                f"{path}: no numeric variable has the dimension {time_dim!r}; "
                "name the time dimension with --time-dim"
            )
    else:
        names = list(dict.fromkeys(wanted))
        for name in names:
            if name not in ds.data_vars:
                raise InputError(
                    f"{path}: no variable {name!r} (variables: {', '.join(map(str, ds.data_vars))})"
                )
            # a variable without time, named here, is a static field (orography, a
            # land-sea mask): reduced over its grid once, the same in every split,
            # without differences; GraphCast's statistics hold such fields too
            if time_dim not in ds[name].dims and mdp and name != "static":
                raise InputError(
                    f"{path}: variable {name} has no {time_dim} dimension (dimensions: "
                    f"{', '.join(ds[name].dims)}); leave it out of --variables"
                )
    if feature_dims:
        if time_dim in feature_dims:
            raise InputError(
                f"{path}: --feature-dims {time_dim}: the time dimension is what statistics "
                "are taken over; name other dimensions (such as level)"
            )
        present = {d for n in names for d in ds[n].dims}
        missing = [d for d in feature_dims if d not in present]
        if missing:
            raise InputError(
                f"{path}: --feature-dims {', '.join(missing)}: no selected variable has "
                "such a dimension"
            )
    out = [_variable(ds, name, path, time_dim, feature_dims, mdp) for name in names]
    for p in time_files[1:]:
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
                    f"{time_files[0].path} has {dict(ds[v.name].sizes)}"
                )
    return out


def _variable(
    ds: Any, name: str, path: str, time_dim: str, chosen: tuple[str, ...] | None, mdp: bool
) -> Variable:
    da = ds[name]
    where = f"{path}: variable {name}"
    if np.dtype(da.dtype).kind not in "iuf":
        raise InputError(f"{where}: dtype {da.dtype} is not numeric")
    has_time = time_dim in da.dims
    fdims = _feature_dims_of(name, tuple(map(str, da.dims)), chosen, mdp)
    gdims = tuple(str(d) for d in da.dims if d != time_dim and d not in fdims)
    shape = tuple(int(da.sizes[d]) for d in fdims)
    n_grid = int(np.prod([da.sizes[d] for d in gdims], dtype=np.int64))
    labels = []
    coords: dict[str, tuple[Any, ...]] = {}
    for d in fdims:
        if d in ds.coords and ds[d].dims == (d,):
            values = np.asarray(ds[d].values)
            # with its attributes (units): a reader aligning on it (GraphCast's) must see
            # the coordinate exactly as in the data, or it drops what does not match
            coords[d] = ((d,), values, plain_attrs(ds[d].attrs))
        else:
            values = np.arange(da.sizes[d])
        labels.append([label(x) for x in values])
    category = name if mdp and name in ROLES else ("state" if has_time else "static")
    features = feature_names(name, labels, prefixed=_prefixed(fdims))
    units, long_names = [], []
    base_units = str(da.attrs.get("units", ""))
    base_long = str(da.attrs.get("long_name", name))
    for combo in np.ndindex(*shape) if shape else [()]:
        units.append(base_units)
        where_in = ", ".join(
            f"{d}={labels[i][j]}" for i, (d, j) in enumerate(zip(fdims, combo, strict=True))
        )
        long_names.append(f"{base_long} ({where_in})" if where_in else base_long)
    if mdp and category in ROLES and len(fdims) == 1:
        dim = fdims[0]
        for coord in (units_coord(dim), long_name_coord(dim)):
            if coord in ds.coords and ds[coord].dims == (dim,):
                values = [label(x) for x in np.asarray(ds[coord].values)]
                coords[coord] = ((dim,), np.asarray(values, dtype=object))
                if coord == units_coord(dim):
                    units = values
                else:
                    long_names = values
    if len(set(features)) != len(features):
        raise InputError(f"{where}: feature names repeat ({', '.join(features[:6])}, ...)")
    if n_grid == 0 or not features:
        raise InputError(f"{where}: has no values (a dimension of size 0)")
    return Variable(
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
        grid_sizes={d: int(da.sizes[d]) for d in gdims},
    )


def _values(v: Variable, dim: str) -> np.ndarray:
    """The coordinate values along feature dimension ``dim`` of ``v`` (positions
    where the data has none)."""
    if dim in v.coords:
        return np.asarray(v.coords[dim][1])
    return np.arange(v.feature_shape[v.feature_dims.index(dim)])


def _prefixed(dims: tuple[str, ...]) -> bool:
    """Whether feature names lead with the variable: not where a ``*_feature``
    dimension names the features itself (mllam-data-prep's categories)."""
    return not lists_features(dims)


def plain_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """The attributes a netCDF file can hold as they are (strings and numbers)."""
    return {str(k): v for k, v in attrs.items() if isinstance(v, (str, int, float, np.number))}


def pooling(v: Variable, dims: tuple[str, ...], split: str) -> Pooling | None:
    """``v``'s features taken together over those of ``dims`` it has (``--pool``),
    as the stream ``{v.name}_pooled__{split}`` along its other feature dimensions;
    None when it has none of them."""
    over = tuple(d for d in v.feature_dims if d in dims)
    if not over:
        return None
    keep = [i for i, d in enumerate(v.feature_dims) if d not in over]
    shape = tuple(v.feature_shape[i] for i in keep)
    groups: dict[tuple[int, ...], list[int]] = {}
    for f, combo in enumerate(np.ndindex(*v.feature_shape)):
        groups.setdefault(tuple(combo[i] for i in keep), []).append(f)
    name = f"{v.name}_pooled"
    labels = [[label(x) for x in _values(v, v.feature_dims[i])] for i in keep]
    features = feature_names(name, labels)
    units, long_names = [], []
    base = v.long_names[0].split(" (")[0] if v.long_names else v.name
    for rest, members in groups.items():
        parts = [labels[i][j] for i, j in enumerate(rest)]
        member_units = {v.units[f] for f in members}
        units.append(member_units.pop() if len(member_units) == 1 else "")
        where_in = ", ".join(f"{v.feature_dims[keep[i]]}={p}" for i, p in enumerate(parts))
        pooled_over = f"pooled over {', '.join(over)}"
        long_names.append(f"{base} ({pooled_over}{'; ' + where_in if parts else ''})")
    kept_dims = tuple(v.feature_dims[i] for i in keep)
    coords = {d: c for d, c in v.coords.items() if set(c[0]) <= set(kept_dims)}
    layout = StreamLayout(
        variable=name,
        split=split,
        feature_dims=kept_dims,
        feature_shape=shape,
        coords=coords,
        role=v.category,
        attrs={POOLED_ATTR: ", ".join(over)},
    )
    return Pooling(
        stream_name(name, split),
        over,
        tuple(tuple(m) for m in groups.values()),
        features,
        units,
        long_names,
        layout,
    )


def check_pool(variables: list[Variable], dims: tuple[str, ...], time_dim: str, path: str) -> None:
    """Refuse, before any data is read, a ``--pool`` dimension that is the time
    dimension, or a feature dimension of no selected variable, or a pooled name
    that is already a variable's."""
    for d in dims:
        if d == time_dim:
            raise InputError(
                f"{path}: --pool {d}: the time dimension is always reduced; pool feature "
                "dimensions (levels)"
            )
        if not any(d in v.feature_dims for v in variables):
            have = sorted({f for v in variables for f in v.feature_dims})
            raise InputError(
                f"{path}: --pool {d}: no selected variable has {d} as a feature dimension "
                f"(feature dimensions: {', '.join(have) or 'none'})"
            )
    names = {v.name for v in variables}
    for v in variables:
        if f"{v.name}_pooled" in names and any(d in v.feature_dims for d in dims):
            raise InputError(
                f"{path}: --pool: the pooled statistics of {v.name} would be named "
                f"{v.name}_pooled, a variable of the dataset"
            )


def stream_specs(
    variables: list[Variable],
    splits: list[Split],
    steps: tuple[int, ...],
    groups: tuple[str, list[int]] | None = None,
    weighted: bool = False,
    time_means: bool = False,
    step_seconds: dict[str, int | None] | None = None,
    pool: tuple[str, ...] = (),
) -> list[StreamSpec]:
    """One stream per (split, variable), keyed by :func:`stream_name`, labelled
    by its variable's feature dimensions and their coordinates. ``groups`` (a
    climatology: the dimension and its values, e.g. ``month``, 1..12) leads the
    feature dimensions of every variable with time: ``(month, level)``.
    ``step_seconds``: one time step of each split, the span of a difference of
    ``k`` steps being ``k`` of them (none: a numeric time axis). ``pool``: the
    feature dimensions each stream's statistics are also pooled over."""
    streams = []
    for split in splits:
        step = (step_seconds or {}).get(split.name)
        for v in variables:
            dims, shape, coords = v.feature_dims, v.feature_shape, v.coords
            features, units, long_names = v.features, v.units, v.long_names
            if groups is not None and v.has_time:
                dim, values = groups
                dims, shape = (dim, *dims), (len(values), *shape)
                coords = {dim: ((dim,), np.asarray(values, dtype=np.int64)), **coords}
                # named as a file's reader names them: the group label first
                labels = [[label(g) for g in values]]
                labels += [[label(x) for x in _values(v, d)] for d in v.feature_dims]
                features = feature_names(v.name, labels, prefixed=_prefixed(v.feature_dims))
                units = [u for _ in values for u in v.units]
                long_names = [f"{n} ({dim} {g})" for g in values for n in v.long_names]
            layout = StreamLayout(
                variable=v.name,
                split=split.name,
                feature_dims=dims,
                feature_shape=shape,
                coords=coords,
                role=v.category,
            )
            name = stream_name(v.name, split.name)
            diff_steps = steps if v.has_time else ()
            cells = v.n_grid if time_means and v.has_time else 0
            span = {k: k * step for k in diff_steps} if step else {}
            streams.append(
                StreamSpec(
                    name,
                    features,
                    units,
                    diff_steps,
                    long_names,
                    layout,
                    weighted,
                    cells,
                    span,
                    pooling(v, pool, split.name) if pool else None,
                )
            )
    return streams
