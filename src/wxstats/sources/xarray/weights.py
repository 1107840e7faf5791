"""Grid-point weights (``--weights``): cos(latitude), or a cell-area field.

On a regular latitude-longitude grid the points near the poles stand for much
smaller areas than those at the equator; an unweighted mean over-counts them.
``coslat`` weights each point by the cosine of its latitude (makani's default
quadrature, GraphCast's area weighting), ``VAR`` by a field of the dataset
(a cell area), and ``FILE:VAR`` by a field of another netCDF/zarr file,
split at the last ``:`` (a path may hold colons, a variable's name not), and
placed on the data's grid by coordinate values (:mod:`.align`). Latitudes are
in degrees unless their ``units`` say radians; other units are refused.

The weights of a variable are one float64 per grid point, in the order its
grid dimensions are flattened (:class:`~wxstats.sources.xarray.layout.Variable`),
broadcast over grid dimensions the field does not have (longitude, ensemble
members). They must be the same bits on every rank and machine: cosines come
from Python's ``math.cos`` (the C library's, correctly rounded in practice)
rather than numpy's, whose SIMD versions may differ by an ulp between CPUs.
"""

from __future__ import annotations

import hashlib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.errors import InputError, first_line
from wxstats.sources.xarray.align import align_to, coordinate_values, coordinates_along
from wxstats.sources.xarray.decode import decode_into, decoding
from wxstats.sources.xarray.layout import Variable
from wxstats.sources.xarray.open import NETCDF_SUFFIXES, open_one
from wxstats.storage.urls import is_url

COSLAT = "coslat"
LATITUDE_NAMES = ("lat", "latitude", "nav_lat", "XLAT")
LATITUDE_UNITS = ("degrees_north", "degree_north", "degree_N", "degrees_N", "degreeN", "degreesN")
DEGREES = {u.lower() for u in LATITUDE_UNITS} | {"degree", "degrees", "deg", "°", "°n"}
RADIANS = {"radian", "radians", "rad"}
"""Units a latitude may have (compared in lower case); none given means degrees."""


@dataclass(frozen=True)
class WeightField:
    """Where the weights come from: the field's name, its dataset and its values."""

    method: str  # "coslat", or the --weights text of a field
    name: str  # the variable read (the latitude coordinate, or the field)
    path: str
    ds: Any

    def describe(self) -> str:
        if self.method == COSLAT:
            return f"coslat (cos of latitude {self.name}, grid points weighted by it)"
        return f"{self.method} (grid points weighted by the field {self.name} of {self.path})"


def _latitude(ds: Any, path: str) -> str:
    found = [
        str(name)
        for name, var in ds.variables.items()
        if str(name) in LATITUDE_NAMES
        or var.attrs.get("standard_name") == "latitude"
        or var.attrs.get("units") in LATITUDE_UNITS
    ]
    if not found:
        raise InputError(
            f"{path}: --weights coslat needs a latitude coordinate (named "
            f"{', '.join(LATITUDE_NAMES)}, or with standard_name latitude or units "
            "degrees_north); none found: give a cell-area field with --weights VAR"
        )
    return found[0]


def _file_and_name(spec: str, ds: Any) -> tuple[str, str] | None:
    """``FILE:VAR`` split at the last ``:`` (None: ``spec`` names a variable of the
    dataset, or is not a path). A missing file that looks like one (a folder
    separator, a data suffix) is refused here, not read as a variable name."""
    if spec in ds.variables:
        return None
    file, colon, name = spec.rpartition(":")
    if not (colon and file and name):
        return None
    if is_url(file) or Path(file).exists():
        return file, name
    suffix = file.lower().rstrip("/").endswith((".zarr", *NETCDF_SUFFIXES))
    if suffix or os.sep in file or "/" in file:
        raise InputError(f"--weights {spec}: weights file {file} not found")
    return None


def weight_field(spec: str, ds: Any, path: str, storage_options: dict[str, Any]) -> WeightField:
    """The field ``--weights spec`` names (checked for existence here, for
    values, shape and coordinates per variable in :func:`grid_weights`)."""
    if spec == COSLAT:
        return WeightField(COSLAT, _latitude(ds, path), path, ds)
    split = _file_and_name(spec, ds)
    if split is not None:
        file, name = split
        try:
            ds = open_one(file, storage_options)
        except InputError as exc:
            raise InputError(f"--weights {spec}: weights file {exc}") from None
        except Exception as exc:  # any backend's error
            raise InputError(f"{file}: --weights {spec}: cannot open: {first_line(exc)}") from None
        where = file
    else:
        where, name = path, spec
    if name not in ds.variables:
        raise InputError(
            f"{where}: --weights {spec}: no variable {name!r} (give coslat, a variable of the "
            "dataset such as a cell area, or FILE:VARIABLE)"
        )
    return WeightField(spec, name, where, ds)


