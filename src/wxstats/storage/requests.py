"""The requests of one object store on one event loop: a queue, first come
first served, with as many in flight as the store sustains
(:class:`.urls.InFlight`). Chunk objects of every block and the objects read
when a store is opened share it (:mod:`.zarrchunks`, :mod:`.zarropen`)."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from concurrent.futures import Future
from typing import Any

from wxstats.storage import urls
from wxstats.storage.urls import InFlight


class Requests:
    """The chunk requests of one store on one event loop, at most
    :attr:`in_flight` ``.limit`` at once over every block being fetched, in the
    order they were submitted: a block read ahead queues behind the block before
    it, and its requests go out as that one's finish, so the pipe stays full
    across blocks while the kernel sums the block before, and the block the
    kernel needs next is the first whole. ``fetch(name, nbytes)`` (a coroutine
    function) returns an object's bytes, ``None`` where it does not exist, and
    reads no further than :func:`.decompress.object_limit` of its declared decoded
    size ``nbytes`` (``None``: a metadata object)."""

    def __init__(self, fetch: Any, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.fetch = fetch
        self.in_flight = InFlight(urls.REQUESTS_IN_FLIGHT)
        self._thread = None
        if loop is None:  # a loop of its own (obstore), on a daemon thread
            loop = asyncio.new_event_loop()
            self._thread = threading.Thread(
                target=loop.run_forever, name="wxstats-requests", daemon=True
            )
            self._thread.start()
        self.loop = loop
        self._active = 0
        # the requests waiting for a slot, first come first served: a freed slot is
        # handed to the first of them. A condition's ``wait_for`` sends a woken waiter
        # that finds no slot to the back, behind later blocks' requests: the first
        # block then finished last, with the run's last objects (a 100 ms store: its
        # kernel work all after the last response, and every block held at once)
        self._queue: collections.deque[asyncio.Future] = collections.deque()

    def submit(self, names: list[str], sizes: list[int | None], arrived: Any = None) -> Future:
        """The objects ``names`` of declared decoded ``sizes`` (a list: bytes,
        ``None`` or the exception), later; ``arrived(index, data)``, called as
        each object found arrives, gives what the list holds instead of its bytes
        (a decode started at once)."""
        coro = self._all(names, sizes, arrived)
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def submit_each(self, names: list[str], sizes: list[int | None]) -> list[Future]:
        """The objects ``names``, one future each (bytes, ``None`` or the
        exception), queued in this order; cancelling one cancels its request."""
        return [
            asyncio.run_coroutine_threadsafe(self._one(name, nbytes, 0, None), self.loop)
            for name, nbytes in zip(names, sizes, strict=True)
        ]

    async def _all(self, names: list[str], sizes: list[int | None], arrived: Any) -> list[Any]:
        pairs = enumerate(zip(names, sizes, strict=True))
        return await asyncio.gather(*(self._one(n, b, i, arrived) for i, (n, b) in pairs))

    async def _slot(self) -> None:
        """Wait for a slot (counted in ``_active`` when this returns)."""
        if not self._queue and self._active < self.in_flight.limit:
            self._active += 1
            return
        turn = self.loop.create_future()
        self._queue.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # handed a slot, then cancelled
                self._free()
            raise

    def _free(self) -> None:
        """A request ended: its slot, and any the limit grew by, to the first waiting."""
        self._active -= 1
        while self._queue and self._active < self.in_flight.limit:
            turn = self._queue.popleft()
            if not turn.done():
                self._active += 1
                turn.set_result(None)

    async def _one(self, name: str, nbytes: int | None, index: int, arrived: Any) -> Any:
        await self._slot()
        try:
            data = await self.fetch(name, nbytes)
            return data if arrived is None or data is None else arrived(index, data)
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 (named with its key by the caller)
            return exc
        finally:
            self.in_flight.completed(bool(self._queue), time.perf_counter())
            self._free()

    def close(self) -> None:
        if self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
