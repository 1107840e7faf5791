"""All-or-nothing output: every file is written to a temporary name in its
final folder, flushed to disk, and renamed only when all of them are ready.

A crash or a failed write leaves earlier results untouched and no half-written
file behind; an existing result is replaced only when the caller allows it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from wxstats.core.errors import WxstatsError

Writer = Callable[[Path], None]
"""Writes one output to the temporary path it is given."""


def check_writable(paths: list[Path], overwrite: bool) -> None:
    """Fail before any work if an output exists (without ``overwrite``) or its
    folder cannot be created or written."""
    existing = [str(p) for p in paths if p.exists()]
    if existing and not overwrite:
        raise WxstatsError(
            f"output exists: {', '.join(existing)}; pass --overwrite to replace, "
            "or choose another location"
        )
    for folder in sorted({p.parent for p in paths}):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".wxstats-probe-"):
                pass
        except OSError as exc:
            raise WxstatsError(
                f"{folder}: output folder is not writable: {exc.strerror or exc}"
            ) from None


def fsync_file(path: Path) -> None:
    """Flush a written file to disk (before it is renamed into place)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_all(outputs: dict[Path, Writer], overwrite: bool) -> None:
    """Write every output atomically, or none of them (see module docstring)."""
    check_writable(list(outputs), overwrite)
    temps: dict[Path, Path] = {}
    try:
        for final, writer in outputs.items():
            fd, name = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp")
            os.close(fd)
            temp = Path(name)
            temps[final] = temp
            writer(temp)
            fsync_file(temp)
        for final, temp in temps.items():
            os.replace(temp, final)
        for folder in {p.parent for p in outputs}:
            _fsync_dir(folder)
    except OSError as exc:
        raise WxstatsError(f"writing outputs failed, nothing was replaced: {exc}") from None
    finally:
        for temp in temps.values():
            if temp.exists():
                temp.unlink()
