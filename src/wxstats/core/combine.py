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

:class:`RunMoments` groups the moments of a run (per stream: the values and
the differences for each step) and packs into flat fixed-size arrays (int64
limbs for sums, float64 for extremes), which the gather across ranks and the
checkpoints move: never pickled objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from wxstats.core.errors import InputError
from wxstats.core.exact import (
    NUM_LIMBS,
    exact_sum,
    fixed_to_fraction,
    from_limbs,
    sqrt_correctly_rounded,
    to_limbs,
)
from wxstats.core.kernels import BlockSums, in_time_order
from wxstats.core.stats import DiffStats, Stats, StreamSpec, StreamStats


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

    WORDS_PER_FEATURE = 2 + 2 * NUM_LIMBS
    """int64 words per feature when packed: count, NaN count, two limb vectors."""

    @staticmethod
    def create(n_features: int) -> Moments:
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
    ) -> None:
        """Add the finite unit sums (units, F) of a block (see :func:`unit_sums`)
        to features ``at .. at + F`` (a group of a climatology, else all)."""
        f = slice(at, at + int(np.shape(count)[0]))
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
        """Add ``other`` into ``self`` (exact, order-independent)."""
        self.count += other.count
        self.sum1 = self.sum1 + other.sum1
        self.sum2 = self.sum2 + other.sum2
        np.minimum(self.minimum, other.minimum, out=self.minimum)
        np.maximum(self.maximum, other.maximum, out=self.maximum)
        self.nan_count += other.nan_count

    def extract(self, reference: Reference) -> tuple[np.ndarray, np.ndarray]:
        """Population mean and std (ddof=0), each rounded once from the exact
        rational value of the summed sums. Features with a zero count give NaN."""
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
            # per-unit float sums can break Cauchy-Schwarz by an ulp when
            # the true variance is ~0: such a variance is zero.
            std[f] = sqrt_correctly_rounded(max(variance, Fraction(0)))
        return mean, std

    # -- fixed-size packing for the gather and checkpoints ---------------------
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
        if ints.shape[0] != f * Moments.WORDS_PER_FEATURE:
            raise ValueError(f"{ints.shape[0]} words do not pack {f} features")
        limb_block = f * NUM_LIMBS
        return Moments(
            count=ints[:f].astype(np.int64),
            sum1=from_limbs(ints[2 * f : 2 * f + limb_block].reshape(f, NUM_LIMBS)),
            sum2=from_limbs(ints[2 * f + limb_block :].reshape(f, NUM_LIMBS)),
            minimum=np.asarray(minimum, dtype=np.float64).copy(),
            maximum=np.asarray(maximum, dtype=np.float64).copy(),
            nan_count=ints[f : 2 * f].astype(np.int64),
        )


@dataclass
class StreamMoments:
    """Moments of one stream's values and of its differences for each step."""

    values: Moments
    diffs: dict[int, Moments] = field(default_factory=dict)

    @staticmethod
    def create(n_features: int, steps: tuple[int, ...]) -> StreamMoments:
        return StreamMoments(
            Moments.create(n_features), {k: Moments.create(n_features) for k in steps}
        )

    def add(self, sums: BlockSums, per_step: bool, at: int = 0) -> None:
        """Add a block's per-step sums (to features from ``at``: a climatology's
        group). Raises :class:`NonFiniteSums`, before changing anything, when a
        unit's sum is not finite (the values span too wide a range for float64
        sums); its features count from ``at``."""
        parts = [(sums.step_sum1, sums.step_sum2)]
        parts += [(sums.diff_step_sum1[k], sums.diff_step_sum2[k]) for k in sorted(self.diffs)]
        units = [(unit_sums(a, per_step), unit_sums(b, per_step)) for a, b in parts]
        bad = sorted(
            {
                f
                for a, b in units
                for f in np.flatnonzero(~(np.isfinite(a).all(0) & np.isfinite(b).all(0)))
            }
        )
        if bad:
            raise NonFiniteSums([at + int(f) for f in bad])
        (v1, v2), *diff_units = units
        self.values.add(sums.count, v1, v2, sums.minimum, sums.maximum, sums.nan_count, at)
        for k, (d1, d2) in zip(sorted(self.diffs), diff_units, strict=True):
            self.diffs[k].add(
                sums.diff_count[k],
                d1,
                d2,
                sums.diff_minimum.get(k),
                sums.diff_maximum.get(k),
                at=at,
            )

    def merge(self, other: StreamMoments) -> None:
        self.values.merge(other.values)
        for k, moments in other.diffs.items():
            self.diffs[k].merge(moments)

    def parts(self) -> list[Moments]:
        return [self.values] + [self.diffs[k] for k in sorted(self.diffs)]


