"""unit_raw_sums against two references written here: Fraction arithmetic of the
formula, and the plain-Python loop it replaced (the same integers, bit for bit)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from wxstats.core.exact import FRACTION_BITS, unit_raw_sums


def _fraction_reference(count, sum1, sum2, shift, scale):
    """Σx = Σ n K + S Σy and Σx² = Σ n K² + 2 K S Σy + S² Σy², in rationals, times 2**3222."""
    u, f = np.shape(count)
    xs, xxs = [], []
    for j in range(f):
        x = xx = Fraction(0)
        for i in range(u):
            n = count[i][j]
            if not n:
                continue
            n = Fraction(n.item() if hasattr(n, "item") else n)
            k, y, q, s = (Fraction(float(a[i][j])) for a in (shift, sum1, sum2, scale))
            x += n * k + s * y
            xx += n * k * k + 2 * k * s * y + s * s * q
        for total, out in ((x, xs), (xx, xxs)):
            fixed = total * 2**FRACTION_BITS
            assert fixed.denominator == 1
            out.append(fixed.numerator)
    return xs, xxs


def _old_loop(count, sum1, sum2, shift, scale):
    """The implementation before issue 36, kept as a second reference."""
    mantissa, exponent = np.frexp(np.asarray(scale, dtype=np.float64))
    counts = np.asarray(count)
    fb = FRACTION_BITS
    total_x = [0] * counts.shape[1]
    total_xx = [0] * counts.shape[1]
    columns = [np.asarray(a, dtype=np.float64).tolist() for a in (sum1, sum2, shift)]
    rows = zip(counts.tolist(), *columns, (exponent - 1).tolist(), strict=True)
    for cu, s1u, s2u, ku, su in rows:
        for f in range(counts.shape[1]):
            n = cu[f]
            if not n:
                continue
            mk, dk = ku[f].as_integer_ratio()
            my, dy = s1u[f].as_integer_ratio()
            mq, dq = s2u[f].as_integer_ratio()
            ek, ey, eq = dk.bit_length() - 1, dy.bit_length() - 1, dq.bit_length() - 1
            s = su[f]
            if n.__class__ is float:
                mn, dn = n.as_integer_ratio()
                en = dn.bit_length() - 1
            else:
                mn, en = n, 0
            nk = mn * mk
            total_x[f] += (nk << (fb - en - ek)) + (my << (fb - ey + s))
            total_xx[f] += ((nk * mk << (fb - en - 2 * ek)) + (mk * my << (fb - ek - ey + s + 1))
                            + (mq << (fb - eq + 2 * s)))  # fmt: skip
    return total_x, total_xx


EXTREMES = np.array([
    0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1e-300, -3e-200, 0.1, -1.5, 1.0,
    3.0, 1e5, -273.15, 1e160, 2.0**1000, -(2.0**1020), 1.7976931348623157e308,
    -1.7976931348623157e308,
])  # fmt: skip


def _random_units(rng, u, f, weighted, extreme):
    if extreme:
        shift = rng.choice(EXTREMES, (u, f))
        sum1 = rng.choice(EXTREMES, (u, f))
        sum2 = np.abs(rng.choice(EXTREMES, (u, f)))
        scale = np.ldexp(1.0, rng.integers(-1020, 1021, (u, f)))
    else:
        shift = rng.normal(0, 1, (u, f)) * 10.0 ** rng.integers(-5, 6, (u, f))
        sum1 = rng.normal(0, 100, (u, f)) * 10.0 ** rng.integers(-12, 3, (u, f))
        sum2 = rng.exponential(100, (u, f))
        scale = np.ldexp(1.0, rng.integers(-30, 31, (u, f)))
    if weighted:
        count = rng.exponential(1000, (u, f)) * 10.0 ** rng.integers(-300, 300, (u, f))
        count[rng.random((u, f)) < 0.2] = 0.0
        if extreme:
            count[rng.random((u, f)) < 0.2] = 5e-324
    else:
        count = rng.integers(0, 100_000, (u, f))
        count[rng.random((u, f)) < 0.2] = 0
        count[rng.random((u, f)) < 0.1] = 2**62 + rng.integers(0, 2**40)  # huge counts
    return count, sum1, sum2, shift, scale


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("extreme", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_unit_raw_sums_are_exact(seed, extreme, weighted):
    rng = np.random.default_rng(seed)
    args = _random_units(rng, 13, 5, weighted, extreme)
    x, xx = unit_raw_sums(*args)
    ref_x, ref_xx = _fraction_reference(*args)
    assert list(x) == ref_x
    assert list(xx) == ref_xx
    old_x, old_xx = _old_loop(*args)
    assert list(x) == old_x and list(xx) == old_xx
    assert all(type(v) is int for v in list(x) + list(xx))


def test_unit_raw_sums_match_the_old_loop_on_larger_blocks():
    rng = np.random.default_rng(7)
    for weighted in (False, True):
        args = _random_units(rng, 300, 17, weighted, extreme=False)
        x, xx = unit_raw_sums(*args)
        old_x, old_xx = _old_loop(*args)
        assert list(x) == old_x and list(xx) == old_xx


def test_zero_counts_and_empty_features_add_nothing():
    count = np.array([[0, 3], [0, 0]])
    junk = np.array([[1e300, 2.0], [-5.0, 7.0]])  # sums of units with no count are ignored
    scale = np.ones((2, 2))
    x, xx = unit_raw_sums(count, junk, junk, junk, scale)
    assert x[0] == 0 and xx[0] == 0
    ref_x, ref_xx = _fraction_reference(count, junk, junk, junk, scale)
    assert list(x) == ref_x and list(xx) == ref_xx
    x, xx = unit_raw_sums(
        np.zeros((0, 3), dtype=np.int64), *(np.zeros((0, 3)),) * 3, np.ones((0, 3))
    )
    assert list(x) == [0, 0, 0] and list(xx) == [0, 0, 0]


def test_non_finite_or_bad_scale_is_refused():
    one = np.ones((1, 1))
    with pytest.raises(ValueError):
        unit_raw_sums(np.ones((1, 1), dtype=np.int64), one * np.inf, one, one, one)
    with pytest.raises(ValueError):
        unit_raw_sums(np.ones((1, 1), dtype=np.int64), one, one, one, one * 3.0)
