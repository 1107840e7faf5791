from __future__ import annotations

import numpy as np
import pytest

from wxstats.kernels import Block, block_partials, block_partials_numpy


def _block(rng, dtype=np.float32, t=9, g=1100, c=5):
    a = (rng.normal(100.0, 3.0, size=(t, g, c))).astype(dtype)
    return Block(a, np.array([0, 2, 3, 4]), (1, 8), {1: (1, 9), 3: (4, 8)})


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16])
def test_compiled_kernel_matches_numpy_definitions(dtype):
    rng = np.random.default_rng(0)
    block = _block(rng, dtype)
    shift, scale = np.full(4, 100.0), np.full(4, 4.0)
    dshift = {1: np.zeros(4), 3: np.full(4, 0.5)}
    dscale = {1: np.ones(4), 3: np.full(4, 2.0)}
    fast = block_partials(block, shift, scale, dshift, dscale)
    slow = block_partials_numpy(block, shift, scale, dshift, dscale)
    a = block.array[:, :, block.channels].astype(np.float64)
    assert list(fast.count) == [7 * 1100] * 4
    np.testing.assert_allclose(fast.sum1, slow.sum1, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fast.sum2, slow.sum2, rtol=1e-12)
    assert np.array_equal(fast.minimum, a[1:8].min(axis=(0, 1)))
    assert np.array_equal(fast.maximum, a[1:8].max(axis=(0, 1)))
    for k, (lo, hi) in {1: (1, 9), 3: (4, 8)}.items():
        d = a[lo:hi] - a[lo - k : hi - k]
        assert list(fast.diff_count[k]) == [d.shape[0] * d.shape[1]] * 4
        y = (d - dshift[k]) / dscale[k]
        np.testing.assert_allclose(fast.diff_sum2[k], (y * y).sum(axis=(0, 1)), rtol=1e-12)
        np.testing.assert_allclose(fast.diff_sum1[k], slow.diff_sum1[k], rtol=1e-9, atol=1e-8)


def test_kernel_counts_and_skips_nan_and_inf():
    rng = np.random.default_rng(1)
    block = _block(rng)
    block.array[2, 5, 0] = np.nan
    block.array[3, 7, 0] = np.nan
    block.array[4, 9, 2] = np.inf
    out = block_partials(
        block,
        np.zeros(4),
        np.ones(4),
        {1: np.zeros(4), 3: np.zeros(4)},
        {1: np.ones(4), 3: np.ones(4)},
    )
    assert list(out.nan_count) == [2, 0, 0, 0]
    assert list(out.inf_count) == [0, 1, 0, 0]
    assert out.count[0] == 7 * 1100 - 2
    # each NaN spoils the pairs it belongs to: (2,3),(1,2)... for lag 1
    assert out.diff_count[1][0] == 8 * 1100 - 4
    assert np.isfinite(out.sum1).all() and np.isfinite(out.diff_sum2[1]).all()


def test_kernel_is_deterministic():
    rng = np.random.default_rng(2)
    block = _block(rng)
    args = (
        np.full(4, 99.0),
        np.full(4, 2.0),
        {1: np.zeros(4), 3: np.zeros(4)},
        {1: np.ones(4), 3: np.ones(4)},
    )
    a, b = block_partials(block, *args), block_partials(block, *args)
    assert (
        a.sum1.tobytes() == b.sum1.tobytes()
        and a.diff_sum2[3].tobytes() == b.diff_sum2[3].tobytes()
    )
