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

from wxstats.core import reduction
from wxstats.core.exact import (
    NUM_LIMBS,
    exact_sum,
    fixed_to_fraction,
    from_limbs,
    sqrt_correctly_rounded,
    to_limbs,
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

    @staticmethod
    def words_per_feature(weighted: bool) -> int:
        """int64 words per feature when packed: a word per count, a limb vector per
        exact sum (:func:`_packed`)."""
        return sum(1 if q.merge == "count" else NUM_LIMBS for q in _packed(weighted))

    @property
    def weighted(self) -> bool:
        return self.weight is not None

    @staticmethod
    def create(n_features: int, weighted: bool = False) -> Moments:
        """Every kept quantity of :mod:`wxstats.core.reduction` at its identity."""
        fields: dict[str, np.ndarray | None] = {}
        for q in reduction.KEPT:
            if q.weighted_only and not weighted:
                fields[q.name] = None
            elif q.merge == "sum":  # exact fixed-point integers
                fields[q.name] = np.zeros(n_features, dtype=object)
                fields[q.name][:] = 0
            else:
                fields[q.name] = np.full(n_features, q.identity, dtype=q.dtype)
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
    ) -> None:
        """Add units (U, F): their counts, finite float64 sums of ``y = (x - shift)
        / scale`` and of ``y²`` and their references, to features ``at .. at + F``
        (a group of a climatology, else all); ``weights``: the units' sums of the
        weights (weighted moments only; the sums are then of ``w y``, ``w y²``)."""
        f = slice(at, at + int(np.shape(count)[1]))
        if (weights is None) != (self.weight is None):
            raise ValueError("weighted and unweighted sums do not mix")
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
        if minimum is not None:
            np.minimum(self.minimum[f], minimum, out=self.minimum[f])
        if maximum is not None:
            np.maximum(self.maximum[f], maximum, out=self.maximum[f])
        if nan_count is not None:
            self.nan_count[f] += np.asarray(nan_count, dtype=np.int64)

    def merge(self, other: Moments) -> None:
        """Add ``other`` into ``self`` (exact, order-independent); refused, with
        ``self`` unchanged, when one side is weighted and the other is not."""
        if (other.weight is None) != (self.weight is None):
            raise ValueError("weighted and unweighted moments do not merge")
        for q in _packed(self.weighted):
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
        """Population mean and std (ddof=0), each rounded once from the exact
        rational value of the summed sums (weighted: divided by the exact sum of
        the weights instead of the count). Features with a zero count give NaN."""
        mean = np.full(self.n_features, np.nan)
        std = np.full(self.n_features, np.nan)
        for f in range(self.n_features):
            n, sx, sxx = self.raw_sums(f)
            if n == 0:
                continue
            mean[f] = float(sx / n)
            # per-unit float sums can break Cauchy-Schwarz by an ulp when the true
            # variance is ~0: such a variance is zero
            std[f] = sqrt_correctly_rounded(max((sxx * n - sx * sx) / (n * n), Fraction(0)))
        return mean, std

    def raw_sums(self, f: int) -> tuple[int | Fraction, Fraction, Fraction]:
        """Feature ``f``'s exact divisor, sum of ``x`` and sum of ``x²`` (weighted:
        of ``w x`` and ``w x²``)."""
        return self.divisor(f), fixed_to_fraction(self.sum1[f]), fixed_to_fraction(self.sum2[f])

    def pooled(
        self, groups: list[list[int]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(count, mean, std, min, max) of each group of features taken as one
        (anemoi's joint normalizer: all levels of a variable), from the exact raw
        sums of its features added and rounded once; exact whatever the counts
        (or weights) of the features."""
        g = len(groups)
        count = np.zeros(g, dtype=np.int64)
        mean, std = np.full(g, np.nan), np.full(g, np.nan)
        minimum, maximum = np.full(g, np.nan), np.full(g, np.nan)
        for i, members in enumerate(groups):
            n, sx, sxx = 0, Fraction(0), Fraction(0)
            for f in members:
                nf, sxf, sxxf = self.raw_sums(f)
                n, sx, sxx = n + nf, sx + sxf, sxx + sxxf
            count[i] = int(self.count[members].sum())
            if count[i] > 0:
                minimum[i] = float(self.minimum[members].min())
                maximum[i] = float(self.maximum[members].max())
            if n == 0:
                continue
            mean[i] = float(sx / n)
            std[i] = sqrt_correctly_rounded(max((sxx * n - sx * sx) / (n * n), Fraction(0)))
        return count, mean, std, minimum, maximum

    # -- fixed-size packing for the gather and checkpoints ---------------------
    def pack(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(int64 words summed across ranks, float64 minima, float64 maxima): the
        counts, then the exact sums' limbs, in the declaration's order."""
        words = [
            getattr(self, q.name) if q.merge == "count" else to_limbs(getattr(self, q.name)).ravel()
            for q in _packed(self.weighted)
        ]
        minimum, maximum = (getattr(self, q.name).copy() for q in _extremes())
        return np.concatenate(words), minimum, maximum

    @staticmethod
    def unpack(
        ints: np.ndarray, minimum: np.ndarray, maximum: np.ndarray, weighted: bool = False
    ) -> Moments:
        f = int(minimum.shape[0])
        if ints.shape[0] != f * Moments.words_per_feature(weighted):
            raise ValueError(f"{ints.shape[0]} words do not pack {f} features")
        fields: dict[str, np.ndarray | None] = {"weight": None}
        start = 0
        for q in _packed(weighted):
            if q.merge == "count":
                fields[q.name] = ints[start : start + f].astype(np.int64)
                start += f
            else:
                words = ints[start : start + f * NUM_LIMBS]
                fields[q.name] = from_limbs(words.reshape(f, NUM_LIMBS))
                start += f * NUM_LIMBS
        for q, values in zip(_extremes(), (minimum, maximum), strict=True):
            fields[q.name] = np.asarray(values, dtype=np.float64).copy()
        return Moments(**fields)


def _packed(weighted: bool) -> list[reduction.Quantity]:
    """The kept quantities that add (counts, exact sums), in packing order."""
    return [
        q
        for q in reduction.KEPT
        if q.merge in ("count", "sum") and (weighted or not q.weighted_only)
    ]


def _extremes() -> list[reduction.Quantity]:
    """The kept minimum and maximum (packed as float64, merged by min/max)."""
    return [q for q in reduction.KEPT if q.merge in ("min", "max")]
