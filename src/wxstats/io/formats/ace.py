"""ACE statistics (ai2cm's climate emulator, the ``fme`` package): ``centering.nc``,
``scaling-full-field.nc``, ``scaling-residual.nc`` and ``time-mean.nc`` (``--format ace``).

What ACE reads, from its source (github.com/ai2cm/ace, fme 2026.10):

- ``fme/core/normalizer.py``, ``load_dict_from_netcdf``: one scalar variable per
  field, named as the dataset's variable, read with ``float(...)``; a
  ``NormalizationConfig`` points ``global_means_path`` at ``centering.nc`` and
  ``global_stds_path`` at ``scaling-full-field.nc`` (the network's
  normalization) or at ``scaling-residual.nc`` (the loss of residual-scaled
  outputs, ``NetworkAndLossNormalizationConfig.residual``);
- ``scripts/data_process/get_stats.py``, ``get_stats``: centering and scaling are
  the mean and population std (ddof 0) over time and both horizontal dimensions,
  **unweighted** (a plain mean over lat/lon); the residual scaling the std of
  ``ds.diff("time")``, the one-step difference ``x[t+1] - x[t]`` of the stored
  time axis; ``time-mean.nc`` the mean over time of every grid point (read back
  by ``fme/ace/aggregator/inference/main.py`` as ``time_mean_reference_data``
  and compared by ``.values`` with the emulator's time mean, grid order as stored);
  every file carries the global attribute ``input_samples`` (the number of time
  steps), which ``scripts/data_process/combine_stats.py`` uses to weight runs
  when it combines them.

So a run writing these files is unweighted unless ``--weights`` says otherwise
(recorded in each file's ``method``); its residual is of ``--diff-steps`` (one
step, default 1). Values are float64 scalars; the time means are float32 as
ACE's own are from its float32 datasets, per grid point and unweighted (the
fixed-point sums of :mod:`wxstats.core.cellsums`). :func:`read_ace` reads such
a folder (wxstats' or ACE's own) back for ``report`` and ``compare``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.errors import InputError, WxstatsError
from wxstats.core.stats import DiffStats, Stats, StreamStats, weighting
from wxstats.core.streams import listed_features
from wxstats.io.atomic import Writer
from wxstats.io.formats.ncwrite import write_netcdf
from wxstats.io.formats.netcdf import recorded_split

FILES = {"centering.nc": "mean", "scaling-full-field.nc": "std"}
RESIDUAL = "scaling-residual.nc"
TIME_MEAN = "time-mean.nc"
ACE_FILES = (*FILES, RESIDUAL, TIME_MEAN)


def _var_attrs(stream: StreamStats) -> dict[str, str]:
    """The field's ``units`` and ``long_name``, kept as get_stats.py's xarray keeps them."""
    attrs = {"units": stream.units[0]} if stream.units and stream.units[0] else {}
    if stream.long_names and stream.long_names[0] and stream.long_names[0] != stream.features[0]:
        attrs["long_name"] = stream.long_names[0]
    return attrs


def _fields(stats: Stats, split: str) -> list[StreamStats]:
    streams = [s for s in stats.streams.values() if s.layout and s.layout.split == split]
    for stream in streams:
        if stream.layout.feature_dims or stream.time_mean is None:
            raise WxstatsError(
                f"variable {stream.layout.variable}: --format ace takes one field with time per "
                "variable name (ACE reads a scalar per name); split its levels into variables"
            )
    return streams


def ace_outputs(
    stats: Stats, folder: Path, split: str, step: int, grids: dict[str, tuple[tuple, tuple]]
) -> dict[Path, Writer]:
    """Writers of ACE's four files for ``split`` (see module docstring); ``grids``:
    each variable's grid dimensions and sizes, as stored, for its time mean."""
    streams = _fields(stats, split)
    names = [s.layout.variable for s in streams]
    first = streams[0]
    n_grid = first.time_mean.shape[0]
    steps = int(first.count[0]) // n_grid if first.count is not None else 0
    attrs: dict[str, Any] = {
        "title": "ACE normalization statistics written by wxstats",
        "split": split,
        "input_samples": steps,  # what combine_stats.py weights runs by: time steps
        "residual_step": step,
        "method": f"population statistics (ddof 0), {weighting(stats.attrs)}, float64; "
        f"scaling-residual: std of x[t+{step}] - x[t]; time-mean: per grid point, "
        "unweighted, float32",
    }
    for key in ("dataset", "statistics_period"):
        if key in stats.attrs:
            attrs[key] = stats.attrs[key]

    def scalars(values: list[np.ndarray]) -> Writer:
        data = {
            n: ((), np.float64(v[0]), _var_attrs(s))
            for n, v, s in zip(names, values, streams, strict=True)
        }
        return lambda path: write_netcdf(path, data, {}, attrs)

    out: dict[Path, Writer] = {
        folder / file: scalars([s.op(op) for s in streams]) for file, op in FILES.items()
    }
    out[folder / RESIDUAL] = scalars([s.diff[step].std for s in streams])
    means = {
        n: (grids[n][0], s.time_mean[:, 0].astype(np.float32).reshape(grids[n][1]), _var_attrs(s))
        for n, s in zip(names, streams, strict=True)
    }
    out[folder / TIME_MEAN] = lambda path: write_netcdf(path, means, {}, attrs)
    return out


