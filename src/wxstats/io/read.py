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
  (:mod:`.formats.graphcast`), an ACE one (:mod:`.formats.ace`), Aurora's
  normalisation (:mod:`.formats.aurora`);
- an anemoi dataset's statistics, or a sidecar store of them (:mod:`.formats.anemoi`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from wxstats.core.errors import InputError
from wxstats.core.stats import Stats
from wxstats.io.formats.ace import is_ace, read_ace
from wxstats.io.formats.anemoi import is_anemoi_statistics, read_anemoi_stats
from wxstats.io.formats.aurora import FILE as AURORA_FILE
from wxstats.io.formats.aurora import is_aurora, read_aurora
from wxstats.io.formats.graphcast import is_graphcast, read_graphcast
from wxstats.io.formats.makani import is_makani, read_makani
from wxstats.io.formats.netcdf import read_stats_file
from wxstats.io.formats.neurallam import is_neurallam_static, read_neurallam_static
from wxstats.io.formats.summary import read_summary
from wxstats.io.journal import interrupted_write
from wxstats.io.storemarker import refuse_interrupted

NETCDF_NAME = "wxstats_stats.nc"
"""The float64 statistics file a MEPS run writes beside neural-lam's files."""


def _is_zarr(path: Path) -> bool:
    return path.suffix == ".zarr" or any(
        (path / marker).exists() for marker in ("zarr.json", ".zgroup", ".zmetadata")
    )


FOLDER_SETS: dict[str, tuple[str, Callable[[Path], bool], Callable[[Path, str | None], Stats]]] = {
    # a static/ folder records no split (a .pt set of the datastore's own): read as before
    "neural-lam": ("parameter_mean.pt", is_neurallam_static, lambda f, _: read_neurallam_static(f)),
    "makani": ("global_means.npy", is_makani, read_makani),
    "GraphCast": ("mean_by_level.nc", is_graphcast, read_graphcast),
    "ACE": ("centering.nc", is_ace, read_ace),
    "Aurora": (AURORA_FILE, is_aurora, read_aurora),
}
"""The statistics sets a folder may hold: (the file that names the set, test, reader).
A folder holding several is not read as one of them silently: its set is chosen
by naming that file (``stats/mean_by_level.nc``)."""


def _sets_in(folder: Path) -> list[str]:
    return [name for name, (_, found, _) in FOLDER_SETS.items() if found(folder)]


def read_stats(path: str | Path, split: str | None = None, exact: bool = False) -> Stats:
    """Read any supported statistics set (see module docstring); a clear error otherwise.

    ``path`` may be a ``.nc`` file, a ``.json`` summary, a ``.zarr`` store, a
    statistics folder (neural-lam ``static/``, makani, GraphCast, ACE), the
    datastore folder holding ``static/``, or the datastore YAML itself; a folder
    holding several sets is refused, naming the file that chooses each
    (``stats/global_means.npy``). ``split``: which split, when the set holds
    several. ``exact``: a neural-lam folder is read from the float64
    ``wxstats_stats.nc`` beside its float32 ``.pt`` files when it is there (what
    a program wants; ``compare`` and ``report`` read what neural-lam reads).
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
    if path.is_dir():  # a store a write was interrupted in (io/storemarker.py)
        refuse_interrupted(path)
    chosen = [n for n, (marker, _, _) in FOLDER_SETS.items() if path.name == marker]
    if path.is_file() and chosen:
        return _read_set(path.parent, chosen[0], split, exact)
    if path.suffix in (".yaml", ".yml"):
        path = path.parent / "static"
        if not is_neurallam_static(path):
            raise InputError(f"{path}: no neural-lam statistics here (run wxstats compute)")
    if not path.is_dir():
        return read_summary(path, split) if path.suffix == ".json" else read_stats_file(path, split)
    if is_anemoi_statistics(path):
        return read_anemoi_stats(path)
    if _is_zarr(path):
        return read_stats_file(path, split, engine="zarr")
    if not _sets_in(path) and is_neurallam_static(path / "static"):
        path = path / "static"
    sets = _sets_in(path)
    if len(sets) > 1:
        choices = ", ".join(f"{name}: {path / FOLDER_SETS[name][0]}" for name in sets)
        raise InputError(
            f"{path}: holds {len(sets)} statistics sets; name the one to read by its file "
            f"({choices})"
        )
    if sets:
        return _read_set(path, sets[0], split, exact)
    if (path / NETCDF_NAME).exists():
        return read_stats_file(path / NETCDF_NAME, split)
    raise InputError(
        f"{path}: no statistics here (expected a zarr store, a neural-lam static/ "
        "folder with parameter_mean.pt, a makani folder with global_means.npy, "
        f"GraphCast-style mean_by_level.nc, an ACE folder with centering.nc, Aurora's "
        f"{AURORA_FILE}, or {NETCDF_NAME})"
    )


def _read_set(folder: Path, name: str, split: str | None, exact: bool) -> Stats:
    if exact and name == "neural-lam" and (folder / NETCDF_NAME).exists():
        return read_stats_file(folder / NETCDF_NAME, split)
    return FOLDER_SETS[name][2](folder, split)
