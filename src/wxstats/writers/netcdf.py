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
from wxstats.stats import Stats

METHOD = (
    "population mean and standard deviation (ddof=0) in float64; per-sample sums of "
    "shifted, power-of-two-scaled values combined by exact (integer) summation and "
    "rounded once; diff statistics over x[t] - x[t-k]; *_standardized = diff / std"
)


def stats_dataset(stats: Stats, split: str):
    """The statistics as an ``xarray.Dataset`` (see module docstring)."""
    import xarray as xr

    data_vars = {}
    coords = {}
    for name, stream in stats.streams.items():
        category = "state" if name == "state" else "forcing"
        dim = f"{category}_feature"
        if category == "forcing" and dim in coords:
            # several forcing streams share one feature axis
            raise NotImplementedError("one forcing stream per statistics file")
        coords[dim] = (dim, list(stream.features))
        coords[f"{category}_feature_units"] = (dim, list(stream.units))
        if stream.long_names:
            coords[f"{category}_feature_long_name"] = (dim, list(stream.long_names))
        prefix = f"{category}__{split}__"
        for op, values in (
            ("count", stream.count),
            ("mean", stream.mean),
            ("std", stream.std),
            ("min", stream.minimum),
            ("max", stream.maximum),
            ("nan_count", stream.nan_count),
        ):
            data_vars[prefix + op] = ((dim,), np.asarray(values))
        if stream.diff:
            steps = sorted(stream.diff)
            coords["diff_step"] = ("diff_step", np.array(steps, dtype=np.int64))
            std_scale = [stream.standardized_diff(k) for k in steps]
            for op, values in (
                ("diff_count", [stream.diff[k].count for k in steps]),
                ("diff_mean", [stream.diff[k].mean for k in steps]),
                ("diff_std", [stream.diff[k].std for k in steps]),
                ("diff_mean_standardized", [s[0] for s in std_scale]),
                ("diff_std_standardized", [s[1] for s in std_scale]),
            ):
                data_vars[prefix + op] = (("diff_step", dim), np.asarray(values))
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


def netcdf_writer(stats: Stats, split: str) -> Writer:
    dataset = stats_dataset(stats, split)

    def write(path: Path) -> None:
        dataset.to_netcdf(path, engine="netcdf4")

    return write
