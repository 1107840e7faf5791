from __future__ import annotations

import numpy as np
import pytest

from reference import assert_close, two_pass
from wxstats.core.accumulator import RunMoments, StreamMoments
from wxstats.core.combine import Moments
from wxstats.core.unit_reference import references


def _moments(values: np.ndarray) -> Moments:
    """The moments of ``values`` (N, F) as one summation unit with its own reference."""
    shift, scale = references(values[None], values[None])
    y = (values - shift) / scale
    moments = Moments.create(values.shape[1])
    moments.add(
        np.full((1, values.shape[1]), values.shape[0]),
        y.sum(0)[None, :],
        (y * y).sum(0)[None, :],
        shift,
        scale,
        values.min(0),
        values.max(0),
        np.zeros(values.shape[1], dtype=np.int64),
    )
    return moments


def test_offset_1e5_spread_1e_2_is_exact_to_1e_10():
    rng = np.random.default_rng(0)
    data = 1e5 + 1e-2 * rng.standard_normal((4000, 3))
    total = Moments.create(3)
    for chunk in np.array_split(data, 17):
        total.merge(_moments(chunk))
    mean, std = total.extract()
    ref_mean, ref_std = two_pass(data, 0)
    assert_close(mean, ref_mean, 1e-10, "mean")
    assert_close(std, ref_std, 1e-10, "std")
    assert np.array_equal(total.minimum, data.min(0))


def test_merge_is_order_and_grouping_independent():
    rng = np.random.default_rng(1)
    data = rng.normal(280.0, 7.0, size=(3000, 4)) * rng.uniform(0.5, 2, size=4)
    parts = [_moments(c) for c in np.array_split(data, 23)]
    results = set()
    for order in (range(23), reversed(range(23)), rng.permutation(23)):
        total = Moments.create(4)
        for i in order:
            total.merge(parts[i])
        mean, std = total.extract()
        results.add((mean.tobytes(), std.tobytes()))
    assert len(results) == 1


def test_huge_and_denormal_values_do_not_overflow_or_underflow():
    rng = np.random.default_rng(2)
    for scale in (1e160, 1e-310):
        data = scale * (3.0 + rng.standard_normal((500, 1)))
        mean, std = _moments(data).extract()
        # reference via exact rescaling by a power of two
        k = 2.0 ** np.frexp(scale)[1]
        ref_mean, ref_std = two_pass(data / k, 0)
        assert_close(mean / k, ref_mean, 1e-10 if scale > 1 else 1e-6, f"mean at {scale}")
        assert_close(std / k, ref_std, 1e-10 if scale > 1 else 1e-6, f"std at {scale}")


def test_units_with_far_apart_references_merge_exactly():
    """Units of 1e-300 and 1e300 (and ones straddling 0) in one feature: the
    exact raw sums hold both, and the result is the float64 reference's."""
    from fractions import Fraction

    parts = [np.array([[1e300], [3e300]]), np.array([[1e-300], [-2e-300]]), np.array([[7.0]])]
    total = Moments.create(1)
    for p in parts:
        total.merge(_moments(p))
    values = [Fraction(v) for p in parts for v in p.ravel()]
    n = len(values)
    exact_mean = sum(values) / n
    mean, std = total.extract()
    assert mean[0] == float(exact_mean)
    variance = sum((v - exact_mean) ** 2 for v in values) / n
    expected = float(variance / 2**2000) ** 0.5 * 2.0**1000  # scaled: 1e600 is no float
    assert abs(std[0] - expected) <= 1e-15 * std[0]


def test_constant_feature_has_zero_std_not_nan():
    data = np.full((100, 2), 101325.0)
    mean, std = _moments(data).extract()
    assert list(mean) == [101325.0, 101325.0] and list(std) == [0.0, 0.0]


