from __future__ import annotations

import numpy as np
import pytest

from reference import block_sums_numpy, fixed
from wxstats.core.kernel import (
    GRID_CHUNK,
    Block,
    block_sums,
    lanes_per_channel,
)


@pytest.fixture(autouse=True, params=["numba", "numpy"])
def implementation(request, monkeypatch):
    """Every test of this module runs on the compiled kernel and on its numpy twin
    (the small-block path), whatever the size of its blocks."""
    import wxstats.core.kernel.choice as choice

    monkeypatch.setattr(choice, "KERNEL", request.param)
    return request.param


def _block(rng, dtype=np.float32, t=9, g=1100, c=5):
    a = (rng.normal(100.0, 3.0, size=(t, g, c))).astype(dtype)
    return Block(a, np.array([0, 2, 3, 4]), (1, 8), {1: (1, 9), 3: (4, 8)})


SHIFT, SCALE = np.full(4, 100.0), np.full(4, 4.0)
DSHIFT = {1: np.zeros(4), 3: np.full(4, 0.5)}
DSCALE = {1: np.ones(4), 3: np.full(4, 2.0)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16])
def test_compiled_kernel_matches_numpy_definitions(dtype):
    rng = np.random.default_rng(0)
    block = _block(rng, dtype)
    shift, scale, dshift, dscale = SHIFT, SCALE, DSHIFT, DSCALE
    fast = block_sums(block, fixed(block, shift, scale, dshift, dscale))
    slow = block_sums_numpy(block, fixed(block, shift, scale, dshift, dscale))
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
        # extremes of the differences: exact (anemoi's tendency minimum/maximum)
        assert np.array_equal(fast.diff_minimum[k], d.min(axis=(0, 1)))
        assert np.array_equal(fast.diff_maximum[k], d.max(axis=(0, 1)))


def test_kernel_counts_and_skips_nan_and_inf():
    rng = np.random.default_rng(1)
    block = _block(rng)
    block.array[2, 5, 0] = np.nan
    block.array[3, 7, 0] = np.nan
    block.array[4, 9, 2] = np.inf
    out = block_sums(
        block,
        fixed(
            block,
            np.zeros(4),
            np.ones(4),
            {1: np.zeros(4), 3: np.zeros(4)},
            {1: np.ones(4), 3: np.ones(4)},
        ),
    )
    assert list(out.nan_count) == [2, 0, 0, 0]
    assert list(out.inf_count) == [0, 1, 0, 0]
    assert out.count[0] == 7 * 1100 - 2
    # each NaN spoils the pairs it belongs to: (2,3),(1,2)... for lag 1
    assert out.diff_count[1][0] == 8 * 1100 - 4
    # the extremes of the differences skip the NaN and Inf pairs
    a = block.array[:, :, block.channels].astype(np.float64)
    d = a[1:9] - a[:8]
    ok = np.isfinite(d)
    np.testing.assert_array_equal(out.diff_minimum[1], np.where(ok, d, np.inf).min(axis=(0, 1)))
    np.testing.assert_array_equal(out.diff_maximum[1], np.where(ok, d, -np.inf).max(axis=(0, 1)))
    assert np.isfinite(out.sum1).all() and np.isfinite(out.diff_sum2[1]).all()


