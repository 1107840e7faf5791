"""Row labels of statistics in tables, reports and figures: a climatology's groups
said in words (``z_500 (month 1)``), not as the file's flat feature names
(``z_500_1``), which read as a level or an ensemble member."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from wxstats.core.stats import Stats, StreamStats

GROUP_DIMS = ("month", "hour")
"""Feature dimensions of a climatology (``--by``): shown as groups, not levels."""


def feature_labels(stream: StreamStats) -> list[str]:
    """Row labels of a stream's features: the feature names, or for a climatology
    the variable and level with the group in words (``z_500 (month 1)``)."""
    layout = stream.layout
    if layout is None or not set(layout.feature_dims) & set(GROUP_DIMS):
        return list(stream.features)
    labels = []
    for flat in range(len(stream.features)):
        index = np.unravel_index(flat, layout.feature_shape)
        name, group = [layout.prefix], []
        for dim, i in zip(layout.feature_dims, index, strict=True):
            value = np.asarray(layout.coords[dim][1])[i] if dim in layout.coords else i
            (group if dim in GROUP_DIMS else name).append(
                f"{dim} {value}" if dim in GROUP_DIMS else str(value)
            )
        labels.append("_".join(name) + f" ({', '.join(group)})")
    return labels


def with_labels(stats: Stats) -> Stats:
    """``stats`` with every stream's features named by :func:`feature_labels`: what a
    report shows and warns about (the streams are joined per category later, which
    leaves their layouts behind)."""
    streams = {k: replace(s, features=feature_labels(s)) for k, s in stats.streams.items()}
    return replace(stats, streams=streams)