def test_pack_unpack_round_trip():
    rng = np.random.default_rng(3)
    data = rng.normal(size=(50, 3))
    acc = RunMoments({"state": StreamMoments(_moments(data), {1: _moments(data[1:] - data[:-1])})})
    ints, mn, mx = acc.pack()
    assert ints.dtype == np.int64 and mn.dtype == np.float64
    copy = RunMoments({"state": StreamMoments.create(3, (1,))})
    copy.unpack_like(ints, mn, mx)
    assert list(copy.streams["state"].values.sum2) == list(acc.streams["state"].values.sum2)
    assert list(copy.streams["state"].diffs[1].sum1) == list(acc.streams["state"].diffs[1].sum1)
    # summing packed arrays is merging
    doubled = RunMoments({"state": StreamMoments.create(3, (1,))})
    doubled.unpack_like(ints * 2, mn, mx)
    merged = RunMoments({"state": StreamMoments.create(3, (1,))})
    merged.merge(acc)
    merged.merge(acc)
    assert list(doubled.streams["state"].values.sum1) == list(merged.streams["state"].values.sum1)


def _block(rows1, rows2, diff1=None, diff2=None):
    from wxstats.core.kernel import BlockSums, StepReferences

    n_t, n_f = rows1.shape
    lags = [] if diff1 is None else [1]
    ones = np.ones((n_t, n_f))
    refs = StepReferences(
        ones * 0.5, ones * 4.0, {k: ones * -1.0 for k in lags}, {k: ones for k in lags}
    )
    out = BlockSums.empty(n_t, n_f, lags, False, refs)
    out.step_count[:] = 10
    out.step_sum1[:], out.step_sum2[:] = rows1, rows2
    out.minimum[:], out.maximum[:] = 0.0, 1.0
    for k in lags:
        out.diff_step_count[k][:] = 9
        out.diff_step_sum1[k][:], out.diff_step_sum2[k][:] = diff1, diff2
    return out


def test_each_step_is_made_exact_with_its_own_reference():
    """Σx = n K + S Σy and Σx² = n K² + 2 K S Σy + S² Σy², exactly, per step."""
    from fractions import Fraction

    from wxstats.core.exact import fixed_to_fraction

    # rows whose float sum rounds: 1 + 2**-60 is 1 in float64
    rows = np.array([[1.0, 3.0], [2.0**-60, 2.0**-70], [-1.0, 1e-300]])
    squares = np.abs(rows) * 3
    acc = StreamMoments.create(2, ())
    acc.add(_block(rows, squares))
    n, k, scale = 10, Fraction(0.5), Fraction(4)
    for f in range(2):
        sx = sum(n * k + scale * Fraction(float(v)) for v in rows[:, f])
        sxx = sum(
            n * k * k + 2 * k * scale * Fraction(float(y)) + scale * scale * Fraction(float(q))
            for y, q in zip(rows[:, f], squares[:, f], strict=True)
        )
        assert fixed_to_fraction(acc.values.sum1[f]) == sx
        assert fixed_to_fraction(acc.values.sum2[f]) == sxx


def test_an_overflowing_block_changes_nothing():
    from wxstats.core.combine import NonFiniteSums

    good = np.ones((2, 2))
    acc = StreamMoments.create(2, (1,))
    acc.add(_block(good, good, good, good))
    before = acc.values.pack()[0].copy(), acc.diffs[1].pack()[0].copy()
    bad = np.array([[1.0, np.inf], [1.0, 1e308]])  # feature 1's diff sums overflowed
    with pytest.raises(NonFiniteSums) as raised:
        acc.add(_block(good, good, good, bad))
    assert raised.value.features == [1]
    assert acc.values.pack()[0].tobytes() == before[0].tobytes()
    assert acc.diffs[1].pack()[0].tobytes() == before[1].tobytes()


@pytest.mark.parametrize(
    "other",
    [
        lambda: StreamMoments.create(3, (1,), grid_points=4),  # time means on one side
        lambda: StreamMoments.create(3, (1, 2)),  # another difference step
        lambda: StreamMoments.create(3, (1,), weighted=True),
    ],
)
def test_moments_of_another_layout_are_refused_and_change_nothing(other):
    """Merging must never drop a sum silently (a mean without part of its data)."""
    rng = np.random.default_rng(4)
    data = rng.normal(size=(20, 3))
    mine = StreamMoments(_moments(data), {1: _moments(data[1:] - data[:-1])})
    before = mine.values.pack()
    theirs = other()
    theirs.values.count[:] = 7
    with pytest.raises(ValueError, match="do not merge"):
        mine.merge(theirs)
    with pytest.raises(ValueError, match="do not merge"):
        theirs.merge(mine)
    after = mine.values.pack()
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
