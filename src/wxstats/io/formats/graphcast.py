"""GraphCast-style statistics: ``mean_by_level.nc``, ``stddev_by_level.nc``,
``diffs_stddev_by_level.nc`` and ``min_by_level.nc`` (``--format graphcast``).

GraphCast's normalization divides each variable of its inputs by the statistic
of the same name, aligned by xarray on the vertical coordinate: statistics whose
``level`` is stored in Pa while the data has hPa share no level with it, and
every pressure level drops out without a word. So each file holds one variable
per field, named as in the dataset; a field with a vertical (or any one
feature) dimension keeps the dataset's coordinate exactly (values, dtype and
attributes such as ``units``), and a 2-D field is a scalar. Population std
(ddof 0), unweighted; ``diffs_stddev`` is the std of ``x[t+k] - x[t]`` for the
one difference step of the run. :func:`read_graphcast` reads such a folder back
(wxstats' or another tool's) for ``report`` and ``compare``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.conventions import span_seconds
from wxstats.core.errors import InputError, WxstatsError
from wxstats.core.stats import DiffStats, Stats, StreamStats, weighting
from wxstats.core.streams import listed_features
from wxstats.io.atomic import Writer
from wxstats.io.formats.ncwrite import write_netcdf
from wxstats.io.formats.netcdf import recorded_split

FILES = {"mean": "mean_by_level.nc", "std": "stddev_by_level.nc", "min": "min_by_level.nc"}
DIFF_FILE = "diffs_stddev_by_level.nc"
GRAPHCAST_FILES = (*FILES.values(), DIFF_FILE)


def _field(stream: StreamStats, values: np.ndarray) -> tuple[tuple[str, ...], Any, dict]:
    lay = stream.layout
    array = np.asarray(values, dtype=np.float64).reshape(lay.feature_shape)
    units = {"units": stream.units[0]} if stream.units and len(set(stream.units)) == 1 else {}
    return tuple(lay.feature_dims), array, units


def _streams(stats: Stats, split: str) -> list[StreamStats]:
    streams = [s for s in stats.streams.values() if s.layout and s.layout.split == split]
    for stream in streams:
        if len(stream.layout.feature_dims) > 1:
            raise WxstatsError(
                f"variable {stream.layout.variable}: --format graphcast takes fields with at most "
                f"one dimension besides time and the grid (it has "
                f"{', '.join(stream.layout.feature_dims)}); choose the grid with --feature-dims"
            )
    return streams


def graphcast_outputs(stats: Stats, folder: Path, split: str, step: int) -> dict[Path, Writer]:
    """Writers of the GraphCast-style files of ``split`` (see module docstring)."""
    per_file: dict[str, dict[str, tuple]] = {name: {} for name in GRAPHCAST_FILES}
    coords: dict[str, tuple] = {}
    span = None
    for stream in _streams(stats, split):
        span = span or stream.diff_span_name(step)
        name = stream.layout.variable
        coords.update(stream.layout.coords)
        for op, file in FILES.items():
            per_file[file][name] = _field(stream, stream.op(op))
        if step in stream.diff:
            per_file[DIFF_FILE][name] = _field(stream, stream.diff[step].std)
    attrs = {
        "title": "GraphCast-style normalization statistics written by wxstats",
        "split": split,
        "diff_step": step,
        "method": f"population statistics (ddof 0), {weighting(stats.attrs)}, float64; "
        "diffs_stddev: std "
        f"of x[t+{step}] - x[t] per level",
    }
    if span:  # the time span of diff_step (6h): what the differences are
        attrs["diff_span"] = span
    if "statistics_period" in stats.attrs:
        attrs["statistics_period"] = stats.attrs["statistics_period"]

    def writer(data_vars: dict[str, tuple]) -> Writer:
        used = {d for dims, _, _ in data_vars.values() for d in dims}
        own = {k: v for k, v in coords.items() if set(np.atleast_1d(v[0])) <= used}

        def write(path: Path) -> None:
            write_netcdf(path, data_vars, own, attrs)

        return write

    return {folder / file: writer(data_vars) for file, data_vars in per_file.items()}


def is_graphcast(folder: Path) -> bool:
    return all((folder / FILES[op]).is_file() for op in ("mean", "std"))


def read_graphcast(folder: str | Path, split: str | None = None) -> Stats:
    """A folder of GraphCast-style files as :class:`Stats`: a ``state`` stream whose
    features are the variables, a variable with a level dimension once per level
    (``z_500``), in the files' order; the difference std under the files' step.
    A variable that ``diffs_stddev_by_level.nc`` leaves out is read into a
    ``static`` stream without differences: GraphCast divides only the residuals
    of its targets by that file, so a static field (``land_sea_mask``), which
    has no differences, is not in it (wxstats writes none; neither need
    another tool's files). ``mean`` and ``stddev`` must hold every variable.
    The streams are of the split the files record (``split``, when given, must
    be it), else of ``split``."""
    import xarray as xr

    folder = Path(folder)
    loaded = {}
    for op, name in {**FILES, "diff": DIFF_FILE}.items():
        if (folder / name).is_file():
            try:
                with xr.open_dataset(folder / name) as ds:
                    loaded[op] = ds.load()
            except (OSError, ValueError) as exc:
                raise InputError(f"{folder / name}: cannot read: {exc}") from None
    mean = loaded["mean"]
    for var in mean.data_vars:
        if mean[var].ndim > 1:
            raise InputError(
                f"{folder / FILES['mean']}: {var} has {mean[var].ndim} dimensions, not 0 or 1"
            )
    names = list(mean.data_vars)
    split = recorded_split(mean.attrs.get("split"), split, str(folder / FILES["mean"]))
    with_diffs = [v for v in names if "diff" not in loaded or v in loaded["diff"].data_vars]
    streams = {"state": _stream("state", split, with_diffs, loaded, folder)}
    statics = [v for v in names if v not in with_diffs]
    if statics:
        streams["static"] = _stream("static", split, statics, {**loaded, "diff": None}, folder)
    if not with_diffs:
        del streams["state"]
    return Stats(
        source_kind="graphcast",
        streams=streams,
        attrs={k: v for k, v in mean.attrs.items() if isinstance(v, (str, int, float))},
        origin=f"{folder} (GraphCast-style)",
    )


def _stream(name: str, split: str, variables: list, loaded: dict, folder: Path) -> StreamStats:
    """The stream of ``variables`` (``name``: ``state``, or ``static`` without differences)."""
    mean = loaded["mean"]
    features: list[str] = []
    units: list[str] = []
    for var in variables:
        da = mean[var]
        labels = [f"{var}_{v}" for v in np.asarray(da[da.dims[0]].values)] if da.ndim else [var]
        features += labels
        units += [str(da.attrs.get("units", ""))] * len(labels)

    def flat(op: str) -> np.ndarray | None:
        if loaded.get(op) is None:
            return None
        missing = [v for v in variables if v not in loaded[op].data_vars]
        if missing:
            raise InputError(f"{folder / FILES.get(op, DIFF_FILE)}: no {', '.join(missing)}")
        return np.concatenate(
            [np.atleast_1d(np.asarray(loaded[op][v].values, np.float64)) for v in variables]
        )

    stream = StreamStats(
        name=name,
        features=features,
        units=units,
        mean=flat("mean"),
        std=flat("std"),
        layout=listed_features(name, split, features),  # its role: state or static
    )
    stream.minimum = flat("min")
    if loaded.get("diff") is not None:
        step = int(loaded["diff"].attrs.get("diff_step", 1))
        std = flat("diff")
        stream.diff[step] = DiffStats(mean=np.full_like(std, np.nan), std=std)
        stream.missing.add(f"diff{step} mean")  # the files hold no difference mean
        span = span_seconds(loaded["diff"].attrs.get("diff_span", ""))
        if span:  # files written before spans were recorded: unknown
            stream.diff_span[step] = span
    return stream
