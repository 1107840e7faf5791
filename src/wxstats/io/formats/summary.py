"""The JSON summary (``--summary FILE.json``): floats that round-trip exactly.

The content is :func:`summary_dict` (what :meth:`Result.to_summary()
<wxstats.io.result.Result.to_summary>` returns)
(the MEPS schema: ``variables``, ``units``, ``state``, ``diff``, ``forcing``,
``static``, ``source``, ``warnings``, ``run``; zarr/netCDF runs add
``splits``). Python's ``json`` writes floats with ``repr``, the shortest string
that reads back to the same float64. :func:`read_summary` reads it back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.conventions import span_seconds
from wxstats.core.errors import InputError, first_line
from wxstats.core.finalize import DIFF_STATISTICS, STATISTICS
from wxstats.core.stats import VALUE_OPS, DiffStats, Stats, StreamStats, concatenate, stat_fields
from wxstats.core.streams import StreamLayout
from wxstats.core.untrusted import UntrustedInput, read_json
from wxstats.io.atomic import Writer


# -- writing: the model as plain data ----------------------------------------------
def _json_floats(values: np.ndarray) -> list[float | None]:
    return [None if not np.isfinite(v) else float(v) for v in np.asarray(values, dtype=np.float64)]


def _ints(values: np.ndarray) -> list[int]:
    return [int(v) for v in values]


def _entries(stream: StreamStats) -> dict[str, dict[str, Any]]:
    """One entry per feature (forcing and static features in the summary), with
    every statistic the stream has: NaN count and differences too."""
    out = {}
    for f, feature in enumerate(stream.features):
        entry: dict[str, Any] = {}
        for s in STATISTICS:
            values = stream.op(s.name)
            if values is not None:
                entry[s.name] = int(values[f]) if s.integer else float(values[f])
            elif not s.optional:
                entry[s.name] = None
        if stream.diff:
            entry["diff"] = {
                str(k): {
                    op: values if op == "span" else values[0]
                    for op, values in _diff_entry(d, stream.diff_span_name(k), f).items()
                }
                for k, d in sorted(stream.diff.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
            }
        out[feature] = entry
    return out


def _diff_entry(d: DiffStats, span: str | None, feature: int | None = None) -> dict[str, Any]:
    """The difference statistics of every feature (or of one: lists of one), with
    the step's time span (``6h``) when known: the key counts hours or steps."""
    pick = slice(None) if feature is None else slice(feature, feature + 1)
    entry: dict[str, Any] = {} if span is None else {"span": span}
    for s in DIFF_STATISTICS:
        values = getattr(d, s.field)
        if values is not None:
            entry[s.name] = (_ints if s.integer else _json_floats)(values[pick])
    return entry


def _split_summary(stats: Stats, split: str | None) -> dict[str, Any]:
    groups = stats.by_category(split)
    state = groups.get("state") or concatenate("state", [], split)
    summary: dict[str, Any] = {
        "variables": list(state.features),
        "units": list(state.units),
        "state": {
            s.name: (_ints if s.integer else _json_floats)(state.op(s.name))
            for s in STATISTICS
            if state.op(s.name) is not None or not s.optional
        },
        "diff": {
            str(k): _diff_entry(d, state.diff_span_name(k)) for k, d in sorted(state.diff.items())
        },
        "forcing": _entries(groups["forcing"]) if "forcing" in groups else {},
        "source": dict(stats.attrs, split=split) if split else dict(stats.attrs),
        "warnings": list(stats.warnings),
        "run": dict(stats.run),
    }
    if "static" in groups:
        summary["static"] = _entries(groups["static"])
    return summary


def summary_dict(stats: Stats) -> dict[str, Any]:
    """The statistics as plain data, floats as float64 (exact through ``json``).

    The MEPS schema: ``variables``, ``units``, ``state``, ``diff`` (raw scale),
    ``forcing`` (and ``static``) per feature, ``source``, ``warnings``, ``run``.
    Statistics of time splits (:attr:`Stats.time_splits`: a zarr/netCDF run's) give
    the first split at the top level and every split under ``splits``. Only ``run``
    describes the run: two runs over the same data give equal summaries but for it.
    """
    splits = stats.splits()
    if not stats.time_splits or not splits:  # a datastore's, an anemoi dataset's, a read set's
        return _split_summary(stats, None)
    out = _split_summary(stats, splits[0])
    out["splits"] = {}
    for split in splits:
        entry = _split_summary(stats, split)
        entry.pop("run")
        out["splits"][split] = entry
    return out


def summary_writer(stats: Stats) -> Writer:
    text = json.dumps(summary_dict(stats), indent=1) + "\n"

    def write(path: Path) -> None:
        path.write_text(text)

    return write


def _floats(values: Any, where: str, what: str) -> np.ndarray:
    try:
        return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{where}: {what} is not a list of numbers") from None


def _stream(name: str, ops: dict[str, np.ndarray], split: str, **fields: Any) -> StreamStats:
    """A stream of category ``name`` from the statistics ``ops`` found."""
    return StreamStats(
        name=name,
        **stat_fields(ops),
        layout=StreamLayout(variable=name, split=split, role=name),
        **fields,
    )


