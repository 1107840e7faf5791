"""The options that select data, declared once: the fields of :class:`DataOptions`.

Each field carries its :class:`~wxstats.runtime.option.Option` (flag, parsing,
help, the capability of the data that takes it, where the run identity records
it, how ``update`` derives it from a state). :class:`~wxstats.runtime.options.ComputeOptions`
adds the outputs and how to run; adding an option is one field in one of the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wxstats.runtime.option import (
    GRIDDED,
    GROWS,
    NOT_DATASTORES,
    ZARR,
    gridded,
    names,
    option,
    positive_float,
    positive_int,
    samples,
    state_feature_dims,
    state_variables,
    steps,
    storage_option,
    weights,
    weights_files,
)


@dataclass(frozen=True)
class DataOptions:
    """What data a run reads (see docs/ for each option)."""

    dataset: str = ""
    split: str | None = None
    """One split: a MEPS split folder, or one ``NAME=START/END`` (same as ``splits``)."""
    splits: tuple[str, ...] = option(
        (),
        "--split",
        "datastore YAML: the split folder (default: train); zarr/netCDF: "
        "NAME=START/END, an inclusive ISO 8601 interval, repeatable (default: one split "
        "'train' over all times, or an mllam-data-prep store's own splits)",
        action="append",
        metavar="SPLIT",
        takes=lambda c: not c.anemoi_statistics,
        where="zarr/netCDF datasets and neural-lam datastores",
        hint="anemoi's statistics are over every variable of one window: choose it with --period",
        identity="data.split",
    )
    period: str | None = option(
        None,
        "--period",
        "compute the statistics over these times only (an inclusive ISO 8601 interval, "
        "e.g. 1979/2015: every split cut to it; a datastore's analysis times), distinct from "
        "the splits that name the outputs; recorded in every statistics file; for an anemoi "
        "dataset: its statistics window (default: its statistics_start/end_date, else "
        "anemoi's rule)",
        metavar="START/END",
        identity="run.splits",
    )
    variables: tuple[str, ...] | None = option(
        None,
        "--variables",
        "variables to use (default: every numeric variable with the time dimension)",
        parse=names,
        metavar="A,B",
        group=ZARR,
        takes=gridded,
        where=GRIDDED,
        identity="data.variables",
        from_state=lambda s: None if samples(s) else state_variables(s),
        show=",".join,
    )
    time_dim: str = option(
        "time",
        "--time-dim",
        "the time dimension (default: time)",
        group=ZARR,
        takes=gridded,
        where=GRIDDED,
        identity="data.time_dim",
        from_state=lambda s: "time" if samples(s) else s.identity["time_dim"],
    )
    diff_steps: tuple[int, ...] | None = option(
        None,
        "--diff-steps",
        "time-difference steps, in time steps (default: 1)",
        parse=steps,
        metavar="K,...",
        group=ZARR,
        takes=lambda c: not c.neurallam_files,
        where=NOT_DATASTORES,
        hint="a datastore's is --step-length",
        identity="data.diff_steps",
        from_state=lambda s: None if samples(s) else tuple(s.identity["diff_steps"]),
        show=lambda v: ",".join(map(str, v)),
    )
    feature_dims: tuple[str, ...] | None = option(
        None,
        "--feature-dims",
        "dimensions whose entries are separate features, e.g. level -> z_500 (default: "
        "*_feature and vertical-level dimensions; '' for none); all others are reduced",
        parse=names,
        metavar="DIM,...",
        group=ZARR,
        takes=gridded,
        where=GRIDDED,
        identity="data.variables",
        from_state=lambda s: None if samples(s) else state_feature_dims(s),
        show=",".join,
    )
    by: str | None = option(
        None,
        "--by",
        "a climatology: mean, std, extremes and differences per month of the year "
        "(or hour of the day) of each split, along a month (hour) dimension, in one pass; "
        "year: the same per calendar year of the data, along a year dimension (wxstats "
        "report then shows the drift: per-year and cumulative mean and std)",
        choices=("month", "hour", "year"),
        group=ZARR,
        takes=gridded,
        where=GRIDDED,
        identity="data.by",
        from_state=lambda s: s.identity.get("by"),
    )
    pool: tuple[str, ...] = option(
        (),
        "--pool",
        "also the statistics of each variable over all entries of these feature "
        "dimensions together (e.g. level: one mean and std per variable, as anemoi's joint "
        "normalizer), exact whatever the counts per level; written as {var}_pooled__{split}__"
        "{op} and in the summary",
        parse=names,
        action="extend",
        metavar="DIM,...",
        group=ZARR,
        takes=gridded,
        where=GRIDDED,
        identity="data.pool",
        from_state=lambda s: tuple(s.identity.get("pool") or ()),
        show=",".join,
    )
    weights: str | None = option(
        None,
        "--weights",
        "area-weighted statistics of values, differences and forcings: coslat weights "
        "each grid point by the cosine of its latitude coordinate; VAR by a field of the "
        "dataset (a cell area), FILE:VAR by one of another file (recorded with its absolute "
        "path); none: unweighted (the default, but for --format makani: coslat); recorded in "
        "every output",
        parse=weights,
        metavar="coslat|VAR|FILE:VAR|none",
        group=ZARR,
        takes=gridded,
        where=GRIDDED,
        identity="data.weights",
        from_state=lambda s: (s.identity.get("weights") or {}).get("method"),
        files=weights_files,
    )
    block_mb: float | None = option(
        None,
        "--block-mb",
        "memory per block of time steps (default 32; at least one storage chunk)",
        parse=positive_float,
        metavar="MB",
        group=ZARR,
        takes=lambda c: not c.neurallam_files,
        where=NOT_DATASTORES,
        identity="job.samples",
    )
    storage_options: tuple[tuple[str, Any], ...] = option(
        (),
        "--storage-option",
        "an fsspec option for a URL (s3://, gs://...), repeatable: endpoint_url=URL, "
        "anon=true, profile=NAME; VALUE is read as JSON when it parses (true, 64, {...}); "
        "credentials otherwise come from the environment (AWS_ACCESS_KEY_ID...)",
        parse=storage_option,
        action="append",
        metavar="KEY=VALUE",
        group=ZARR,
        commands=GROWS,
        takes=gridded,
        where=GRIDDED,
    )
    """fsspec options of a URL (``endpoint_url``, ``anon``, ``key``...); never recorded."""
    step_length: int | None = option(
        None,
        "--step-length",
        "time step of the differences (default: the config's step_length)",
        parse=positive_int,
        metavar="HOURS",
        takes=lambda c: c.neurallam_files,
        where="neural-lam datastores",
        hint="for zarr/netCDF give --diff-steps (in time steps)",
        identity="data.diff_steps",
        from_state=lambda s: int(s.identity["diff_steps"][0]) if samples(s) else None,
    )
    skipna: bool = option(
        False,
        "--skipna",
        "leave NaN values out (counted in nan_count) instead of failing",
        action="store_true",
        identity="data.skipna",
        from_state=lambda s: bool(s.identity["skipna"]),
    )
    moments: int = option(
        2,
        "--moments",
        "the highest power of the values summed: 2 (default) the mean and std; 4 also "
        "the skewness and excess kurtosis of values and differences (exact like the rest; "
        "in the statistics file and the summary, not in a trainer's files)",
        parse=int,
        choices=(2, 4),
        identity="data.moments",
        from_state=lambda s: int(s.identity.get("moments", 2)),  # absent before --moments
    )
