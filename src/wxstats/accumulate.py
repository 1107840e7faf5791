"""Mergeable exact accumulators and the finalization into statistics.

A :class:`Moments` holds, per feature, the count, the exact sums of
``(x - shift) / scale`` and of its square, the extremes and the NaN count.
Sums are exact integers (:mod:`wxstats.exact`), so :meth:`Moments.merge` is
associative and commutative down to the last bit; the only rounding happens
once, in :meth:`Moments.finalize`.

A :class:`RunAccumulator` groups the moments of one run: the state, its
differences for each step, and each forcing stream. It packs into two flat
arrays (int64 for sums, float64 for extremes) so that the distributed runtime
and checkpoints move fixed-size tensors, never pickled objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from wxstats.exact import (
    NUM_LIMBS,
    exact_sum,
    fixed_to_fraction,
    from_limbs,
    sqrt_correctly_rounded,
    to_limbs,
)


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


@dataclass
class Moments:
    """Exact partial moments of one stream of F features (see module doc)."""

    count: np.ndarray  # int64 (F,)
    sum1: np.ndarray  # object (F,), exact fixed-point ints of sum((x-shift)/scale)
    sum2: np.ndarray  # object (F,), exact fixed-point ints of sum(((x-shift)/scale)**2)
    minimum: np.ndarray  # float64 (F,)
    maximum: np.ndarray  # float64 (F,)
    nan_count: np.ndarray  # int64 (F,)

    @staticmethod
    def empty(n_features: int) -> Moments:
        zeros = np.zeros(n_features, dtype=object)
        zeros[:] = 0
        return Moments(
            count=np.zeros(n_features, dtype=np.int64),
            sum1=zeros.copy(),
            sum2=zeros.copy(),
            minimum=np.full(n_features, np.inf),
            maximum=np.full(n_features, -np.inf),
            nan_count=np.zeros(n_features, dtype=np.int64),
        )

    @staticmethod
    def from_partials(
        count: np.ndarray,
        sum1: np.ndarray,
        sum2: np.ndarray,
        minimum: np.ndarray,
        maximum: np.ndarray,
        nan_count: np.ndarray,
    ) -> Moments:
        """Moments from one sample's float64 partial sums (exactly converted)."""
        return Moments(
            count=np.asarray(count, dtype=np.int64).copy(),
            sum1=exact_sum(sum1),
            sum2=exact_sum(sum2),
            minimum=np.asarray(minimum, dtype=np.float64).copy(),
            maximum=np.asarray(maximum, dtype=np.float64).copy(),
            nan_count=np.asarray(nan_count, dtype=np.int64).copy(),
        )

    @property
    def n_features(self) -> int:
        return int(self.count.shape[0])

    def merge(self, other: Moments) -> None:
        """Add ``other`` into ``self`` (exact, order-independent)."""
        self.count += other.count
        self.sum1 = self.sum1 + other.sum1
        self.sum2 = self.sum2 + other.sum2
        np.minimum(self.minimum, other.minimum, out=self.minimum)
        np.maximum(self.maximum, other.maximum, out=self.maximum)
        self.nan_count += other.nan_count

    def finalize(self, reference: Reference) -> tuple[np.ndarray, np.ndarray]:
        """Population mean and std (ddof=0), each rounded once from the exact
        rationals. Features with a zero count give NaN."""
        mean = np.full(self.n_features, np.nan)
        std = np.full(self.n_features, np.nan)
        for f in range(self.n_features):
            n = int(self.count[f])
            if n == 0:
                continue
            shift = Fraction(float(reference.shift[f]))
            scale = Fraction(float(reference.scale[f]))
            s1 = fixed_to_fraction(self.sum1[f])
            s2 = fixed_to_fraction(self.sum2[f])
            mean[f] = float(shift + scale * s1 / n)
            variance = scale * scale * (s2 * n - s1 * s1) / (n * n)
            # per-sample float sums can break Cauchy-Schwarz by an ulp when
            # the true variance is ~0: such a variance is zero.
            std[f] = sqrt_correctly_rounded(max(variance, Fraction(0)))
        return mean, std

    # -- fixed-size packing for collectives and checkpoints -----------------
    def int_words(self) -> int:
        return self.n_features * (2 + 2 * NUM_LIMBS)

    def pack(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(int64 words summed across ranks, float64 minima, float64 maxima)."""
        ints = np.concatenate(
            [
                self.count,
                self.nan_count,
                to_limbs(self.sum1).ravel(),
                to_limbs(self.sum2).ravel(),
            ]
        )
        return ints, self.minimum.copy(), self.maximum.copy()

    @staticmethod
    def unpack(ints: np.ndarray, minimum: np.ndarray, maximum: np.ndarray) -> Moments:
        f = int(minimum.shape[0])
        count = ints[:f].astype(np.int64)
        nan_count = ints[f : 2 * f].astype(np.int64)
        limb_block = f * NUM_LIMBS
        sum1 = from_limbs(ints[2 * f : 2 * f + limb_block].reshape(f, NUM_LIMBS))
        sum2 = from_limbs(ints[2 * f + limb_block : 2 * f + 2 * limb_block].reshape(f, NUM_LIMBS))
        return Moments(
            count=count,
            sum1=sum1,
            sum2=sum2,
            minimum=np.asarray(minimum, dtype=np.float64).copy(),
            maximum=np.asarray(maximum, dtype=np.float64).copy(),
            nan_count=nan_count,
        )


@dataclass
class StreamAccumulator:
    """Moments of one stream's values and of its differences for each step."""

    values: Moments
    diffs: dict[int, Moments] = field(default_factory=dict)

    @staticmethod
    def empty(n_features: int, steps: tuple[int, ...]) -> StreamAccumulator:
        return StreamAccumulator(
            values=Moments.empty(n_features), diffs={k: Moments.empty(n_features) for k in steps}
        )

    def merge(self, other: StreamAccumulator) -> None:
        self.values.merge(other.values)
        for k, moments in other.diffs.items():
            self.diffs[k].merge(moments)

    def parts(self) -> list[Moments]:
        return [self.values] + [self.diffs[k] for k in sorted(self.diffs)]


@dataclass
class RunAccumulator:
    """All streams of a run, keyed by stream name (e.g. "state", a forcing)."""

    streams: dict[str, StreamAccumulator]

    def empty_like(self) -> RunAccumulator:
        """An empty accumulator of the same layout (streams, features, steps)."""
        return RunAccumulator(
            {
                name: StreamAccumulator.empty(s.values.n_features, tuple(sorted(s.diffs)))
                for name, s in self.streams.items()
            }
        )

    def merge(self, other: RunAccumulator) -> None:
        for name, stream in other.streams.items():
            self.streams[name].merge(stream)

    def _parts(self) -> list[Moments]:
        return [m for name in sorted(self.streams) for m in self.streams[name].parts()]

    def pack(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Flat (int64 sums, float64 minima, float64 maxima) of every part."""
        packed = [m.pack() for m in self._parts()]
        return (
            np.concatenate([p[0] for p in packed]),
            np.concatenate([p[1] for p in packed]),
            np.concatenate([p[2] for p in packed]),
        )

    def unpack_like(self, ints: np.ndarray, minimum: np.ndarray, maximum: np.ndarray) -> None:
        """Replace the contents with packed arrays of the same layout."""
        i = j = 0
        for name in sorted(self.streams):
            stream = self.streams[name]
            parts = [("values", None)] + [("diff", k) for k in sorted(stream.diffs)]
            for kind, k in parts:
                f = stream.values.n_features
                words = f * (2 + 2 * NUM_LIMBS)
                moments = Moments.unpack(
                    ints[i : i + words], minimum[j : j + f], maximum[j : j + f]
                )
                if kind == "values":
                    stream.values = moments
                else:
                    stream.diffs[k] = moments
                i += words
                j += f