def _documented_order(a, channels, t0, t1, shift, scale):
    """The per-step sums of the values, added in the order the kernels module
    documents, written independently in numpy: per chunk of GRID_CHUNK grid
    points, lanes of m * C values each summed sequentially, lanes folded into
    channels in lane order, chunk sums added in chunk order."""
    n_t, n_g, n_c = a.shape
    m = lanes_per_channel(n_c)
    lanes = m * n_c
    sh = np.zeros(n_c)
    iv = np.ones(n_c)
    sh[channels], iv[channels] = shift, 1.0 / scale
    out = np.zeros((n_t, n_c))
    for t in range(t0, t1):
        for gs in range(0, n_g, GRID_CHUNK):
            chunk = a[t, gs : gs + GRID_CHUNK].astype(np.float64).reshape(-1)
            y = (chunk - np.tile(sh, chunk.size // n_c)) * np.tile(iv, chunk.size // n_c)
            lane_sums = np.zeros(lanes)
            for j in range(lanes):
                if y[j::lanes].size:
                    lane_sums[j] = np.cumsum(y[j::lanes])[-1]  # sequential, first to last
            for c in range(n_c):
                folded = np.cumsum(lane_sums[c::n_c])[-1]  # lanes in lane order
                out[t, c] = out[t, c] + folded
    return out[:, channels]


@pytest.mark.parametrize("n_c,n_g", [(3, 1400), (18, 600), (1, 700)])
def test_kernel_adds_in_the_documented_order_bit_for_bit(n_c, n_g):
    # the kernel must not reassociate (no fastmath, no tree reduction): then its
    # bits depend on the data alone, never on the CPU's vector width
    rng = np.random.default_rng(n_c)
    a = rng.normal(100.0, 3.0, size=(5, n_g, n_c)).astype(np.float32)
    channels = np.arange(n_c)
    shift, scale = np.full(n_c, 99.0), np.full(n_c, 4.0)
    block = Block(a, channels, (1, 5))
    fast = block_sums(block, fixed(block, shift, scale, {}, {}))
    expected = _documented_order(a, channels, 1, 5, shift, scale)
    assert fast.step_sum1.tobytes() == expected.tobytes()


def _args(n_f, lags=(1, 3)):
    return (
        np.full(n_f, 99.0),
        np.full(n_f, 4.0),
        {k: np.full(n_f, 0.25) for k in lags},
        {k: np.full(n_f, 2.0) for k in lags},
    )


def _bits(p):
    parts = [p.sum1, p.sum2, p.minimum, p.maximum, p.count, p.nan_count, p.inf_count]
    for k in sorted(p.diff_sum1):
        parts += [p.diff_sum1[k], p.diff_sum2[k], p.diff_count[k]]
    return b"".join(np.ascontiguousarray(x).tobytes() for x in parts)


@pytest.mark.parametrize("n_c,n_g", [(1, 1500), (5, 2 * 512 + 37), (18, 700), (70, 9)])
def test_kernel_matches_numpy_across_chunks_lanes_and_leftovers(n_c, n_g):
    # chunk boundaries, lane rows of m grid points, a partial last row, m = 1
    rng = np.random.default_rng(n_c)
    a = rng.normal(100.0, 3.0, size=(7, n_g, n_c)).astype(np.float32)
    channels = np.arange(n_c)[::2] if n_c > 2 else np.arange(n_c)
    block = Block(a, channels, (0, 7), {1: (0, 7), 3: (2, 6)})
    args = _args(len(channels))
    fast, slow = (
        block_sums(block, fixed(block, *args)),
        block_sums_numpy(block, fixed(block, *args)),
    )
    np.testing.assert_array_equal(fast.count, slow.count)
    np.testing.assert_array_equal(fast.minimum, slow.minimum)
    np.testing.assert_array_equal(fast.maximum, slow.maximum)
    np.testing.assert_allclose(fast.sum1, slow.sum1, rtol=1e-11, atol=1e-9)
    np.testing.assert_allclose(fast.sum2, slow.sum2, rtol=1e-12)
    for k in (1, 3):
        np.testing.assert_array_equal(fast.diff_count[k], slow.diff_count[k])
        np.testing.assert_array_equal(fast.diff_minimum[k], slow.diff_minimum[k])
        np.testing.assert_array_equal(fast.diff_maximum[k], slow.diff_maximum[k])
        np.testing.assert_allclose(fast.diff_sum1[k], slow.diff_sum1[k], rtol=1e-11, atol=1e-9)
        np.testing.assert_allclose(fast.diff_sum2[k], slow.diff_sum2[k], rtol=1e-12)


def test_checked_path_adds_the_same_numbers_in_the_same_order():
    # NaN/Inf in a channel that is not used send chunks to the per-value path;
    # the used channels must come out with the very same bits
    rng = np.random.default_rng(5)
    a = rng.normal(100.0, 3.0, size=(9, 1300, 6)).astype(np.float32)
    block = Block(a, np.array([0, 1, 2, 4, 5]), (1, 8), {1: (1, 9), 3: (4, 8)})
    clean = block_sums(block, fixed(block, *_args(5)))
    dirty = a.copy()
    dirty[2, 5, 3] = np.nan
    dirty[6, 900, 3] = np.inf
    dirty[7, 1299, 3] = -np.inf
    dirty_block = Block(dirty, block.channels, (1, 8), block.diff_ranges)
    spoiled = block_sums(dirty_block, fixed(dirty_block, *_args(5)))
    assert _bits(clean) == _bits(spoiled)


def test_layout_does_not_change_bits():
    # a non-contiguous array (copied internally) gives the contiguous result
    rng = np.random.default_rng(6)
    base = rng.normal(10.0, 1.0, size=(6, 800, 8)).astype(np.float32)
    strided = np.asfortranarray(base)
    assert not strided.flags.c_contiguous
    ranges = {2: (2, 6)}
    b1, b2 = Block(base, np.arange(8), (0, 6), ranges), Block(strided, np.arange(8), (0, 6), ranges)
    one = block_sums(b1, fixed(b1, *_args(8, (2,))))
    two = block_sums(b2, fixed(b2, *_args(8, (2,))))
    assert _bits(one) == _bits(two)


def test_overflowing_float64_values_and_differences_keep_their_semantics():
    # finite values whose squares overflow with the given scale: the step is summed
    # again with its scale from its whole row (its own data), so its sums are
    # finite; differences that are not finite are skipped
    a = np.full((4, 600, 2), 1.0)
    a[1, 10, 0] = 1.7e308
    a[2, 10, 0] = -1.7e308
    block = Block(a, np.arange(2), (0, 4), {1: (1, 4)})
    args = (np.zeros(2), np.ones(2), {1: np.zeros(2)}, {1: np.ones(2)})
    fast = block_sums(block, fixed(block, *args))
    with np.errstate(over="ignore", invalid="ignore"):
        slow = block_sums_numpy(block, fast.refs)
    np.testing.assert_array_equal(fast.count, slow.count)
    np.testing.assert_array_equal(fast.diff_count[1], slow.diff_count[1])
    assert fast.diff_count[1][0] == 3 * 600 - 1  # (1,2) overflows; (0,1), (2,3) do not
    assert np.isfinite(fast.step_sum2).all() and np.isfinite(fast.diff_step_sum2[1]).all()
    assert list(fast.refs.scale[:, 0]) == [1.0, 2.0**1020, 2.0**1020, 1.0]  # only those widened
    np.testing.assert_allclose(fast.step_sum2, slow.step_sum2, rtol=1e-12)
    assert fast.maximum[0] == 1.7e308 and fast.minimum[0] == -1.7e308


def test_weighted_kernel_matches_numpy_and_its_checked_path():
    """Weighted sums (``--weights``): sum(w y), sum(w y y) and sum(w) per step as
    numpy computes them; a NaN elsewhere in the chunk (the checked path) leaves
    the other channels' bits unchanged (both paths add in the same order)."""
    rng = np.random.default_rng(3)
    clean = _block(rng)
    weights = rng.uniform(0.0, 2.0, clean.array.shape[1])
    block = Block(clean.array, clean.channels, clean.value_range, clean.diff_ranges,
                  weights=weights)  # fmt: skip
    shift, scale, dshift, dscale = SHIFT, SCALE, DSHIFT, DSCALE
    fast = block_sums(block, fixed(block, shift, scale, dshift, dscale))
    slow = block_sums_numpy(block, fixed(block, shift, scale, dshift, dscale))
    a = block.array[:, :, block.channels].astype(np.float64)
    y = (a - shift) / scale
    w = weights[None, :, None]
    np.testing.assert_allclose(fast.step_weight[1:8], np.broadcast_to(w, y.shape)[1:8].sum(1))
    np.testing.assert_allclose(fast.step_sum1[1:8], (w * y).sum(axis=1)[1:8], atol=1e-9)
    np.testing.assert_allclose(fast.step_sum2[1:8], (w * y * y).sum(axis=1)[1:8], rtol=1e-12)
    assert not fast.step_weight[0].any() and not fast.step_weight[8].any()
    for k in (1, 3):
        np.testing.assert_allclose(fast.diff_step_sum2[k], slow.diff_step_sum2[k], rtol=1e-12)
        np.testing.assert_allclose(fast.diff_step_weight[k], slow.diff_step_weight[k])
    assert list(fast.count) == [7 * 1100] * 4  # counts stay counts
    spoiled = block.array.copy()
    spoiled[2, 5, 0] = np.nan  # channel 0 of the first chunk at step 2
    spoiled_block = Block(
        spoiled, block.channels, block.value_range, block.diff_ranges, weights=weights
    )
    again = block_sums(spoiled_block, fixed(spoiled_block, shift, scale, dshift, dscale))
    assert again.step_sum1[:, 1:].tobytes() == fast.step_sum1[:, 1:].tobytes()
    assert again.step_weight[:, 1:].tobytes() == fast.step_weight[:, 1:].tobytes()
    assert np.isclose(again.step_weight[2, 0], fast.step_weight[2, 0] - weights[5])
    assert again.count[0] == fast.count[0] - 1 and again.nan_count[0] == 1


def test_group_codes_give_each_group_its_own_totals():
    """A climatology's block is summed whole with the group of each step (as flox
    takes ``by``): the per-step rows are the ungrouped block's, each group's
    extremes and NaN counts are numpy's over its own steps, and the moments equal
    those of the block cut into runs of one group."""
    from wxstats.core.accumulator import StreamMoments
    from wxstats.core.blocks import group_runs

    rng = np.random.default_rng(8)
    plain = _block(rng)
    plain.array[2, 5, 0] = np.nan
    groups = np.array([0, 2, 2, 1, 1, 2, 0, 0, 1])
    block = Block(plain.array, plain.channels, plain.value_range, plain.diff_ranges, groups)
    refs = fixed(block, SHIFT, SCALE, DSHIFT, DSCALE)
    whole, by = block_sums(plain, refs), block_sums(block, refs)
    assert by.step_sum1.tobytes() == whole.step_sum1.tobytes()
    assert by.diff_step_sum2[3].tobytes() == whole.diff_step_sum2[3].tobytes()
    a = block.array[:, :, block.channels].astype(np.float64)
    for g in range(3):
        steps = [t for t in range(1, 8) if groups[t] == g]
        v = a[steps]
        np.testing.assert_array_equal(by.minimum[g], np.nanmin(v, axis=(0, 1)))
        np.testing.assert_array_equal(by.maximum[g], np.nanmax(v, axis=(0, 1)))
        np.testing.assert_array_equal(by.nan_count[g], np.isnan(v).sum(axis=(0, 1)))
        for k, (lo, hi) in block.diff_ranges.items():
            later = [t for t in range(max(lo, k), hi) if groups[t] == g]
            if later:
                d = a[later] - a[[t - k for t in later]]
                np.testing.assert_array_equal(by.diff_minimum[k][g], np.nanmin(d, axis=(0, 1)))
    n_f = 3 * len(block.channels)
    grouped, runs = StreamMoments.create(n_f, (1, 3)), StreamMoments.create(n_f, (1, 3))
    grouped.add(block_sums(block))
    for piece, at in group_runs(block):
        runs.add(block_sums(piece), at)
    for mine, theirs in zip(grouped.parts(), runs.parts(), strict=True):
        for x, y in zip(mine.pack(), theirs.pack(), strict=True):
            assert x.tobytes() == y.tobytes()


_DIGEST_SCRIPT = """
import hashlib, numpy as np
import wxstats.core.kernel.choice as choice
import wxstats.core.kernel as kernels
choice.KERNEL = {kernel!r}
rng = np.random.default_rng(1)
a = (rng.normal(0, 1, (6, 700, 5)) * np.exp2(rng.uniform(-120, 120, (6, 700, 5))))
a = a.astype(np.float32)
s = kernels.block_sums(kernels.Block(a, np.arange(5), (0, 6), {{1: (1, 6)}}))
parts = [s.refs.shift, s.refs.scale, s.step_sum1, s.step_sum2, s.minimum, s.maximum,
         s.diff_step_sum1[1], s.diff_step_sum2[1], s.diff_minimum[1], s.diff_maximum[1]]
print(hashlib.sha256(b"".join(p.tobytes() for p in parts)).hexdigest())
"""


@pytest.fixture(scope="module")
def cpu_without_fma_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("numba-generic-cpu")


def test_bits_do_not_depend_on_the_cpu(implementation, cpu_without_fma_cache):
    """The compiled kernel built for a CPU without FMA or AVX (numba's ``generic``
    x86-64 target: the fused multiply-add of the scaling becomes a correctly
    rounded library call, the lanes SSE2 vectors) gives the same bits as this
    process (compiled for this CPU, or the numpy twin)."""
    import subprocess
    import sys

    def digest(kernel: str, env: dict) -> str:
        script = _DIGEST_SCRIPT.format(kernel=kernel)
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, check=True)  # fmt: skip
        return done.stdout.strip()

    import os

    here = dict(os.environ)
    generic = here | {"NUMBA_CPU_NAME": "generic", "NUMBA_CACHE_DIR": str(cpu_without_fma_cache)}
    assert digest("numba", generic) == digest(implementation, here)
