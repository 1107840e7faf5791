"""Why a job cannot hang: heartbeats, failure reports and progress in the job's store.

Besides the process group, every rank talks to the job's key-value store (the
``TCPStore`` behind the process group). A :class:`Monitor` thread per rank
publishes progress and a heartbeat each second and looks for failure reports.
A rank that fails publishes the reason; the others stop at their next sample
(:meth:`Monitor.raise_if_failed`) with a message naming that rank. A rank that
dies without a word stops its heartbeat and is declared failed after
``timeout`` seconds; a process that ends is noticed at once through its
liveness connection (:mod:`.liveness`). A rank whose heartbeat goes on while
its work stands still (stuck in a read) declares itself failed after the stall
limit: ``max(timeout, STALL_FACTOR x its slowest sample so far)`` (the first
sample, which holds the start-up, not counted). A rank that
cannot stop within ``timeout`` seconds of a failure is ended by its monitor.
Every message names the rank and its host.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from wxstats.core.errors import WxstatsError
from wxstats.core.untrusted import parse_json

HEARTBEAT_S = 1.0
"""How often each rank's monitor publishes progress and checks for failures."""
STALL_FACTOR = 4.0
"""A rank without progress for this many times its slowest sample (and at least
``timeout``) is stuck."""


PUBLISHED_WAIT_S = 2.0
"""How long an interrupted rank waits for the store to tell the job's first failure."""
INTERRUPT_CODES = (128 + signal.SIGINT, 128 + signal.SIGTERM)
"""Exit codes of a rank stopped by SIGINT or SIGTERM (the shell's convention)."""


class JobStopped(WxstatsError):
    """This rank stops because another rank failed (the message names it)."""

    def __init__(self, message: str, code: int, rank: int = -1) -> None:
        super().__init__(message)
        self.code = code
        self.rank = rank  # the rank that failed


