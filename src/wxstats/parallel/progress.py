"""Progress of a run: one display for the whole job, shown by rank 0.

A :class:`ProgressReporter` is fed either one call per finished sample
(:meth:`advance`, in a single-process run) or the job-wide totals that all
ranks publish (:meth:`set_done`, by rank 0's :mod:`~wxstats.parallel.monitor`).
Modes:

- ``"bar"``: a rich bar (samples, samples/s, GB/s, ETA) on a terminal; on a
  pipe or a Slurm output file a plain line every ``interval`` seconds instead;
  always one closing line with the totals;
- ``"json"``: one JSON object per line at most every ``interval`` seconds,
  plus a first and a last line, so a batch log stays short and parseable;
- ``"none"``: silent.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TextIO

MODES = ("bar", "json", "none")


def _clock_text(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"


def plural(n: int, word: str) -> str:
    """``1 time block``, ``3 time blocks``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


class ProgressReporter:
    """Counts finished samples and reports (see module docstring); a context manager."""

    def __init__(
        self,
        total_samples: int,
        total_bytes: int,
        mode: str = "bar",
        interval: float = 30.0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        ranks: int = 1,
        unit: str = "sample",
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"progress mode {mode!r}: expected one of {MODES}")
        self.total_samples = total_samples
        self.total_bytes = total_bytes
        self.mode = mode
        self.interval = interval
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.ranks = ranks
        self.unit = unit
        self.done = 0
        self.bytes_done = 0
        self._lock = threading.Lock()
        self._started = clock()
        self._last = self._started
        self._bar = None
        self._task = None
        self._closed = False

    # -- numbers -------------------------------------------------------------
    def snapshot(self, event: str = "progress") -> dict:
        elapsed = max(self.clock() - self._started, 1e-9)
        rate = self.bytes_done / elapsed
        left = self.total_bytes - self.bytes_done
        return {
            "event": event,
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "samples_done": self.done,
            "samples_total": self.total_samples,
            "bytes_done": self.bytes_done,
            "bytes_total": self.total_bytes,
            "percent": round(100.0 * self.done / max(self.total_samples, 1), 2),
            "elapsed_s": round(elapsed, 3),
            "samples_per_s": round(self.done / elapsed, 3),
            "gb_per_s": round(rate / 1e9, 4),
            "eta_s": round(left / rate, 1) if rate > 0 else None,
            "ranks": self.ranks,
        }

    def _line(self) -> str:
        s = self.snapshot()
        eta = _clock_text(s["eta_s"]) if s["eta_s"] is not None else "?"
        return (
            f"{self.done}/{plural(self.total_samples, self.unit)}, "
            f"{s['samples_per_s']:.2f} {self.unit}s/s, "
            f"{s['gb_per_s']:.3f} GB/s, ETA {eta}"
        )

    def _write(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    # -- lifecycle -----------------------------------------------------------
    def __enter__(self) -> ProgressReporter:
        self._started = self._last = self.clock()
        if self.mode == "json":
            self._write(json.dumps(self.snapshot("start")))
        elif self.mode == "bar" and self.stream.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self._bar = Progress(
                TextColumn("[bold]wxstats[/] {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("samples · {task.fields[rate]} · ETA {task.fields[eta]}"),
                console=Console(file=self.stream),
                transient=True,
            )
            self._bar.start()
            label = f"{self.ranks} ranks" if self.ranks > 1 else "compute"
            self._task = self._bar.add_task(
                label, total=max(self.total_samples, 1), rate="", eta="?"
            )
        return self

    def advance(self, nbytes: int) -> None:
        """One more sample of ``nbytes`` is finished (thread-safe)."""
        with self._lock:
            self._advance(self.done + 1, self.bytes_done + nbytes)

    def set_done(self, samples: int, nbytes: int) -> None:
        """The job-wide totals so far (fed by rank 0's monitor)."""
        with self._lock:
            self._advance(min(samples, self.total_samples), nbytes)

    def _advance(self, samples: int, nbytes: int) -> None:
        self.done, self.bytes_done = samples, nbytes
        now = self.clock()
        if self._bar is not None:
            s = self.snapshot()
            eta = _clock_text(s["eta_s"]) if s["eta_s"] is not None else "?"
            rate = f"{s['samples_per_s']:.2f}/s · {s['gb_per_s']:.3f} GB/s"
            self._bar.update(self._task, completed=self.done, rate=rate, eta=eta)
        elif self.mode != "none" and now - self._last >= self.interval:
            self._last = now
            if self.mode == "json":
                self._write(json.dumps(self.snapshot("progress")))
            else:
                self._write(f"wxstats: progress: {self._line()}")

    def close(self, success: bool) -> None:
        """Stop the bar; the closing line (totals, or the failure for JSON)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._bar is not None:
                self._bar.stop()
                self._bar = None
            if self.mode == "json":
                self._write(json.dumps(self.snapshot("done" if success else "failed")))
            elif self.mode == "bar" and success:
                s = self.snapshot()
                where = f" on {self.ranks} ranks" if self.ranks > 1 else ""
                self._write(
                    f"wxstats: {plural(self.done, self.unit)} ({self.bytes_done / 1e9:.3f} GB) "
                    f"in {s['elapsed_s']:.1f} s{where}: {s['samples_per_s']:.2f} {self.unit}s/s, "
                    f"{s['gb_per_s']:.3f} GB/s"
                )

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(success=exc_type is None)