def _per_feature(entries: dict, category: str, split: str, where: str) -> StreamStats:
    """A forcing or static section (one entry per feature) as a stream."""
    names = list(entries)
    ops: dict[str, np.ndarray] = {}
    for op in VALUE_OPS:
        if all(isinstance(entries[n], dict) and entries[n].get(op) is not None for n in names):
            ops[op] = _floats([entries[n][op] for n in names], where, f"{category}.{op}")
    if "mean" not in ops or "std" not in ops:
        raise InputError(f"{where}: {category} entries lack mean or std")
    diff: dict[int | None, DiffStats] = {}
    spans: dict[int | None, int] = {}
    per_step = [entries[n].get("diff") for n in names]
    if names and all(isinstance(d, dict) for d in per_step):
        for step in set.intersection(*(set(d) for d in per_step)):
            got = {}
            for op in (s.name for s in DIFF_STATISTICS):
                if all(isinstance(d[step], dict) and op in d[step] for d in per_step):
                    what = f"{category}.diff.{step}.{op}"
                    got[op] = _floats([d[step][op] for d in per_step], where, what)
            if "mean" in got and "std" in got:
                key = _step(step, where)
                diff[key] = DiffStats(**stat_fields(got, diffs=True))
                span = _span(per_step[0][step], where, f"{category}.diff.{step}")
                if span:
                    spans[key] = span
    units = [""] * len(names)
    fields = {"features": names, "units": units, "diff": diff, "diff_span": spans}
    return _stream(category, ops, split, **fields)


def _span(entry: dict, where: str, what: str) -> int | None:
    """The seconds of an entry's ``span`` (``6h``); None for a summary written
    before spans were recorded."""
    if "span" not in entry:
        return None
    seconds = span_seconds(entry["span"])
    if seconds is None:
        raise InputError(f"{where}: {what}.span {entry['span']!r} is not a time span such as 6h")
    return seconds


def _step(text: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InputError(f"{where}: diff step {text!r} is not an integer") from None


def read_summary(path: Path, split: str | None = None) -> Stats:
    """The JSON written by ``wxstats compute --summary`` (``split``: one of its
    ``splits``; default the top level, its first split)."""
    try:
        data = read_json(path)
    except OSError as exc:
        raise InputError(f"{path}: not a readable JSON summary: {exc}") from None
    except UntrustedInput as exc:
        raise InputError(f"{path}: not a readable JSON summary: {exc.why}") from None
    try:
        return _summary_stats(data, Path(path), split)
    except (TypeError, KeyError, AttributeError, IndexError, ValueError) as exc:
        # a field of another type than wxstats writes (someone else's file, or damaged)
        raise InputError(f"{path}: not a wxstats JSON summary ({first_line(exc)})") from None


def _summary_stats(data: Any, path: Path, split: str | None) -> Stats:
    where = str(path)
    if not isinstance(data, dict) or not isinstance(data.get("state"), dict):
        raise InputError(f"{path}: not a wxstats JSON summary (no 'state' section)")
    top = data
    if split is not None and split != (data.get("source") or {}).get("split"):
        splits = data.get("splits") or {}
        if split not in splits:
            raise InputError(f"{path}: no statistics for split {split!r} (has {sorted(splits)})")
        data = splits[split]
    source = data.get("source") or {}
    name = str(source.get("split") or split or "")
    section = data["state"]
    ops = {op: _floats(section[op], where, f"state.{op}") for op in VALUE_OPS if op in section}
    names = data.get("variables")
    n = len(ops.get("mean", []))
    if names is not None and len(names) != n:
        raise InputError(f"{path}: {len(names)} variable names for {n} state statistics")
    diff: dict[int | None, DiffStats] = {}
    spans: dict[int | None, int] = {}
    derived: set[str] = set()
    for step, entry in (data.get("diff") or {}).items():
        key = _step(step, where)
        got = {
            op: _floats(v, where, f"diff.{step}.{op}") for op, v in entry.items() if op != "span"
        }
        span = _span(entry, where, f"diff.{step}")
        if span:
            spans[key] = span
        if "mean" in got and "std" in got:
            diff[key] = DiffStats(**stat_fields(got, diffs=True))
            derived |= {f"diff{key} mean_standardized", f"diff{key} std_standardized"}
    if "mean" not in ops or "std" not in ops:
        raise InputError(f"{path}: the state section holds no mean and std")
    units = data.get("units") or [""] * n
    streams = {
        "state": _stream(
            "state",
            ops,
            name,
            features=list(names) if names is not None else [f"#{i}" for i in range(n)],
            units=[str(u) for u in units],
            diff=diff,
            named=names is not None,
            derived=derived,
            diff_span=spans,
        )
    }
    for category in ("forcing", "static"):
        if data.get(category):
            streams[category] = _per_feature(data[category], category, name, where)
    return Stats(
        source_kind="wxstats-summary",
        streams=streams,
        attrs={k: v for k, v in source.items() if isinstance(v, (str, int, float))},
        run=dict(top.get("run") or {}),
        warnings=list(data.get("warnings", [])),
        origin=str(path),
    )
