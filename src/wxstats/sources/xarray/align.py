"""Placing a field of one dataset on the grid of another by coordinate values.

Labels, not positions: a cell-area file with its latitudes descending, or on
other latitudes of the same shape, must not be laid on the data point by point.
Along each dimension the two share, the field is put in the data's order by a
1-D coordinate both have (the dimension's own coordinate first, else one of
the same name along it, such as ``lat(y)``): the same values in another order
are reordered, other values are refused. Every other coordinate both have
along the shared dimensions (``lat(y, x)`` of a curvilinear grid, a second
1-D one) must then be equal, value for value. A dimension neither side labels
is taken by position (there is nothing else to go by); one that only one side
labels is refused, since the positions could not be checked.

Coordinates are compared decoded, in float64, or in float32 where either side
stores float32 (a float32 copy of float64 latitudes is the same grid).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from wxstats.core.errors import InputError
from wxstats.sources.xarray.decode import decode_into, decoding


def coordinates_along(ds: Any, dims: tuple[str, ...]) -> dict[str, Any]:
    """The coordinates of ``ds`` whose dimensions are all among ``dims``."""
    return {
        str(name): var
        for name, var in ds.coords.items()
        if var.dims and all(str(d) in dims for d in var.dims)
    }


def coordinate_values(var: Any, where: str) -> np.ndarray:
    """Decoded values of a coordinate (float64 for numbers; as stored otherwise)."""
    raw = np.asarray(var.values)
    if raw.dtype.kind not in "iuf":
        return raw
    out = np.empty(raw.shape, dtype=np.float64)
    decode_into(raw, decoding(var, where), out, where)
    return out


def _comparable(a: Any, b: Any, va: np.ndarray, vb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    narrow = any(v.dtype.kind == "f" and v.dtype.itemsize < 8 for v in (a, b))
    if narrow and va.dtype.kind == vb.dtype.kind == "f":
        return va.astype(np.float32), vb.astype(np.float32)
    return va, vb


def _order(name: str, data: np.ndarray, field: np.ndarray, where: str) -> np.ndarray | None:
    """Indices putting ``field``'s points in ``data``'s order (None: already are)."""
    if data.shape == field.shape and np.array_equal(data, field):
        return None
    position = {}
    for i, value in enumerate(field.tolist()):
        position.setdefault(value, i)
    missing = [i for i, value in enumerate(data.tolist()) if value not in position]
    if missing:
        i = missing[0]
        raise InputError(
            f"{where}: coordinate {name} is not the data's: the data's {name}[{i}] = "
            f"{data[i].item()!r} is not among its {field.size} values "
            f"({field.flat[0].item()!r} .. {field.flat[-1].item()!r})"
        )
    if len(position) != field.size or len(set(data.tolist())) != data.size:
        raise InputError(
            f"{where}: coordinate {name} repeats values and is not in the data's order: "
            "its points cannot be placed"
        )
    return np.array([position[value] for value in data.tolist()], dtype=np.intp)


def align_to(
    var: Any, ds: Any, data: Any, where: str, data_where: str
) -> tuple[np.ndarray | None, ...]:
    """For each dimension of ``var`` (a field of ``ds``), the indices putting it in
    the order of the dataset ``data`` (None: as it is); see the module docstring.
    ``where`` names the field, ``data_where`` the data, in refusals."""
    dims = tuple(map(str, var.dims))
    mine, theirs = coordinates_along(ds, dims), coordinates_along(data, dims)
    values: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name in sorted(set(mine) & set(theirs)):
        if tuple(map(str, mine[name].dims)) != tuple(map(str, theirs[name].dims)):
            raise InputError(
                f"{where}: coordinate {name} is along {', '.join(map(str, mine[name].dims))}, "
                f"the data's along {', '.join(map(str, theirs[name].dims))}"
            )
        va = coordinate_values(mine[name], f"{where}: coordinate {name}")
        vb = coordinate_values(theirs[name], f"{data_where}: coordinate {name}")
        values[name] = _comparable(mine[name], theirs[name], va, vb)
    orders: list[np.ndarray | None] = []
    for d in dims:
        ours = sorted(n for n, c in mine.items() if tuple(map(str, c.dims)) == (d,))
        others = sorted(n for n, c in theirs.items() if tuple(map(str, c.dims)) == (d,))
        common = sorted(set(ours) & set(others), key=lambda n: (n != d, n))
        if common:
            field_values, data_values = values[common[0]]
            orders.append(_order(common[0], data_values, field_values, where))
        elif ours or others:
            raise InputError(
                f"{where}: no coordinate along {d} in common with the data "
                f"({', '.join(ours) or 'none'} here, {', '.join(others) or 'none'} in "
                f"{data_where}): its points cannot be placed by value; give it the data's "
                f"coordinate {d}"
            )
        else:
            orders.append(None)  # neither side labels d: by position
    for name, (field_values, data_values) in values.items():
        placed = field_values
        for axis, d in enumerate(map(str, mine[name].dims)):
            index = orders[dims.index(d)]
            if index is not None:
                placed = np.take(placed, index, axis=axis)
        if np.array_equal(placed, data_values):
            continue
        differ = np.asarray(placed != data_values)
        if differ.shape != placed.shape or not differ.any():
            raise InputError(f"{where}: coordinate {name} is not the data's ({data_where})")
        i = tuple(int(k) for k in np.argwhere(differ)[0])
        raise InputError(
            f"{where}: coordinate {name} is not the data's: {name}{list(i)} is "
            f"{placed[i].item()!r} here, {data_values[i].item()!r} in {data_where}"
        )
    return tuple(orders)
