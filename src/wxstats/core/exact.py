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


def _ratio(value: float) -> tuple[int, int]:
    """``(m, e)`` with ``value == m * 2**-e`` exactly (``e >= 0``)."""
    m, d = value.as_integer_ratio()
    return m, d.bit_length() - 1


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
    in any order: that is what lets any two pieces of the same data merge."""
    count, sum1, sum2 = (np.asarray(a) for a in (count, sum1, sum2))
    n_units, n_features = np.shape(sum1)
    total_x = [0] * n_features
    total_xx = [0] * n_features
    counts = count.tolist()
    s1, s2 = sum1.tolist(), sum2.tolist()
    shifts, scales = np.asarray(shift, np.float64).tolist(), np.asarray(scale, np.float64).tolist()
    fb = FRACTION_BITS
    for u in range(n_units):
        cu, s1u, s2u, ku, su = counts[u], s1[u], s2[u], shifts[u], scales[u]
        for f in range(n_features):
            n = cu[f]
            if not n:
                continue
            mk, ek = _ratio(ku[f])
            my, ey = _ratio(s1u[f])
            mq, eq = _ratio(s2u[f])
            s = math.frexp(su[f])[1] - 1  # S = 2**s
            if isinstance(n, float):  # a weighted unit: n is the sum of its weights
                mn, en = _ratio(n)
            else:
                mn, en = int(n), 0
            total_x[f] += (mn * mk << (fb - en - ek)) + _shifted(my, fb - ey + s)
            total_xx[f] += (
                (mn * mk * mk << (fb - en - 2 * ek))
                + _shifted(mk * my, fb - ek - ey + s + 1)
                + _shifted(mq, fb - eq + 2 * s)
            )
    out_x = np.empty(n_features, dtype=object)
    out_xx = np.empty(n_features, dtype=object)
    out_x[:] = total_x
    out_xx[:] = total_xx
    return out_x, out_xx


def _shifted(m: int, bits: int) -> int:
    """``m * 2**bits`` for ``bits >= 0`` (always so for a reference kept in the
    normal range, see :mod:`wxstats.core.unit_reference`)."""
    if bits < 0:
        raise OverflowError("a unit's sums fall below the exact fixed point")
    return m << bits


def fixed_to_fraction(value: int) -> Fraction:
    """The exact rational value of a fixed-point integer."""
    return Fraction(value, 1 << FRACTION_BITS)


def exact_sum(values: np.ndarray) -> np.ndarray:
    """Element-wise fixed-point integers of a float64 array (object dtype)."""
    flat = np.asarray(values, dtype=np.float64).ravel()
    out = np.empty(flat.shape, dtype=object)
    for i, v in enumerate(flat.tolist()):
        out[i] = float_to_fixed(v)
    return out.reshape(np.shape(values))


def to_limbs(values: np.ndarray) -> np.ndarray:
    """Signed 32-bit limbs (int64) of an object array of exact integers.

    Shape ``values.shape + (NUM_LIMBS,)``. Each limb carries the sign of its
    integer so that limb-wise sums of several encodings decode to the sum.
    """
    flat = np.asarray(values, dtype=object).ravel()
    out = np.zeros((flat.size, NUM_LIMBS), dtype=np.int64)
    for i, v in enumerate(flat.tolist()):
        sign = -1 if v < 0 else 1
        magnitude = -v if v < 0 else v
        if magnitude.bit_length() > LIMB_BITS * NUM_LIMBS - 1:
            raise OverflowError("exact sum exceeds the limb capacity")
        j = 0
        while magnitude:
            out[i, j] = sign * (magnitude & _LIMB_MASK)
            magnitude >>= LIMB_BITS
            j += 1
    return out.reshape(np.shape(values) + (NUM_LIMBS,))


def from_limbs(limbs: np.ndarray) -> np.ndarray:
    """Inverse of :func:`to_limbs` (also for limb-wise sums of encodings)."""
    limbs = np.asarray(limbs, dtype=np.int64)
    flat = limbs.reshape(-1, NUM_LIMBS)
    out = np.empty(flat.shape[0], dtype=object)
    for i, row in enumerate(flat.tolist()):
        total = 0
        for j in range(NUM_LIMBS - 1, -1, -1):
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
