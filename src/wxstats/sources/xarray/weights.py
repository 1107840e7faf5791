"""Grid-point weights (``--weights``): cos(latitude), or a cell-area field.

On a regular latitude-longitude grid the points near the poles stand for much
smaller areas than those at the equator; an unweighted mean over-counts them.
``coslat`` weights each point by the cosine of its latitude (makani's default
quadrature, GraphCast's area weighting), ``VAR`` by a field of the dataset
(a cell area), and ``FILE:VAR`` by a field of another netCDF/zarr file.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.errors import InputError
from wxstats.sources.xarray.decode import decode_into, decoding
from wxstats.sources.xarray.layout import Variable
from wxstats.sources.xarray.open import first_line, open_one

COSLAT = "coslat"
LATITUDE_NAMES = ("lat", "latitude", "nav_lat", "XLAT")
LATITUDE_UNITS = ("degrees_north", "degree_north", "degree_N", "degrees_N", "degreeN", "degreesN")


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


def weight_field(spec: str, ds: Any, path: str, storage_options: dict[str, Any]) -> WeightField:
    """The field ``--weights spec`` names (checked for existence here, for
    values and shape per variable in :func:`grid_weights`)."""
    if spec == COSLAT:
        return WeightField(COSLAT, _latitude(ds, path), path, ds)
    file, colon, name = spec.rpartition(":")
    if colon and file and Path(file).exists():
        try:
            other = open_one(file, storage_options)
        except Exception as exc:  # any backend's error
            raise InputError(f"{file}: --weights {spec}: cannot open: {first_line(exc)}") from None
        where, ds = file, other
    else:
        where, name = path, spec
    if name not in ds.variables:
        raise InputError(
            f"{where}: --weights {spec}: no variable {name!r} (give coslat, a variable of the "
            "dataset such as a cell area, or FILE:VARIABLE)"
        )
    return WeightField(spec, name, where, ds)


def _cos_degrees(values: np.ndarray) -> np.ndarray:
    flat = [math.cos(math.radians(float(x))) for x in values.ravel()]
    return np.asarray(flat, dtype=np.float64).reshape(values.shape)


def grid_weights(field: WeightField, v: Variable) -> np.ndarray:
    """float64 (G,): the weight of each grid point of ``v`` (see module docstring)."""
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
    try:
        raw = np.asarray(var.values)
    except Exception as exc:  # storage errors of any backend
        raise InputError(f"{where}: cannot read: {first_line(exc)}") from None
    values = np.empty(raw.shape, dtype=np.float64)
    decode_into(raw, decoding(var, where), values, where)
    if field.method == COSLAT:
        if not (np.isfinite(values).all() and (np.abs(values) <= 90).all()):
            raise InputError(f"{where}: latitudes must be finite and within -90..90 degrees")
        values = np.maximum(_cos_degrees(values), 0.0)  # cos(±90°) is 6e-17, never below 0
    elif not (np.isfinite(values).all() and (values >= 0).all()):
        raise InputError(f"{where}: weights must be finite and not negative (NaN or < 0 found)")
    # to the variable's grid order, broadcast over the dimensions the field lacks
    order = [d for d in v.grid_dims if d in dims]
    values = values.transpose([dims.index(d) for d in order])
    shape = [v.grid_sizes[d] if d in dims else 1 for d in v.grid_dims]
    full = np.broadcast_to(values.reshape(shape), [v.grid_sizes[d] for d in v.grid_dims])
    weights = np.ascontiguousarray(full, dtype=np.float64).reshape(-1)
    if not (weights > 0).any():
        raise InputError(f"{where}: every weight is 0; nothing would be counted")
    return weights


def weights_digest(weights: np.ndarray) -> str:
    """The identity of a variable's weights (a state grows only with the same ones)."""
    return hashlib.sha256(np.ascontiguousarray(weights, dtype="<f8").tobytes()).hexdigest()
