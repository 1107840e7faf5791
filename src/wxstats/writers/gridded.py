"""Outputs of a zarr/netCDF run: the statistics file and the JSON summary.

A run over a zarr/netCDF dataset has one stream per (variable, split), laid
out by :class:`~wxstats.sources.base.StreamLayout`. The statistics file names
them like mllam-data-prep, ``{variable}__{split}__{op}``, all splits in one
file. The JSON summary keeps the MEPS schema (one entry per feature: the
features of every variable of a split are listed together as ``variables``)
for the first split at the top level, and the same for every split under
``"splits"``; mllam-data-prep's forcing and static features go under
``"forcing"`` and ``"static"``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.atomic import Writer
from wxstats.sources.base import StreamLayout
from wxstats.stats import DiffStats, Stats, StreamStats
from wxstats.writers.netcdf import netcdf_writer
from wxstats.writers.summary import summary_dict


def _concat(name: str, streams: list[StreamStats]) -> StreamStats:
    """Several streams as one (features one after the other)."""

    def cat(attr: str) -> np.ndarray:
        if not streams:
            return np.zeros(0)
        return np.concatenate([np.asarray(getattr(s, attr)) for s in streams])

    steps = sorted({k for s in streams for k in s.diff})
    diff = {}
    for k in steps:
        parts = []
        for s in streams:
            if k in s.diff:
                parts.append(s.diff[k])
            else:  # no pairs for this stream: count 0, no values
                n = len(s.features)
                nan = np.full(n, np.nan)
                parts.append(DiffStats(np.zeros(n, dtype=np.int64), nan, nan))
        diff[k] = DiffStats(
            np.concatenate([p.count for p in parts]),
            np.concatenate([p.mean for p in parts]),
            np.concatenate([p.std for p in parts]),
        )
    return StreamStats(
        name=name,
        features=[f for s in streams for f in s.features],
        units=[u for s in streams for u in s.units],
        count=cat("count"),
        mean=cat("mean"),
        std=cat("std"),
        minimum=cat("minimum"),
        maximum=cat("maximum"),
        nan_count=cat("nan_count"),
        diff=diff,
        long_names=[n for s in streams for n in (s.long_names or s.features)],
    )


def _single(stream: StreamStats, f: int) -> StreamStats:
    """Feature ``f`` of a stream, as a stream of its own named after it."""
    return StreamStats(
        name=stream.features[f],
        features=[stream.features[f]],
        units=[stream.units[f]],
        count=stream.count[f : f + 1],
        mean=stream.mean[f : f + 1],
        std=stream.std[f : f + 1],
        minimum=stream.minimum[f : f + 1],
        maximum=stream.maximum[f : f + 1],
        nan_count=stream.nan_count[f : f + 1],
    )


def split_views(stats: Stats, layout: dict[str, StreamLayout]) -> dict[str, tuple[Stats, list]]:
    """Per split: the statistics shaped like a MEPS run ("state" plus one
    stream per forcing feature) and the static streams."""
    splits: dict[str, dict[str, list[StreamStats]]] = {}
    for name, stream in stats.streams.items():
        lay = layout[name]
        groups = splits.setdefault(lay.split, {"state": [], "forcing": [], "static": []})
        groups[lay.category if lay.category in groups else "state"].append(stream)
    views = {}
    for split, groups in splits.items():
        streams: dict[str, StreamStats] = {}
        if groups["state"]:
            streams["state"] = _concat("state", groups["state"])
        for stream in groups["forcing"]:
            for f in range(len(stream.features)):
                streams[stream.features[f]] = _single(stream, f)
        attrs = dict(stats.attrs, split=split)
        view = Stats(stats.source_kind, streams, attrs, dict(stats.run), list(stats.warnings))
        views[split] = (view, groups["static"])
    return views


def _summary_of(view: Stats, static: list[StreamStats]) -> dict[str, Any]:
    if "state" not in view.streams:  # only static/forcing selected
        view.streams["state"] = _concat("state", [])
    out = summary_dict(view)
    if static:
        out["static"] = {
            feature: {
                "count": int(s.count[f]),
                "mean": float(s.mean[f]),
                "std": float(s.std[f]),
                "min": float(s.minimum[f]),
                "max": float(s.maximum[f]),
            }
            for s in static
            for f, feature in enumerate(s.features)
        }
    return out


def summary_by_split(stats: Stats, layout: dict[str, StreamLayout]) -> dict[str, Any]:
    """The JSON summary (see module docstring)."""
    views = split_views(stats, layout)
    per_split = {}
    for split, (view, static) in views.items():
        entry = _summary_of(view, static)
        entry.pop("run", None)
        per_split[split] = entry
    first_view, first_static = next(iter(views.values()))
    out = _summary_of(first_view, first_static)
    out["splits"] = per_split
    return out


def gridded_outputs(
    stats: Stats | None,
    layout: dict[str, StreamLayout],
    output: Path | None,
    summary: Path | None,
) -> dict[Path, Writer | None]:
    """The files of a zarr/netCDF run (writers need ``stats``; ``None`` lists paths)."""
    outputs: dict[Path, Writer | None] = {}
    if output is not None:
        splits = ",".join(dict.fromkeys(lay.split for lay in layout.values()))
        outputs[Path(output)] = netcdf_writer(stats, splits, layout) if stats else None
    if summary is not None:
        if stats is None:
            outputs[Path(summary)] = None
        else:
            text = json.dumps(summary_by_split(stats, layout), indent=1) + "\n"
            outputs[Path(summary)] = lambda path: path.write_text(text)
    return outputs
