"""Read-ahead into the page cache: a cold disk works while the kernel computes.

The sources announce what they read next (``Source.prefetch``, called by the
engine a few samples ahead) with ``POSIX_FADV_WILLNEED``, which starts the reads
and returns. Linux honours one such call only up to its read-ahead size, so the
advice is given in pieces (:func:`will_need`), and for whole files on a thread
of its own (:func:`prefetch_files`). Measured in ``benchmarks/bench_cold.py``.
"""

from __future__ import annotations

import os
import queue
import stat
import threading
from pathlib import Path

WILLNEED_PIECE = 128 << 10
"""Bytes per ``POSIX_FADV_WILLNEED`` call. Linux reads at most max(read-ahead,
the device's largest request) per call (128 KiB to a few MiB) and drops the
rest silently: one call for a whole 285 MiB MEPS sample read its first 8 MiB
(``fincore``), so a cold run read the rest on page faults, with the kernel
waiting. 128 KiB is under every such limit; a 285 MiB file costs 0.04 s of
calls (8 MiB pieces 0.15 s), on the prefetch thread."""

_hints: queue.SimpleQueue[Path] | None = None
_hints_lock = threading.Lock()


def will_need(fd: int, offset: int, length: int) -> None:
    """``POSIX_FADV_WILLNEED`` on ``length`` bytes at ``offset`` of ``fd``, in
    pieces of :data:`WILLNEED_PIECE` (see there); waits for the disk's queue,
    so call it off the computing threads."""
    for start in range(offset, offset + length, WILLNEED_PIECE):
        size = min(WILLNEED_PIECE, offset + length - start)
        os.posix_fadvise(fd, start, size, os.POSIX_FADV_WILLNEED)


def prefetch_files(paths: list[Path]) -> None:
    """Ask the kernel to read ``paths`` ahead (``POSIX_FADV_WILLNEED``).

    Returns at once: one background thread gives the advice, file after file in
    the order asked, so a cold file is in the page cache by the time the kernel
    reaches it (the calls themselves wait for the disk's queue: 0.04-0.15 s for
    a 285 MiB sample, which the engine's thread must not pay). A no-op where the
    call does not exist; errors are ignored (reading the file reports them).
    """
    global _hints
    if getattr(os, "posix_fadvise", None) is None:
        return
    with _hints_lock:
        if _hints is None:
            _hints = queue.SimpleQueue()
            threading.Thread(
                target=_advise_forever, args=(_hints,), name="wxstats-prefetch", daemon=True
            ).start()
    for path in paths:
        _hints.put(path)


def _advise_forever(hints: queue.SimpleQueue[Path]) -> None:
    while True:
        _advise(hints.get())


def _advise(path: Path) -> None:
    """``POSIX_FADV_WILLNEED`` on all of one regular file, in pieces."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return  # a FIFO or a device: opening it could block, reading it ahead means nothing
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        will_need(fd, 0, os.fstat(fd).st_size)
    except OSError:
        pass
    finally:
        os.close(fd)
