"""Row labels of statistics in tables, reports and figures: a climatology's groups
said in words (``z_500 (month 1)``), not as the file's flat feature names
(``z_500_1``), which read as a level or an ensemble member."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import numpy as np

from wxstats.core.stats import Stats, StreamStats
from wxstats.core.streams import GROUP_DIMS


def feature_labels(stream: StreamStats) -> list[str]:
    """Row labels of a stream's features: the feature names, or for a climatology
    the variable and level with the group in words (``z_500 (month 1)``)."""
    layout = stream.layout
    if layout is None or not layout.group_dims:
        return list(stream.features)
    labels = []
    for flat in range(len(stream.features)):
        index = np.unravel_index(flat, layout.feature_shape)
        name, group = [layout.variable], []
        for dim, i in zip(layout.feature_dims, index, strict=True):
            value = layout.values(dim)[i]
            (group if dim in GROUP_DIMS else name).append(
                f"{dim} {value}" if dim in GROUP_DIMS else str(value)
            )
        labels.append("_".join(name) + f" ({', '.join(group)})")
    return labels


def with_labels(stats: Stats, split: str | None = None) -> tuple[Stats, int]:
    """``stats`` as a report shows it: every stream's features named by
    :func:`feature_labels`, a climatology's groups without data (count 0: a month
    outside the data) left out; and how many were left out in ``split``. Done before
    the streams are joined per category, which leaves their layouts behind."""
    streams, left_out = {}, 0
    for key, stream in stats.streams.items():
        labelled = replace(stream, features=feature_labels(stream))
        grouped = stream.layout is not None and stream.layout.group_dims
        if grouped and stream.count is not None and (stream.count == 0).any():
            keep = np.flatnonzero(stream.count != 0)
            if stream.split in (split, None):
                left_out += len(stream.features) - len(keep)
            labelled = _features(labelled, keep)
        streams[key] = labelled
    return replace(stats, streams=streams), left_out


def _features(stream: StreamStats, keep: np.ndarray) -> StreamStats:
    """``stream`` with only the features ``keep`` (every per-feature list and array)."""
    n = len(stream.features)

    def take(value: Any) -> Any:
        if isinstance(value, np.ndarray) and value.ndim and value.shape[-1] == n:
            return value[..., keep]
        if isinstance(value, list) and len(value) == n:
            return [value[i] for i in keep]
        return value

    changes = {f.name: take(getattr(stream, f.name)) for f in fields(stream)}
    changes["diff"] = {
        k: replace(d, **{f.name: take(getattr(d, f.name)) for f in fields(d)})
        for k, d in stream.diff.items()
    }
    return replace(stream, **changes)