class Monitor:
    """One rank's heartbeat, failure and progress traffic (see module docstring).

    ``store`` is the job's (prefixed) store; ``where`` names it in messages;
    ``on_progress(samples, bytes)`` receives the job-wide totals on rank 0.
    """

    def __init__(
        self,
        store: Any,
        rank: int,
        world_size: int,
        timeout: float,
        where: str,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.timeout = timeout
        self.where = where
        self.on_progress = on_progress
        self.samples_done = 0
        self.bytes_done = 0
        self.failure: tuple[int, str, int] | None = None  # (rank, message, exit code)
        self.dead: set[int] = set()  # ranks declared dead: rank 0 does not wait for them
        self._pushed = (0, 0)
        self._stop = threading.Event()
        self._failed_at: float | None = None
        self._lock = threading.Lock()  # progress pushes come from two threads
        self.before_forced_exit: Callable[[], str] | None = None
        """Called by the watchdog before it ends a stuck process (a checkpoint's
        save); returns words for the last line."""
        self.hosts: dict[int, str] = {}
        self.busy = False  # between the start of its share and its end
        self._last_progress = time.monotonic()
        self._slowest = 0.0
        watched = list(range(1, world_size)) if rank == 0 else [0]
        self._beat = {r: (-1, time.monotonic()) for r in watched}
        self._thread = threading.Thread(target=self._watch, name="wxstats-monitor", daemon=True)

    def start(self) -> Monitor:
        import socket

        self.store.set(f"host/{self.rank}", socket.gethostname())
        self._thread.start()
        return self

    def describe(self, rank: int) -> str:
        """``rank N on HOST`` (the host once known: every rank publishes it)."""
        if rank not in self.hosts:
            try:
                if self.store.check([f"host/{rank}"]):
                    self.hosts[rank] = self.store.get(f"host/{rank}").decode()
            except Exception:  # noqa: BLE001 - the store gone: the rank alone
                pass
        return self._known(rank)

    def _known(self, rank: int) -> str:
        host = self.hosts.get(rank)
        return f"rank {rank} on {host}" if host else f"rank {rank}"

    def begin_share(self) -> None:
        """This rank starts its samples: from now on no progress is a stall."""
        self._last_progress = time.monotonic()
        self.busy = True

    def end_share(self) -> None:
        """This rank's samples are done: waiting for the others is no stall."""
        self.busy = False

    def stall_limit(self) -> float:
        return max(self.timeout, STALL_FACTOR * self._slowest)

    def connection_lost(self, rank: int) -> None:
        """``rank``'s liveness connection closed (see :mod:`.liveness`)."""
        self.dead.add(rank)
        self.publish_failure(
            rank,
            "its connection closed: the process ended (killed, out of memory, or its node failed)",
            1,
        )

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    # -- what the main thread tells ----------------------------------------------
    def count(self, nbytes: int) -> None:
        """A sample is done: count it, stop if asked."""
        now = time.monotonic()
        if self.samples_done:  # the first also holds the start-up (kernel load, references)
            self._slowest = max(self._slowest, now - self._last_progress)
        self._last_progress = now
        self.samples_done += 1
        self.bytes_done += nbytes
        self.raise_if_failed()

    def raise_if_failed(self) -> None:
        if self.failure is not None:
            raise _stopped(self.failure, self.describe(self.failure[0]))

    def _first_failure(self) -> tuple[int, str, int] | None:
        """The job's first published failure, read from the store (None: none yet)."""
        if self.store.add("failures", 0) == 0:
            return None
        first = parse_json(self.store.get("first_error"), "first_error")
        return int(first["rank"]), str(first["message"]), int(first["code"])

    def publish_failure(self, rank: int, message: str, code: int) -> None:
        """Tell every rank that ``rank`` failed (the first failure wins the message)."""
        try:
            payload = json.dumps({"rank": rank, "message": message, "code": code})
            self.store.set(f"error/{rank}", payload)
            if self.store.add("failures", 1) == 1:
                self.store.set("first_error", payload)
        except Exception:  # noqa: BLE001 - store gone: peers notice through it too
            pass
        if self.failure is None:
            self.failure = (rank, message, code)

    def published_failure(self, wait: float = PUBLISHED_WAIT_S) -> JobStopped | None:
        """The job's first published failure (another rank's, not an interruption),
        read from the store now, or ``None``. For a rank interrupted by its launcher:
        torchrun and srun stop the other ranks with SIGTERM once one exits, which may
        be before this rank's monitor read the failure (once a second). The read is
        in a daemon thread given ``wait`` seconds: a store gone or unreachable never
        holds up the exit."""
        found: list[tuple[tuple[int, str, int], str]] = []  # (failure, who)

        def read() -> None:
            try:
                if (failure := self._first_failure()) is not None:
                    found.append((failure, self.describe(failure[0])))
            except Exception:  # noqa: BLE001 - the store gone: what this rank knows
                pass

        reader = threading.Thread(target=read, name="wxstats-failure", daemon=True)
        reader.start()
        reader.join(wait)
        if found:
            failure, who = found[0]
        elif self.failure is not None:  # read before, by the monitor thread
            failure = self.failure
            who = self._known(failure[0])  # the store may not answer: hosts known so far
        else:
            return None
        rank, _message, code = failure
        if rank == self.rank or code in INTERRUPT_CODES:
            return None  # this rank's own (said already), or the same signal at another rank
        if self.failure is None:  # known now: rank 0 does not wait for it to leave
            self.failure = failure
        return _stopped(failure, who)

    def lost(self, exc: Exception) -> None:
        """The store stopped answering: rank 0 or the launcher is gone."""
        if self.failure is None and not self._stop.is_set():
            self.failure = (
                0,
                f"lost contact with the job's store at {self.where} "
                f"(rank 0 or the launcher ended): {exc}",
                1,
            )

    def push_progress(self) -> None:
        with self._lock:
            done = (self.samples_done, self.bytes_done)
            ds, db = done[0] - self._pushed[0], done[1] - self._pushed[1]
            if ds or db:
                self.store.add("samples", ds)
                self.store.add("bytes", db)
                self._pushed = done

    def wait_for(self, key: str, target: int) -> None:
        """Wait until counter ``key`` reaches ``target`` or a rank fails."""
        while True:
            self.raise_if_failed()
            try:
                if self.store.add(key, 0) >= target:
                    return
            except Exception as exc:  # noqa: BLE001
                self.lost(exc)
            time.sleep(0.05)

    # -- the thread ----------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stop.wait(HEARTBEAT_S if self.failure is None else 0.2):
            try:
                self._watch_once()
            except Exception as exc:  # noqa: BLE001
                self.lost(exc)
            if self.failure is not None:
                if self._failed_at is None:
                    self._failed_at = time.monotonic()
                elif time.monotonic() - self._failed_at > self.timeout:
                    # the main thread is stuck (e.g. in a hung read): end the process
                    rank, message, code = self.failure
                    saved = self.before_forced_exit() if self.before_forced_exit else ""
                    print(
                        f"wxstats: error: rank {self.rank}: stopping, {self.describe(rank)} "
                        f"failed: {message}{saved}",
                        file=sys.stderr,
                        flush=True,
                    )
                    os._exit(code or 1)

    def _watch_once(self) -> None:
        store = self.store
        self.push_progress()
        store.add(f"hb/{self.rank}", 1)
        if self.failure is None:
            self.failure = self._first_failure()
        now = time.monotonic()
        stalled = now - self._last_progress
        if self.busy and self.failure is None and stalled > self.stall_limit():
            self.publish_failure(
                self.rank,
                f"no progress for {stalled:.0f} s while its heartbeat went on (stuck in a "
                f"read?; the limit is max(--timeout, {STALL_FACTOR:g} x its slowest sample))",
                1,
            )
        for r in list(self._beat):
            count = store.add(f"hb/{r}", 0)
            last, since = self._beat[r]
            if count != last:
                self._beat[r] = (count, now)
            elif now - since > self.timeout and self.failure is None:
                if store.check([f"left/{r}"]) or store.check(["result"]):
                    del self._beat[r]
                    continue
                self.dead.add(r)
                self.publish_failure(
                    r,
                    f"no sign of life for {self.timeout:g} s (killed, or its node failed?)",
                    1,
                )
        if self.on_progress is not None:
            self.on_progress(store.add("samples", 0), store.add("bytes", 0))


def _stopped(failure: tuple[int, str, int], who: str) -> JobStopped:
    """What stops this rank when ``failure`` (rank, message, code) is another's."""
    rank, message, code = failure
    return JobStopped(f"{who} failed: {message}", code, rank)
