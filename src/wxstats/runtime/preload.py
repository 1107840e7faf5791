"""Import the writers' heavy libraries in the background while data is read.

``torch`` (for the neural-lam ``.pt`` files) takes seconds to import, longer
than reading gigabytes of warm data; ``netCDF4`` writes the statistics file.
Only what a run writes is imported: a zarr run never pays for torch.
They are only needed at the end of a run, so :func:`start` imports them in a
thread while the kernel (which releases the GIL) works; the writers' own
``import`` then finds them loaded. A failed import is left for the writer to
report.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable

WRITER_MODULES = ("torch", "netCDF4")
"""What a neural-lam run writes with; other runs import only ``netCDF4``."""


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
