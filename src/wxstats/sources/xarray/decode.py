"""Decoding stored values: packing (``scale_factor``/``add_offset``), fill values.

Values are decoded here, not by xarray, and always into float64 when packed:
``raw * scale_factor + add_offset`` with both attributes widened to float64
(exactly); raw values equal to ``_FillValue`` or ``missing_value`` become NaN.
xarray would decode int16 with float32 attributes into float32, rounding every
value; unpacked float32 stays float32 (the kernel widens it exactly). Each file
of a glob is decoded with its own attributes.

``_Unsigned="true"`` reads signed integers as unsigned (``"false"`` unsigned as
signed); a fill value given in the stored type (GOES-R: int16 with
``_FillValue=-1``, as netCDF requires) is read through the same view, so it
still marks its values missing: ``_FillValue`` and ``missing_value`` alike
(xarray converts only ``_FillValue``). ``valid_min``/``valid_max``/``valid_range``
are not applied, as xarray does not: values outside are data.

A netCDF variable without ``_FillValue`` holds netCDF's default fill value
(``9.96921e36`` for floats, ``-32767`` for int16...) where it was never written
(a file still being written). Such values are refused, naming the file, the
variable and the value, whether they fill whole chunks, share a chunk with
written steps or lie in a contiguous variable: counted as data they would be
silently wrong numbers (xarray keeps them as data), and read as missing they
would hide an unfinished file. One-byte types are left out, as netCDF4-python
leaves them out: their default fill is an ordinary value.

64-bit integers beyond 2**53 have no exact float64: such a value is refused
(naming it), never rounded into silently wrong statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from wxstats.core.errors import InputError


@dataclass(frozen=True)
class Decoding:
    """How one variable of one file is decoded (see module docstring)."""

    scale: float | None
    offset: float | None
    fills: tuple[Any, ...]  # in the ``view`` dtype
    view: np.dtype | None  # ``_Unsigned``: the integers are read as this dtype
    out_dtype: np.dtype
    unwritten: Any = None  # netCDF's default fill, if it marks values never written

    @property
    def plain(self) -> bool:
        """Whether the stored values are the decoded ones (no copy needed)."""
        return (self.scale, self.offset, self.fills, self.view) == (None, None, (), None)


def _scalar(value: Any, name: str, where: str) -> float | None:
    if value is None:
        return None
    try:
        return float(np.asarray(value, dtype=np.float64).ravel()[0])
    except (TypeError, ValueError, IndexError, OverflowError):  # someone else's attribute
        raise InputError(f"{where}: attribute {name} = {value!r:.60} is not a number") from None


def _view(raw: np.dtype, attrs: Any) -> np.dtype | None:
    """The integer dtype ``_Unsigned`` says the stored integers are, if not their own."""
    unsigned = str(attrs.get("_Unsigned", "")).lower()
    if raw.kind == "i" and unsigned == "true":
        return np.dtype(f"u{raw.itemsize}")
    if raw.kind == "u" and unsigned == "false":
        return np.dtype(f"i{raw.itemsize}")
    return None


def _in_view(value: int, raw: np.dtype, view: np.dtype) -> int | None:
    """An integer fill value as the ``view`` reads it: as given, or given in the
    stored type (netCDF's rule for ``_Unsigned`` data); ``None``: in neither."""
    for dtype in (view, raw):
        info = np.iinfo(dtype)
        if info.min <= value <= info.max:
            return int(np.array(value, dtype=dtype).view(view.newbyteorder("=")))
    return None


def _add_fill(fills: list, fill: Any, raw: np.dtype, raw_view: np.dtype) -> None:
    """``fill`` (an attribute's value) as a stored value of ``raw_view``, when it can be one."""
    f = np.asarray(fill).ravel()
    if f.size == 0 or (f.dtype.kind == "f" and np.isnan(f[0])):
        return  # NaN is already missing (and cannot mark an integer)
    value = f[0]
    if raw_view.kind in "iu":
        if float(value) != round(float(value)):
            return
        in_view = _in_view(int(value), raw.newbyteorder("="), raw_view)
        if in_view is not None:
            fills.append(raw_view.type(in_view))
    else:
        fills.append(raw_view.type(value))


def decoding(var: Any, where: str, netcdf: bool = False) -> Decoding:
    """How ``var`` (opened undecoded) is decoded; ``netcdf``: it is a netCDF
    variable, whose values equal to the default fill may be unwritten."""
    raw = np.dtype(var.dtype)
    if raw.kind not in "iuf":
        raise InputError(f"{where}: dtype {raw} is not numeric; leave it out of --variables")
    attrs = var.attrs
    scale = _scalar(attrs.get("scale_factor"), "scale_factor", where)
    offset = _scalar(attrs.get("add_offset"), "add_offset", where)
    view = _view(raw, attrs)
    raw_view = (view or raw).newbyteorder("=")
    fills = []
    candidates = [attrs.get("_FillValue")] + list(np.atleast_1d(attrs.get("missing_value", [])))
    for fill in candidates:
        if fill is None:
            continue
        try:
            _add_fill(fills, fill, raw, raw_view)
        except (TypeError, ValueError, IndexError, OverflowError):  # someone else's attribute
            raise InputError(
                f"{where}: _FillValue or missing_value {fill!r:.60} is not a number"
            ) from None
    packed = scale is not None or offset is not None or raw.kind in "iu"
    if packed:
        out = np.dtype(np.float64)
    else:
        out = np.dtype(np.float32) if raw.itemsize <= 4 else np.dtype(np.float64)
    dec = Decoding(scale, offset, tuple(fills), view, out)
    default = NETCDF_DEFAULT_FILLS.get(f"{raw.kind}{raw.itemsize}")
    if netcdf and "_FillValue" not in attrs and default is not None:
        default = raw.newbyteorder("=").type(default)
        if not is_missing(default, raw, dec):
            dec = replace(dec, unwritten=default)
    return dec


NETCDF_DEFAULT_FILLS = {
    "i2": -32767,
    "u2": 65535,
    "i4": -2147483647,
    "u4": 4294967295,
    "i8": -9223372036854775806,
    "u8": 18446744073709551614,
    "f4": 9.969209968386869e36,
    "f8": 9.969209968386869e36,
}
"""netCDF-C's ``NC_FILL_*``: what a never-written value of a variable without
``_FillValue`` reads as (netCDF4.default_fillvals)."""


EXACT_INTEGERS = 2**53
"""Every integer of at most this magnitude is a float64; not all beyond."""


def decode_into(raw: np.ndarray, dec: Decoding, out: np.ndarray, where: str) -> None:
    """Decoded values of ``raw`` into ``out`` (same shape), as in the module doc;
    ``where`` (file and variable) names the data in errors."""
    refuse_unwritten(raw, dec, where)
    if dec.view is not None:
        raw = raw.view(dec.view.newbyteorder(raw.dtype.byteorder))
    mask = _mask(raw, dec)
    if raw.dtype.kind in "iu" and raw.dtype.itemsize == 8:
        _refuse_inexact(raw, mask, where)
    out[...] = raw
    if dec.scale is not None:
        out *= dec.scale
    if dec.offset is not None:
        out += dec.offset
    if mask is not None and mask.any():
        out[mask] = np.nan


def _mask(raw: np.ndarray, dec: Decoding) -> np.ndarray | None:
    """Where ``raw`` (in the view dtype) holds a fill value (``None``: nowhere)."""
    mask = None
    for fill in dec.fills:
        hit = raw == fill
        mask = hit if mask is None else mask | hit
    return mask


def is_missing(value: Any, stored: np.dtype, dec: Decoding) -> bool:
    """Whether the stored ``value`` (of dtype ``stored``) decodes to missing."""
    raw = np.asarray([value], dtype=stored)
    if raw.dtype.kind == "f" and np.isnan(raw[0]):
        return True
    if dec.view is not None:
        raw = raw.view(dec.view.newbyteorder(raw.dtype.byteorder))
    mask = _mask(raw, dec)
    return bool(mask is not None and mask[0])


def refuse_unwritten(raw: np.ndarray, dec: Decoding, where: str) -> None:
    """Refuse values equal to netCDF's default fill in a variable without
    ``_FillValue`` (see module docstring)."""
    if dec.unwritten is None:
        return
    hit = raw == dec.unwritten
    if hit.any():
        raise InputError(
            f"{where}: values equal netCDF's default fill value "
            f"{dec.unwritten} ({raw.dtype}) and the variable has no _FillValue: they look never "
            "written (a file still being written?). Finish the file, or give the variable "
            "a _FillValue attribute to count them as missing (--skipna)"
        )


def _refuse_inexact(raw: np.ndarray, mask: np.ndarray | None, where: str) -> None:
    big = raw > EXACT_INTEGERS
    if raw.dtype.kind == "i":
        big |= raw < -EXACT_INTEGERS
    if mask is not None:
        big &= ~mask
    if big.any():
        value = raw[big].flat[0]
        raise InputError(
            f"{where}: the {raw.dtype} value {value} is beyond 2**53, where float64 cannot "
            "hold every integer: its statistics would be silently rounded. Subtract a "
            "reference value (or store it as float64) first"
        )
