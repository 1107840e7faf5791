"""Decoded chunks two neighbouring blocks both read (a block's last steps are the
next block's difference halo), decompressed once for both (:class:`SharedChunks`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from typing import Any

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


class FetchedElsewhere:
    """A halo chunk's stored bytes that a neighbouring block's requests fetch (it
    was left out of this block's requests), waited for when this block decodes
    it first: blocks are read two at once, and a block reading its halo before
    the block before has decoded it fetched each such chunk again, one request
    after the other (a 100 ms store: 30-40 sequential round trips at the end of
    a run, ``docs/benchmarks.md``)."""

    __slots__ = ("_bytes", "key")

    def __init__(self, found: Future, key: str) -> None:
        self._bytes, self.key = found, key

    def get(self, fetch_again: Callable[[], Any]) -> Any:
        """The bytes (``None``: missing); ``fetch_again()`` where the other
        block's requests were cancelled (the reader closing)."""
        try:
            return self._bytes.result()[self.key]
        except CancelledError:
            return fetch_again()


def fetched_elsewhere(block: Future, keys: list[str]) -> dict[str, FetchedElsewhere]:
    """``keys`` of the objects the future ``block`` fetches (a dict by key), each
    as a :class:`FetchedElsewhere`; only their bytes are kept once it is done,
    not the rest of that block's values."""
    found: Future = Future()

    def done(fut: Future) -> None:
        if fut.cancelled():
            found.cancel()
            return
        try:
            values = fut.result()
            found.set_result({k: values[k] for k in keys})
        except BaseException as exc:  # noqa: BLE001 (raised by get(), as by that block)
            found.set_exception(exc)

    block.add_done_callback(done)
    return {k: FetchedElsewhere(found, k) for k in keys}
