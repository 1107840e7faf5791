from __future__ import annotations

import numpy as np

from reference import assert_close, two_pass
from wxstats.accumulate import Moments, Reference, RunAccumulator, StreamAccumulator


def _moments(values: np.ndarray, ref: Reference) -> Moments:
    y = (values - ref.shift) / ref.scale
    return Moments.from_partials(
        np.full(values.shape[1], values.shape[0]),
        y.sum(0),
        (y * y).sum(0),
        values.min(0),
        values.max(0),
        np.zeros(values.shape[1], dtype=np.int64),
    )


def test_offset_1e5_spread_1e_2_is_exact_to_1e_10():
    rng = np.random.default_rng(0)
    data = 1e5 + 1e-2 * rng.standard_normal((4000, 3))
    ref = Reference.from_values(data[:10])
    total = Moments.empty(3)
    for chunk in np.array_split(data, 17):
        total.merge(_moments(chunk, ref))
    mean, std = total.finalize(ref)
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
        total = Moments.empty(4)
        for i in order:
            total.merge(parts[i])
        mean, std = total.finalize(ref)
        results.add((mean.tobytes(), std.tobytes()))
    assert len(results) == 1


def test_huge_and_denormal_values_do_not_overflow_or_underflow():
    rng = np.random.default_rng(2)
    for scale in (1e160, 1e-310):
        data = scale * (3.0 + rng.standard_normal((500, 1)))
        ref = Reference.from_values(data[:3])
        total = _moments(data, ref)
        mean, std = total.finalize(ref)
        # reference via exact rescaling by a power of two
        k = 2.0 ** np.frexp(scale)[1]
        ref_mean, ref_std = two_pass(data / k, 0)
        assert_close(mean / k, ref_mean, 1e-10 if scale > 1 else 1e-6, f"mean at {scale}")
        assert_close(std / k, ref_std, 1e-10 if scale > 1 else 1e-6, f"std at {scale}")


def test_constant_feature_has_zero_std_not_nan():
    data = np.full((100, 2), 101325.0)
    ref = Reference.from_values(data[:1])
    mean, std = _moments(data, ref).finalize(ref)
    assert list(mean) == [101325.0, 101325.0] and list(std) == [0.0, 0.0]


def test_pack_unpack_round_trip():
    rng = np.random.default_rng(3)
    data = rng.normal(size=(50, 3))
    ref = Reference.from_values(data)
    acc = RunAccumulator(
        {"state": StreamAccumulator(_moments(data, ref), {1: _moments(data[1:] - data[:-1], ref)})}
    )
    ints, mn, mx = acc.pack()
    assert ints.dtype == np.int64 and mn.dtype == np.float64
    copy = RunAccumulator({"state": StreamAccumulator.empty(3, (1,))})
    copy.unpack_like(ints, mn, mx)
    assert list(copy.streams["state"].values.sum2) == list(acc.streams["state"].values.sum2)
    assert list(copy.streams["state"].diffs[1].sum1) == list(acc.streams["state"].diffs[1].sum1)
    # summing packed arrays is merging
    doubled = RunAccumulator({"state": StreamAccumulator.empty(3, (1,))})
    doubled.unpack_like(ints * 2, mn, mx)
    merged = RunAccumulator({"state": StreamAccumulator.empty(3, (1,))})
    merged.merge(acc)
    merged.merge(acc)
    assert list(doubled.streams["state"].values.sum1) == list(merged.streams["state"].values.sum1)