@dataclass
class RunMoments:
    """All streams of a run, keyed by stream name: the accumulator a rank
    fills, checkpoints and gathers (see module docstring)."""

    streams: dict[str, StreamMoments]

    @staticmethod
    def create(specs: list[StreamSpec]) -> RunMoments:
        return RunMoments(
            {s.name: StreamMoments.create(len(s.features), s.diff_steps) for s in specs}
        )

    def empty_like(self) -> RunMoments:
        """An empty accumulator of the same layout (streams, features, steps)."""
        return RunMoments(
            {
                name: StreamMoments.create(s.values.n_features, tuple(sorted(s.diffs)))
                for name, s in self.streams.items()
            }
        )

    def add(self, stream: str, sums: BlockSums, per_step: bool, at: int = 0) -> None:
        self.streams[stream].add(sums, per_step, at)

    def merge(self, other: RunMoments) -> None:
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
        if ints.shape[0] != sum(m.n_features * Moments.WORDS_PER_FEATURE for m in self._parts()):
            raise ValueError(f"{ints.shape[0]} words do not fit this layout")
        i = j = 0
        for name in sorted(self.streams):
            stream = self.streams[name]
            f = stream.values.n_features
            words = f * Moments.WORDS_PER_FEATURE
            unpacked = []
            for _ in stream.parts():
                unpacked.append(
                    Moments.unpack(ints[i : i + words], minimum[j : j + f], maximum[j : j + f])
                )
                i += words
                j += f
            stream.values = unpacked[0]
            stream.diffs = dict(zip(sorted(stream.diffs), unpacked[1:], strict=True))

    def extract(
        self, specs: list[StreamSpec], refs: dict[str, StreamReference], source_kind: str
    ) -> Stats:
        """Round the exact sums once into statistics; refuse what is unusable
        (a feature without a single finite value)."""
        streams: dict[str, StreamStats] = {}
        notes: list[str] = []
        for spec in specs:
            moments = self.streams[spec.name]
            values = moments.values
            for f, name in enumerate(spec.features):
                # no value at all (a climatology's month without data) is NaN;
                # only NaN values are unusable
                if values.count[f] == 0 and values.nan_count[f] > 0:
                    raise InputError(
                        f"variable {name} ({spec.name}): no finite values in the whole split "
                        f"({int(values.nan_count[f])} NaN); nothing to standardize with"
                    )
            mean, std = values.extract(refs[spec.name].values)
            diff: dict[int | None, DiffStats] = {}
            for k in spec.diff_steps:
                part = moments.diffs[k]
                if not part.count.any():
                    notes.append(
                        f"{spec.name}: no pairs of time steps {k} apart; "
                        f"difference statistics for step {k} are absent"
                    )
                    continue
                d_mean, d_std = part.extract(refs[spec.name].diffs[k])
                diff[k] = DiffStats(
                    mean=d_mean,
                    std=d_std,
                    count=part.count.copy(),
                    minimum=np.where(part.count > 0, part.minimum, np.nan),
                    maximum=np.where(part.count > 0, part.maximum, np.nan),
                )
            for f, name in enumerate(spec.features):
                if std[f] == 0:
                    notes.append(
                        f"variable {name} ({spec.name}) is constant (std 0): standardizing by "
                        "it divides by zero; consider dropping it"
                    )
            streams[spec.name] = StreamStats(
                name=spec.name,
                features=list(spec.features),
                units=list(spec.units),
                mean=mean,
                std=std,
                count=values.count.copy(),
                minimum=np.where(values.count > 0, values.minimum, np.nan),
                maximum=np.where(values.count > 0, values.maximum, np.nan),
                nan_count=values.nan_count.copy(),
                diff=diff,
                long_names=list(spec.long_names),
                layout=spec.layout,
            )
        return Stats(source_kind=source_kind, streams=streams, warnings=notes)