def is_ace(folder: Path) -> bool:
    return all((folder / name).is_file() for name in FILES)


def _scalars(path: Path) -> tuple[dict[str, float], dict[str, Any], dict[str, str]]:
    """The scalar variables of one file, as ACE's ``load_dict_from_netcdf`` takes
    them (others are left out), with the file's attributes and the units."""
    import xarray as xr

    try:
        with xr.open_dataset(path, decode_timedelta=False) as ds:
            values = {str(n): float(v.values) for n, v in ds.data_vars.items() if v.ndim == 0}
            units = {str(n): str(v.attrs.get("units", "")) for n, v in ds.data_vars.items()}
            return values, dict(ds.attrs), units
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot read: {exc}") from None


def read_ace(folder: str | Path, split: str | None = None) -> Stats:
    """An ACE statistics folder as :class:`Stats`: one ``state`` stream, a feature per
    scalar of ``centering.nc``; the residual scaling under its step (wxstats'
    ``residual_step``, else 1 as get_stats.py's ``diff("time")``); of the split the
    files record (``split``, when given, must be it), else of ``split``."""
    folder = Path(folder)
    mean, attrs, units = _scalars(folder / "centering.nc")
    names = list(mean)

    def aligned(file: str) -> tuple[np.ndarray, dict[str, Any]]:
        values, file_attrs, _ = _scalars(folder / file)
        missing = [n for n in names if n not in values]
        if missing:
            raise InputError(f"{folder / file}: no {', '.join(missing)} (centering.nc has them)")
        return np.array([values[n] for n in names], dtype=np.float64), file_attrs

    stream = StreamStats(
        name="state",
        features=names,
        units=[units.get(n, "") for n in names],
        mean=np.array([mean[n] for n in names], dtype=np.float64),
        std=aligned("scaling-full-field.nc")[0],
        layout=listed_features(
            "state", recorded_split(attrs.get("split"), split, str(folder / "centering.nc")), names
        ),
    )
    if (folder / RESIDUAL).is_file():
        std, residual_attrs = aligned(RESIDUAL)
        step = int(residual_attrs.get("residual_step", 1))
        stream.diff[step] = DiffStats(mean=np.full_like(std, np.nan), std=std)
        stream.missing.add(f"diff{step} mean")  # ACE keeps no residual mean
    return Stats(
        source_kind="ace",
        streams={"state": stream},
        attrs={k: v for k, v in attrs.items() if isinstance(v, (str, int, float))},
        origin=f"{folder} (ACE)",
    )
