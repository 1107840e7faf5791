"""Exact, order-independent summation of float64 values and of products of them.

Every finite float64 is an integer multiple of 2**-1074, and a product of three
of them a multiple of 2**-3222, so the raw sums a summation unit contributes
(``n K + S Σy`` and ``n K² + 2 K S Σy + S² Σy²``, from its float64 sums ``Σy``
of ``y = (x - K) / S`` with its own reference ``K``, ``S``) are held exactly as
Python integers in that fixed point. Integer addition is associative, so the
total is the same bits whatever order or grouping the units arrive in: that is
what makes the statistics independent of the number of ranks, the block size,
resumption and of how pieces computed apart are merged.

For collectives and checkpoints an exact integer travels as a fixed number of
signed 32-bit "limbs" stored in int64, so that limb-wise integer addition (an
``all_reduce`` with SUM) is still exact for up to 2**31 contributors.
"""

from __future__ import annotations

import math
from fractions import Fraction
from operator import lshift, mul

import numpy as np

FRACTION_BITS = 3222
"""Fixed point: an exact sum ``n`` stands for ``n * 2**-FRACTION_BITS`` (the
resolution of a product of three float64, ``K² Σw`` of a weighted unit)."""

LIMB_BITS = 32
NUM_LIMBS = 200
"""200 limbs of 32 bits hold 2**6399: a weighted ``Σ w x²`` can reach 2**3072 (the
float64 range cubed), 2**6294 in fixed point, with 2**100 of headroom."""

_LIMB_MASK = (1 << LIMB_BITS) - 1


def float_to_fixed(value: float) -> int:
    """The exact fixed-point integer of a finite float64."""
    numerator, denominator = float(value).as_integer_ratio()
    return numerator << (FRACTION_BITS - (denominator.bit_length() - 1))


