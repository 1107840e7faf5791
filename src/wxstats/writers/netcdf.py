"""The self-describing statistics file (netCDF, float64, via xarray).

Variables are named like mllam-data-prep's, ``{stream}__{split}__{op}``
(``state__train__mean``, ``state__train__diff_std``, ``forcing__train__mean``),
with feature names, units and long names as coordinates, difference
statistics along a ``diff_step`` dimension (raw and standardized scale), and
attributes saying how the numbers were computed. netCDF was chosen because
every weather tool opens it, and xarray reads it back into the same shape.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from wxstats.atomic import Writer
from wxstats.sources.base import StreamLayout
from wxstats.stats import Stats

METHOD = (
    "population mean and standard deviation (ddof=0) in float64; per-sample sums of "
    "shifted, power-of-two-scaled values combined by exact (integer) summation and "
    "rounded once; diff statistics over x[t] - x[t-k]; *_standardized = diff / std"
)


def _diff_dim(stream, prefix: str, all_steps: set[int], layout) -> str:
    """``diff_step``, or a dimension of the stream's own where a short split
    lacks some steps (absent, rather than NaN-filled by alignment)."""
    if layout is None or set(stream.diff) == all_steps:
        return "diff_step"
    return f"{prefix}diff_step"


def _variable(values, form, extra_dims: tuple[str, ...], unit: bool) -> tuple:
    """(dims, array, attrs) of one statistic; ``form`` is (feature dims,
    feature shape or None for a flat feature axis, attrs with units)."""
    dims, shape, attrs = form
    array = np.asarray(values)
    if shape is not None:
        array = array.reshape(array.shape[: len(extra_dims)] + tuple(shape))
    return (extra_dims + tuple(dims), array, attrs if unit else {})


def stats_dataset(stats: Stats, split: str, layout: dict[str, StreamLayout] | None = None):
    """The statistics as an ``xarray.Dataset`` (see module docstring).

    Without ``layout`` (neural-lam MEPS) the streams are ``state`` and one
    forcing; with it (zarr/netCDF sources) each stream is named and shaped as
    its :class:`~wxstats.sources.base.StreamLayout` says.
    """
    import xarray as xr

    data_vars = {}
    coords = {}
    all_steps = {k for stream in stats.streams.values() for k in stream.diff}
    for name, stream in stats.streams.items():
        if layout is None:
            category = "state" if name == "state" else "forcing"
            dim = f"{category}_feature"
            if category == "forcing" and dim in coords:
                # several forcing streams share one feature axis
                raise NotImplementedError("one forcing stream per statistics file")
            coords[dim] = (dim, list(stream.features))
            coords[f"{category}_feature_units"] = (dim, list(stream.units))
            if stream.long_names:
                coords[f"{category}_feature_long_name"] = (dim, list(stream.long_names))
            prefix, dims, shape, attrs = f"{category}__{split}__", (dim,), None, {}
        else:
            lay = layout[name]
            prefix, dims, shape = (
                f"{lay.prefix}__{lay.split}__",
                lay.feature_dims,
                lay.feature_shape,
            )
            coords.update(lay.coords)
            attrs = {"units": stream.units[0]} if len(set(stream.units)) == 1 else {}

        form = (dims, shape, attrs)
        for op, values in (
            ("count", stream.count),
            ("mean", stream.mean),
            ("std", stream.std),
            ("min", stream.minimum),
            ("max", stream.maximum),
            ("nan_count", stream.nan_count),
        ):
            data_vars[prefix + op] = _variable(values, form, (), op not in ("count", "nan_count"))
        if stream.diff:
            steps = sorted(stream.diff)
            diff_dim = _diff_dim(stream, prefix, all_steps, layout)
            coords[diff_dim] = (diff_dim, np.array(steps, dtype=np.int64))
            std_scale = [stream.standardized_diff(k) for k in steps]
            for op, values in (
                ("diff_count", [stream.diff[k].count for k in steps]),
                ("diff_mean", [stream.diff[k].mean for k in steps]),
                ("diff_std", [stream.diff[k].std for k in steps]),
                ("diff_mean_standardized", [s[0] for s in std_scale]),
                ("diff_std_standardized", [s[1] for s in std_scale]),
            ):
                unit = op in ("diff_mean", "diff_std")
                data_vars[prefix + op] = _variable(values, form, (diff_dim,), unit)
    attrs = {
        "title": "wxstats normalization statistics",
        "method": METHOD,
        "source_kind": stats.source_kind,
        "split": split,
        "warnings": json.dumps(stats.warnings),
        "wxstats_run": json.dumps(stats.run, sort_keys=True),
    }
    attrs.update({f"source_{k}": v for k, v in stats.attrs.items()})
    return xr.Dataset(data_vars, coords=coords, attrs=attrs)


def netcdf_writer(
    stats: Stats, split: str, layout: dict[str, StreamLayout] | None = None
) -> Writer:
    dataset = stats_dataset(stats, split, layout)

    def write(path: Path) -> None:
        dataset.to_netcdf(path, engine="netcdf4")

    return write
