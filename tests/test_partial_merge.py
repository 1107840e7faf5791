"""Properties of the exact partial sums: any pieces of the same data merge to the
whole, byte for byte, in any order and grouping (each time step is summed with its
own reference, so no piece depends on another)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from reference import two_pass
from wxstats.core.accumulator import StreamMoments
from wxstats.core.blocks import Block, restrict
from wxstats.core.kernels import block_sums

LAGS = (1, 2)


def _piece(a: np.ndarray, lo: int, hi: int, weights: np.ndarray | None) -> StreamMoments:
    """The moments of time steps ``lo .. hi`` of ``a``: their values and the
    differences ending at them (reading the steps before ``lo`` they need)."""
    start = max(0, lo - max(LAGS))
    block = Block(
        a[start:hi],
        np.arange(a.shape[2]),
        (lo - start, hi - start),
        {k: (max(lo, k) - start, hi - start) for k in LAGS},
        weights=weights,
    )
    moments = StreamMoments.create(a.shape[2], LAGS, weighted=weights is not None)
    moments.add(block_sums(block))
    return moments


def _merge_tree(parts: list[StreamMoments], splits: list[int]) -> StreamMoments:
    """Merge ``parts`` as a tree whose shape ``splits`` chooses (any grouping)."""
    if len(parts) == 1:
        return parts[0]
    cut = 1 + splits[0] % (len(parts) - 1) if splits else len(parts) // 2
    left = _merge_tree(parts[:cut], splits[1:])
    right = _merge_tree(parts[cut:], splits[1:])
    out = StreamMoments.create(left.values.n_features, LAGS, weighted=left.values.weighted)
    out.merge(left)
    out.merge(right)
    return out


def _bytes(m: StreamMoments) -> list[bytes]:
    return [p.tobytes() for part in m.parts() for p in part.pack()]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_t=st.integers(3, 12),
    n_g=st.integers(1, 40),
    n_c=st.integers(1, 3),
    magnitude=st.sampled_from([1e-300, 1e-3, 1.0, 280.0, 1e5, 1e150]),
    nan_fraction=st.sampled_from([0.0, 0.1]),
    weighted=st.booleans(),
    dtype=st.sampled_from([np.float32, np.float64]),
    data=st.data(),
)
def test_any_pieces_merge_to_the_whole_in_any_order(
    seed, n_t, n_g, n_c, magnitude, nan_fraction, weighted, dtype, data
):
    rng = np.random.default_rng(seed)
    scale = magnitude if dtype == np.float64 else min(max(magnitude, 1e-30), 1e30)
    a = (scale * (3.0 + rng.standard_normal((n_t, n_g, n_c)))).astype(dtype)
    a[rng.random(a.shape) < nan_fraction] = np.nan
    weights = rng.uniform(0.0, 2.0, n_g) if weighted else None
    whole = _piece(a, 0, n_t, weights)

    cuts = sorted(data.draw(st.sets(st.integers(1, n_t - 1), max_size=n_t - 1)))
    bounds = [0, *cuts, n_t]
    parts = [_piece(a, lo, hi, weights) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
    order = data.draw(st.permutations(range(len(parts))))
    splits = data.draw(st.lists(st.integers(0, 100), max_size=6))
    merged = _merge_tree([parts[i] for i in order], splits)
    assert _bytes(merged) == _bytes(whole)


def test_pieces_agree_with_a_float64_two_pass_reference():
    """The merged statistics of a year-like series cut at random days are within
    1e-13 of numpy's float64 two-pass mean and std (values and differences)."""
    rng = np.random.default_rng(7)
    a = (280.0 + 15.0 * rng.standard_normal((40, 300, 2))).astype(np.float32)
    bounds = [0, 3, 4, 17, 29, 40]
    parts = [_piece(a, lo, hi, None) for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)]
    merged = _merge_tree(parts[::-1], [3, 1])
    mean, std = merged.values.extract()
    x = a.astype(np.float64).reshape(-1, 2)
    ref_mean, ref_std = two_pass(x, 0)
    np.testing.assert_allclose(mean, ref_mean, rtol=1e-13)
    np.testing.assert_allclose(std, ref_std, rtol=1e-13)
    for k in LAGS:
        d = (a[k:].astype(np.float64) - a[:-k]).reshape(-1, 2)
        d_mean, d_std = merged.diffs[k].extract()
        ref_mean, ref_std = two_pass(d, 0)
        np.testing.assert_allclose(d_mean, ref_mean, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(d_std, ref_std, rtol=1e-13)


def _intervals(steps: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for t in sorted(steps):
        if out and out[-1][1] == t:
            out[-1] = (out[-1][0], t + 1)
        else:
            out.append((t, t + 1))
    return out


@settings(max_examples=40, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32 - 1), n_t=st.integers(3, 12), data=st.data())
def test_a_block_restricted_to_any_steps_and_to_the_rest_merges_to_the_whole(seed, n_t, data):
    """What a resume does with a sample partly done: ``restrict`` keeps the values
    of the steps asked for and the differences ending at them (in one block per
    run of steps); the two complementary restrictions merge to the whole block."""
    rng = np.random.default_rng(seed)
    a = (280.0 + 5.0 * rng.standard_normal((n_t, 7, 2))).astype(np.float32)
    whole_block = Block(a, np.arange(2), (0, n_t), {k: (k, n_t) for k in LAGS})
    mine = sorted(data.draw(st.sets(st.integers(0, n_t - 1))))
    rest = [t for t in range(n_t) if t not in mine]

    def moments(steps: list[int]) -> StreamMoments:
        out = StreamMoments.create(2, LAGS)
        for piece in restrict(whole_block, _intervals(steps)):
            out.add(block_sums(piece))
        return out

    part = moments(mine)
    assert list(part.values.count) == [7 * len(mine)] * 2  # each step's 7 grid points
    for k in LAGS:  # the differences ending at the steps kept
        assert list(part.diffs[k].count) == [7 * sum(t >= k for t in mine)] * 2
    merged = StreamMoments.create(2, LAGS)
    merged.merge(part)
    merged.merge(moments(rest))
    assert _bytes(merged) == _bytes(moments(list(range(n_t))))
    whole = StreamMoments.create(2, LAGS)
    whole.add(block_sums(whole_block))
    assert _bytes(merged) == _bytes(whole)


def test_a_step_whose_sampled_points_are_all_missing_takes_its_first_finite_value():
    """Step 3 of channel 0 is NaN at every sampled grid point (a masked region
    where the reference looks) but finite elsewhere: its reference comes from its
    own first finite value, the pieces still merge to the whole, and the result
    is the float64 reference's."""
    from wxstats.core.kernels import step_references
    from wxstats.core.unit_reference import sample_positions

    rng = np.random.default_rng(11)
    a = 1000.0 + rng.standard_normal((8, 1000, 2))
    at = sample_positions(1000)
    a[3, at, 0] = np.nan
    whole = _piece(a, 0, 8, None)
    parts = [_piece(a, 0, 3, None), _piece(a, 3, 5, None), _piece(a, 5, 8, None)]
    assert _bytes(_merge_tree(parts, [1])) == _bytes(whole)
    refs = step_references(Block(a, np.arange(2), (0, 8), {1: (1, 8)}))
    first = a[3, np.flatnonzero(np.isfinite(a[3, :, 0]))[0], 0]
    assert refs.shift[3, 0] == first
    assert refs.diff_shift[1][3, 0] == a[3, 1, 0] - a[2, 1, 0]  # point 0 is sampled (NaN), 1 is not
    mean, std = whole.values.extract()
    x = a[:, :, 0][np.isfinite(a[:, :, 0])]
    np.testing.assert_allclose([mean[0], std[0]], [x.mean(), x.std()], rtol=1e-13)
