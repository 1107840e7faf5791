"""Which implementation sums a block: the numpy twin of the kernel
(:mod:`wxstats.core._kernels_numpy`) while it costs less than loading numba
would, then the compiled kernel (:mod:`wxstats.core._kernels_numba`). Both give
the same bits, so the choice is about time only; it lives here, apart from the
kernel's definitions in :mod:`wxstats.core.kernels`.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

SMALL_BLOCK_BYTES = 256 * 2**10
"""Blocks up to this size may be summed by the numpy twin of the kernel
(:mod:`wxstats.core._kernels_numpy`, the same bits): a small dataset never waits
the 0.3 s that loading numba and the compiled kernel take."""

TWIN_SECONDS = 0.3
"""What the numpy twin may spend in one process before the compiled kernel is
loaded anyway (about what loading it costs). The twin is 50-300x slower per
value (its lane loop runs in Python), so choosing it by block size alone made a
dataset read in many small blocks (``--block-mb 2`` over ten variables) 40x
slower than in large ones. Renting the twin only up to the price of buying
numba bounds that loss to 2x the load time, whatever the block size; once numba
is loaded every block uses it. The choice never changes a bit."""

KERNEL = "auto"
"""``auto`` (the rule above), or ``numpy``/``numba`` to force one (tests)."""

_twin_spent = 0.0


BEFORE_NUMBA: Callable[[], None] | None = None
"""Called once, under the loading lock, before the compiled kernel first loads
numba: a process's own settings for that import. The ``wxstats`` command sets
it (its process loads numba without the BLAS probe, :mod:`wxstats.cli.process`);
a library caller's process is left as it is (``None``)."""
_LOADING = threading.Lock()


def _use_twin(nbytes: int) -> bool:
    if KERNEL != "auto":
        return KERNEL == "numpy"
    return (
        nbytes <= SMALL_BLOCK_BYTES
        and _twin_spent < TWIN_SECONDS
        and "wxstats.core._kernels_numba" not in sys.modules
    )


def run_kernel(nbytes: int, *args: Any) -> None:
    """The kernel on ``args``: the numpy twin or the compiled one (see
    :data:`TWIN_SECONDS`); the twin's time is added up for the next choice."""
    global _twin_spent
    if _use_twin(nbytes):
        from wxstats.core._kernels_numpy import kernel

        started = time.thread_time()  # its own CPU time: not the GIL waits of a busy process
        kernel(*args)
        _twin_spent += time.thread_time() - started  # a heuristic: races are harmless
        return
    _compiled()(*args)


def _compiled():
    with _LOADING:
        if BEFORE_NUMBA is not None and "wxstats.core._kernels_numba" not in sys.modules:
            BEFORE_NUMBA()
        from wxstats.core._kernels_numba import kernel
    return kernel
