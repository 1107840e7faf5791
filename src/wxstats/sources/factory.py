"""Which source a dataset needs, opened: what runtime and tools know of the kinds.

A neural-lam datastore YAML gets a MEPS source, an anemoi dataset an anemoi
source, anything else (a zarr store, a netCDF file or glob, an
``xarray.Dataset`` given in place of a path) an xarray source. Runtime and
tools see only the :class:`~wxstats.sources.base.Source` protocol (and the
sub-protocols its :class:`~wxstats.sources.base.Capabilities` name), this
module and the kinds table: never a concrete source module. The kinds' modules
are imported here only when a source is opened (zarr, xarray and pandas load
then). Options arrive as plain values: sources know nothing of a run's options.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from wxstats.core.errors import WxstatsError
from wxstats.sources.base import Source


def kind_of(dataset: str | Path, given: Any = None) -> str:
    """The kind label (a key of :data:`~wxstats.sources.kinds.KINDS`) of the source
    :func:`open_source` opens for ``dataset``. Telling an anemoi dataset opens its
    zarr group, so a command finds it once and passes it on (``kind=``)."""
    if given is not None:
        return "xarray"
    text = str(dataset)
    if text.endswith((".yaml", ".yml")):
        return "npyfilesmeps"
    from wxstats.sources.anemoi import is_anemoi

    return "anemoi" if is_anemoi(text) else "xarray"


def open_source(
    dataset: str | Path,
    *,
    given: Any = None,
    kind: str | None = None,
    splits: tuple[str, ...] = (),
    period: str | None = None,
    by: str | None = None,
    weights: str | None = None,
    time_means: bool = False,
    variables: tuple[str, ...] | None = None,
    time_dim: str = "time",
    diff_steps: tuple[int, ...] | None = None,
    feature_dims: tuple[str, ...] | None = None,
    pool: tuple[str, ...] = (),
    block_bytes: int | None = None,
    storage_options: tuple[tuple[str, Any], ...] = (),
    io_threads: int = 0,
    step_length: int | None = None,
) -> Source:
    """The source of ``dataset`` (``given``: an ``xarray.Dataset`` read in place
    of the path; ``kind``: its :func:`kind_of`, if found already). A datastore
    takes one split (its folder, default ``train``), ``period`` and
    ``step_length``; an anemoi dataset ``period``, ``diff_steps``,
    ``block_bytes`` and ``io_threads``; an xarray dataset every option.
    ``block_bytes`` None: the kind's default."""
    kind = kind or kind_of(dataset, given)
    if kind == "npyfilesmeps":
        from wxstats.sources.meps import MepsSource

        if len(splits) > 1:
            raise WxstatsError(f"{dataset}: a neural-lam datastore takes one --split per run")
        split = splits[0] if splits else "train"
        return MepsSource(str(dataset), split=split, step_length=step_length, period=period)
    if kind == "anemoi":
        from wxstats.sources.anemoi import DEFAULT_BLOCK_BYTES, AnemoiSource

        return AnemoiSource(
            str(dataset),
            period=period,
            diff_steps=diff_steps,
            block_bytes=DEFAULT_BLOCK_BYTES if block_bytes is None else block_bytes,
            io_threads=io_threads,
        )
    from wxstats.sources.xarray import DEFAULT_BLOCK_BYTES, XarrayOptions, XarraySource

    return XarraySource(
        dataset if given is None else given,
        XarrayOptions(
            splits=splits,
            period=period,
            by=by,
            weights=weights,
            time_means=time_means,
            variables=variables,
            time_dim=time_dim,
            diff_steps=diff_steps,
            feature_dims=feature_dims,
            pool=pool,
            block_bytes=DEFAULT_BLOCK_BYTES if block_bytes is None else block_bytes,
            storage_options=storage_options,
            io_threads=io_threads,
        ),
    )


def output_stem(path: str | Path) -> str:
    """A file name stem for the statistics of ``path`` (``era5.nc`` -> ``era5``)."""
    from wxstats.sources.xarray.open import NETCDF_SUFFIXES

    name = str(path).rstrip("/").rsplit("/", 1)[-1]
    for suffix in (".zarr", *NETCDF_SUFFIXES):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    name = re.sub(r"[*?\[\]]", "", name).strip("._-")
    return name or "dataset"


def describe_array_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One phrase per array whose fingerprint (a source's identity's ``arrays``)
    differs between two runs: what a refused resume names."""
    from wxstats.sources.xarray.fingerprint import describe_array_changes as describe

    return describe(old, new)