def _cosines(latitudes: np.ndarray, var: Any, where: str) -> np.ndarray:
    """cos(latitude) of latitudes in degrees or radians (by their ``units``), each
    checked within the poles; the cosine at a pole (6e-17) is never below 0."""
    units = str(var.attrs.get("units", "degrees_north")).strip()
    if units.lower() in DEGREES:
        limit, to_radians = 90.0, math.radians
    elif units.lower() in RADIANS:
        limit, to_radians = math.pi / 2, float
    else:
        raise InputError(
            f"{where}: latitude units {units!r} are neither degrees (degrees_north) nor radians"
        )
    if not (np.isfinite(latitudes).all() and (np.abs(latitudes) <= limit).all()):
        bad = latitudes[~(np.abs(latitudes) <= limit)].flat[0]
        span = "-90..90 degrees" if limit == 90.0 else "-pi/2..pi/2 radians"
        raise InputError(f"{where}: latitudes must be finite and within {span} ({bad} found)")
    flat = [math.cos(to_radians(float(x))) for x in latitudes.ravel()]
    return np.maximum(np.asarray(flat, dtype=np.float64).reshape(latitudes.shape), 0.0)


def grid_weights(
    field: WeightField, v: Variable, data: Any, data_where: str
) -> tuple[np.ndarray, str]:
    """float64 (G,): the weight of each grid point of ``v``, a variable of the
    dataset ``data`` (see module docstring), and its digest."""
    var = field.ds.variables[field.name]
    where = f"{field.path}: --weights {field.method}: variable {field.name}"
    dims = tuple(map(str, var.dims))
    extra = [d for d in dims if d not in v.grid_dims]
    if extra:
        raise InputError(
            f"{where} has dimensions {', '.join(dims)}, but {v.name}'s grid is "
            f"{', '.join(v.grid_dims) or '(none)'}: {', '.join(extra)} not among them"
        )
    sizes = {d: int(s) for d, s in zip(var.dims, var.shape, strict=True)}
    for d in dims:
        if sizes[d] != v.grid_sizes[d]:
            raise InputError(
                f"{where}: dimension {d} has {sizes[d]} points, {v.name}'s has {v.grid_sizes[d]}"
            )
    # another file's field goes where its coordinates say; the data's own are in place
    orders = align_to(var, field.ds, data, where, data_where) if field.ds is not data else ()
    try:
        raw = np.asarray(var.values)
    except Exception as exc:  # storage errors of any backend
        raise InputError(f"{where}: cannot read: {first_line(exc)}") from None
    values = np.empty(raw.shape, dtype=np.float64)
    decode_into(raw, decoding(var, where), values, where)
    for axis, index in enumerate(orders):
        if index is not None:
            values = np.take(values, index, axis=axis)
    latitudes = values
    if field.method == COSLAT:
        values = _cosines(values, var, where)
    elif not (np.isfinite(values).all() and (values >= 0).all()):
        raise InputError(
            f"{where}: weights must be finite and not negative (NaN, inf or < 0 found)"
        )
    # to the variable's grid order, broadcast over the dimensions the field lacks
    order = [d for d in v.grid_dims if d in dims]
    values = values.transpose([dims.index(d) for d in order])
    shape = [v.grid_sizes[d] if d in dims else 1 for d in v.grid_dims]
    full = np.broadcast_to(values.reshape(shape), [v.grid_sizes[d] for d in v.grid_dims])
    weights = np.ascontiguousarray(full, dtype=np.float64).reshape(-1)
    if not (weights > 0).any():
        raise InputError(f"{where}: every weight is 0; nothing would be counted")
    labels = {
        f"coordinate {name}": coordinate_values(c, f"{data_where}: coordinate {name}")
        for name, c in coordinates_along(data, v.grid_dims).items()
    }
    if field.method == COSLAT:
        labels[f"latitude {field.name}"] = latitudes
    return weights, weights_digest(weights, labels)


def weigh(variables: list[Any], field: WeightField, data: Any, where: str) -> dict[str, Any]:
    """Set each variable's grid-point weights (computed once per grid: variables on
    the same grid share one array); the weights' part of the run identity."""
    per_grid: dict[tuple, tuple[np.ndarray, str]] = {}
    digests = {}
    for v in variables:
        grid = (v.grid_dims, tuple(v.grid_sizes[d] for d in v.grid_dims))
        if grid not in per_grid:
            per_grid[grid] = grid_weights(field, v, data, where)
        v.weights, digests[v.name] = per_grid[grid]
    return {"method": field.method, "digests": digests}


def weights_digest(weights: np.ndarray, labels: dict[str, np.ndarray]) -> str:
    """The identity of a variable's weights (a state grows only with the same ones):
    the weights in grid order and, by name, the values that place them (the
    data's coordinates along the grid, the latitudes of coslat), so that the same
    weights on a flipped or shifted grid are other weights."""
    digest = hashlib.sha256(np.ascontiguousarray(weights, dtype="<f8").tobytes())
    for name in sorted(labels):
        values = np.asarray(labels[name])
        digest.update(f"\0{name}\0{values.shape}\0".encode())
        if values.dtype.kind in "iuf":
            digest.update(np.ascontiguousarray(values, dtype="<f8").tobytes())
        else:
            digest.update(repr(values.tolist()).encode())
    return digest.hexdigest()
