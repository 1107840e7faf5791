"""Every declared statistic and quantity (wxstats.core.reduction), iterated: each
against a float64 two-pass numpy reference, exact merges in any grouping, the
numpy twin and the compiled kernel bit for bit, and any cut of the data into
blocks giving the same bytes. A statistic added to the table is tested here
without a new test; one without a reference below fails."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import wxstats.core.kernel.choice as choice
from wxstats.core import finalize, reduction
from wxstats.core.accumulator import StreamMoments
from wxstats.core.blocks import Block
from wxstats.core.combine import Moments
from wxstats.core.kernel import block_sums


def _central(v: np.ndarray, p: int) -> np.ndarray:
    c = v - v.mean(axis=0)
    return (c**p).mean(axis=0)


# float64 two-pass references over the rows of a (N, F) array of finite values,
# written from the textbook definitions (population, bias=True, Fisher's kurtosis)
REFERENCES = {
    "count": lambda v: np.full(v.shape[1], v.shape[0]),
    "mean": lambda v: v.mean(axis=0),
    "std": lambda v: np.sqrt(_central(v, 2)),
    "min": lambda v: v.min(axis=0),
    "max": lambda v: v.max(axis=0),
    "nan_count": lambda v: np.zeros(v.shape[1]),
    "skewness": lambda v: _central(v, 3) / _central(v, 2) ** 1.5,
    "excess_kurtosis": lambda v: _central(v, 4) / _central(v, 2) ** 2 - 3.0,
}
TOLERANCE = {"skewness": 1e-9, "excess_kurtosis": 1e-9}


def test_every_declared_statistic_has_a_reference_and_a_result_field():
    from dataclasses import fields

    from wxstats.core.stats import DiffStats, StreamStats

    value_fields = {f.name for f in fields(StreamStats)}
    diff_fields = {f.name for f in fields(DiffStats)}
    for s in finalize.STATISTICS:
        assert s.name in REFERENCES, f"no reference for {s.name}"
        assert s.field in value_fields, s.name
        assert s.values_only or s.field in diff_fields, s.name
        assert (s.finalize is None) != (s.quantity is None), s.name


def test_higher_orders_slots_come_last_so_order_2_arrays_are_unchanged():
    for names in reduction.ARRAYS.values():
        orders = [reduction.BY_NAME[n].order for n in names]
        assert orders == sorted(orders)
    # the bytes of states and checkpoints: order 2 packs the quantities it always did
    packed = [q.name for q in reduction.KEPT if reduction.present(q, True, 2)]
    assert packed == ["count", "nan_count", "sum1", "sum2", "weight", "minimum", "maximum"]


def _data(rng, n: int = 3000) -> np.ndarray:
    """Three features at a large offset: normal, gamma (skewed), lognormal (heavy tail)."""
    return np.stack(
        [
            1e4 + rng.standard_normal(n),
            1e4 + rng.gamma(2.0, 1.0, n),
            1e4 + rng.lognormal(0.0, 0.5, n),
        ],
        axis=1,
    )


def _moments_of(values: np.ndarray, order: int, pieces: int, weights=None) -> Moments:
    """The exact moments of ``values`` (T, G, F) summed by the kernel in ``pieces``
    blocks of time steps (each step its own summation unit)."""
    acc = StreamMoments.create(values.shape[2], (), weights is not None, order=order)
    for chunk in np.array_split(np.arange(values.shape[0]), pieces):
        block = Block(values[chunk], np.arange(values.shape[2]), (0, len(chunk)), weights=weights)
        acc.add(block_sums(block, order=order))
    return acc.values


@pytest.mark.parametrize("order", reduction.ORDERS)
def test_each_statistic_matches_a_float64_two_pass_reference(order):
    rng = np.random.default_rng(0)
    data = _data(rng).reshape(30, 100, 3)
    got = _moments_of(data, order, 4).statistics()
    flat = data.reshape(-1, 3)
    for s in finalize.statistics_of(order):
        want = REFERENCES[s.name](flat)
        tol = TOLERANCE.get(s.name, 1e-12)
        np.testing.assert_allclose(got[s.field], want, rtol=tol, atol=tol, err_msg=s.name)
    missing = {s.field for s in finalize.STATISTICS} - set(got)
    assert missing == {s.field for s in finalize.STATISTICS if s.order > order}


def test_the_higher_power_sums_are_the_units_sums_made_exact():
    """Each unit's float64 sums of ``y**j`` (weighted ``w y**j``) with its reference
    ``K``, ``S`` give ``Σx**p = Σ_j C(p, j) K**(p-j) S**j Σy**j`` exactly, computed
    here in rationals; and close to the data's own sums."""
    from math import comb

    rng = np.random.default_rng(1)
    data = (1e3 + rng.standard_normal((5, 40, 2))).astype(np.float32)
    weights = rng.uniform(0.5, 2.0, 40)
    for w in (None, weights):
        block = Block(data, np.arange(2), (0, 5), weights=w)
        sums = block_sums(block, order=4)
        moments = Moments.create(2, w is not None, order=4)
        StreamMoments(moments).add(sums)
        for f in range(2):
            raw = moments.raw(f)
            for p in (1, 2, 3, 4):
                want = Fraction(0)
                for t in range(5):
                    k = Fraction(float(sums.refs.shift[t, f]))
                    scale = Fraction(float(sums.refs.scale[t, f]))
                    n = int(sums.step_count[t, f]) if w is None else float(sums.step_weight[t, f])
                    ys = [Fraction(n)] + [
                        Fraction(float(sums.of(f"sum{j}")[0, t, f])) for j in range(1, p + 1)
                    ]
                    want += sum(comb(p, j) * k ** (p - j) * scale**j * ys[j] for j in range(p + 1))
                assert raw.sums[p - 1] == want, (p, f)
                ws = np.ones(200) if w is None else np.tile(w, 5)
                x = data[:, :, f].astype(np.float64).ravel()
                assert float(raw.sums[p - 1]) == pytest.approx(float((ws * x**p).sum()), rel=1e-12)


