"""The numpy twin of the compiled kernel (wxstats.core.kernel.twin), which sums
small blocks without loading numba: the very same bits as the compiled kernel on
every path. (tests/test_kernels.py runs all its tests on both as well.)"""

from __future__ import annotations

import numpy as np
import pytest

import wxstats.core.kernel as kernels
import wxstats.core.kernel.choice as choice
from reference import fixed
from wxstats.core.kernel import Block, block_sums, lanes_per_channel


def _all_bits(p) -> bytes:
    parts = [p.count, p.step_sum1, p.step_sum2, p.minimum, p.maximum, p.nan_count, p.inf_count]
    parts += [p.step_weight] if p.step_weight is not None else []
    for k in sorted(p.diff_step_sum1):
        parts += [p.diff_count[k], p.diff_step_sum1[k], p.diff_step_sum2[k]]
        parts += [p.diff_minimum[k], p.diff_maximum[k]]
        parts += [p.diff_step_weight[k]] if p.diff_step_weight else []
    return b"".join(np.ascontiguousarray(x).tobytes() for x in parts)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16])
@pytest.mark.parametrize("n_c,n_g", [(1, 1500), (3, 2 * 512 + 37), (18, 700), (70, 9)])
@pytest.mark.parametrize("spoil", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_numpy_twin_is_the_compiled_kernel_bit_for_bit(
    monkeypatch, dtype, n_c, n_g, spoil, weighted
):
    """Small blocks are summed in numpy (no numba to load): every output, to the
    bit, as the compiled kernel's, with NaN/Inf (the checked path), -0.0 and ties
    in the extremes, weights, chunk and lane leftovers."""
    monkeypatch.setattr(choice, "KERNEL", "numba")
    rng = np.random.default_rng(n_c * 7 + n_g)
    a = (rng.normal(0.0, 3.0, size=(8, n_g, n_c)) * (100 if dtype == np.int16 else 1)).astype(dtype)
    if dtype != np.int16:
        # channel 0 never negative: its minimum is a tie of -0.0 and +0.0, in one
        # lane (grid points m apart), in one step's fold, and across steps
        m = lanes_per_channel(n_c)
        a[:, :, 0] = np.abs(a[:, :, 0]) + 1
        a[1, 0, 0] = -0.0
        if m < n_g:
            a[1, m, 0] = 0.0
        a[2, n_g - 1, 0] = 0.0
        a[3, 0, 0] = -0.0
        if spoil:
            a[3, min(5, n_g - 1), 0] = np.nan
            a[4, 0, n_c - 1] = np.inf
    weights = rng.uniform(0.0, 2.0, n_g) if weighted else None
    channels = np.arange(n_c)
    block = Block(a, channels, (1, 7), {1: (1, 8), 3: (4, 8)}, weights=weights)
    args = (np.full(n_c, 0.5), np.full(n_c, 4.0), {1: np.zeros(n_c), 3: np.full(n_c, 0.25)},
            {1: np.ones(n_c), 3: np.full(n_c, 2.0)})  # fmt: skip
    compiled = block_sums(block, fixed(block, *args))
    monkeypatch.setattr(choice, "KERNEL", "numpy")
    twin = block_sums(block, fixed(block, *args))
    assert _all_bits(twin) == _all_bits(compiled)


def _wide_float32(rng, shape) -> np.ndarray:
    """float32 values over the whole exponent range: subnormals, 1e-30, 1e38."""
    magnitude = np.exp2(rng.uniform(-149.0, 127.0, size=shape))
    return (rng.choice([-1.0, 1.0], size=shape) * magnitude).astype(np.float32)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("spread", ["wide", "narrow", "tiny"])
def test_fused_scaling_adds_the_bits_of_subtract_then_multiply(monkeypatch, seed, spread):
    """For float32 input the compiled kernel computes ``(v - p) * q`` as one fused
    multiply-add (kernels.fused_scaling_is_exact): the twin's subtract-then-multiply
    bits, for references derived from each step's data as the kernel derives them,
    on values and differences from subnormals to 1e38."""
    rng = np.random.default_rng(seed)
    shape = (5, 700, 4)
    if spread == "wide":
        a = _wide_float32(rng, shape)
    elif spread == "narrow":  # ERA5-like: large mean, small spread
        a = rng.normal(101325.0, 50.0, size=shape).astype(np.float32)
    else:  # values near the float32 subnormal range
        a = (rng.normal(0.0, 1.0, size=shape) * 2.0**-140).astype(np.float32)
    block = Block(a, np.arange(4), (0, 5), {1: (1, 5)})
    monkeypatch.setattr(choice, "KERNEL", "numba")
    compiled = block_sums(block)
    refs = compiled.refs
    assert kernels.fused_scaling_is_exact(refs.shift, 1 / refs.scale)
    assert kernels.fused_scaling_is_exact(refs.diff_shift[1], 1 / refs.diff_scale[1])
    monkeypatch.setattr(choice, "KERNEL", "numpy")
    assert _all_bits(block_sums(block)) == _all_bits(compiled)


def test_references_outside_the_fused_range_are_summed_in_float64(monkeypatch):
    """A reference the proof does not cover (a shift of 2**-500, a scale that is not
    a power of two: the fma would round once where the twin rounds twice) is refused
    by the check, and the compiled kernel then sums a float64 copy: the twin's bits."""
    assert not kernels.fused_scaling_is_exact(np.array([2.0**-500]), np.array([1.0]))
    assert not kernels.fused_scaling_is_exact(np.array([1.0]), np.array([1 / 3]))
    assert not kernels.fused_scaling_is_exact(np.array([1.0]), np.array([2.0**300]))
    assert kernels.fused_scaling_is_exact(np.array([0.0, -280.5]), np.array([1.0, 2.0**-7]))
    rng = np.random.default_rng(9)
    a = rng.normal(100.0, 3.0, size=(4, 600, 2)).astype(np.float32)
    block = Block(a, np.arange(2), (0, 4), {1: (1, 4)})
    args = (np.full(2, 99.3), np.full(2, 3.0), {1: np.full(2, 0.1)}, {1: np.full(2, 5.0)})
    monkeypatch.setattr(choice, "KERNEL", "numba")
    compiled = block_sums(block, fixed(block, *args))
    monkeypatch.setattr(choice, "KERNEL", "numpy")
    assert _all_bits(block_sums(block, fixed(block, *args))) == _all_bits(compiled)


def test_the_twin_is_rented_only_up_to_the_price_of_loading_the_kernel(monkeypatch):
    """Small blocks are summed by the twin only until it has spent what loading
    the compiled kernel costs (or once it is loaded): many small blocks
    (``--block-mb 2`` over ten variables) took 40x longer than large ones when
    size alone chose."""
    monkeypatch.setattr(choice, "KERNEL", "auto")
    calls = []
    monkeypatch.setattr(choice, "_compiled", lambda: lambda *args: calls.append("numba"))
    monkeypatch.setattr(choice, "_loaded", False)
    rng = np.random.default_rng(0)
    block = Block(rng.normal(size=(3, 40, 2)).astype(np.float32), np.arange(2), (0, 3), {})

    monkeypatch.setattr(choice, "_twin_spent", 0.0)
    block_sums(block)
    assert calls == [] and choice._twin_spent > 0  # small, budget left: the twin, its CPU timed
    monkeypatch.setattr(choice, "_twin_spent", choice.TWIN_SECONDS)
    block_sums(block)
    assert calls == ["numba"]  # the budget spent: the compiled kernel, however small
    monkeypatch.setattr(choice, "_twin_spent", 0.0)
    monkeypatch.setattr(choice, "_loaded", True)
    block_sums(block)
    assert calls == ["numba", "numba"]  # the compiled kernel loaded: never the twin
