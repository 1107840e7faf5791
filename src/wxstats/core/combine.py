"""The exact combiner: create, add a block's per-step sums, merge, extract.

A :class:`Moments` holds, per feature, the count, the exact sums of
``(x - shift) / scale`` and of its square, the extremes and the NaN count.
Sums are exact integers (:mod:`wxstats.core.exact`), so :meth:`Moments.merge`
is associative and commutative down to the last bit; the only rounding happens
once, in :meth:`Moments.extract`.

What is made exact is decided by the source's *summation unit*: the kernel
returns one row of float64 sums per time step; when a sample is always read
whole (neural-lam's files), the rows of a sample are added in time order and
the sum made exact; when the grouping of time steps into samples may change
(a zarr store read in blocks of any size), every row is made exact on its own.
Either way the result never depends on how samples are spread over threads,
ranks or resumed runs.

:mod:`wxstats.core.accumulator` groups the moments of a run (per stream: the
values and the differences for each step).

Weighted moments (``--weights``, an area weighting) also hold the exact sum of
the weights, and their sums are of ``w * y`` and ``w * y * y``: the mean is
``sum(w x) / sum(w)``, made exact the same way, so a weighted run is as
independent of its layout as an unweighted one.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from wxstats.core.exact import (
    NUM_LIMBS,
    exact_sum,
    fixed_to_fraction,
    from_limbs,
    sqrt_correctly_rounded,
    to_limbs,
)
from wxstats.core.kernels import in_time_order


@dataclass(frozen=True)
class Reference:
    """Per-feature shift and power-of-two scale applied before summing.

    Shifting by a value close to the mean removes the cancellation of
    ``E[x²] - E[x]²``; dividing by a power of two near the spread keeps
    squares of huge (1e160) or tiny (denormal) values in range, exactly.
    Every rank derives the same reference from the same data.
    """

    shift: np.ndarray  # float64 (F,)
    scale: np.ndarray  # float64 (F,), powers of two

    @staticmethod
    def from_values(values: np.ndarray) -> Reference:
        """Reference from sample values of shape (..., F); NaN/Inf ignored."""
        v = np.asarray(values, dtype=np.float64).reshape(-1, np.shape(values)[-1])
        n_features = v.shape[1]
        shift = np.zeros(n_features)
        scale = np.ones(n_features)
        for f in range(n_features):
            column = v[:, f]
            finite = column[np.isfinite(column)]
            if finite.size == 0:
                continue
            # mean without overflow even for |x| ~ 1e300
            big = np.max(np.abs(finite))
            k = float(np.mean(finite / big) * big) if big > 0 else 0.0
            if not np.isfinite(k):
                k = float(finite[0])
            shift[f] = k
            spread = float(np.max(np.abs(finite - k))) if np.isfinite(finite - k).all() else big
            magnitude = spread if spread > 0 else abs(k)
            if magnitude > 0 and np.isfinite(magnitude):
                # keep 1/scale a normal float64 so that multiplying by it is exact
                scale[f] = 2.0 ** int(np.clip(np.frexp(magnitude)[1], -1020, 1020))
        return Reference(shift=shift, scale=scale)


@dataclass(frozen=True)
class StreamReference:
    """The references of a stream's values and of its differences per step."""

    values: Reference
    diffs: dict[int, Reference]


class NonFiniteSums(ArithmeticError):
    """A unit's float64 sums overflowed; ``features`` are the indices concerned."""

    def __init__(self, features: list[int]) -> None:
        super().__init__(f"non-finite sums for features {features}")
        self.features = features


def unit_sums(rows: np.ndarray, per_step: bool) -> np.ndarray:
    """The float64 sums made exact: every row (``per_step``), or the rows added
    in time order (the sample is the unit); shape (units, F)."""
    return rows if per_step else in_time_order(rows)[None, :]


