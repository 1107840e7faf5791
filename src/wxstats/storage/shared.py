"""Decoded chunks two neighbouring blocks both read (a block's last steps are the
next block's difference halo), decompressed once for both (:class:`SharedChunks`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np


class SharedChunks:
    """Decoded chunks that two neighbouring blocks read (a block's last steps are
    the next block's difference halo), decompressed once: whichever block comes
    first decodes, the other takes the values, waiting if they are being decoded.
    An entry leaves when its second reader takes it; entries whose second reader
    is elsewhere (another rank) leave oldest first beyond ``limit`` bytes. A
    chunk read by more than two blocks (a halo longer than a block) is decoded
    again by the third: the same values."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)  # one for all: waiting is rare
        self._entries: OrderedDict[str, _Pending] = OrderedDict()
        self._bytes = 0

    def holds(self, key: str) -> bool:
        """Whether chunk ``key`` is being decoded, or kept, for a second reader."""
        with self._lock:
            return key in self._entries

    def take(self, key: str, decode: Callable[[], np.ndarray | None]) -> np.ndarray | None:
        """The values of chunk ``key``: ``decode()`` for its first reader, kept
        for (or waited on by) the second."""
        with self._lock:
            entry = self._entries.pop(key, None)
            first = entry is None
            if first:
                entry = self._entries[key] = _Pending()
            else:
                if entry.done and entry.error is None:  # counted while it was kept
                    self._bytes -= nbytes_of(entry.value)
                while not entry.done:
                    self._ready.wait()
        if not first:
            if entry.error is not None:
                raise entry.error
            return entry.value
        try:
            values = decode()
        except BaseException as exc:
            with self._lock:
                if self._entries.get(key) is entry:
                    del self._entries[key]
                entry.error, entry.done = exc, True
                self._ready.notify_all()
            raise
        with self._lock:
            entry.value, entry.done = values, True
            self._ready.notify_all()
            if self._entries.get(key) is entry:  # the second reader is yet to come
                self._bytes += nbytes_of(values)
                # listed only when over the limit: a copy of every entry at each insertion
                # was quadratic in a block's shared chunks (10,000: 100 s)
                for old in list(self._entries) if self._bytes > self.limit else ():
                    if self._bytes <= self.limit:
                        break
                    if self._entries[old].done:
                        self._bytes -= nbytes_of(self._entries.pop(old).value)
        return values


class _Pending:
    """A shared chunk being decoded, or decoded (a ``Future`` cost 6 us each: a
    condition and a lock per chunk, for a wait that is rare)."""

    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = False
        self.error: BaseException | None = None
        self.value: np.ndarray | None = None


def nbytes_of(values: np.ndarray | None) -> int:
    return 0 if values is None else values.nbytes
