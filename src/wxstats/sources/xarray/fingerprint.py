"""What a resumed run must find unchanged in a zarr store: each array it reads;
and the values of the coordinates a run's identity holds (:func:`coordinates`).

A store's folder keeps its modification time when values are written into
existing chunks (a region write), so the folder's time says nothing about the
data. Every array the run reads is fingerprinted instead: its metadata (the
array's own ``.zarray``/``.zattrs`` or ``zarr.json``, and its entry in the
consolidated metadata) by content, and its chunk objects (every other file
under the array's folder, shards included) by name, size and modification
time. A chunk rewritten in place gets a new modification time; a chunk added
or deleted changes the list. Arrays the run does not read (statistics written
with ``--write-into``, say) may change freely.

Each array is recorded as a few short digests, not a list of its chunks, so
a manifest stays small for stores of millions of chunks; a change names the
array and whether its metadata or its chunks changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from wxstats.core.untrusted import read_json

METADATA_FILES = (".zarray", ".zattrs", "zarr.json")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _consolidated(store: Path) -> dict[str, Any]:
    """Consolidated metadata entries by key (zarr 2 ``.zmetadata``: ``name/.zarray``;
    zarr 3 root ``zarr.json``: ``name``); empty if there are none."""
    for name in (".zmetadata", "zarr.json"):
        try:
            doc = read_json(store / name)
        except (OSError, ValueError):
            continue
        if name == "zarr.json":
            doc = (doc.get("consolidated_metadata") or {}) if isinstance(doc, dict) else {}
        entries = doc.get("metadata") if isinstance(doc, dict) else None
        if isinstance(entries, dict):
            return entries
    return {}


def _chunk_listing(folder: Path) -> tuple[list[str], int]:
    """``name size mtime_ns`` of every chunk object under ``folder``, sorted; total bytes."""
    lines, total = [], 0
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in files:
            if name in METADATA_FILES:
                continue
            path = Path(root, name)
            st = path.stat()
            lines.append(f"{path.relative_to(folder).as_posix()} {st.st_size} {st.st_mtime_ns}")
            total += st.st_size
    lines.sort()
    return lines, total


def array_fingerprints(store: str | Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """``{array: {"metadata": digest, "chunks": [count, bytes, digest]}}`` for
    each of ``names`` in the local zarr store ``store`` (see module docstring)."""
    store = Path(store)
    consolidated = _consolidated(store)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(set(names)):
        folder = store / name
        meta = hashlib.sha256()
        for file in METADATA_FILES:
            with contextlib.suppress(OSError):  # each format has only some of them
                meta.update(f"{file}\0".encode() + (folder / file).read_bytes() + b"\0")
        entries = {k: v for k, v in consolidated.items() if k == name or k.startswith(f"{name}/")}
        meta.update(json.dumps(entries, sort_keys=True, default=str).encode())
        lines, total = _chunk_listing(folder) if folder.is_dir() else ([], 0)
        out[name] = {
            "metadata": meta.hexdigest()[:16],
            "chunks": [len(lines), total, _digest("\n".join(lines).encode())],
        }
    return out


def stored(paths: list[str], names: list[str]) -> dict[str, Any]:
    """Where and when the data was written: ``files`` (netCDF: path, size and
    modification time; zarr or a URL: the path) and ``arrays`` (a local zarr
    store: :func:`array_fingerprints` of ``names``)."""
    from wxstats.sources.xarray.open import is_zarr
    from wxstats.storage.urls import is_url

    files: list[list[Any]] = []
    arrays: dict[str, Any] = {}
    for path in paths:
        if is_url(path):
            files.append([path, None, None])
            continue
        where = os.path.realpath(path)  # another cwd or a trailing / is the same data
        if is_zarr(path):
            files.append([where, None, None])
            arrays = array_fingerprints(where, names)
        else:
            stat = os.stat(where)
            files.append([where, stat.st_size, stat.st_mtime_ns])
    return {"files": files, "arrays": arrays}


def describe_array_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """One phrase per array that differs between two :func:`array_fingerprints`."""
    changes = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a == b:
            continue
        if a is None or b is None:
            changes.append(f"array {name} {'added' if a is None else 'no longer read'}")
            continue
        what = []
        if a.get("metadata") != b.get("metadata"):
            what.append("metadata changed")
        if a.get("chunks") != b.get("chunks"):
            n0, n1 = (a.get("chunks") or [None])[0], (b.get("chunks") or [None])[0]
            count = f", {n0} -> {n1} files" if n0 != n1 else ""
            what.append(f"chunks rewritten (size or modification time{count})")
        changes.append(f"array {name} changed in the store: {', '.join(what)}")
    return changes


def _value_text(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def coordinates(ds: Any, dims: list[str]) -> dict[str, dict[str, str]]:
    """:func:`coordinate_identity` of every coordinate of ``dims`` (the variables'
    non-time dimensions) in ``ds``: dimension coordinates, and others on them
    (``lat(y, x)``)."""
    wanted = set(dims)
    names = [d for d in sorted(wanted) if d in ds.variables] + sorted(
        str(n)
        for n, c in ds.coords.items()
        if n not in wanted and c.dims and set(map(str, c.dims)) <= wanted
    )
    return {name: coordinate_identity(ds.variables[name].values) for name in names}


def coordinate_identity(values: Any) -> dict[str, str]:
    """A coordinate's values as a run's identity holds them: a digest of the
    values and their order (numbers as float64: a float32 copy of the same
    latitudes is the same grid), and words for messages (``descending
    90..-90 (181 values)``)."""
    import numpy as np

    array = np.asarray(values)
    if array.dtype.kind in "iuf":
        array = array.astype("<f8")
        data = array.tobytes()
    else:
        data = "\0".join(map(str, array.ravel().tolist())).encode()
    flat = array.ravel().tolist()
    order = ""
    if array.ndim == 1 and array.size > 1 and array.dtype.kind == "f":
        steps = np.diff(array)
        order = "ascending " if (steps > 0).all() else "descending " if (steps < 0).all() else ""
    span = f"{_value_text(flat[0])}..{_value_text(flat[-1])} " if flat else ""
    shape = "x".join(map(str, array.shape))
    return {
        "digest": _digest(shape.encode() + b"\0" + data),
        "text": f"{order}{span}({shape} values)",
    }
