"""A TCP proxy on localhost that puts a delay in front of each HTTP request.

An object store in a cloud region answers 20-100 ms after a request leaves;
a local S3 server (moto) answers in a fraction of a millisecond. Placed in
front of the local server, this proxy holds each request ``delay`` seconds
before passing it on, so that a client sees the cloud's time to first byte
with the local server's bandwidth. The delay is per request, not per
connection: on a kept-alive connection each request is delayed again (HTTP/1.1
clients send a request, then wait for its response; the first bytes a client
sends after the server's last response are a new request).

It also counts the requests in flight (sent, no response byte yet) and the most
at once: the concurrency a client reached, seen from outside the client. With
``gather`` set, requests are held until that many are in flight together (then
all go on; only requests whose first line contains ``gather_only``, e.g. chunk
objects, not the metadata a client reads one by one): a test shows concurrency
by an event, not by timing.

Each request is also given its round (``rounds``, beside ``lines``): 1 for one
sent before any response came, else one more than the latest round whose
response had come when it was sent. The round of a client's first chunk
request, less one, is how many round trips it waited for before it: the
requests that opening a store sends one after the other.

Plain asyncio, no root, any platform: ``tc netem`` on a veth pair would need
both. Used by ``tests/test_latency.py`` and ``benchmarks/bench_latency.py``.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

READ_BYTES = 1 << 16
GATHER_TIMEOUT_S = 30.0
"""A hang guard only: a client that never has ``gather`` requests in flight gets
through after this (``timed_out`` says so, and its test fails)."""


class DelayProxy:
    """Forwards ``127.0.0.1:port`` to ``upstream`` (host, port), each request
    held ``delay`` seconds; runs its own event loop on a daemon thread."""

    def __init__(self, upstream: tuple[str, int], delay: float = 0.0) -> None:
        self.upstream = upstream
        self.delay = delay
        self.gather = 0
        self.gather_only = ""
        self.timed_out = False
        self.requests = 0
        self.lines: list[tuple[float, str]] = []  # (loop time, request line), in order
        self.rounds: list[int] = []  # each request's round (see the module doc), as lines
        self._answered = 0  # the latest round a response has come for
        self.in_flight = 0
        self.most = 0
        self._loop = asyncio.new_event_loop()
        self._gathered: asyncio.Event | None = None
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        ready.wait()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def reset(self, delay: float | None = None, gather: int = 0, gather_only: str = "") -> None:
        """Zero the counts; set the delay and the requests to gather."""

        def apply() -> None:
            if delay is not None:
                self.delay = delay
            self.gather, self.gather_only, self.timed_out = gather, gather_only, False
            self.requests, self.most = 0, self.in_flight
            self.lines, self.rounds, self._answered = [], [], 0
            self._gathered = asyncio.Event()

        self._call(apply)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def _call(self, fn: Any) -> None:
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()

        self._loop.call_soon_threadsafe(run)
        done.wait()

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._gathered = asyncio.Event()
        server = self._loop.run_until_complete(
            asyncio.start_server(self._connection, "127.0.0.1", 0, backlog=1024)
        )
        self.port = server.sockets[0].getsockname()[1]
        ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        state = {"waiting": False, "round": 0}  # waiting: a request sent, no response yet
        tasks = [
            asyncio.ensure_future(self._requests(reader, up_writer, state)),
            asyncio.ensure_future(self._responses(up_reader, writer, state)),
        ]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        for w in (writer, up_writer):
            w.close()
        if state["waiting"]:
            self.in_flight -= 1

    async def _requests(self, reader, up_writer, state) -> None:
        while data := await reader.read(READ_BYTES):
            if not state["waiting"]:  # the first bytes of a new request
                state["waiting"] = True
                self.requests += 1
                self.in_flight += 1
                self.most = max(self.most, self.in_flight)
                line = data.split(b"\r\n", 1)[0].decode("latin-1")
                self.lines.append((self._loop.time(), line))
                state["round"] = self._answered + 1
                self.rounds.append(state["round"])
                await self._hold(line)
            up_writer.write(data)
            await up_writer.drain()

    async def _responses(self, up_reader, writer, state) -> None:
        while data := await up_reader.read(READ_BYTES):
            if state["waiting"]:
                state["waiting"] = False
                self.in_flight -= 1
                self._answered = max(self._answered, state["round"])
            writer.write(data)
            await writer.drain()

    async def _hold(self, line: str) -> None:
        """The delay, and (with ``gather``) the wait for that many in flight."""
        gathered = self._gathered
        if self.gather and self.gather_only in line and not gathered.is_set():
            if self.in_flight >= self.gather:
                gathered.set()
            else:
                try:
                    await asyncio.wait_for(gathered.wait(), GATHER_TIMEOUT_S)
                except asyncio.TimeoutError:
                    self.timed_out = True
                    gathered.set()
        if self.delay > 0:
            await asyncio.sleep(self.delay)
