"""A run's accumulator: the exact moments of every stream, packed to travel.

:class:`RunMoments` groups the :class:`~wxstats.core.combine.Moments` of a run
(per stream: the values and the differences for each step), adds a block's
per-step sums to them, and packs into flat fixed-size arrays (int64 limbs for
sums, float64 for extremes), which the gather across ranks, the checkpoints
and the state files move: never pickled objects. :meth:`RunMoments.extract`
rounds them once into the :class:`~wxstats.core.stats.Stats` a run returns.
A stream may also hold per-grid-point time sums (:mod:`wxstats.core.cellsums`),
packed after every stream's moments.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from wxstats.core import reduction
from wxstats.core.cellsums import cell_means
from wxstats.core.combine import Moments, NonFiniteSums
from wxstats.core.errors import InputError
from wxstats.core.kernel import BlockSums
from wxstats.core.stats import DiffStats, Stats, StreamStats
from wxstats.core.streams import StreamSpec


@dataclass
class StreamMoments:
    """Moments of one stream's values and of its differences for each step."""

    values: Moments
    diffs: dict[int, Moments] = field(default_factory=dict)
    cells: np.ndarray | None = None
    """int64 (2, G, F): per-grid-point time sums (limbs), when the stream asks for them."""
    cell_reference: tuple[np.ndarray, np.ndarray] | None = None
    """The (shift, scale) of the per-grid-point sums' fixed point: the first time
    step's, the same on every rank of a run (:mod:`wxstats.core.cellsums`)."""

    @staticmethod
    def create(
        n_features: int,
        steps: tuple[int, ...],
        weighted: bool = False,
        grid_points: int = 0,
        cell_reference: tuple[np.ndarray, np.ndarray] | None = None,
        order: int = 2,
    ) -> StreamMoments:
        return StreamMoments(
            Moments.create(n_features, weighted, order),
            {k: Moments.create(n_features, weighted, order) for k in steps},
            np.zeros((2, grid_points, n_features), dtype=np.int64) if grid_points else None,
            cell_reference if grid_points else None,
        )

    def add(self, sums: BlockSums, at: int = 0) -> None:
        """Add a block's per-step sums to features from ``at`` (a block with groups,
        a climatology: each step to its group ``g``'s features, from ``at + g * F``).
        Raises :class:`NonFiniteSums`, before changing anything, when a step's sum
        is not finite; its features count from ``at``."""
        steps = sorted(self.diffs)
        if tuple(steps) != sums.lags:
            raise ValueError(f"block sums of lags {sums.lags} for a stream of steps {steps}")
        if self.values.weighted != sums.weighted:
            raise ValueError("weighted and unweighted sums do not mix")
        count, s1, s2 = sums.of("count"), sums.of("sum1"), sums.of("sum2")
        n_f = count.shape[-1]
        codes = np.zeros(count.shape[1], dtype=np.int64) if sums.groups is None else sums.groups
        bad = (count > 0) & ~(np.isfinite(s1) & np.isfinite(s2))  # (parts, T, F)
        where = np.flatnonzero(bad.any(axis=0).ravel())
        if where.size:
            t, f = np.divmod(where, n_f)
            raise NonFiniteSums(sorted({int(v) for v in at + codes[t] * n_f + f}))
        refs = sums.refs
        shifts = [refs.shift] + [refs.diff_shift[k] for k in steps]
        scales = [refs.scale] + [refs.diff_scale[k] for k in steps]
        weight = sums.of("weight") if sums.weighted else None
        higher = [sums.of(q.name) for q in reduction.POWERS[2 : self.values.order]]
        if any(h is None for h in higher):
            raise ValueError(f"block sums of order 2 for moments of order {self.values.order}")
        low, high, nans = sums.of("minimum"), sums.of("maximum"), sums.of("nan_count")
        if sums.groups is None:  # one group: the totals (parts, F) as (parts, 1, F)
            low, high, nans = low[:, None], high[:, None], nans[:, None]
        for g in np.unique(codes[codes >= 0]):
            rows = codes == g
            for p, moments in enumerate(self.parts()):
                moments.add(
                    count[p][rows],
                    s1[p][rows],
                    s2[p][rows],
                    shifts[p][rows],
                    scales[p][rows],
                    low[p, g],
                    high[p, g],
                    nans[p, g] if p == 0 else None,
                    at + int(g) * n_f,
                    None if weight is None else weight[p][rows],
                    tuple(h[p][rows] for h in higher),
                )

    def merge(self, other: StreamMoments) -> None:
        """Add ``other`` into ``self``; refused, with ``self`` unchanged, when
        they are not of one layout (other difference steps, or per grid point
        sums on one side only: a sum left out would be a wrong mean; a weighting
        on one side only is refused by the first :meth:`Moments.merge`)."""
        if (self.cells is None) != (other.cells is None) or set(other.diffs) != set(self.diffs):
            raise ValueError("moments of different layouts do not merge")
        if self.cells is not None and not all(
            np.array_equal(a, b)
            for a, b in zip(self.cell_reference or (), other.cell_reference or (), strict=True)
        ):
            raise ValueError("per grid point sums of another fixed point do not merge")
        self.values.merge(other.values)
        for k, moments in other.diffs.items():
            self.diffs[k].merge(moments)
        if self.cells is not None:
            self.cells += other.cells

    def parts(self) -> list[Moments]:
        return [self.values] + [self.diffs[k] for k in sorted(self.diffs)]


