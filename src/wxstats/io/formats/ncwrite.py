"""Writing a netCDF file with netCDF4 directly, laid out as xarray would write it.

Why not ``xarray.Dataset.to_netcdf``: building a Dataset imports dask (about a
second, more than a whole small run). The file is the same for any reader:
float variables get ``_FillValue = NaN``, strings are variable-length, and
coordinates that are not dimensions are named in each variable's
``coordinates`` attribute (or the global one), so ``xarray.open_dataset``
opens it exactly as the file xarray writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

Variables = dict[str, tuple[tuple[str, ...], Any, dict[str, Any]]]
"""``name -> (dims, values, attrs)``, as ``xarray.Dataset`` takes them."""


def _values(values: Any) -> np.ndarray:
    array = np.asarray(values)
    if array.dtype.kind in "OUS":
        return np.asarray([str(x) for x in array.ravel()], dtype=object).reshape(array.shape)
    native = np.dtype(f"{array.dtype.kind}{array.dtype.itemsize}")  # netCDF4 wants "="
    return array.astype(native, copy=False).view(native)


def _set_attrs(target: Any, where: str, attrs: dict[str, Any]) -> None:
    """Attributes, one refused by netCDF named with what it refused."""
    for key, value in attrs.items():
        try:
            target.setncattr(key, value)
        except (AttributeError, TypeError, ValueError, RuntimeError) as exc:
            refused = f"{where} attribute {key} = {value!r}: netCDF refuses it ({exc})"
            raise ValueError(refused) from None


def _create(nc: Any, name: str, dims: tuple[str, ...], values: Any, attrs: dict) -> None:
    """One variable; a ``_FillValue`` among ``attrs`` (a coordinate copied from a
    file xarray wrote) goes where netCDF takes it, to ``createVariable``."""
    array = _values(values)
    attrs = dict(attrs)
    fill = attrs.pop("_FillValue", None)
    if array.dtype == object:
        var = nc.createVariable(name, str, dims)  # a string's fill is netCDF's own
    elif fill is not None:
        var = nc.createVariable(name, array.dtype, dims, fill_value=array.dtype.type(fill))
    elif array.dtype.kind == "f":
        var = nc.createVariable(name, array.dtype, dims, fill_value=array.dtype.type(np.nan))
    else:
        var = nc.createVariable(name, array.dtype, dims, fill_value=False)
    _set_attrs(var, f"variable {name}", attrs)
    if array.ndim == 0:
        var.assignValue(array)
    elif array.size:
        var[...] = array


def write_netcdf(path: Path, data_vars: Variables, coords: dict, attrs: dict[str, Any]) -> None:
    """``data_vars`` and ``coords`` (``name -> (dims, values)`` or ``(dims, values,
    attrs)``) with global ``attrs`` into a netCDF4 file at ``path``."""
    import netCDF4

    coord_vars: Variables = {}
    for name, spec in coords.items():
        dims, values = spec[0], spec[1]
        dims = (dims,) if isinstance(dims, str) else tuple(dims)
        coord_vars[name] = (dims, values, dict(spec[2]) if len(spec) > 2 else {})
    sizes: dict[str, int] = {}
    for dims, values, _ in (*coord_vars.values(), *data_vars.values()):
        for dim, n in zip(dims, np.shape(values), strict=True):
            if sizes.setdefault(dim, n) != n:
                raise ValueError(f"dimension {dim} has sizes {sizes[dim]} and {n}")
    extra = [n for n, (dims, _, _) in coord_vars.items() if dims != (n,)]
    used: set[str] = set()
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        for dim, n in sizes.items():
            nc.createDimension(dim, n)
        for name, (dims, values, vattrs) in coord_vars.items():
            _create(nc, name, dims, values, vattrs)
        for name, (dims, values, vattrs) in data_vars.items():
            names = sorted(c for c in extra if set(coord_vars[c][0]) <= set(dims))
            used.update(names)
            more = {"coordinates": " ".join(names)} if names else {}
            _create(nc, name, tuple(dims), values, {**vattrs, **more})
        unused = [c for c in extra if c not in used]
        all_attrs = {**attrs, **({"coordinates": " ".join(sorted(unused))} if unused else {})}
        _set_attrs(nc, "global", all_attrs)
