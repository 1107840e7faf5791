"""What a resumed run must find unchanged in a zarr store: each array it reads.

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

METADATA_FILES = (".zarray", ".zattrs", "zarr.json")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _consolidated(store: Path) -> dict[str, Any]:
    """Consolidated metadata entries by key (zarr 2 ``.zmetadata``: ``name/.zarray``;
    zarr 3 root ``zarr.json``: ``name``); empty if there are none."""
    for name in (".zmetadata", "zarr.json"):
        try:
            doc = json.loads((store / name).read_bytes())
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
