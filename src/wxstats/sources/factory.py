"""Which source a dataset needs, opened: what runtime and tools know of the kinds.

Each kind of data declares itself in its module (:mod:`wxstats.sources.kinds`):
a neural-lam datastore YAML gets a MEPS source, an anemoi dataset an anemoi
source, anything else (a zarr store, a netCDF file or glob, an
``xarray.Dataset`` given in place of a path) an xarray source. Runtime and
tools see only the :class:`~wxstats.sources.base.Source` protocol (and the
sub-protocols its :class:`~wxstats.sources.base.Capabilities` name), this
module and the kinds: never a concrete source module. What to read arrives as
one :class:`~wxstats.sources.kinds.Selection`: sources know nothing of a run's
options.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from wxstats.sources.base import Source
from wxstats.sources.kinds import Selection, SourceKind, recognise


def kind_of(dataset: str | Path, given: Any = None) -> SourceKind:
    """The kind of ``dataset`` (:func:`~wxstats.sources.kinds.recognise`). Telling an
    anemoi dataset opens its zarr group, so a command finds it once and passes it on
    (``kind=``)."""
    return recognise(str(dataset), given)


def open_source(
    dataset: str | Path,
    selection: Selection,
    *,
    given: Any = None,
    kind: SourceKind | None = None,
) -> Source:
    """The source of ``dataset`` (``given``: an ``xarray.Dataset`` read in place
    of the path; ``kind``: its :func:`kind_of`, if found already), opened by its
    kind from ``selection``."""
    kind = kind or kind_of(dataset, given)
    return kind.opens(dataset if given is None else given, selection)


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
