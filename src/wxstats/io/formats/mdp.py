"""mllam-data-prep's statistics, written into its own zarr store (``--write-into``).

neural-lam's ``mdp`` datastore reads ``{category}__train__mean``/``std`` and
``state__train__diff_mean``/``diff_std`` from the store. wxstats writes
``{category}__{split}__{mean,std}`` for every category and split it computed,
and ``{category}__{split}__diff_{mean,std}`` for the categories with time
(mllam-data-prep's definition: differences of consecutive time steps, raw
scale), reduced over every dimension but ``{category}_feature``.

A variable the store already has keeps its dtype, shape, chunks and
attributes; only its values change (float64 results rounded to its dtype,
float32 in most stores: what neural-lam converts to anyway). A dtype that
cannot hold them is refused (:mod:`.stored`): an integer before any work, a
value that overflows it before anything is written. Each variable's
chunks are written into a temporary copy first, then moved over the old ones
with ``os.replace`` (atomic per file; these small arrays have one chunk); the
old chunk files are kept aside until every variable is in place and put back
if anything fails. Each variable written records the run (:func:`mdp_attrs`:
its ``--period``, the time steps of its split), in its attributes, replaced
with its chunks; the rest of its metadata (dtype, shape, chunks) does not
change, so a reader never decodes new data with other metadata.

Variables the store lacks are added the same way: written complete into a
staging folder inside the store (the same filesystem), then each array
folder is renamed into place. Everything that takes disk space (copies, new
arrays, the new consolidated metadata, the previous versions' links) is
written before the first rename, so a full disk stops the write with the
store untouched; a rename failing later undoes the ones before it. The
consolidated metadata (``.zmetadata``, or the root ``zarr.json`` of a
consolidated zarr 3 store) is replaced last, in one ``os.replace``, with an
entry for every variable written. The renames are those of
:class:`wxstats.io.zarrstore.Replacement`: the store is locked for the
write, marked before the first rename, and a write killed between two is
refused by readers and repaired by the next (:mod:`wxstats.io.storemarker`).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.conventions import ROLES, feature_dim
from wxstats.core.errors import InputError
from wxstats.core.stats import Stats
from wxstats.core.streams import StreamSpec
from wxstats.core.untrusted import read_json
from wxstats.io.formats.netcdf import stat_name
from wxstats.io.formats.stored import check_float_dtype, check_min_std
from wxstats.io.zarrstore import Replacement, array_names, fsync_tree, locked_store, replacing

DIFF_STEP = 1
DIVISORS = ("std", "diff_std")
"""The ops neural-lam divides by (floored by ``--min-std``)."""
_METADATA = {".zarray", ".zattrs", ".zgroup", ".zmetadata", "zarr.json"}
_ATTRIBUTES = (".zattrs", "zarr.json")
"""An array's files holding its attributes (zarr 2; zarr 3, with the rest of its metadata)."""


@dataclass(frozen=True)
class Planned:
    stream: str
    op: str
    dim: str
    size: int
    category: str


def planned_variables(specs: list[StreamSpec]) -> dict[str, Planned]:
    """The variables ``--write-into`` writes, from the run's streams."""
    out = {}
    for spec in specs:
        lay = spec.layout
        if lay.role not in ROLES or lay.variable != lay.role:
            continue
        if lay.feature_dims != (feature_dim(lay.role),):
            raise InputError(
                f"--write-into: {lay.role} has feature dimensions {lay.feature_dims}; "
                f"mllam-data-prep's statistics are along {feature_dim(lay.role)} only"
            )
        ops = ["mean", "std"]
        if spec.diff_steps:
            if DIFF_STEP not in spec.diff_steps:
                raise InputError(
                    "--write-into: mllam-data-prep's diff statistics are over consecutive time "
                    "steps; include 1 in --diff-steps"
                )
            ops += ["diff_mean", "diff_std"]
        for op in ops:
            name = stat_name(replace(lay, variable=lay.role), op)
            out[name] = Planned(spec.name, op, lay.feature_dims[0], len(spec.features), lay.role)
    if not out:
        raise InputError(
            "--write-into: no mllam-data-prep category (state/forcing/static) selected"
        )
    return out


def mdp_values(stats: Stats, planned: dict[str, Planned]) -> dict[str, np.ndarray]:
    """float64 values of the planned variables (a step without pairs is left out)."""
    out = {}
    for name, p in planned.items():
        stream = stats.streams[p.stream]
        if p.op in ("mean", "std"):
            out[name] = np.asarray(stream.mean if p.op == "mean" else stream.std, np.float64)
        elif DIFF_STEP in stream.diff:
            d = stream.diff[DIFF_STEP]
            out[name] = np.asarray(d.mean if p.op == "diff_mean" else d.std, np.float64)
    return out


