"""What the compiled kernel is built from, in one place: the stored objects are
named by it (:mod:`wxstats.core.kernel.stored`) and numba's cache is checked
against it (:func:`wxstats.core.kernel.compiled.refresh_stale_cache`). A file
added to the kernel and left out here would let either serve machine code of
the old sources (wrong slots, wrong numbers). Kept apart so that neither of
those two modules imports the other for it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

KERNEL_SOURCES = ("kernel/compiled.py", "kernel/lanes.py", "kernel/record.py", "reduction.py")
"""The files under ``wxstats/core`` (:data:`CORE`) the machine code is compiled from (beside numba
and the CPU)."""

CORE = Path(__file__).parents[1]
"""``wxstats/core``: the kernel's sources are named relative to it."""


def sources_digest(names: tuple[str, ...] = KERNEL_SOURCES) -> bytes:
    """SHA-256 of the kernel's source files ``names``, in order."""
    h = hashlib.sha256()
    for name in names:
        h.update((CORE / name).read_bytes())
    return h.digest()
