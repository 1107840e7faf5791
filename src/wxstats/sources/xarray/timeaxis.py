"""The time axis: files in time order, its values, sortedness and spacing, and
the splits (``NAME=START/END`` intervals or an mllam-data-prep store's own).

The time axis must be sorted; each split must be regularly spaced, because a
difference over ``k`` steps must mean the same time lag everywhere. Splits are
``NAME=START/END`` intervals, inclusive, selected like xarray's
``ds.sel(time=slice(START, END))``.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from wxstats.core.conventions import coord_label, has_split_statistics
from wxstats.core.errors import InputError, first_line
from wxstats.core.times import GROUPINGS, fmt_delta, fmt_time, group_index, group_values

_SPLIT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Split:
    name: str
    start: int  # first time index
    stop: int  # one past the last
    label: str  # the interval as given or resolved


@dataclass
class TimeFile:
    """One opened file (or store) and where its times sit on the whole axis."""

    path: str
    ds: Any  # xarray.Dataset, opened lazily without decoding
    start: int
    length: int


def time_values(ds: Any, time_dim: str, where: str) -> np.ndarray:
    if time_dim not in ds.dims:
        raise InputError(
            f"{where}: no dimension {time_dim!r} (dimensions: {', '.join(map(str, ds.dims))}); "
            "name the time dimension with --time-dim (Python: time_dim=)"
        )
    if time_dim in ds.indexes:
        return np.asarray(ds.indexes[time_dim])
    return np.arange(ds.sizes[time_dim])


def _later(values: np.ndarray) -> np.ndarray:
    """values[i + 1] > values[i], for datetimes, numbers and cftime objects."""
    if values.dtype == object:
        return np.array([b > a for a, b in zip(values[:-1], values[1:], strict=True)], dtype=bool)
    return values[1:] > values[:-1]


def check_sorted(values: np.ndarray, time_dim: str, where_of) -> None:
    ok = _later(values)
    if not ok.all():
        i = int(np.argmin(ok)) + 1
        raise InputError(
            f"{where_of(i)}: {time_dim} is not sorted: {time_dim}[{i}] = "
            f"{fmt_time(values[i])} does not come after {time_dim}[{i - 1}] = "
            f"{fmt_time(values[i - 1])}; sort the dataset by time and drop duplicates"
        )


def check_regular(values: np.ndarray, split: Split, time_dim: str, where_of) -> None:
    v = values[split.start : split.stop]
    if v.shape[0] < 3:
        return
    if v.dtype == object:
        steps = [b - a for a, b in zip(v[:-1], v[1:], strict=True)]
        bad = [j for j, s in enumerate(steps) if s != steps[0]]
    else:
        steps = np.diff(v)
        if v.dtype.kind == "f":
            same = np.isclose(steps, steps[0], rtol=1e-9, atol=0.0)
        else:
            same = steps == steps[0]
        bad = np.flatnonzero(~same).tolist()
    if bad:
        i = split.start + bad[0] + 1
        raise InputError(
            f"{where_of(i)}: {time_dim} is irregular in split {split.name}: {time_dim}[{i}] = "
            f"{fmt_time(values[i])} comes {fmt_delta(steps[bad[0]])} after the previous "
            f"step, but the split starts with steps of {fmt_delta(steps[0])}; differences "
            "over k steps need equally spaced times (choose split bounds inside a regular part)"
        )


def step_seconds(values: np.ndarray, split: Split) -> int | None:
    """Seconds of one time step of ``split`` (regular: checked), what a difference
    over ``k`` steps spans; None for a numeric axis, one step or a fractional second."""
    if split.stop - split.start < 2:
        return None
    a, b = values[split.start], values[split.start + 1]
    if isinstance(a, np.datetime64):
        seconds = (b - a) / np.timedelta64(1, "s")
    elif hasattr(b - a, "total_seconds"):  # cftime dates
        seconds = (b - a).total_seconds()
    else:
        return None
    return int(seconds) if float(seconds).is_integer() and seconds > 0 else None


def time_index(values: np.ndarray):
    import pandas as pd

    if values.dtype == object:
        import xarray as xr

        return xr.CFTimeIndex(values)
    return pd.Index(values)


def parse_split(spec: str) -> tuple[str, str | None, str | None]:
    name, sep, interval = spec.partition("=")
    name = name.strip()
    if not _SPLIT_NAME.match(name) or "__" in name:
        raise InputError(
            f"--split {spec!r}: the split name must be letters, digits, '_', '-' or '.' "
            "(no '__', which separates the parts of the output names)"
        )
    if not sep:
        return name, None, None
    start, slash, end = interval.partition("/")
    if not slash or not (start.strip() or end.strip()):
        raise InputError(
            f"--split {spec!r}: expected NAME=START/END, an inclusive ISO 8601 interval such as "
            "train=2019-03-01T00:00/2019-03-20T23:00 (START/ or /END: open on that side)"
        )
    return name, start.strip(), end.strip()


_UTC_OFFSET = re.compile(r"T.*(Z|[+-]\d\d(:?\d\d)?)$")


def _naive(bound: str, name: str) -> str:
    """An ISO 8601 time with a UTC offset (``...T00:00Z``, ``+01:00``) as the naive
    UTC time the data's CF time axis holds; other bounds as they are."""
    if not _UTC_OFFSET.search(bound):
        return bound
    import pandas as pd

    try:
        when = pd.Timestamp(bound).tz_convert("UTC").tz_localize(None)
    except (ValueError, TypeError) as exc:
        what = f"split {name}: cannot read {bound!r} as a time"
        raise InputError(f"{what}: {first_line(exc)}") from None
    return when.isoformat()


