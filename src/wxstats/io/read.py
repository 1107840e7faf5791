"""Read any statistics set back into the one result model, whoever wrote it.

Three families of files hold normalization statistics, each read by its
format module into a :class:`~wxstats.core.stats.Stats`:

- ``{prefix}__{split}__{op}`` files (:mod:`.formats.netcdf`): wxstats'
  ``wxstats_stats.nc`` and the statistics file of a zarr/netCDF run, and
  mllam-data-prep zarr stores;
- the ``--summary`` JSON (:mod:`.formats.summary`);
- a neural-lam ``static/`` folder (:mod:`.formats.neurallam`), with variable
  names, units and step length from the datastore YAML beside it;
- a makani statistics folder (:mod:`.formats.makani`), a GraphCast-style one
  (:mod:`.formats.graphcast`), an ACE one (:mod:`.formats.ace`);
- an anemoi dataset's statistics, or a sidecar store of them (:mod:`.formats.anemoi`).
"""

from __future__ import annotations

from pathlib import Path

from wxstats.core.errors import InputError
from wxstats.core.stats import Stats
from wxstats.io.atomic import interrupted_write
from wxstats.io.formats.ace import is_ace, read_ace
from wxstats.io.formats.anemoi import is_anemoi_statistics, read_anemoi_stats
from wxstats.io.formats.graphcast import is_graphcast, read_graphcast
from wxstats.io.formats.makani import is_makani, read_makani
from wxstats.io.formats.netcdf import read_stats_file
from wxstats.io.formats.neurallam import is_neurallam_static, read_neurallam_static
from wxstats.io.formats.summary import read_summary

NETCDF_NAME = "wxstats_stats.nc"
"""The float64 statistics file a MEPS run writes beside neural-lam's files."""


def _is_zarr(path: Path) -> bool:
    return path.suffix == ".zarr" or any(
        (path / marker).exists() for marker in ("zarr.json", ".zgroup", ".zmetadata")
    )


def read_stats(path: str | Path, split: str | None = None) -> Stats:
    """Read any supported statistics set (see module docstring); a clear error otherwise.

    ``path`` may be a ``.nc`` file, a ``.json`` summary, a ``.zarr`` store, a
    neural-lam ``static/`` folder, the datastore folder holding it, or the
    datastore YAML itself. ``split``: which split, when the set holds several.
    """
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or folder")
    folder = path if path.is_dir() else path.parent
    for where in (folder, folder / "static"):
        journal = interrupted_write(where)
        if journal is not None:
            raise InputError(
                f"{where}: a wxstats write of these files was interrupted ({journal.name}), "
                "they may be a mix of new and previous ones; rerun the wxstats command that "
                "writes them (it first puts a consistent set back)"
            )
    if path.is_dir():
        if is_anemoi_statistics(path):
            return read_anemoi_stats(path)
        if _is_zarr(path):
            return read_stats_file(path, split, engine="zarr")
        if is_neurallam_static(path):
            return read_neurallam_static(path)
        if is_neurallam_static(path / "static"):
            return read_neurallam_static(path / "static")
        if (path / NETCDF_NAME).exists():
            return read_stats_file(path / NETCDF_NAME, split)
        if is_makani(path):
            return read_makani(path)
        if is_graphcast(path):
            return read_graphcast(path)
        if is_ace(path):
            return read_ace(path)
        raise InputError(
            f"{path}: no statistics here (expected a zarr store, a neural-lam static/ "
            "folder with parameter_mean.pt, a makani folder with global_means.npy, "
            f"GraphCast-style mean_by_level.nc, an ACE folder with centering.nc, or {NETCDF_NAME})"
        )
    if path.suffix == ".json":
        return read_summary(path, split)
    if path.suffix in (".yaml", ".yml"):
        static = path.parent / "static"
        if is_neurallam_static(static):
            return read_neurallam_static(static)
        raise InputError(f"{path}: no neural-lam statistics in {static} (run wxstats compute)")
    return read_stats_file(path, split)
