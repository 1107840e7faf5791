"""How a run uses a checkpoint folder (``wxstats compute --checkpoint DIR [--resume]``).

Rank 0 locks the folder for the run's life (another run on it is refused),
prepares the manifest and reads the part files (the folder's format is
:mod:`wxstats.runtime.checkpoint`), every rank receives the same set of time
steps done and shares out only the samples with steps still to do (a sample
partly done, when the block size changed, sums only those: :func:`plan`), and
each rank saves its part at most every ``interval`` seconds, at the end of its
share, when the run fails, on SIGINT/SIGTERM (then it stops with
:class:`~wxstats.core.errors.Interrupted`), and before a watchdog ends a
process whose main thread is stuck (only between two samples' merges, when the
accumulator matches the samples recorded).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wxstats.core.accumulator import RunMoments
from wxstats.core.errors import Interrupted
from wxstats.core.partial import Coverage
from wxstats.parallel.job import Solo, World
from wxstats.runtime.checkpoint import Checkpoint
from wxstats.runtime.engine import Steps, empty_accumulator
from wxstats.runtime.identity import run_identity
from wxstats.sources.base import Source


def resume_hint(directory: str | Path) -> str:
    return f"progress is saved in {directory}; rerun the same command with --resume to continue"


SIGNAL_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


@dataclass
class ResumeWork:
    """What a resumed run still does: ``todo`` samples (in order), of which those
    in ``partial`` only over those steps; ``adds``: the steps each todo sample
    adds to the checkpoint; ``skipped``: the samples done entirely."""

    todo: list[int] = field(default_factory=list)
    partial: dict[int, Steps] = field(default_factory=dict)
    adds: dict[int, Coverage] = field(default_factory=dict)
    skipped: int = 0


def resume_work(source: Source, done: Coverage) -> ResumeWork:
    """The samples of ``source`` with time steps not in ``done`` (the same on
    every rank: it depends on the source and ``done`` only)."""
    out = ResumeWork()
    for index in range(len(source)):
        spans = [s for s in source.covers(index).values() if s.start < s.stop]
        wants = Coverage(
            {s.unit: tuple((t.start, t.stop) for t in spans if t.unit == s.unit) for s in spans}
        )
        adds = wants.difference(done)
        if not adds:
            out.skipped += 1
            continue
        out.todo.append(index)
        out.adds[index] = adds
        if adds != wants:
            out.partial[index] = {unit: list(ranges) for unit, ranges in adds.ranges.items()}
    return out


class Resumable:
    """One rank's use of a checkpoint folder during a run (see module docstring).

    ``world`` (a :class:`~wxstats.parallel.job.World`) shares the time steps
    rank 0 found done with the other ranks."""

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
        self._done = Coverage()
        self._adds: dict[int, Coverage] = {}
        self.partial: dict[int, Steps] = {}
        """Samples to sum over some of their steps only (see :func:`plan`)."""
        self._count = 0
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
        steps done, elsewhere ``None``). Only rank 0 reads the folder, before
        any rank of this run writes to it, so all ranks agree on what is done.
        :attr:`partial` then holds the samples to sum over some steps only."""
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
            loaded = self._checkpoint.load(empty_accumulator(source))
            carried = loaded.sums
            payload = zlib.compress(json.dumps(loaded.coverage.to_json()).encode())
        payload = world.broadcast_bytes("checkpoint/done", payload)
        work = resume_work(source, Coverage.from_json(zlib.decompress(payload).decode()))
        self._adds, self.partial = work.adds, work.partial
        self.done_before = work.skipped
        self.started = True
        return work.todo, carried

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
            self._done = self._done.union(self._adds.get(index, Coverage()))
            self._count += 1
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

    def close(self) -> None:
        """The run is over: other runs may use the folder (rank 0 held it locked)."""
        if self._checkpoint is not None:
            self._checkpoint.release()

    def save(self) -> None:
        """Write this rank's part file if it finished samples since the last save."""
        if self._checkpoint is not None and self._acc is not None and self._count > self._saved:
            self._checkpoint.save(self._done, self._acc)
            self._saved = self._count
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
