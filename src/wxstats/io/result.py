"""The statistics as ``wxstats.compute`` and ``wxstats.read`` hand them to users:
core's :class:`~wxstats.core.stats.Stats` with the file layouts in memory.

``to_xarray()`` is the statistics file (``t2m__train__mean``: its variables,
coordinates and attributes; :func:`wxstats.io.formats.netcdf.stats_dataset`)
and ``to_summary()`` the JSON summary (:func:`wxstats.io.formats.summary.summary_dict`).
They live here, not on core's class, because a file's names are io's: core
keeps each stream's labelled view (:meth:`~wxstats.core.stats.StreamStats.to_xarray`,
no file names) and never imports io, and a registry io filled into core
worked only once io had been imported (not in a Dask or Beam worker that
unpickled the statistics).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from wxstats.core.stats import Stats


@dataclass
class Result(Stats):
    """:class:`~wxstats.core.stats.Stats` with its file layouts (module docstring)."""

    @classmethod
    def of(cls, stats: Stats) -> Result:
        """``stats`` as users get them (the same values, not copied)."""
        return cls(**{f.name: getattr(stats, f.name) for f in fields(stats) if f.init})

    def to_xarray(self) -> Any:
        """Every stream's labelled view in one ``xarray.Dataset``, each statistic
        named as the statistics file a run writes names it: that file, in memory."""
        from wxstats.io.formats.netcdf import stats_dataset

        return stats_dataset(self)

    def to_summary(self) -> dict[str, Any]:
        """The statistics as plain data: the JSON summary's content."""
        from wxstats.io.formats.summary import summary_dict

        return summary_dict(self)
