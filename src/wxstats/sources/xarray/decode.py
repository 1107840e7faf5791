"""Decoding stored values: packing (``scale_factor``/``add_offset``), fill values.

Values are decoded here, not by xarray, and always into float64 when packed:
``raw * scale_factor + add_offset`` with both attributes widened to float64
(exactly); raw values equal to ``_FillValue`` or ``missing_value`` become NaN.
xarray would decode int16 with float32 attributes into float32, rounding every
value; unpacked float32 stays float32 (the kernel widens it exactly). Each file
of a glob is decoded with its own attributes.

64-bit integers beyond 2**53 have no exact float64: such a value is refused
(naming it), never rounded into silently wrong statistics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from wxstats.core.errors import InputError


@dataclass(frozen=True)
class Decoding:
    """How one variable of one file is decoded (see module docstring)."""

    scale: float | None
    offset: float | None
    fills: tuple[Any, ...]
    unsigned: bool
    out_dtype: np.dtype


def _scalar(value: Any) -> float | None:
    if value is None:
        return None
    return float(np.asarray(value, dtype=np.float64).ravel()[0])


def decoding(var: Any, where: str) -> Decoding:
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
    return Decoding(scale, offset, tuple(fills), unsigned, out)


EXACT_INTEGERS = 2**53
"""Every integer of at most this magnitude is a float64; not all beyond."""


def decode_into(raw: np.ndarray, dec: Decoding, out: np.ndarray, where: str) -> None:
    """Decoded values of ``raw`` into ``out`` (same shape), as in the module doc;
    ``where`` (file and variable) names the data in errors."""
    if dec.unsigned:
        raw = raw.view(f"u{raw.dtype.itemsize}")
    mask = None
    for fill in dec.fills:
        hit = raw == fill
        mask = hit if mask is None else mask | hit
    if raw.dtype.kind in "iu" and raw.dtype.itemsize == 8:
        _refuse_inexact(raw, mask, where)
    out[...] = raw
    if dec.scale is not None:
        out *= dec.scale
    if dec.offset is not None:
        out += dec.offset
    if mask is not None and mask.any():
        out[mask] = np.nan


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
