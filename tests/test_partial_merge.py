"""Properties of the exact partial sums: any pieces of the same data merge to the
whole, byte for byte, in any order and grouping (each time step is summed with its
own reference, so no piece depends on another)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference import two_pass
from wxstats.core.accumulator import RunMoments, StreamMoments
from wxstats.core.blocks import Block, restrict
from wxstats.core.kernel import block_sums
from wxstats.core.partial import Coverage, CoverageOverlap, Partial, PartialMismatch

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
    from wxstats.core.kernel import step_references
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


# -- Coverage and Partial (core.partial): a set of units, and exact sums that carry it --

SERIES = ("train", "nwp_2021010100_mbr000.npy")


def _units(draw_set: set[tuple[str, int]]) -> Coverage:
    """A coverage of a set of (series, step) units, built one unit at a time."""
    return Coverage.of((s, t, t + 1) for s, t in sorted(draw_set))


def _as_set(coverage: Coverage) -> set[tuple[str, int]]:
    return {(s, t) for s, a, b in coverage.spans() for t in range(a, b)}


unit_sets = st.sets(st.tuples(st.sampled_from(SERIES), st.integers(0, 30)), max_size=25)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(x=unit_sets, y=unit_sets, window=st.tuples(st.integers(0, 30), st.integers(0, 31)))
def test_coverage_is_a_set_of_units(x, y, window):
    """Union, overlap, difference, what a window lacks and the JSON form agree
    with Python's sets of (series, step)."""
    cx, cy = _units(x), _units(y)
    assert _as_set(cx) == x and len(cx) == len(x)
    assert Coverage.from_json(cx.to_json()) == cx
    for spans in cx.ranges.values():  # sorted, disjoint, touching ones joined
        assert all(b < c for (_, b), (c, _) in zip(spans[:-1], spans[1:], strict=False))
    shared = cx.overlap(cy)
    if x & y:
        series, (a, b) = shared
        assert {(series, t) for t in range(a, b)} <= x & y
        with pytest.raises(CoverageOverlap, match=series):
            cx.union(cy)
    else:
        assert shared is None
        assert _as_set(cx.union(cy)) == x | y
        assert cx.union(cy) == cy.union(cx)
    assert _as_set(cx.difference(cy)) == x - y
    lo, hi = min(window), max(window)
    lacking = {(SERIES[0], t) for a, b in cx.missing(SERIES[0], lo, hi) for t in range(a, b)}
    assert lacking == {(SERIES[0], t) for t in range(lo, hi)} - x


def test_coverage_refuses_a_unit_given_twice_and_bad_json():
    with pytest.raises(CoverageOverlap, match=r"train: steps \[3, 4\) are held twice"):
        Coverage.of([("train", 0, 4), ("train", 3, 6)])
    for bad in ([1, 2], {"train": [[3, 2]]}, {"train": [[0, 1.5]]}):
        with pytest.raises(ValueError):
            Coverage.from_json(bad)


def _run_partial(a: np.ndarray, runs: list[tuple[int, int]], weights) -> Partial:
    """What a state of steps ``runs`` of ``a`` holds, computed from those steps
    alone: their values, the differences inside each run, each run's edges."""
    reach = max(LAGS)
    sums = StreamMoments.create(a.shape[2], LAGS, weighted=weights is not None)
    heads, tails = {}, {}
    for lo, hi in runs:
        n = hi - lo
        block = Block(
            a[lo:hi], np.arange(a.shape[2]), (0, n), {k: (k, n) for k in LAGS}, weights=weights
        )
        sums.add(block_sums(block))
        m = min(reach, n)
        heads[("train", lo)] = {"x": a[lo : lo + m]}
        tails[("train", hi)] = {"x": a[hi - m : hi]}
    coverage = Coverage({"train": tuple(runs)})
    return Partial(RunMoments({"x": sums}), coverage, {"data": "x"}, reach, heads, tails)


def _seam_of(weights):
    def seam(series, at, tail, head) -> RunMoments:
        """The differences from ``tail``'s steps into ``head``'s, as the runtime's seam."""
        t, h = tail["x"], head["x"]
        array = np.concatenate([t, h])
        diffs = {k: (max(len(t), k), min(len(t) + k, len(array))) for k in LAGS}
        diffs = {k: r if r[0] < r[1] else (0, 0) for k, r in diffs.items()}
        block = Block(array, np.arange(array.shape[2]), (0, 0), diffs, weights=weights)
        out = StreamMoments.create(array.shape[2], LAGS, weighted=weights is not None)
        out.add(block_sums(block))
        return RunMoments({"x": out})

    return seam


