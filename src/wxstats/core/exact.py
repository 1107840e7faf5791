"""Exact, order-independent summation of float64 values.

Every finite float64 is an integer multiple of 2**-1074, so a sum of floats is
held exactly as a Python integer in that fixed point. Integer addition is
associative, so the total is the same bits whatever order or grouping the
partial sums arrive in: that is what makes the statistics independent of the
number of ranks, the batch size and resumption.

For collectives and checkpoints an exact integer travels as a fixed number of
signed 32-bit "limbs" stored in int64, so that limb-wise integer addition (an
``all_reduce`` with SUM) is still exact for up to 2**31 contributors.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

FRACTION_BITS = 1074
"""Fixed point: an exact sum ``n`` stands for ``n * 2**-FRACTION_BITS``."""

LIMB_BITS = 32
NUM_LIMBS = 72
"""72 limbs of 32 bits cover 2**2304: the float64 range (2**2098 in fixed
point) times 2**200 contributions of the largest float."""

_LIMB_MASK = (1 << LIMB_BITS) - 1


def float_to_fixed(value: float) -> int:
    """The exact fixed-point integer of a finite float64."""
    numerator, denominator = float(value).as_integer_ratio()
    return numerator << (FRACTION_BITS - (denominator.bit_length() - 1))


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
