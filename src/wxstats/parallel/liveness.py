"""A TCP connection from every rank to rank 0, held for the whole run: a process
that ends is noticed in seconds, not after the heartbeat timeout.

When a process is killed (SIGKILL, out of memory, a crash) or all of its node's
processes are, the operating system closes its sockets: the other end reads
end-of-file at once. Rank 0 holds one connection per rank and tells the job
(through ``on_lost``) which rank's closed; every other rank holds its connection
to rank 0 and does the same for it. A node that vanishes silently (a pulled
cable, a power cut) closes nothing: the heartbeats of :mod:`.monitor` catch it
after ``--timeout``. A connection that closes after the rank said it is leaving
(``left/{rank}`` in the store) or after the job's result is set is a normal end.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from collections.abc import Callable
from typing import Any

ADDRESS_KEY = "liveness/address"


def own_address(towards: str) -> str:
    """The address of this host on the route to ``towards`` (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((socket.gethostbyname(towards), 9))
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())


class Liveness:
    """This rank's end of the liveness connections (see module docstring)."""

    def __init__(
        self,
        store: Any,
        rank: int,
        world_size: int,
        master: str,
        on_lost: Callable[[int], None],
    ) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.master = master
        self.on_lost = on_lost
        self.gone: set[int] = set()
        """Ranks whose connection closed, a normal end or not (rank 0 waits for none)."""
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = []
        self._thread: threading.Thread | None = None

    def start(self) -> Liveness:
        if self.world_size < 2:
            return self
        if self.rank == 0:
            server = socket.create_server(("", 0), backlog=self.world_size)
            self._sockets.append(server)
            port = server.getsockname()[1]
            self.store.set(ADDRESS_KEY, f"{own_address(self.master)}:{port}")
            target = self._serve
        else:
            host, port = self.store.get(ADDRESS_KEY).decode().rsplit(":", 1)
            conn = socket.create_connection((host, int(port)), timeout=30)
            conn.settimeout(None)
            conn.sendall(f"{self.rank}\n".encode())
            self._sockets.append(conn)
            target = self._watch_master
        self._thread = threading.Thread(target=target, name="wxstats-liveness", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()

    def _normal_end(self, rank: int) -> bool:
        if self._closing.is_set():
            return True
        try:
            return bool(self.store.check([f"left/{rank}"]) or self.store.check(["result"]))
        except Exception:  # noqa: BLE001 - the store gone too: not a normal end
            return False

    def _lost(self, rank: int) -> None:
        self.gone.add(rank)
        if not self._normal_end(rank):
            self.on_lost(rank)

    def _watch_master(self) -> None:
        conn = self._sockets[0]
        try:
            while conn.recv(64):
                pass
        except OSError:
            pass
        self._lost(0)

    def _serve(self) -> None:
        server = self._sockets[0]
        selector = selectors.DefaultSelector()
        selector.register(server, selectors.EVENT_READ, None)
        ranks: dict[socket.socket, int | None] = {}
        while not self._closing.is_set():
            try:
                events = selector.select(timeout=0.5)
            except (OSError, ValueError):
                return
            for key, _ in events:
                if key.fileobj is server:
                    try:
                        conn, _ = server.accept()
                    except OSError:
                        return
                    ranks[conn] = None
                    self._sockets.append(conn)
                    selector.register(conn, selectors.EVENT_READ, None)
                    continue
                conn = key.fileobj
                try:
                    data = conn.recv(64)
                except OSError:
                    data = b""
                if data and ranks[conn] is None:
                    with contextlib.suppress(ValueError):
                        ranks[conn] = int(data.split(b"\n", 1)[0])
                if not data:
                    selector.unregister(conn)
                    conn.close()
                    rank = ranks.pop(conn)
                    if rank is not None:
                        self._lost(rank)
