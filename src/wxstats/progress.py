"""Progress of a run: a bar on a terminal, JSON lines for batch jobs.

A :class:`ProgressReporter` is fed one call per finished sample (the
``on_sample`` callback of :func:`wxstats.api.compute_source`) and shows
samples done, GB/s and the time left. ``mode="json"`` writes one JSON object
per line at most every ``interval`` seconds (plus a first and a last line), so
a Slurm log stays short and machine-readable; ``mode="bar"`` draws a rich
progress bar when the stream is a terminal and nothing otherwise;
``mode="none"`` is silent.
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


class ProgressReporter:
    """Counts finished samples and reports (see module docstring); a context manager."""

    def __init__(
        self,
        total_samples: int,
        sample_bytes: Callable[[int], int],
        total_bytes: int,
        mode: str = "bar",
        interval: float = 10.0,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"progress mode {mode!r}: expected one of {MODES}")
        self.total_samples = total_samples
        self.total_bytes = total_bytes
        self.sample_bytes = sample_bytes
        self.mode = mode
        self.interval = interval
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.done = 0
        self.bytes_done = 0
        self._lock = threading.Lock()
        self._started = clock()
        self._last = self._started
        self._bar = None
        self._task = None

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
        }

    def _emit(self, event: str) -> None:
        self.stream.write(json.dumps(self.snapshot(event)) + "\n")
        self.stream.flush()

    # -- lifecycle -----------------------------------------------------------
    def __enter__(self) -> ProgressReporter:
        self._started = self._last = self.clock()
        if self.mode == "json":
            self._emit("start")
        elif self.mode == "bar" and self.stream.isatty():
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("samples"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("compute", total=self.total_samples, rate="")
        return self

    def update(self, index: int) -> None:
        """Sample ``index`` is finished (thread-safe)."""
        with self._lock:
            self.done += 1
            self.bytes_done += self.sample_bytes(index)
            now = self.clock()
            if self.mode == "json" and now - self._last >= self.interval:
                self._last = now
                self._emit("progress")
            elif self._bar is not None:
                rate = self.bytes_done / max(now - self._started, 1e-9) / 1e9
                self._bar.update(self._task, completed=self.done, rate=f"{rate:.2f} GB/s")

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._bar is not None:
            self._bar.stop()
        if self.mode == "json":
            self._emit("done" if exc_type is None else "failed")
