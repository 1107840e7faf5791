"""What each kind of data supports, by its label: the one place they meet.

A source class takes its :class:`~wxstats.sources.base.Capabilities` from
:data:`KINDS` under its ``kind``; a statistics state records only the label,
so what its data supports is :func:`capabilities_of` the label.
"""

from __future__ import annotations

from wxstats.sources.base import Capabilities

KINDS: dict[str, Capabilities] = {
    "xarray": Capabilities(
        what="a zarr/netCDF dataset", time_splits=True, state="time ranges", workers=True
    ),
    "npyfilesmeps": Capabilities(
        what="a neural-lam datastore", state="samples", neurallam_files=True, maps_samples=True
    ),
    "anemoi": Capabilities(
        what="an anemoi dataset",
        no_state="an anemoi dataset's statistics are rewritten whole, over its window",
        anemoi_statistics=True,
    ),
}
"""Capabilities by kind label (an xarray source of an mllam-data-prep store adds ``mdp_store``)."""


def capabilities_of(kind: str) -> Capabilities:
    """What data of the kind labelled ``kind`` supports (an unknown label: nothing)."""
    return KINDS.get(kind, Capabilities())
