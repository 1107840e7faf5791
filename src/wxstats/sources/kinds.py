"""The kinds of data: each source module declares its own, and the one lookup.

A source module declares a :class:`SourceKind` named ``KIND``: its label, its
:class:`~wxstats.sources.base.Capabilities`, how it recognises a dataset and
how it opens one from a :class:`Selection`. :data:`MODULES` names those modules
in the order they are asked (the first that recognises a dataset opens it; the
last, zarr/netCDF, takes anything); a module is imported only when it is asked,
so a datastore's run never loads xarray. A statistics state records only the
label: what its data supports is :func:`capabilities_of` the label.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from wxstats.sources.base import Capabilities, Source


@dataclass(frozen=True)
class Selection:
    """What to read of a dataset, in one frozen value every kind opens from
    (each takes the fields it knows; the run's options refuse the others first).
    ``block_bytes`` None: the kind's default."""

    splits: tuple[str, ...] = ()
    period: str | None = None
    by: str | None = None
    weights: str | None = None
    time_means: bool = False
    """Also the mean over time of every grid point (``--format makani``)."""
    variables: tuple[str, ...] | None = None
    time_dim: str = "time"
    diff_steps: tuple[int, ...] | None = None
    feature_dims: tuple[str, ...] | None = None
    pool: tuple[str, ...] = ()
    block_bytes: int | None = None
    storage_options: tuple[tuple[str, Any], ...] = ()
    io_threads: int = 0
    """Threads fetching and decompressing chunks (``--threads``); 0: the CPUs."""
    step_length: int | None = None


@dataclass(frozen=True)
class SourceKind:
    """One kind of data, declared by its module (see module docstring)."""

    label: str
    """For messages, the statistics file and a state's identity (``xarray``)."""
    capabilities: Capabilities
    recognises: Callable[[str, Any], bool]
    """Whether a dataset (its path, or an ``xarray.Dataset`` given in place of one) is of it."""
    opens: Callable[[Any, Selection], Source]
    """Its source over a dataset (the path, or the given Dataset) and a selection."""


MODULES: dict[str, str] = {
    "npyfilesmeps": "wxstats.sources.meps",
    "anemoi": "wxstats.sources.anemoi",
    "xarray": "wxstats.sources.xarray",
}
"""The module declaring each kind, by label, in the order they are asked."""


def kind_named(label: str) -> SourceKind:
    """The kind labelled ``label`` (its module imported now)."""
    return importlib.import_module(MODULES[label]).KIND


def recognise(dataset: str, given: Any = None) -> SourceKind:
    """The first kind that recognises ``dataset`` (``given``: a Dataset read in its place)."""
    for label in MODULES:
        kind = kind_named(label)
        if kind.recognises(dataset, given):
            return kind
    raise AssertionError("the last kind takes any dataset")


def capabilities_of(label: str) -> Capabilities:
    """What data of the kind labelled ``label`` supports (an unknown label: nothing)."""
    return kind_named(label).capabilities if label in MODULES else Capabilities()