def select(index, values: np.ndarray, name: str, start: str, end: str, time_dim: str) -> slice:
    """The time steps of the inclusive interval ``start``/``end`` (``""``: open)."""
    try:
        if values.dtype.kind in "iuf":
            lo = float(start) if start else -np.inf
            hi = float(end) if end else np.inf
            return slice(
                int(np.searchsorted(values, lo, "left")), int(np.searchsorted(values, hi, "right"))
            )
        found = index.slice_indexer(_naive(start, name) or None, _naive(end, name) or None)
        return slice(
            int(found.start or 0), int(values.shape[0] if found.stop is None else found.stop)
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise InputError(
            f"split {name}: cannot read {start!r}/{end!r} as times of {time_dim} "
            f"({values.dtype}): {first_line(exc)}"
        ) from None


label = coord_label
"""A coordinate value as text (``500.0`` -> ``500``): core's, for feature names."""


def _bound(value: Any) -> str:
    """A split bound of an mllam-data-prep ``splits`` variable as a string."""
    v = np.asarray(value)
    if v.dtype.kind == "M":
        return fmt_time(v[()])
    return label(v.item())


def along_time(opened: list[tuple[str, Any]], time_dim: str, path: str) -> list[TimeFile]:
    """The opened files in time order, each with its offset on the whole axis."""
    starts = []
    for where, ds in opened:
        values = time_values(ds, time_dim, where)
        if values.shape[0]:
            starts.append((values[0], where, ds, values.shape[0]))
    if not starts:
        raise InputError(f"{path}: the {time_dim} dimension is empty")
    if len(starts) > 1:
        starts.sort(key=lambda s: s[0])
    time_files, offset = [], 0
    for _, where, ds, length in starts:
        time_files.append(TimeFile(where, ds, offset, int(length)))
        offset += int(length)
    return time_files


def where_in(time_files: list[TimeFile], time_index: int, default: str) -> str:
    """The file holding a time index (for messages)."""
    for p in time_files:
        if p.start <= time_index < p.start + p.length:
            return p.path
    return default


def diff_steps(steps: tuple[int, ...] | None) -> tuple[int, ...]:
    steps = steps if steps is not None else (1,)
    if not steps or any(int(k) < 1 for k in steps):
        raise InputError(f"--diff-steps {steps}: steps must be positive whole numbers")
    return tuple(sorted({int(k) for k in steps}))


def mdp_splits(ds: Any) -> dict[str, tuple[str, str]]:
    """The splits an mllam-data-prep store defines in its ``splits`` variable."""
    if "splits" not in ds.variables or set(ds["splits"].dims) != {"split_name", "split_part"}:
        return {}
    da = ds["splits"].load()
    out = {}
    for name in da["split_name"].values:
        row = da.sel(split_name=name)
        out[label(name)] = tuple(
            _bound(row.sel(split_part=part).values) for part in ("start", "end")
        )
    return out


def resolve_splits(
    specs: tuple[str, ...],
    defined: dict[str, tuple[str, str]],
    variable_names: list[str],
    times: np.ndarray,
    time_dim: str,
    path: str,
    where_of: Callable[[int], str],
) -> list[Split]:
    """The splits asked for (default: a store's splits with statistics, else
    all of them, else one split ``train`` over all times), checked."""
    specs = list(specs)
    if not specs and defined:
        with_stats = [n for n in defined if has_split_statistics(variable_names, n)]
        specs = with_stats or list(defined)
    resolved: list[tuple[str, str | None, str | None]] = []
    for spec in specs:
        name, start, end = parse_split(spec)
        if start is None:
            if name not in defined:
                known = f" (the store defines {', '.join(defined)})" if defined else ""
                raise InputError(f"--split {name}: give the interval as NAME=START/END{known}")
            start, end = defined[name]
        resolved.append((name, start, end))
    if not resolved:
        resolved = [("train", None, None)]
    names = [r[0] for r in resolved]
    if len(set(names)) != len(names):
        raise InputError(f"--split: split names must differ (got {', '.join(names)})")
    index = time_index(times)
    n_times = int(times.shape[0])
    first, last = fmt_time(times[0]), fmt_time(times[-1])
    splits = []
    for name, start, end in resolved:
        if start is None:
            split = Split(name, 0, n_times, f"{first}/{last}")
        else:
            found = select(index, times, name, start, end, time_dim)
            if found.stop <= found.start:
                raise InputError(
                    f"{path}: split {name} ({start}/{end}) selects no time steps: "
                    f"{time_dim} runs from {first} to {last}"
                )
            split = Split(name, found.start, found.stop, f"{start}/{end}")
        check_regular(times, split, time_dim, where_of)
        if split.stop - split.start == 1:
            warnings.warn(
                f"split {name} has one time step ({fmt_time(times[split.start])}): "
                "no differences; its difference statistics are absent",
                stacklevel=2,
            )
        splits.append(split)
    return splits


def restrict_to_period(
    splits: list[Split], period: str, times: np.ndarray, time_dim: str, path: str
) -> list[Split]:
    """Each split cut to the time steps of ``--period`` (the statistics' own
    period, distinct from the splits that name the outputs)."""
    from wxstats.sources.base import parse_period

    start, end = parse_period(period)
    found = select(time_index(times), times, "--period", start, end, time_dim)
    out = []
    for split in splits:
        lo, hi = max(split.start, found.start), min(split.stop, found.stop)
        if lo >= hi:
            raise InputError(
                f"{path}: split {split.name} ({split.label}) has no time steps in --period "
                f"{period} ({time_dim} runs from {fmt_time(times[0])} to {fmt_time(times[-1])})"
            )
        out.append(Split(split.name, lo, hi, split.label))
    return out


def time_groups(
    by: str | None, times: np.ndarray, path: str, splits: list[Split] | None = None
) -> tuple[str, list[int], np.ndarray] | None:
    """A climatology (``--by month|hour``) or per-year statistics (``--by year``):
    the dimension, its values and the group index of every time step; ``None``
    without ``--by``. The years are those of the steps of ``splits`` (all
    steps without), one set for every split: a file has one ``year`` dimension,
    a year outside a split has count 0 and NaN statistics there."""
    if by is None:
        return None
    if by not in GROUPINGS:
        raise InputError(f"--by {by!r}: expected one of {', '.join(GROUPINGS)}")
    if times.dtype.kind != "M":
        raise InputError(
            f"{path}: --by {by} needs datetime64 times (this axis holds {times.dtype})"
        )
    used = times
    if by == "year" and splits:
        used = np.concatenate([times[s.start : s.stop] for s in splits])
    values = group_values(by, used)
    return by, values, group_index(by, times, values)
