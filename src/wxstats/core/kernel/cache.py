"""Where the compiled kernel is cached, and whether a cache may be read at all.

Both caches of the kernel hold code that runs when read: the stored machine
code of :mod:`wxstats.core.kernel.stored`, and numba's own cache of the
``cache=True`` functions of :mod:`wxstats.core.kernel.compiled`, whose index
files are pickles. A cache someone else can write (a group-writable
``NUMBA_CACHE_DIR`` on a cluster's shared space) would run their code as ours,
so each is used only in a private folder (:mod:`wxstats.core.private_files`:
this user's or root's, writable by no one else, nor is any folder above it).
Otherwise one warning line says why, and the kernel comes from numba: from
its cache where that is private, else compiled in this process (seconds) and
cached nowhere; a process with no writable cache at all (a read-only
installation and ``$HOME``) computes the same way.
"""

from __future__ import annotations

import functools
import os
import threading
import warnings
from pathlib import Path

from wxstats.core import private_files

_warned = threading.Event()


def store_dir() -> Path:
    """The kernel store's folder: ``WXSTATS_KERNEL_CACHE`` if set; else beside
    numba's own cache when ``NUMBA_CACHE_DIR`` is set (a user who moved numba's
    cache moved this one too); else the user's cache folder (``$XDG_CACHE_HOME``
    or ``~/.cache``). A folder shared by nodes of other CPUs is fine: the CPU is in
    each file's name."""
    if os.environ.get("WXSTATS_KERNEL_CACHE"):
        return Path(os.environ["WXSTATS_KERNEL_CACHE"])
    if os.environ.get("NUMBA_CACHE_DIR"):
        return Path(os.environ["NUMBA_CACHE_DIR"]) / "wxstats-kernels"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "wxstats" / "kernels"


def not_cached(why: str) -> None:
    """Say once per process that the kernel is not read from a cache (numba's
    kernel is used: from numba's cache where private, else compiled here), and
    ``why`` (one line: the first reason found is the one that matters)."""
    if _warned.is_set():
        return
    _warned.set()
    warnings.warn(
        f"the compiled kernel is not cached: {why}; this process gets it from numba "
        "instead (the same numbers, up to seconds slower); to keep it, point "
        "WXSTATS_KERNEL_CACHE (and NUMBA_CACHE_DIR) at a folder only you can write",
        UserWarning,
        stacklevel=3,
    )


NUMBA_FILES = (".nbi", ".nbc")
"""numba's cache files: an index (pickles) and the compiled code (a pickle)."""


def _where_numba_caches() -> None:
    """A plain function of this folder: numba caches the functions of every file
    of a folder in one place, found from the folder (and ``NUMBA_CACHE_DIR``), so
    this one says where the kernel's are cached."""


@functools.cache
def numba_may_cache() -> bool:
    """Whether numba may cache (and so read back) the ``cache=True`` functions of
    the kernel (``wxstats/core``): where numba would put them (its own choice of
    folder: ``NUMBA_CACHE_DIR``, the sources' ``__pycache__``, ``~/.cache/numba``)
    is private, and so is every cache file there. False (said once,
    :func:`not_cached`) where numba has no writable folder, where that folder or a
    file in it is not private, or where this numba places its cache in a way
    not known here. Asked once per process, before the first decorator."""
    try:
        from numba.core.caching import FunctionCache

        folder = FunctionCache(_where_numba_caches).cache_path
    except RuntimeError:  # "cannot cache function ...: no locator available"
        not_cached("numba finds no folder it can write for its cache")
        return False
    except (ImportError, AttributeError, TypeError) as e:  # another numba's internals
        not_cached(f"this numba's cache cannot be checked ({type(e).__name__}: {e})")
        return False
    try:
        why = private_files.folder_problem(folder) or private_files.files_problem(
            folder, NUMBA_FILES
        )
    except OSError as e:
        why = f"{folder}: {e.strerror or e}"
    if why:
        not_cached(f"numba's cache folder is not private to this user ({why})")
        return False
    return True
