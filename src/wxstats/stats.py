"""The result of a run: statistics per stream, ready for writers and notebooks.

Finalization happens here and nowhere else: exact accumulators in, float64
statistics out, each rounded once. Everything describing the run rather than
the data (time, host, world size, version) lives in ``Stats.run`` only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from wxstats.accumulate import RunAccumulator
from wxstats.errors import InputError
from wxstats.sources.base import StreamSpec


@dataclass
class DiffStats:
    """Statistics of ``x[t] - x[t-k]`` on the raw scale, per feature."""

    count: np.ndarray
    mean: np.ndarray
    std: np.ndarray


@dataclass
class StreamStats:
    """Statistics of one stream (the state, or one forcing field)."""

    name: str
    features: list[str]
    units: list[str]
    count: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    minimum: np.ndarray
    maximum: np.ndarray
    nan_count: np.ndarray
    diff: dict[int, DiffStats] = field(default_factory=dict)
    long_names: list[str] = field(default_factory=list)

    def standardized_diff(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """(diff_mean / std, diff_std / std): neural-lam's scale, the statistics
        of the difference of standardized fields."""
        d = self.diff[step]
        # a constant field (std 0, warned about) has only zero differences:
        # write 0 rather than 0/0
        safe = np.where(self.std > 0, self.std, 1.0)
        return np.where(self.std > 0, d.mean / safe, 0.0), np.where(self.std > 0, d.std / safe, 0.0)


@dataclass
class Stats:
    """All statistics of a run (see module docstring)."""

    source_kind: str
    streams: dict[str, StreamStats]
    attrs: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    @property
    def state(self) -> StreamStats:
        return self.streams["state"]

    @property
    def forcing(self) -> dict[str, StreamStats]:
        return {k: v for k, v in self.streams.items() if k != "state"}

    def to_summary(self) -> dict[str, Any]:
        """The JSON summary (floats as float64, exact through ``json``)."""
        from wxstats.writers.summary import summary_dict

        return summary_dict(self)


def finalize(acc: RunAccumulator, specs: list[StreamSpec], refs: dict, source_kind: str) -> Stats:
    """Round the exact accumulators once into statistics; check what is unusable."""
    streams: dict[str, StreamStats] = {}
    notes: list[str] = []
    for spec in specs:
        stream_acc = acc.streams[spec.name]
        values = stream_acc.values
        for f, name in enumerate(spec.features):
            if values.count[f] == 0:
                raise InputError(
                    f"variable {name} ({spec.name}): no finite values in the whole split "
                    f"({int(values.nan_count[f])} NaN); nothing to standardize with"
                )
        mean, std = values.finalize(refs[spec.name].values)
        diff: dict[int, DiffStats] = {}
        for k in spec.diff_steps:
            moments = stream_acc.diffs[k]
            if not moments.count.any():
                notes.append(
                    f"{spec.name}: no pairs of time steps {k} apart; "
                    f"difference statistics for step {k} are absent"
                )
                continue
            d_mean, d_std = moments.finalize(refs[spec.name].diffs[k])
            diff[k] = DiffStats(count=moments.count.copy(), mean=d_mean, std=d_std)
        for f, name in enumerate(spec.features):
            if std[f] == 0:
                notes.append(
                    f"variable {name} ({spec.name}) is constant (std 0): standardizing by it "
                    "divides by zero; consider dropping it"
                )
        streams[spec.name] = StreamStats(
            name=spec.name,
            features=list(spec.features),
            units=list(spec.units),
            count=values.count.copy(),
            mean=mean,
            std=std,
            minimum=values.minimum.copy(),
            maximum=values.maximum.copy(),
            nan_count=values.nan_count.copy(),
            diff=diff,
            long_names=list(spec.long_names),
        )
    return Stats(source_kind=source_kind, streams=streams, warnings=notes)
