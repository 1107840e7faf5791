"""Which implementation sums a block: the numpy twin of the kernel
(:mod:`wxstats.core.kernel.twin`) while it costs less than loading the
compiled kernel would, then the compiled kernel (its machine code, loaded by
:mod:`wxstats.core.kernel.stored`). Both give the same bits, so the choice is
about time only; it lives here, apart from the kernel's definitions in
:mod:`wxstats.core.kernel`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wxstats.core.kernel.record import KernelArgs

SMALL_BLOCK_BYTES = 256 * 2**10
"""Blocks up to this size may be summed by the numpy twin of the kernel
(:mod:`wxstats.core.kernel.twin`, the same bits): a small dataset never waits
for the compiled kernel to load."""

TWIN_SECONDS = 0.05
"""What the numpy twin may spend in one process before the compiled kernel is
loaded anyway: about what loading its stored machine code costs (0.03-0.05 s;
through numba it was 0.3 s, and the first run on a machine compiles it). The twin
is 50-300x slower per value (its lane loop runs in Python), so choosing it by
block size alone made a dataset read in many small blocks (``--block-mb 2`` over
ten variables) 40x slower than in large ones. Renting the twin only up to the
price of loading bounds that loss to 2x the load time, whatever the block size;
once the compiled kernel is loaded every block uses it. The choice never changes
a bit."""

KERNEL = "auto"
"""``auto`` (the rule above), or ``numpy``/``numba`` to force one (tests)."""

_twin_spent = 0.0


BEFORE_NUMBA: Callable[[], None] | None = None
"""Called before the compiled kernel first imports numba (to compile it, see
:mod:`wxstats.core.kernel.stored`): a process's own settings for that import. The
``wxstats`` command sets it (its process loads numba without the BLAS probe,
:mod:`wxstats.cli.process`); a library caller's process is left as it is (``None``)."""
_loaded = False  # the compiled kernel was asked for: every block uses it from then on


def _use_twin(nbytes: int) -> bool:
    if KERNEL != "auto":
        return KERNEL == "numpy"
    return nbytes <= SMALL_BLOCK_BYTES and _twin_spent < TWIN_SECONDS and not _loaded


def run_kernel(nbytes: int, args: KernelArgs) -> None:
    """The kernel on the record ``args``: the numpy twin or the compiled one (see
    :data:`TWIN_SECONDS`); the twin's time is added up for the next choice."""
    global _twin_spent
    if _use_twin(nbytes):
        from wxstats.core.kernel.twin import kernel

        started = time.thread_time()  # its own CPU time: not the GIL waits of a busy process
        kernel(args)
        _twin_spent += time.thread_time() - started  # a heuristic: races are harmless
        return
    _compiled()(args)


def _compiled() -> Callable[[KernelArgs], None]:
    global _loaded
    from wxstats.core.kernel.stored import kernel

    _loaded = True
    return lambda args: kernel(args, before_numba=BEFORE_NUMBA)
