from __future__ import annotations

import numpy as np
import pytest

from reference import assert_close, two_pass
from wxstats.core.accumulator import RunMoments, StreamMoments
from wxstats.core.combine import Moments, Reference


def _moments(values: np.ndarray, ref: Reference) -> Moments:
    y = (values - ref.shift) / ref.scale
    moments = Moments.create(values.shape[1])
    moments.add(
        np.full(values.shape[1], values.shape[0]),
        y.sum(0)[None, :],
        (y * y).sum(0)[None, :],
        values.min(0),
        values.max(0),
        np.zeros(values.shape[1], dtype=np.int64),
    )
    return moments


def test_offset_1e5_spread_1e_2_is_exact_to_1e_10():
    rng = np.random.default_rng(0)
    data = 1e5 + 1e-2 * rng.standard_normal((4000, 3))
    ref = Reference.from_values(data[:10])
    total = Moments.create(3)
    for chunk in np.array_split(data, 17):
        total.merge(_moments(chunk, ref))
    mean, std = total.extract(ref)
    ref_mean, ref_std = two_pass(data, 0)
    assert_close(mean, ref_mean, 1e-10, "mean")
    assert_close(std, ref_std, 1e-10, "std")
    assert np.array_equal(total.minimum, data.min(0))


def test_merge_is_order_and_grouping_independent():
    rng = np.random.default_rng(1)
    data = rng.normal(280.0, 7.0, size=(3000, 4)) * rng.uniform(0.5, 2, size=4)
    ref = Reference.from_values(data[:5])
    parts = [_moments(c, ref) for c in np.array_split(data, 23)]
    results = set()
    for order in (range(23), reversed(range(23)), rng.permutation(23)):
        total = Moments.create(4)
        for i in order:
            total.merge(parts[i])
        mean, std = total.extract(ref)
        results.add((mean.tobytes(), std.tobytes()))
    assert len(results) == 1


def test_huge_and_denormal_values_do_not_overflow_or_underflow():
    rng = np.random.default_rng(2)
    for scale in (1e160, 1e-310):
        data = scale * (3.0 + rng.standard_normal((500, 1)))
        ref = Reference.from_values(data[:3])
        total = _moments(data, ref)
        mean, std = total.extract(ref)
        # reference via exact rescaling by a power of two
        k = 2.0 ** np.frexp(scale)[1]
        ref_mean, ref_std = two_pass(data / k, 0)
        assert_close(mean / k, ref_mean, 1e-10 if scale > 1 else 1e-6, f"mean at {scale}")
        assert_close(std / k, ref_std, 1e-10 if scale > 1 else 1e-6, f"std at {scale}")


def test_constant_feature_has_zero_std_not_nan():
    data = np.full((100, 2), 101325.0)
    ref = Reference.from_values(data[:1])
    mean, std = _moments(data, ref).extract(ref)
    assert list(mean) == [101325.0, 101325.0] and list(std) == [0.0, 0.0]


def test_pack_unpack_round_trip():
    rng = np.random.default_rng(3)
    data = rng.normal(size=(50, 3))
    ref = Reference.from_values(data)
    acc = RunMoments(
        {"state": StreamMoments(_moments(data, ref), {1: _moments(data[1:] - data[:-1], ref)})}
    )
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
    from wxstats.core.kernels import BlockSums

    n_t, n_f = rows1.shape
    lags = [] if diff1 is None else [1]
    return BlockSums(
        count=np.full(n_f, 10, dtype=np.int64),
        step_sum1=rows1,
        step_sum2=rows2,
        minimum=np.zeros(n_f),
        maximum=np.ones(n_f),
        nan_count=np.zeros(n_f, dtype=np.int64),
        inf_count=np.zeros(n_f, dtype=np.int64),
        diff_count={k: np.full(n_f, 9, dtype=np.int64) for k in lags},
        diff_step_sum1={k: diff1 for k in lags},
        diff_step_sum2={k: diff2 for k in lags},
    )


def test_the_summation_unit_decides_what_is_made_exact():
    from fractions import Fraction

    from wxstats.core.exact import fixed_to_fraction

    # rows whose float sum rounds: 1 + 2**-60 is 1 in float64
    rows = np.array([[1.0, 3.0], [2.0**-60, 2.0**-70], [-1.0, 1e-300]])
    per_step = StreamMoments.create(2, ())
    per_step.add(_block(rows, rows * 0), per_step=True)
    whole = StreamMoments.create(2, ())
    whole.add(_block(rows, rows * 0), per_step=False)
    exact_rows = [sum(Fraction(float(v)) for v in rows[:, f]) for f in range(2)]
    sequential = [float((rows[0, f] + rows[1, f]) + rows[2, f]) for f in range(2)]
    assert [fixed_to_fraction(v) for v in per_step.values.sum1] == exact_rows
    assert [fixed_to_fraction(v) for v in whole.values.sum1] == [Fraction(v) for v in sequential]
    assert exact_rows[0] == Fraction(1, 2**60) and sequential[0] == 0.0


def test_an_overflowing_block_changes_nothing():
    from wxstats.core.combine import NonFiniteSums

    good = np.ones((2, 2))
    acc = StreamMoments.create(2, (1,))
    acc.add(_block(good, good, good, good), per_step=False)
    before = acc.values.pack()[0].copy(), acc.diffs[1].pack()[0].copy()
    bad = np.array([[1.0, 1e308], [1.0, 1e308]])  # feature 1's diff sums overflow in time order
    with pytest.raises(NonFiniteSums) as raised:
        acc.add(_block(good, good, good, bad), per_step=False)
    assert raised.value.features == [1]
    assert acc.values.pack()[0].tobytes() == before[0].tobytes()
    assert acc.diffs[1].pack()[0].tobytes() == before[1].tobytes()
    acc.add(_block(good, good, good, bad), per_step=True)  # each row is finite on its own


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
    ref = Reference.from_values(data)
    mine = StreamMoments(_moments(data, ref), {1: _moments(data[1:] - data[:-1], ref)})
    before = mine.values.pack()
    theirs = other()
    theirs.values.count[:] = 7
    with pytest.raises(ValueError, match="do not merge"):
        mine.merge(theirs)
    with pytest.raises(ValueError, match="do not merge"):
        theirs.merge(mine)
    after = mine.values.pack()
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