def _partial_bytes(p: Partial) -> list:
    edges = [(k, v["x"].tobytes()) for d in (p.heads, p.tails) for k, v in sorted(d.items())]
    return [_bytes(p.sums.streams["x"]), p.coverage.to_json(), edges]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_t=st.integers(2, 14),
    n_pieces=st.integers(1, 5),
    weighted=st.booleans(),
    nan_fraction=st.sampled_from([0.0, 0.1]),
    data=st.data(),
)
def test_partials_of_any_unit_sets_merge_to_the_whole(
    seed, n_t, n_pieces, weighted, nan_fraction, data
):
    """Steps dealt at random to pieces (each piece: any set of steps, so ranges
    with gaps), each piece's sums computed from its own steps alone, merged in
    any order and grouping with the seams' differences: the whole run's sums,
    coverage and edges, byte for byte."""
    rng = np.random.default_rng(seed)
    a = (280.0 + 9.0 * rng.standard_normal((n_t, 6, 2))).astype(np.float32)
    a[rng.random(a.shape) < nan_fraction] = np.nan
    weights = rng.uniform(0.0, 2.0, 6) if weighted else None
    owner = data.draw(st.lists(st.integers(0, n_pieces - 1), min_size=n_t, max_size=n_t))
    pieces = []
    for i in sorted(set(owner)):
        steps = [t for t in range(n_t) if owner[t] == i]
        pieces.append(_run_partial(a, _intervals(steps), weights))
    order = data.draw(st.permutations(range(len(pieces))))
    splits = data.draw(st.lists(st.integers(0, 100), max_size=6))
    seam = _seam_of(weights)

    def tree(parts: list[Partial], splits: list[int]) -> Partial:
        if len(parts) == 1:
            return parts[0]
        cut = 1 + splits[0] % (len(parts) - 1) if splits else len(parts) // 2
        return tree(parts[:cut], splits[1:]).merge(tree(parts[cut:], splits[1:]), seam)

    merged = tree([pieces[i] for i in order], splits)
    assert _partial_bytes(merged) == _partial_bytes(_run_partial(a, [(0, n_t)], weights))


def test_overlapping_or_foreign_partials_are_refused_and_left_unchanged():
    rng = np.random.default_rng(3)
    a = (280.0 + rng.standard_normal((10, 5, 1))).astype(np.float32)
    left, right = _run_partial(a, [(0, 6)], None), _run_partial(a, [(4, 10)], None)
    before = [_partial_bytes(left), _partial_bytes(right)]
    with pytest.raises(CoverageOverlap, match=r"train: steps \[4, 6\) are held twice"):
        left.merge(right, _seam_of(None))
    other = _run_partial(a, [(6, 10)], None)
    other.identity = {"data": "y"}
    with pytest.raises(PartialMismatch):
        left.merge(other, _seam_of(None))
    assert [_partial_bytes(left), _partial_bytes(right)] == before
    empty = Partial.empty(left.sums, left.identity, left.reach)
    assert _partial_bytes(empty.merge(left)) == _partial_bytes(left)


def test_a_partial_moved_to_other_positions_is_the_partial_computed_there():
    """Ranges computed at their own positions (a state's steps from its own first
    time), moved onto a larger grid: the partial computed at those positions,
    byte for byte, which then merges with the rest into the whole run."""
    rng = np.random.default_rng(5)
    a = (280.0 + 9.0 * rng.standard_normal((12, 5, 2))).astype(np.float32)
    own = _run_partial(a[3:10], [(0, 3), (5, 7)], None)  # steps 3-5 and 8-9 of a
    moved = own.moved("train", {0: 3, 5: 8})
    assert _partial_bytes(moved) == _partial_bytes(_run_partial(a, [(3, 6), (8, 10)], None))
    assert _partial_bytes(own) == _partial_bytes(_run_partial(a[3:10], [(0, 3), (5, 7)], None))
    rest = _run_partial(a, [(0, 3), (6, 8), (10, 12)], None)
    whole = moved.merge(rest, _seam_of(None))
    assert _partial_bytes(whole) == _partial_bytes(_run_partial(a, [(0, 12)], None))
