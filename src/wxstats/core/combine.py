"""The exact combiner: create, add a block's per-step sums, merge, extract.

A :class:`Moments` holds, per feature, the count, the exact sums of ``x`` and
of ``x²``, the extremes and the NaN count. The sums are exact integers
(:mod:`wxstats.core.exact`): each time step (the summation unit) is summed in
float64 relative to its own reference (:mod:`wxstats.core.unit_reference`) and
its raw sums made exact, so :meth:`Moments.merge` is associative and
commutative down to the last bit and the moments of any pieces of the same
data (ranks, blocks, resumed runs, states computed apart) merge to the full
run's; the only rounding happens once, in :meth:`Moments.extract`.

:mod:`wxstats.core.accumulator` groups the moments of a run (per stream: the
values and the differences for each step).

Weighted moments (``--weights``, an area weighting) also hold the exact sum of
the weights, and their sums are of ``w x`` and ``w x²``: the mean is
``sum(w x) / sum(w)``, made exact the same way, so a weighted run is as
independent of its layout as an unweighted one.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from wxstats.core import finalize, reduction
from wxstats.core.exact import (
    exact_sum,
    fixed_to_fraction,
    from_limbs,
    to_limbs,
    unit_power_sums,
    unit_raw_sums,
)


class NonFiniteSums(ArithmeticError):
    """A unit's float64 sums overflowed; ``features`` are the indices concerned."""

    def __init__(self, features: list[int]) -> None:
        super().__init__(f"non-finite sums for features {features}")
        self.features = features


