"""Statistics as the files store them: float64 results rounded to each target's dtype.

A value is checked as it will be stored, not as computed: a mean of 101305 Pa
is ``inf`` in float16, a std of 1e-50 is 0 in float32 (and 1e-45 a subnormal,
whose reciprocal overflows). Trainers divide by the std, so a std that rounds
to 0 or a subnormal is refused like a true 0, or floored by ``--min-std``; a
value that overflows the dtype is refused. Only floating-point targets can
hold statistics (an integer one truncates every value), checked before any
data is read (:func:`check_float_dtype`, :func:`check_min_std`).
"""

from __future__ import annotations

import numpy as np

from wxstats.core.errors import WxstatsError

PT_DTYPE = np.dtype(np.float32)
"""neural-lam's ``.pt`` tensors."""


def check_float_dtype(dtype: np.dtype, where: str) -> None:
    """Refuse a target dtype that cannot hold statistics (integers truncate them)."""
    if np.dtype(dtype).kind != "f":
        raise WxstatsError(
            f"{where} is {np.dtype(dtype)}: statistics written into it would be truncated or "
            "wrapped; remove that variable from the store (wxstats then adds it as a float) "
            "or leave out --write-into"
        )


def _normal(value: float, dtype: np.dtype) -> bool:
    """``value`` rounded to ``dtype`` is a normal number (not 0, subnormal or inf)."""
    with np.errstate(over="ignore", under="ignore"):
        stored = abs(float(np.asarray(value, dtype=np.float64).astype(dtype)))
    return bool(np.finfo(dtype).tiny <= stored < np.inf)


def check_min_std(min_std: float | None, dtype: np.dtype, where: str) -> None:
    """Refuse, before any data is read, a ``--min-std`` that the target stores as
    0, a subnormal or inf: the floor would itself be a divisor that breaks."""
    dtype = np.dtype(dtype)
    if min_std is not None and not _normal(min_std, dtype):
        info = np.finfo(dtype)
        raise WxstatsError(
            f"--min-std {min_std:g} is {'inf' if min_std > 1 else '0 or subnormal'} in "
            f"{dtype}, the dtype of {where}; give a value between "
            f"{float(info.tiny):.3g} and {float(info.max):.3g}"
        )


def divisor_std(
    std: np.ndarray,
    names: list[str],
    min_std: float | None,
    where: str,
    dtype: np.dtype = PT_DTYPE,
) -> np.ndarray:
    """A std that a trainer divides by: ``max(std, min_std)``; without a floor a
    std that is 0 as stored in ``dtype`` (or a subnormal) is refused, naming the
    variables, since neural-lam would standardize by it into infinities and NaN
    without a word. ``max`` commutes with rounding, so a floor that is a normal
    number in ``dtype`` (:func:`check_min_std`) leaves no such std."""
    std = np.asarray(std, dtype=np.float64)
    if min_std is not None:
        check_min_std(min_std, dtype, where)
        return np.where(std < min_std, min_std, std)
    dtype = np.dtype(dtype)
    zero = [name for name, value in zip(names, std, strict=True) if value == 0]
    tiny = [
        f"{name} ({value:.3g})"
        for name, value in zip(names, std, strict=True)
        if value != 0 and not _normal(value, dtype) and not value > np.finfo(dtype).max
    ]
    what = [f"the std of {', '.join(zero)} is 0 (constant over the split)"] if zero else []
    if tiny:
        what.append(f"the std of {', '.join(tiny)} is 0 or subnormal as stored in {dtype}")
    if what:
        raise WxstatsError(
            f"{where}: {'; '.join(what)}, and neural-lam divides by it. Pass --min-std VALUE "
            "to write max(std, VALUE) (the statistics file keeps the true value), or leave "
            "the variable out"
        )
    return std


def check_stored(values: np.ndarray, dtype: np.dtype, names: list[str], where: str) -> None:
    """Refuse finite values that overflow ``dtype`` (float16 holds at most 65504)."""
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore"):
        lost = np.isfinite(values) & ~np.isfinite(values.astype(dtype))
    if lost.any():
        shown = ", ".join(
            f"{n} ({v:.6g})" for n, v, bad in zip(names, values, lost, strict=True) if bad
        )
        raise WxstatsError(
            f"{where}: {shown} overflows {np.dtype(dtype)} (at most "
            f"{float(np.finfo(dtype).max):.6g}); remove that variable from the store (wxstats "
            "then adds it as a float wide enough) or write a statistics file (--output)"
        )