def pooled_stats(
    spec: StreamSpec, moments: StreamMoments, steps: Iterable[int | None]
) -> StreamStats:
    """The statistics of ``spec.pooled``'s groups of features taken together, of
    the values and of the differences of ``steps`` (those with pairs)."""
    pool = spec.pooled
    groups = [list(g) for g in pool.groups]
    values = moments.values.statistics(groups)
    diff = {k: DiffStats(**moments.diffs[k].statistics(groups, diffs=True)) for k in steps}
    return StreamStats(
        name=pool.name,
        features=list(pool.features),
        units=list(pool.units),
        **values,
        diff=diff,
        long_names=list(pool.long_names),
        layout=pool.layout,
        diff_span={k: v for k, v in spec.diff_span.items() if k in diff},
    )


@dataclass
class RunMoments:
    """All streams of a run, keyed by stream name: the accumulator a rank
    fills, checkpoints and gathers (see module docstring)."""

    streams: dict[str, StreamMoments]

    @staticmethod
    def create(
        specs: list[StreamSpec],
        cell_references: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> RunMoments:
        """Empty moments of ``specs``; ``cell_references``: the fixed point of each
        stream that sums per grid point (:mod:`wxstats.core.cellsums`)."""
        cells = cell_references or {}
        missing = [s.name for s in specs if s.cell_grid_points and s.name not in cells]
        if missing:
            raise ValueError(f"per grid point sums of {missing} need their reference")
        return RunMoments(
            {
                s.name: StreamMoments.create(
                    len(s.features),
                    s.diff_steps,
                    s.weighted,
                    s.cell_grid_points,
                    cells.get(s.name),
                    s.order,
                )
                for s in specs
            }
        )

    def empty_like(self) -> RunMoments:
        """An empty accumulator of the same layout (streams, features, steps)."""
        return RunMoments(
            {
                name: StreamMoments.create(
                    s.values.n_features,
                    tuple(sorted(s.diffs)),
                    s.values.weighted,
                    0 if s.cells is None else s.cells.shape[1],
                    s.cell_reference,
                    s.values.order,
                )
                for name, s in self.streams.items()
            }
        )

    def add(self, stream: str, sums: BlockSums, at: int = 0) -> None:
        self.streams[stream].add(sums, at)

    def merge(self, other: RunMoments) -> None:
        for name, stream in other.streams.items():
            self.streams[name].merge(stream)

    def _parts(self) -> list[Moments]:
        return [m for name in sorted(self.streams) for m in self.streams[name].parts()]

    def pack(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Flat (int64 sums, float64 minima, float64 maxima) of every part."""
        packed = [m.pack() for m in self._parts()]
        cells = [s.cells.ravel() for _, s in sorted(self.streams.items()) if s.cells is not None]
        return (
            np.concatenate([p[0] for p in packed] + cells),
            np.concatenate([p[1] for p in packed]),
            np.concatenate([p[2] for p in packed]),
        )

    def n_words(self) -> int:
        """The length of the packed int64 sums of this layout."""
        cells = sum(s.cells.size for s in self.streams.values() if s.cells is not None)
        return cells + sum(
            m.n_features * Moments.words_per_feature(m.weighted, m.order) for m in self._parts()
        )

    def unpack_like(self, ints: np.ndarray, minimum: np.ndarray, maximum: np.ndarray) -> None:
        """Replace the contents with packed arrays of the same layout."""
        if ints.shape[0] != self.n_words():
            raise ValueError(f"{ints.shape[0]} words do not fit this layout")
        i = j = 0
        for name in sorted(self.streams):
            stream = self.streams[name]
            f = stream.values.n_features
            weighted, order = stream.values.weighted, stream.values.order
            words = f * Moments.words_per_feature(weighted, order)
            unpacked = []
            for _ in stream.parts():
                unpacked.append(
                    Moments.unpack(
                        ints[i : i + words], minimum[j : j + f], maximum[j : j + f], weighted, order
                    )
                )
                i += words
                j += f
            stream.values = unpacked[0]
            stream.diffs = dict(zip(sorted(stream.diffs), unpacked[1:], strict=True))
        for name in sorted(self.streams):
            cells = self.streams[name].cells
            if cells is not None:
                self.streams[name].cells = ints[i : i + cells.size].reshape(cells.shape).copy()
                i += cells.size

    def _time_mean(self, spec: StreamSpec) -> np.ndarray | None:
        """The per-grid-point time means of a stream that summed them (NaN were refused)."""
        moments = self.streams[spec.name]
        if moments.cells is None or moments.cell_reference is None:
            return None
        grid = moments.cells.shape[1]
        steps = int(moments.values.count[0]) // grid if moments.values.count.size else 0
        if steps == 0:
            return np.full(moments.cells.shape[1:], np.nan)
        return cell_means(moments.cells, steps, *moments.cell_reference)

    def extract(self, specs: list[StreamSpec], source_kind: str, time_splits: bool) -> Stats:
        """Round the exact sums once into statistics; refuse what is unusable
        (a feature without a single finite value, or weighted, one of positive weight).
        ``time_splits``: the splits are intervals of a time axis (:attr:`Stats.time_splits`)."""
        streams: dict[str, StreamStats] = {}
        notes: list[str] = []
        for spec in specs:
            moments = self.streams[spec.name]
            values = moments.values
            for f, name in enumerate(spec.features):
                # no value at all (a climatology's month without data) is NaN; values
                # with nothing to divide by (only NaN, or finite ones only where the
                # weight is 0) are unusable
                count, nans = int(values.count[f]), int(values.nan_count[f])
                if values.divisor(f) == 0 and count + nans > 0:
                    what = "with a weight above 0 " if values.weighted else ""
                    finite = f"{count} finite, all weighted 0; " if count else ""
                    raise InputError(
                        f"variable {name} ({spec.name}): no finite values {what}in the whole "
                        f"split ({finite}{nans} NaN); nothing to standardize with"
                    )
            fields = values.statistics()
            std = fields["std"]
            diff: dict[int | None, DiffStats] = {}
            for k in spec.diff_steps:
                part = moments.diffs[k]
                if not part.count.any():
                    notes.append(
                        f"{spec.name}: no pairs of time steps {k} apart; "
                        f"difference statistics for step {k} are absent"
                    )
                    continue
                diff[k] = DiffStats(**part.statistics(diffs=True))
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
                **fields,
                diff=diff,
                diff_span={k: v for k, v in spec.diff_span.items() if k in diff},
                long_names=list(spec.long_names),
                layout=spec.layout,
                time_mean=self._time_mean(spec),
            )
            if spec.pooled is not None:
                pooled = pooled_stats(spec, moments, diff)
                streams[pooled.name] = pooled
        return Stats(
            source_kind=source_kind, streams=streams, warnings=notes, time_splits=time_splits
        )