@pytest.mark.parametrize("order", reduction.ORDERS)
def test_merge_of_any_grouping_gives_the_same_bytes(order):
    rng = np.random.default_rng(2)
    data = _data(rng, 1200).reshape(12, 100, 3)
    parts = [_moments_of(data[i : i + 1], order, 1) for i in range(12)]
    results = set()
    for permutation in (range(12), reversed(range(12)), rng.permutation(12)):
        total = Moments.create(3, order=order)
        for i in permutation:
            total.merge(parts[i])
        results.add(tuple(v.tobytes() for v in total.statistics().values()))
    tree = Moments.create(3, order=order)
    for half in (parts[:5], parts[5:]):
        sub = Moments.create(3, order=order)
        for p in half:
            sub.merge(p)
        tree.merge(sub)
    results.add(tuple(v.tobytes() for v in tree.statistics().values()))
    assert len(results) == 1


@pytest.mark.parametrize("order", reduction.ORDERS)
def test_every_layout_gives_the_same_bytes(order):
    """Blocks of any size (threads, ranks and checkpoints cut the data the same way)."""
    rng = np.random.default_rng(3)
    data = _data(rng, 2400).reshape(24, 100, 3).astype(np.float32)
    seen = set()
    for pieces in (1, 3, 24):
        stats = _moments_of(data, order, pieces).statistics()
        seen.add(tuple(v.tobytes() for v in stats.values()))
    assert len(seen) == 1


def test_moments_of_other_orders_do_not_merge():
    with pytest.raises(ValueError, match="order"):
        Moments.create(2, order=2).merge(Moments.create(2, order=4))


@pytest.mark.parametrize("order", reduction.ORDERS)
@pytest.mark.parametrize("weighted", [False, True])
def test_numpy_twin_is_the_compiled_kernel_for_every_quantity(monkeypatch, order, weighted):
    rng = np.random.default_rng(4)
    a = (1e4 + rng.standard_normal((7, 600, 4))).astype(np.float32)
    a[3, 5, 1] = np.nan  # the checked path too
    w = rng.uniform(0.5, 2.0, 600) if weighted else None
    block = Block(a, np.arange(4), (0, 7), {1: (1, 7), 2: (2, 7)}, weights=w)
    out = {}
    for kind in ("numpy", "numba"):
        monkeypatch.setattr(choice, "KERNEL", kind)
        out[kind] = block_sums(block, order=order)
    for q in reduction.QUANTITIES:
        twin, compiled = out["numpy"].of(q.name), out["numba"].of(q.name)
        assert (twin is None) == (q.order > order), q.name
        if twin is not None:
            assert twin.tobytes() == compiled.tobytes(), q.name


def test_packing_round_trips_every_quantity():
    rng = np.random.default_rng(5)
    data = _data(rng, 600).reshape(6, 100, 3)
    for order in reduction.ORDERS:
        for w in (None, rng.uniform(0.5, 2.0, 100)):
            m = _moments_of(data, order, 2, w)
            back = Moments.unpack(*m.pack(), weighted=w is not None, order=order)
            for q in reduction.KEPT:
                a, b = getattr(m, q.name), getattr(back, q.name)
                assert (a is None) == (b is None), q.name
                if a is not None:
                    assert list(a) == list(b), q.name
