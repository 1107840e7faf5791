"""The settings a process running one ``wxstats`` command takes, never a library
caller's: memory reuse, the garbage collector during start-up, numba loaded
without its BLAS probe. They are process-wide, so the command (:func:`wxstats.cli.console`)
sets them; the computation below the CLI only offers the hooks
(:func:`wxstats.runtime.run.execute`'s ``after_start_up``,
:data:`wxstats.core.kernel.choice.BEFORE_NUMBA`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # glibc's mallopt parameters
_ARENAS = 2
"""glibc's arenas (its default: 8 per core): each thread that allocates takes one
and keeps what it freed there (``_KEPT_FREE``), so the blocks summed on two
threads and the chunk reader's threads held ~45 MiB more at a million chunks
than at 10,000 (``MALLOC_ARENA_MAX`` 1 or 2: 325 -> 277-283 MiB, 265 at 10,000;
``benchmarks/bench_scale.py``): the main arena and one the other threads share."""
_LARGEST_FROM_HEAP = 32 << 20  # glibc's maximum (64-bit)
_KEPT_FREE = 1 << 30
_START_UP_GC_THRESHOLDS = (100_000, 50, 100)
_paused_gc: tuple[int, int, int] | None = None  # the thresholds to restore


def tune_for_one_command() -> None:
    """Settings for a process that runs one ``wxstats`` command (never a
    library caller's), each measured on a 2 GB zarr store:

    - a block's slabs are MBs to tens of MB: glibc maps such allocations fresh
      and unmaps them when freed, so every block's slab was faulted in and
      zeroed by the kernel again (5 % of the run's CPU); now allocations up to
      32 MB come from the heap and freed memory is kept there for the next
      block (the peak is still what one window of blocks holds);
    - start-up imports create some 10^5 long-lived objects that the garbage
      collector walks again and again without freeing any (5 % of the CPU):
      collections wait until :func:`end_of_start_up`, which freezes them;
    - numba loads without its BLAS probe (:func:`numba_without_blas`);
    - two arenas of glibc's, not 8 per core (``_ARENAS``): what each thread
      freed is not kept apart from what the others reuse.
    """
    global _paused_gc
    from wxstats.core.kernel import choice

    choice.BEFORE_NUMBA = numba_without_blas
    if sys.platform.startswith("linux"):
        try:
            mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
        except (OSError, AttributeError, TypeError):  # not glibc
            mallopt = None
        if mallopt is not None:
            mallopt(_M_MMAP_THRESHOLD, _LARGEST_FROM_HEAP)
            mallopt(_M_TRIM_THRESHOLD, _KEPT_FREE)
            mallopt(_M_ARENA_MAX, _ARENAS)
    if _paused_gc is None:
        _paused_gc = gc.get_threshold()
        gc.set_threshold(*_START_UP_GC_THRESHOLDS)


def end_of_start_up() -> None:
    """What start-up made stays (modules, the opened dataset): freeze it out of
    the collector's walks and collect as before from here on (only where
    :func:`tune_for_one_command` paused it)."""
    global _paused_gc
    if _paused_gc is not None:
        gc.freeze()
        gc.set_threshold(*_paused_gc)
        _paused_gc = None


_BLAS_PROBE = "scipy.linalg.cython_blas"


def numba_without_blas() -> None:
    """Load numba's array functions with their BLAS probe failing: when they
    first load they import ``scipy.linalg`` to find a BLAS (0.15-0.3 s of every
    run); the kernels use none. Only numba's own ``np.dot`` and friends in the
    same process would notice; ``scipy.linalg`` itself still imports afterwards.
    The kernel's loader calls it (:data:`wxstats.core.kernel.choice.BEFORE_NUMBA`,
    set by :func:`tune_for_one_command`)."""
    if "numba.np.arraymath" in sys.modules or _BLAS_PROBE in sys.modules:
        return
    sys.modules[_BLAS_PROBE] = None  # type: ignore[assignment]  # "not installed"
    try:
        import numba.np.arraymath  # noqa: F401  (its BLAS probe fails here)
    finally:
        if sys.modules.get(_BLAS_PROBE, 0) is None:
            del sys.modules[_BLAS_PROBE]
