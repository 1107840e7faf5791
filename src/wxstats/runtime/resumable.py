"""How a run uses a checkpoint folder (``wxstats compute --checkpoint DIR [--resume]``).

Rank 0 prepares the manifest and reads the part files (the folder's format is
:mod:`wxstats.runtime.checkpoint`), every rank receives the same set of
finished samples and shares out only the rest, and each rank saves its part at
most every ``interval`` seconds, at the end of its share, when the run fails,
on SIGINT/SIGTERM (then it stops with :class:`~wxstats.core.errors.Interrupted`),
and before a watchdog ends a process whose main thread is stuck (only between
two samples' merges, when the accumulator matches the samples recorded).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.accumulator import RunMoments
from wxstats.core.errors import Interrupted
from wxstats.runtime.checkpoint import Checkpoint
from wxstats.runtime.identity import run_identity
from wxstats.runtime.job import Solo, World
from wxstats.sources.base import Source


def resume_hint(directory: str | Path) -> str:
    return f"progress is saved in {directory}; rerun the same command with --resume to continue"


SIGNAL_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Resumable:
    """One rank's use of a checkpoint folder during a run (see module docstring).

    ``world`` (a :class:`~wxstats.runtime.job.World`) shares rank 0's list
    of finished samples with the other ranks.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        resume: bool = False,
        interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = Path(directory)
        self.resume = resume
        self.interval = float(interval)
        self.clock = clock
        self.done_before = 0
        self.started = False  # the folder holds a checkpoint of this run
        self._checkpoint: Checkpoint | None = None
        self._acc: RunMoments | None = None
        self._done: list[int] = []
        self._saved = 0
        self._last_save = 0.0
        self._signal: int | None = None
        self._finished = False
        self.merging = threading.Lock()
        """Held while a sample is merged and recorded: outside it, the accumulator
        holds exactly the samples recorded, and may be saved from another thread."""

    def start(
        self, source: Source, *, skipna: bool, world: World | None = None
    ) -> tuple[list[int], RunMoments | None]:
        """(the samples still to do, in order; on rank 0 the accumulator of the
        finished ones, elsewhere ``None``). Only rank 0 reads the folder, before
        any rank of this run writes to it, so all ranks agree on what is done."""
        world = world if world is not None else Solo()
        rank = world.rank
        # only rank 0 checks the manifest: the others need not stat every chunk
        self._checkpoint = Checkpoint(
            self.directory,
            run_identity(source, skipna) if rank == 0 else {},
        )
        carried: RunMoments | None = None
        payload = b""
        if rank == 0:
            self._checkpoint.prepare(self.resume)
            done, carried = self._checkpoint.load(RunMoments.create(source.streams))
            payload = zlib.compress(np.array(sorted(done), dtype=np.int64).tobytes())
        payload = world.broadcast_bytes("checkpoint/done", payload)
        finished = set(np.frombuffer(zlib.decompress(payload), dtype=np.int64).tolist())
        self.done_before = len(finished)
        self.started = True
        return [i for i in range(len(source)) if i not in finished], carried

    @contextmanager
    def tracking(
        self, acc: RunMoments, on_sample: Callable[[int], None] | None = None
    ) -> Iterator[Callable[[int], None]]:
        """Within: ``acc`` is this rank's accumulator of exactly the samples
        passed to the yielded callback (called after each is merged). Saves as
        the module docstring says; SIGINT/SIGTERM stop the run at the next
        sample after a save (a second signal stops it at once)."""
        self._acc, self._last_save = acc, self.clock()

        def after_sample(index: int) -> None:
            self._done.append(index)
            if self._signal is not None:
                self.save()
                raise self._interrupted(self._signal, saved=True)
            if self.clock() - self._last_save >= self.interval:
                self.save()
            if on_sample is not None:
                on_sample(index)

        previous = self._install_handlers()
        try:
            yield after_sample
        except Exception:
            if not self._finished:
                self._save_after_failure()
            raise
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def finish(self) -> None:
        """This rank's share is done: save it; a signal from now on stops at once."""
        self.save()
        self._finished = True
        if self._signal is not None:  # came after the last sample
            raise self._interrupted(self._signal, saved=True)

    def save(self) -> None:
        """Write this rank's part file if it finished samples since the last save."""
        if self._checkpoint is not None and self._acc is not None and len(self._done) > self._saved:
            self._checkpoint.save(self._done, self._acc)
            self._saved = len(self._done)
        self._last_save = self.clock()

    # -- internals ---------------------------------------------------------------
    def save_if_consistent(self, wait: float = 5.0) -> str:
        """Save from another thread (the watchdog, ending a process whose main
        thread hangs): only between two samples' merges, else nothing. Says what
        happened, for the last line the process prints."""
        if self._checkpoint is None or self._acc is None or self._finished:
            return ""
        if not self.merging.acquire(timeout=wait):
            return "; its progress since the last save is lost (it was merging a sample)"
        try:
            self.save()
        except Exception as exc:  # noqa: BLE001 - the failure being reported comes first
            return f"; could not save its progress: {exc}"
        finally:
            self.merging.release()
        return f"; its progress is saved in {self.directory} (--resume continues it)"

    def _save_after_failure(self) -> None:
        try:
            self.save()
        except Exception as exc:  # noqa: BLE001 - the first error is the one to report
            print(f"wxstats: warning: could not save progress: {exc}", file=sys.stderr)

    def _interrupted(self, signum: int, saved: bool) -> Interrupted:
        name = signal.Signals(signum).name
        if saved:
            what = resume_hint(self.directory)
        else:
            what = (
                f"stopped at once without saving the last samples; {self.directory} holds what "
                "was saved before, rerun the same command with --resume to continue"
            )
        return Interrupted(f"interrupted by {name}: {what}", SIGNAL_CODES.get(signum, 1))

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._finished:
            raise self._interrupted(signum, saved=True)
        if self._signal is not None:  # asked twice: perhaps stuck in a read
            self._finished = True  # ``acc`` may be half-merged now: never save it
            raise self._interrupted(signum, saved=False)
        self._signal = signum

    def _install_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {s: signal.signal(s, self._on_signal) for s in SIGNAL_CODES}