def _mantissa_exponent(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Signed integer mantissas ``m`` (int64, ``|m| < 2**53``) and exponents ``e >= -1074``
    with ``value == m * 2**e`` exactly, read from the float64 bits (no rounding)."""
    bits = np.ascontiguousarray(values, dtype=np.float64).view(np.int64)
    biased = (bits >> 52) & 0x7FF
    if (biased == 0x7FF).any():
        raise ValueError("a unit's sums or reference are not finite")
    mantissa = (bits & ((1 << 52) - 1)) | ((biased > 0).astype(np.int64) << 52)
    return np.where(bits < 0, -mantissa, mantissa), np.maximum(biased, 1) - 1075


def unit_raw_sums(
    count: np.ndarray,
    sum1: np.ndarray,
    sum2: np.ndarray,
    shift: np.ndarray,
    scale: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact fixed-point ``Σx`` and ``Σx²`` (object arrays of shape (F,)) of units
    given as (U, F) arrays: each unit's divisor ``n`` (its count, or the float64
    sum of its weights), its float64 sums ``Σy``, ``Σy²`` of ``y = (x - K) / S``
    (weighted: of ``w y``, ``w y²``) and its reference ``K``, ``S = 2**s``:
    ``Σx = n K + S Σy`` and ``Σx² = n K² + 2 K S Σy + S² Σy²``, every product
    exact. A unit's sums depend on nothing outside it, and these integers add
    in any order: that is what lets any two pieces of the same data merge.

    Each float64 is read as ``m * 2**e`` (``|m| < 2**53``, ``e >= -1074``; a
    count as ``n * 2**0``), so each term is a product of mantissas shifted left by
    its exponent plus ``FRACTION_BITS``: ``n K`` by ``3222 + en + ek``, ``S Σy`` by
    ``3222 + ey + s``, ``n K²`` by ``3222 + en + 2 ek``, ``2 K S Σy`` by
    ``3222 + ek + ey + s + 1``, ``S² Σy²`` by ``3222 + eq + 2 s``. Every shift is
    non-negative: ``e >= -1074`` and ``s >= -1020``
    (:func:`wxstats.core.unit_reference.power_of_two`) make the smallest
    ``3222 - 1074 - 1074 - 1020 + 1 = 55`` (``n K²``: ``3222 - 3 * 1074 = 0``).
    The mantissas and shifts are found by numpy for all units at once; each
    feature's terms are then shifted by their excess over that feature's
    smallest shift only (small integers where a feature's magnitudes are
    alike), summed by ``map``/``sum`` without a Python loop per unit, and the
    total shifted once by that smallest shift: the same integers as shifting
    every term in full, at about half the cost (docs/benchmarks.md)."""
    mantissa, exponent = np.frexp(np.asarray(scale, dtype=np.float64))
    if not np.all((mantissa == 0.5) & (exponent - 1 >= -1020) & (exponent - 1 <= 1020)):
        raise ValueError("a unit's scale is not a power of two in [2**-1020, 2**1020]")
    counts = np.asarray(count)
    n_features = counts.shape[1]
    if counts.dtype.kind == "f":  # weighted units: n is the float64 sum of the weights
        mn, en = _mantissa_exponent(counts)
    else:
        mn, en = counts.astype(np.int64), np.zeros(counts.shape, dtype=np.int64)
    used = mn != 0  # a unit with n = 0 adds nothing, whatever its sums hold
    mk, ek = _mantissa_exponent(shift)
    my, ey = _mantissa_exponent(sum1)
    mq, eq = _mantissa_exponent(sum2)
    s = exponent.astype(np.int64) - 1
    fb = FRACTION_BITS
    shifts = np.stack(
        [fb + en + ek, fb + ey + s, fb + en + 2 * ek, fb + ek + ey + s + 1, fb + eq + 2 * s]
    )  # (5, U, F): the terms of Σx (first two) and of Σx² (last three)
    unused = np.iinfo(np.int64).max
    masked = np.where(used, shifts, unused)
    base_x = masked[:2].min(axis=(0, 1), initial=unused)  # (F,)
    base_xx = masked[2:].min(axis=(0, 1), initial=unused)
    excess = shifts - np.concatenate([np.broadcast_to(base_x, (2, 1, n_features)),
                                      np.broadcast_to(base_xx, (3, 1, n_features))])  # fmt: skip
    excess = np.where(used, excess, 0)
    d1, d2, d3, d4, d5 = (e.T.tolist() for e in excess)
    ns, ks = mn.T.tolist(), mk.T.tolist()
    ys, qs = np.where(used, my, 0).T.tolist(), np.where(used, mq, 0).T.tolist()
    any_used = used.any(axis=0).tolist()
    out_x = np.empty(n_features, dtype=object)
    out_xx = np.empty(n_features, dtype=object)
    for f in range(n_features):
        if not any_used[f]:
            out_x[f] = out_xx[f] = 0
            continue
        k = ks[f]
        nk = list(map(mul, ns[f], k))
        x = sum(map(lshift, nk, d1[f])) + sum(map(lshift, ys[f], d2[f]))
        xx = (
            sum(map(lshift, map(mul, nk, k), d3[f]))
            + sum(map(lshift, map(mul, k, ys[f]), d4[f]))
            + sum(map(lshift, qs[f], d5[f]))
        )
        out_x[f] = x << int(base_x[f])
        out_xx[f] = xx << int(base_xx[f])
    return out_x, out_xx


def unit_power_sums(
    power: int,
    count: np.ndarray,
    sums: list[np.ndarray],
    shift: np.ndarray,
    scale: np.ndarray,
    fraction_bits: int,
) -> np.ndarray:
    """Exact fixed-point ``Σx**p`` (object array (F,)) of units (U, F), as
    :func:`unit_raw_sums` does for ``p <= 2``: ``sums[j - 1]`` the float64
    ``Σy**j`` (weighted: ``Σ w y**j``) for ``j = 1 .. p``, and by the binomial
    theorem ``Σx**p = Σ_j C(p, j) K**(p - j) S**j Σy**j`` (``Σy**0``: the divisor),
    every product of float64 an integer in a fixed point of ``1074 (p + 1)`` bits
    (``fraction_bits``; each shift below is then non-negative, as there). For the
    higher moments (``--moments 4``): written for clarity, not speed."""
    mantissa, exponent = np.frexp(np.asarray(scale, dtype=np.float64))
    if not np.all((mantissa == 0.5) & (exponent - 1 >= -1020) & (exponent - 1 <= 1020)):
        raise ValueError("a unit's scale is not a power of two in [2**-1020, 2**1020]")
    if fraction_bits < 1074 * (power + 1):
        raise ValueError(f"{fraction_bits} fraction bits cannot hold a sum of x**{power}")
    counts = np.asarray(count)
    n_features = counts.shape[1]
    binomial = [math.comb(power, j) for j in range(power + 1)]
    totals = [0] * n_features
    columns = [counts.tolist()] + [np.asarray(a, dtype=np.float64).tolist() for a in sums[:power]]
    rows = zip(
        *columns, np.asarray(shift, dtype=np.float64).tolist(), (exponent - 1).tolist(), strict=True
    )
    for *terms, ku, su in rows:
        for f in range(n_features):
            if not terms[0][f]:
                continue
            mk, dk = float(ku[f]).as_integer_ratio()
            ek = dk.bit_length() - 1
            s = su[f]
            for j in range(power + 1):
                term = terms[j][f]
                m, d = (term, 1) if term.__class__ is int else term.as_integer_ratio()
                e = d.bit_length() - 1
                shift_bits = fraction_bits - (power - j) * ek - e + j * s
                totals[f] += binomial[j] * mk ** (power - j) * m << shift_bits
    out = np.empty(n_features, dtype=object)
    out[:] = totals
    return out


def fixed_to_fraction(value: int, fraction_bits: int = FRACTION_BITS) -> Fraction:
    """The exact rational value of a fixed-point integer."""
    return Fraction(value, 1 << fraction_bits)


def exact_sum(values: np.ndarray) -> np.ndarray:
    """Element-wise fixed-point integers of a float64 array (object dtype)."""
    flat = np.asarray(values, dtype=np.float64).ravel()
    out = np.empty(flat.shape, dtype=object)
    for i, v in enumerate(flat.tolist()):
        out[i] = float_to_fixed(v)
    return out.reshape(np.shape(values))


def to_limbs(values: np.ndarray, num_limbs: int = NUM_LIMBS) -> np.ndarray:
    """Signed 32-bit limbs (int64) of an object array of exact integers.

    Shape ``values.shape + (NUM_LIMBS,)``. Each limb carries the sign of its
    integer so that limb-wise sums of several encodings decode to the sum.
    """
    flat = np.asarray(values, dtype=object).ravel()
    out = np.zeros((flat.size, num_limbs), dtype=np.int64)
    for i, v in enumerate(flat.tolist()):
        sign = -1 if v < 0 else 1
        magnitude = -v if v < 0 else v
        if magnitude.bit_length() > LIMB_BITS * num_limbs - 1:
            raise OverflowError("exact sum exceeds the limb capacity")
        j = 0
        while magnitude:
            out[i, j] = sign * (magnitude & _LIMB_MASK)
            magnitude >>= LIMB_BITS
            j += 1
    return out.reshape(np.shape(values) + (num_limbs,))


def from_limbs(limbs: np.ndarray) -> np.ndarray:
    """Inverse of :func:`to_limbs` (also for limb-wise sums of encodings)."""
    limbs = np.asarray(limbs, dtype=np.int64)
    num_limbs = limbs.shape[-1]
    flat = limbs.reshape(-1, num_limbs)
    out = np.empty(flat.shape[0], dtype=object)
    for i, row in enumerate(flat.tolist()):
        total = 0
        for j in range(num_limbs - 1, -1, -1):
            total = (total << LIMB_BITS) + row[j]
        out[i] = total
    return out.reshape(limbs.shape[:-1])


def sqrt_correctly_rounded(value: Fraction) -> float:
    """The float64 nearest to ``sqrt(value)`` for a non-negative rational.

    Integer square root with >= 2 guard bits and a sticky bit, then one
    correctly rounded conversion: no double rounding, so the result depends
    only on the exact rational.
    """
    if value < 0:
        raise ValueError("square root of a negative number")
    if value == 0:
        return 0.0
    p, q = value.numerator, value.denominator
    # choose an even exponent 2e so that p * 2**(2e) / q has about 120 bits
    e = (120 - (p.bit_length() - q.bit_length())) // 2
    if e >= 0:
        num, den = p << (2 * e), q
    else:
        num, den = p, q << (-2 * e)
    n, remainder = divmod(num, den)
    root = math.isqrt(n)
    inexact = remainder != 0 or root * root != n
    # sqrt(value) * 2**e lies in [root, root + 1); root has >= 59 bits
    return float(
        Fraction(2 * root + int(inexact), 1 << (e + 1))
        if e >= -1
        else Fraction((2 * root + int(inexact)) << (-(e + 1)), 1)
    )