def _group(store: Path):
    import zarr

    try:
        return zarr.open_group(str(store), mode="r", use_consolidated=False)
    except Exception as exc:  # any zarr error: one line for the user
        raise InputError(f"{store}: cannot open as a zarr group: {exc}") from None


def _dims(array) -> tuple[str, ...]:
    if array.metadata.zarr_format == 2:
        return tuple(array.attrs.get("_ARRAY_DIMENSIONS", ()))
    return tuple(array.metadata.dimension_names or ())


def _new_dtype(root: Path, category: str) -> np.dtype:
    """The dtype of a variable the store lacks: its category's data dtype if that
    is a float, at least float32 (float16 holds at most 65504 and stores a std
    below 6e-5 as a subnormal), else float64."""
    import zarr

    try:
        data_dtype = np.dtype(zarr.open_array(str(root / category), mode="r").dtype)
    except Exception:  # no such array: keep float64
        return np.dtype(np.float64)
    if data_dtype.kind != "f":
        return np.dtype(np.float64)
    return np.promote_types(data_dtype, np.float32)


def store_dtypes(store: str | Path, planned: dict[str, Planned]) -> dict[str, np.dtype]:
    """The dtype each planned variable is stored in: an existing variable keeps its
    own, a new one gets :func:`_new_dtype`."""
    root = Path(store)
    group = _group(root)
    arrays = array_names(group)
    return {
        name: np.dtype(group[name].dtype) if name in arrays else _new_dtype(root, p.category)
        for name, p in planned.items()
    }


def check_store(
    store: str | Path, planned: dict[str, Planned], min_std: float | None = None
) -> None:
    """Refuse, before any work, a store that cannot take the planned variables:
    other dimensions, a dtype that cannot hold statistics, a ``min_std`` that its
    std variables would store as 0 (:mod:`.stored`)."""
    if "://" in str(store):
        raise InputError(f"{store}: --write-into needs a local zarr store, not a URL")
    root = Path(store)
    if not root.is_dir():
        raise InputError(f"{store}: --write-into needs a zarr store folder")
    if not os.access(root, os.W_OK):
        raise InputError(f"{store}: the store is not writable")
    group = _group(root)
    arrays = array_names(group)
    for name, p in planned.items():
        if name not in arrays:
            continue
        array = group[name]
        if _dims(array) != (p.dim,) or tuple(array.shape) != (p.size,):
            raise InputError(
                f"{store}: {name} has dimensions {_dims(array)} and shape {tuple(array.shape)}; "
                f"wxstats writes statistics over every dimension but {p.dim} (shape "
                f"({p.size},)); remove that variable or leave out --write-into"
            )
    for name, dtype in store_dtypes(root, planned).items():
        check_float_dtype(dtype, f"{store}: {name}")
        if planned[name].op in DIVISORS:
            check_min_std(min_std, dtype, f"{store}: {name}")


def _replaced_files(folder: Path) -> set[str]:
    """An array's files that writing it replaces: its chunks and its attributes."""
    chunks = {
        str(path.relative_to(folder))
        for path in folder.rglob("*")
        if path.is_file() and path.name not in _METADATA
    }
    return chunks | {name for name in _ATTRIBUTES if (folder / name).is_file()}


def _metadata_file(root: Path, zarr_format: int) -> Path | None:
    """The store's consolidated metadata file, or None if it has none."""
    if zarr_format == 2:
        return root / ".zmetadata" if (root / ".zmetadata").exists() else None
    meta = read_json(root / "zarr.json")
    return root / "zarr.json" if meta.get("consolidated_metadata") else None


def _consolidated_text(root: Path, zarr_format: int, arrays: dict[str, Path]) -> str | None:
    """The store's consolidated metadata with an entry for each of ``arrays``
    (name -> the folder whose metadata it will have), or None if nothing changes."""
    path = _metadata_file(root, zarr_format)
    if path is None:
        return None
    doc = read_json(path)
    entries = doc["metadata"] if zarr_format == 2 else doc["consolidated_metadata"]["metadata"]
    before = json.dumps(entries, sort_keys=True)
    for name, folder in arrays.items():
        if zarr_format == 2:
            for file in (".zarray", ".zattrs"):
                if (folder / file).exists():
                    entries[f"{name}/{file}"] = read_json(folder / file)
        else:
            entries[name] = read_json(folder / "zarr.json")
    if json.dumps(entries, sort_keys=True) == before:
        return None
    return json.dumps(doc, indent=2 if zarr_format == 3 else 4, sort_keys=zarr_format == 2)