@dataclass
class Moments:
    """Exact partial moments of F features (see module docstring)."""

    count: np.ndarray  # int64 (F,)
    sum1: np.ndarray  # object (F,), exact fixed-point ints of sum((x-shift)/scale)
    sum2: np.ndarray  # object (F,), exact fixed-point ints of sum(((x-shift)/scale)**2)
    minimum: np.ndarray  # float64 (F,)
    maximum: np.ndarray  # float64 (F,)
    nan_count: np.ndarray  # int64 (F,)
    weight: np.ndarray | None = None
    """object (F,): exact fixed-point sums of the weights (weighted moments only)."""

    @staticmethod
    def words_per_feature(weighted: bool) -> int:
        """int64 words per feature when packed: count, NaN count, two limb vectors
        (three when weighted: the weights' sum)."""
        return 2 + (3 if weighted else 2) * NUM_LIMBS

    @property
    def weighted(self) -> bool:
        return self.weight is not None

    @staticmethod
    def create(n_features: int, weighted: bool = False) -> Moments:
        zeros = np.zeros(n_features, dtype=object)
        zeros[:] = 0
        return Moments(
            count=np.zeros(n_features, dtype=np.int64),
            sum1=zeros.copy(),
            sum2=zeros.copy(),
            minimum=np.full(n_features, np.inf),
            maximum=np.full(n_features, -np.inf),
            nan_count=np.zeros(n_features, dtype=np.int64),
            weight=zeros.copy() if weighted else None,
        )

    @property
    def n_features(self) -> int:
        return int(self.count.shape[0])

    def add(
        self,
        count: np.ndarray,
        sums1: np.ndarray,
        sums2: np.ndarray,
        minimum: np.ndarray | None = None,
        maximum: np.ndarray | None = None,
        nan_count: np.ndarray | None = None,
        at: int = 0,
        weights: np.ndarray | None = None,
    ) -> None:
        """Add the finite unit sums (units, F) of a block (see :func:`unit_sums`)
        to features ``at .. at + F`` (a group of a climatology, else all);
        ``weights``: the unit sums of the weights (weighted moments only)."""
        f = slice(at, at + int(np.shape(count)[0]))
        if (weights is None) != (self.weight is None):
            raise ValueError("weighted and unweighted sums do not mix")
        if weights is not None:
            self.weight[f] = self.weight[f] + exact_sum(weights).sum(axis=0)
        self.count[f] += np.asarray(count, dtype=np.int64)
        self.sum1[f] = self.sum1[f] + exact_sum(sums1).sum(axis=0)
        self.sum2[f] = self.sum2[f] + exact_sum(sums2).sum(axis=0)
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
        self.count += other.count
        self.sum1 = self.sum1 + other.sum1
        self.sum2 = self.sum2 + other.sum2
        np.minimum(self.minimum, other.minimum, out=self.minimum)
        np.maximum(self.maximum, other.maximum, out=self.maximum)
        self.nan_count += other.nan_count
        if other.weight is not None:
            self.weight = self.weight + other.weight

    def divisor(self, f: int) -> int | Fraction:
        """What feature ``f``'s sums are divided by: its count of finite values, or
        (weighted) the exact sum of their weights, 0 when they all weigh nothing."""
        if self.weight is not None:
            return fixed_to_fraction(self.weight[f])
        return int(self.count[f])

    def extract(self, reference: Reference) -> tuple[np.ndarray, np.ndarray]:
        """Population mean and std (ddof=0), each rounded once from the exact
        rational value of the summed sums (weighted: divided by the exact sum of
        the weights instead of the count). Features with a zero count give NaN."""
        mean = np.full(self.n_features, np.nan)
        std = np.full(self.n_features, np.nan)
        for f in range(self.n_features):
            n = self.divisor(f)
            if n == 0:
                continue
            shift = Fraction(float(reference.shift[f]))
            scale = Fraction(float(reference.scale[f]))
            s1 = fixed_to_fraction(self.sum1[f])
            s2 = fixed_to_fraction(self.sum2[f])
            mean[f] = float(shift + scale * s1 / n)
            variance = scale * scale * (s2 * n - s1 * s1) / (n * n)
            # per-unit float sums can break Cauchy-Schwarz by an ulp when
            # the true variance is ~0: such a variance is zero.
            std[f] = sqrt_correctly_rounded(max(variance, Fraction(0)))
        return mean, std

    def raw_sums(self, reference: Reference, f: int) -> tuple[int | Fraction, Fraction, Fraction]:
        """Feature ``f``'s exact divisor, sum of ``x`` and sum of ``x²`` (weighted:
        of ``w x`` and ``w x²``), undoing its shift ``K`` and scale ``S``:
        ``n K + S Σy`` and ``n K² + 2 K S Σy + S² Σy²``."""
        n = self.divisor(f)
        shift = Fraction(float(reference.shift[f]))
        scale = Fraction(float(reference.scale[f]))
        s1 = fixed_to_fraction(self.sum1[f])
        s2 = fixed_to_fraction(self.sum2[f])
        return (
            n,
            n * shift + scale * s1,
            n * shift * shift + 2 * shift * scale * s1 + scale * scale * s2,
        )

    def pooled(
        self, reference: Reference, groups: list[list[int]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(count, mean, std, min, max) of each group of features taken as one
        (anemoi's joint normalizer: all levels of a variable), from the exact raw
        sums of its features (each with its own reference) added as rationals and
        rounded once; exact whatever the counts (or weights) of the features."""
        g = len(groups)
        count = np.zeros(g, dtype=np.int64)
        mean, std = np.full(g, np.nan), np.full(g, np.nan)
        minimum, maximum = np.full(g, np.nan), np.full(g, np.nan)
        for i, members in enumerate(groups):
            n, sx, sxx = 0, Fraction(0), Fraction(0)
            for f in members:
                nf, sxf, sxxf = self.raw_sums(reference, f)
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
        """(int64 words summed across ranks, float64 minima, float64 maxima)."""
        ints = np.concatenate(
            [
                self.count,
                self.nan_count,
                to_limbs(self.sum1).ravel(),
                to_limbs(self.sum2).ravel(),
                *([to_limbs(self.weight).ravel()] if self.weight is not None else []),
            ]
        )
        return ints, self.minimum.copy(), self.maximum.copy()

    @staticmethod
    def unpack(
        ints: np.ndarray, minimum: np.ndarray, maximum: np.ndarray, weighted: bool = False
    ) -> Moments:
        f = int(minimum.shape[0])
        if ints.shape[0] != f * Moments.words_per_feature(weighted):
            raise ValueError(f"{ints.shape[0]} words do not pack {f} features")
        limb_block = f * NUM_LIMBS

        def limbs(i: int) -> np.ndarray:
            start = 2 * f + i * limb_block
            return from_limbs(ints[start : start + limb_block].reshape(f, NUM_LIMBS))

        return Moments(
            count=ints[:f].astype(np.int64),
            sum1=limbs(0),
            sum2=limbs(1),
            minimum=np.asarray(minimum, dtype=np.float64).copy(),
            maximum=np.asarray(maximum, dtype=np.float64).copy(),
            nan_count=ints[f : 2 * f].astype(np.int64),
            weight=limbs(2) if weighted else None,
        )
