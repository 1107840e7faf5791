"""All-or-nothing output: every file is written to a temporary name in its
final folder, flushed to disk, and renamed only when all of them are ready.

A crash or a failed write leaves earlier results untouched and no half-written
file behind; an existing result is replaced only when the caller allows it.

File modes are what a user of a shared cluster expects: a new file gets
``0666 & ~umask`` (``mkstemp`` alone would make every output 0600, unreadable to
the colleagues whose training jobs load a group-shared ``static/``), and a file
being replaced keeps its own mode.
"""

from __future__ import annotations

import os
import stat
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


def current_umask() -> int:
    """The process umask, read without changing it (``os.umask`` sets it, which
    races with other threads creating files)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def output_mode(final: Path) -> int:
    """The permission bits ``final`` gets: those of the file it replaces, else
    what ``open`` would give a new file under the umask."""
    try:
        return stat.S_IMODE(os.stat(final).st_mode)
    except OSError:
        return 0o666 & ~current_umask()


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
            os.chmod(temp, output_mode(final))  # after the writer: it may recreate the file
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