def _stage_new(
    stage: Path,
    root: Path,
    zarr_format: int,
    values: dict[str, np.ndarray],
    planned: dict[str, Planned],
    attrs: dict[str, Any],
) -> None:
    """Write the variables the store lacks, complete, into a store of their own
    at ``stage`` (in the store's folder: the same filesystem, so moving them in
    is a rename). Each gets the dtype of its category's data if that is a float."""
    import xarray as xr

    data_vars = {}
    for name, array in values.items():
        p = planned[name]
        data_vars[name] = ((p.dim,), array.astype(_new_dtype(root, p.category)), attrs)
    xr.Dataset(data_vars).to_zarr(stage, mode="w-", zarr_format=zarr_format, consolidated=False)


def mdp_attrs(stats: Stats) -> dict[str, Any]:
    """What each variable written records of the run: its period (the store's
    splits still name the whole interval), the time steps of each split, NaN
    handling, who wrote it. Every key is set (a rerun without ``--period``
    replaces an earlier run's period)."""
    return {
        "statistics_period": stats.attrs.get(
            "statistics_period", "none (every time step of the split)"
        ),
        "statistics_splits": stats.attrs.get("splits", ""),
        "statistics_skipna": int(stats.attrs.get("skipna", 0)),
        "statistics_written_by": f"wxstats {stats.run.get('wxstats_version', '')}".strip(),
    }


def write_into_store(
    store: str | Path,
    values: dict[str, np.ndarray],
    planned: dict[str, Planned],
    attrs: dict[str, Any] | None = None,
) -> list[str]:
    """Replace (or add) the variables in ``store``, each with ``attrs`` set: all
    or nothing (see module docstring)."""
    root = Path(store)
    with locked_store(root):
        check_store(root, planned)
        with replacing(
            root,
            f"{store}: writing the statistics failed, the store was left as it was (old "
            "values kept, nothing added)",
        ) as rep:
            return _write_into(rep, values, planned, attrs or {})


def _write_into(
    rep: Replacement, values: dict[str, np.ndarray], planned: dict[str, Planned], attrs: dict
) -> list[str]:
    import zarr

    root, tmp = rep.root, rep.tmp
    group = _group(root)
    zarr_format = group.metadata.zarr_format
    arrays = array_names(group)
    existing = [n for n in values if n in arrays]
    missing = [n for n in values if n not in arrays]
    stage = tmp / "new"
    # 1. everything that takes space, under tmp: a full disk stops here
    for name in existing:
        shutil.copytree(root / name, tmp / name)
        array = zarr.open_array(str(tmp / name), mode="r+", zarr_format=zarr_format)
        array[...] = values[name].astype(array.dtype)
        array.attrs.update(attrs)
    if missing:
        new = {n: values[n] for n in missing}
        _stage_new(stage, root, zarr_format, new, planned, attrs)
    meta_file = _metadata_file(root, zarr_format)
    folders = {n: tmp / n for n in existing} | {n: stage / n for n in missing}
    meta_text = _consolidated_text(root, zarr_format, folders)
    if meta_text is not None and meta_file is not None:
        (tmp / "metadata").write_text(meta_text)
        _keep(meta_file, tmp / ".old-metadata")
    backup = tmp / ".old"
    for name in existing:
        for rel in sorted(_replaced_files(root / name)):
            _keep(root / name / rel, backup / name / rel)
    fsync_tree(tmp)
    # 2. renames only (the store marked first), each undone if a later one fails
    for name in existing:
        new, old = _replaced_files(tmp / name), _replaced_files(root / name)
        for rel in sorted(new):
            saved = backup / name / rel if rel in old else None
            rep.file(root / name / rel, tmp / name / rel, saved)
        for rel in sorted(old - new):  # chunks now equal to the fill value
            rep.remove(root / name / rel, backup / name / rel)
    for name in missing:
        rep.move_in(root / name, stage / name)
    if meta_text is not None and meta_file is not None:
        # last: consolidated readers see all or none
        rep.file(meta_file, tmp / "metadata", tmp / ".old-metadata")
    rep.apply()
    return existing + missing


def _keep(path: Path, saved: Path) -> None:
    """A hard link (a copy where links fail) to ``path`` at ``saved``."""
    saved.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(path, saved)
    except OSError:
        shutil.copy2(path, saved)
