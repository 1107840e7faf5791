from __future__ import annotations

import math
import random
from decimal import Decimal, getcontext
from fractions import Fraction

import numpy as np
import pytest

from wxstats.core.exact import (
    exact_sum,
    fixed_to_fraction,
    float_to_fixed,
    from_limbs,
    sqrt_correctly_rounded,
    to_limbs,
)

SPECIAL = [
    0.0,
    -0.0,
    1.0,
    -1.5,
    5e-324,
    -5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    -1.7976931348623157e308,
    0.1,
    1e160,
    -3e-200,
]


@pytest.mark.parametrize("value", SPECIAL)
def test_fixed_point_is_exact(value):
    assert fixed_to_fraction(float_to_fixed(value)) == Fraction(value)


def test_sum_is_independent_of_order():
    rng = random.Random(1)
    values = [rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300) for _ in range(2000)]
    exact = sum(Fraction(v) for v in values)
    ints = exact_sum(np.array(values))
    forward = sum(ints.tolist())
    shuffled = ints.tolist()
    rng.shuffle(shuffled)
    assert forward == sum(shuffled)
    assert fixed_to_fraction(forward) == exact


def test_limbs_round_trip_and_add():
    values = np.array(
        [float_to_fixed(v) for v in SPECIAL] + [-(1 << 2200), (1 << 2200) - 7], dtype=object
    )
    limbs = to_limbs(values)
    assert limbs.dtype == np.int64 and limbs.shape == (len(values), limbs.shape[1])
    assert list(from_limbs(limbs)) == list(values)
    # limb-wise sums of several encodings decode to the sum of the integers
    other = values[::-1].copy()
    summed = from_limbs(limbs + to_limbs(other))
    assert list(summed) == [a + b for a, b in zip(values, other, strict=True)]


def _decimal_sqrt(value: Fraction) -> float:
    getcontext().prec = 80
    return float((Decimal(value.numerator) / Decimal(value.denominator)).sqrt())


@pytest.mark.parametrize("seed", range(5))
def test_sqrt_is_correctly_rounded(seed):
    rng = random.Random(seed)
    for _ in range(200):
        value = Fraction(rng.randint(1, 10**30), rng.randint(1, 10**30)) * Fraction(
            10
        ) ** rng.randint(-200, 200)
        got = sqrt_correctly_rounded(value)
        assert got == _decimal_sqrt(value)
    assert sqrt_correctly_rounded(Fraction(4)) == 2.0
    assert sqrt_correctly_rounded(Fraction(0)) == 0.0
    assert sqrt_correctly_rounded(Fraction(2)) == math.sqrt(2)