@dataclass
class Moments:
    """Exact partial moments of F features (see module docstring)."""

    count: np.ndarray  # int64 (F,)
    sum1: np.ndarray  # object (F,), exact fixed-point ints of sum(x) (weighted: of w x)
    sum2: np.ndarray  # object (F,), exact fixed-point ints of sum(x²) (weighted: of w x²)
    minimum: np.ndarray  # float64 (F,)
    maximum: np.ndarray  # float64 (F,)
    nan_count: np.ndarray  # int64 (F,)
    weight: np.ndarray | None = None
    """object (F,): exact fixed-point sums of the weights (weighted moments only)."""
    sum3: np.ndarray | None = None
    """object (F,): exact sums of ``x³`` (``w x³``), moments of order 4 only."""
    sum4: np.ndarray | None = None
    """object (F,): exact sums of ``x⁴`` (``w x⁴``), moments of order 4 only."""

    @staticmethod
    def words_per_feature(weighted: bool, order: int = 2) -> int:
        """int64 words per feature when packed: a word per count, a limb vector per
        exact sum (:func:`_packed`)."""
        return sum(1 if q.merge == "count" else q.limbs for q in _packed(weighted, order))

    @property
    def weighted(self) -> bool:
        return self.weight is not None

    @property
    def order(self) -> int:
        """The highest power of ``x`` whose exact sum the moments hold (2, or 4
        with ``--moments 4``)."""
        return max(q.power for q in reduction.POWERS if getattr(self, q.name) is not None)

    @staticmethod
    def create(n_features: int, weighted: bool = False, order: int = 2) -> Moments:
        """Every kept quantity of :mod:`wxstats.core.reduction` at its identity."""
        if order not in reduction.ORDERS:
            raise ValueError(f"moments of order {order}: only {reduction.ORDERS}")
        fields: dict[str, np.ndarray | None] = {}
        for q in reduction.KEPT:
            if not reduction.present(q, weighted, order):
                fields[q.name] = None
            elif q.merge == "sum":  # exact fixed-point integers
                fields[q.name] = np.zeros(n_features, dtype=object)
                fields[q.name][:] = 0
            else:
                fields[q.name] = np.full(n_features, q.zero, dtype=q.dtype)
        return Moments(**fields)

    @property
    def n_features(self) -> int:
        return int(self.count.shape[0])

    def add(
        self,
        count: np.ndarray,
        sums1: np.ndarray,
        sums2: np.ndarray,
        shift: np.ndarray,
        scale: np.ndarray,
        minimum: np.ndarray | None = None,
        maximum: np.ndarray | None = None,
        nan_count: np.ndarray | None = None,
        at: int = 0,
        weights: np.ndarray | None = None,
        higher: tuple[np.ndarray, ...] = (),
    ) -> None:
        """Add units (U, F): their counts, finite float64 sums of ``y = (x - shift)
        / scale`` and of ``y²`` and their references, to features ``at .. at + F``
        (a group of a climatology, else all); ``weights``: the units' sums of the
        weights (weighted moments only; the sums are then of ``w y``, ``w y²``);
        ``higher``: the sums of ``y³``, ``y⁴`` (``w y³``...) of moments of order 4."""
        f = slice(at, at + int(np.shape(count)[1]))
        if (weights is None) != (self.weight is None):
            raise ValueError("weighted and unweighted sums do not mix")
        if len(higher) != self.order - 2:
            raise ValueError(f"{2 + len(higher)} powers summed for moments of order {self.order}")
        count = np.asarray(count, dtype=np.int64)
        if weights is not None:
            # a unit with finite values but no weight adds nothing to the weighted sums
            divisor = np.where(count > 0, np.asarray(weights, dtype=np.float64), 0.0)
            self.weight[f] = self.weight[f] + exact_sum(divisor).sum(axis=0)
        else:
            divisor = count
        sx, sxx = unit_raw_sums(divisor, sums1, sums2, shift, scale)
        self.count[f] += count.sum(axis=0)
        self.sum1[f] = self.sum1[f] + sx
        self.sum2[f] = self.sum2[f] + sxx
        ys = [sums1, sums2, *higher]
        for q in reduction.POWERS[2 : self.order]:
            exact = unit_power_sums(q.power, divisor, ys, shift, scale, q.fraction_bits)
            held = getattr(self, q.name)
            held[f] = held[f] + exact
        if minimum is not None:
            np.minimum(self.minimum[f], minimum, out=self.minimum[f])
        if maximum is not None:
            np.maximum(self.maximum[f], maximum, out=self.maximum[f])
        if nan_count is not None:
            self.nan_count[f] += np.asarray(nan_count, dtype=np.int64)

    def merge(self, other: Moments) -> None:
        """Add ``other`` into ``self`` (exact, order-independent); refused, with
        ``self`` unchanged, when one side is weighted and the other is not, or
        they hold other powers (``--moments``)."""
        if (other.weight is None) != (self.weight is None):
            raise ValueError("weighted and unweighted moments do not merge")
        if other.order != self.order:
            raise ValueError(f"moments of order {other.order} and {self.order} do not merge")
        for q in _packed(self.weighted, self.order):
            setattr(self, q.name, getattr(self, q.name) + getattr(other, q.name))
        for q in _extremes():
            merge = np.minimum if q.merge == "min" else np.maximum
            merge(getattr(self, q.name), getattr(other, q.name), out=getattr(self, q.name))

    def divisor(self, f: int) -> int | Fraction:
        """What feature ``f``'s sums are divided by: its count of finite values, or
        (weighted) the exact sum of their weights, 0 when they all weigh nothing."""
        if self.weight is not None:
            return fixed_to_fraction(self.weight[f])
        return int(self.count[f])

    def extract(self) -> tuple[np.ndarray, np.ndarray]:
        """Population mean and std (ddof=0) of each feature (:meth:`statistics`)."""
        out = self.statistics()
        return out["mean"], out["std"]

    def raw(self, f: int) -> finalize.Raw:
        """Feature ``f``'s exact raw moments: its divisor and sums of ``x``, ``x²``
        (weighted: of ``w x``, ``w x²``), and so on up to the moments' order."""
        sums = tuple(
            fixed_to_fraction(getattr(self, q.name)[f], q.fraction_bits)
            for q in reduction.POWERS[: self.order]
        )
        return finalize.Raw(self.divisor(f), sums)

    def statistics(
        self, groups: list[list[int]] | None = None, diffs: bool = False
    ) -> dict[str, np.ndarray]:
        """Every declared statistic (:data:`wxstats.core.finalize.STATISTICS`; of
        the differences, ``diffs``: those they have) by its result field, for each
        feature or each of ``groups`` of features taken as one (``--pool``:
        anemoi's joint normalizer, the exact raw moments of its features added):
        the one place the exact moments are rounded, once each. Without a finite
        value (or weight), a statistic is NaN."""
        groups = [[f] for f in range(self.n_features)] if groups is None else groups
        counts = [int(self.count[g].sum()) for g in groups]
        out: dict[str, np.ndarray] = {}
        raws: list[finalize.Raw] | None = None
        for s in finalize.statistics_of(self.order, diffs):
            if s.finalize is None:
                q = reduction.BY_NAME[str(s.quantity)]
                held = getattr(self, q.name)
                if q.merge == "count":
                    out[s.field] = np.array([int(held[g].sum()) for g in groups], np.int64)
                    continue
                pick = np.min if q.merge == "min" else np.max
                found = zip(groups, counts, strict=True)
                out[s.field] = np.array([float(pick(held[g])) if c else np.nan for g, c in found])
                continue
            if raws is None:
                raws = [sum((self.raw(f) for f in g[1:]), self.raw(g[0])) for g in groups]
            out[s.field] = np.array([s.finalize(r) if r.n != 0 else np.nan for r in raws])
        return out

    # -- fixed-size packing for the gather and checkpoints ---------------------
    def pack(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(int64 words summed across ranks, float64 minima, float64 maxima): the
        counts, then the exact sums' limbs, in the declaration's order."""
        words = [
            getattr(self, q.name)
            if q.merge == "count"
            else to_limbs(getattr(self, q.name), q.limbs).ravel()
            for q in _packed(self.weighted, self.order)
        ]
        minimum, maximum = (getattr(self, q.name).copy() for q in _extremes())
        return np.concatenate(words), minimum, maximum

    @staticmethod
    def unpack(
        ints: np.ndarray,
        minimum: np.ndarray,
        maximum: np.ndarray,
        weighted: bool = False,
        order: int = 2,
    ) -> Moments:
        f = int(minimum.shape[0])
        if ints.shape[0] != f * Moments.words_per_feature(weighted, order):
            raise ValueError(f"{ints.shape[0]} words do not pack {f} features")
        fields: dict[str, np.ndarray | None] = {}
        start = 0
        for q in _packed(weighted, order):
            if q.merge == "count":
                fields[q.name] = ints[start : start + f].astype(np.int64)
                start += f
            else:
                words = ints[start : start + f * q.limbs]
                fields[q.name] = from_limbs(words.reshape(f, q.limbs))
                start += f * q.limbs
        for q, values in zip(_extremes(), (minimum, maximum), strict=True):
            fields[q.name] = np.asarray(values, dtype=np.float64).copy()
        return Moments(**fields)


def _packed(weighted: bool, order: int = 2) -> list[reduction.Quantity]:
    """The kept quantities that add (counts, exact sums), in packing order."""
    return [
        q
        for q in reduction.KEPT
        if q.merge in ("count", "sum") and reduction.present(q, weighted, order)
    ]


def _extremes() -> list[reduction.Quantity]:
    """The kept minimum and maximum (packed as float64, merged by min/max)."""
    return [q for q in reduction.KEPT if q.merge in ("min", "max")]
