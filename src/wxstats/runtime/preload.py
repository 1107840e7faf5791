"""Import the writers' libraries in the background while data is read.

``netCDF4`` writes the statistics file. It is only needed at the end of a run,
so :func:`start` imports it in a thread while the kernel (which releases the
GIL) works; the writer's own ``import`` then finds it loaded. A failed import
is left for the writer to report. (torch is not among them: the neural-lam
``.pt`` files are written without it, :mod:`wxstats.io.formats.ptfile`.)
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable

WRITER_MODULES = ("netCDF4",)
"""What every run writes with."""


def _import_all(names: tuple[str, ...]) -> None:
    for name in names:
        # a failure is reported by the writer that needs the module, in context
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def start(names: tuple[str, ...] = WRITER_MODULES) -> threading.Thread:
    """Begin importing ``names`` in a (non-daemon) thread; returns the thread."""
    thread = threading.Thread(
        target=_import_all, args=(names,), name="wxstats-preload", daemon=False
    )
    thread.start()
    return thread


def after_first(names: tuple[str, ...] = WRITER_MODULES) -> Callable[[int], None]:
    """An ``on_sample`` callback that calls :func:`start` once, after the first
    sample: by then numba has loaded the kernel (itself seconds of GIL-bound
    imports that a concurrent import would only slow down), and the remaining
    samples run in GIL-free compiled code alongside the import."""
    started: list[threading.Thread] = []

    def on_sample(_index: int) -> None:
        if not started:
            started.append(start(names))

    return on_sample
