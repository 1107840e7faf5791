"""One progress display for a whole job (shown by rank 0, fed by every rank).

On a terminal: a live bar with samples done of total, samples/s, GB/s and
ETA. Elsewhere (Slurm output files, CI logs): a plain line every
``LOG_EVERY_S`` seconds, so logs stay short. Always a closing line with the
totals.
"""

from __future__ import annotations

import sys
import threading
import time

LOG_EVERY_S = 30.0


def _eta(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"


class JobProgress:
    """Progress of ``total`` samples (``nbytes`` bytes) over ``world`` ranks."""

    def __init__(self, total: int, nbytes: int, world: int, stream=None) -> None:
        self.total, self.nbytes, self.world = total, nbytes, world
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.done = self.bytes_done = 0
        self._lock = threading.Lock()
        self._last_log = self.started
        self._live = None
        if self.stream.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self._live = Progress(
                TextColumn("[bold]wxstats[/] {task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("samples · {task.fields[rate]}"),
                TextColumn("· ETA {task.fields[eta]}"),
                console=Console(file=self.stream),
                transient=True,
            )
            self._task = self._live.add_task(
                f"{world} ranks", total=max(total, 1), rate="", eta="?"
            )
            self._live.start()

    def _rates(self) -> tuple[float, float, float]:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        per_s = self.done / elapsed
        eta = (self.total - self.done) / per_s if per_s > 0 else float("nan")
        return per_s, self.bytes_done / elapsed / 1e9, eta

    def _line(self) -> str:
        per_s, gbps, eta = self._rates()
        eta_text = _eta(eta) if eta == eta else "?"
        return (
            f"{self.done}/{self.total} samples, {per_s:.2f} samples/s, {gbps:.3f} GB/s, "
            f"ETA {eta_text}"
        )

    def update(self, done: int, bytes_done: int) -> None:
        with self._lock:
            self.done, self.bytes_done = min(done, self.total), bytes_done
            per_s, gbps, eta = self._rates()
            if self._live is not None:
                self._live.update(
                    self._task,
                    completed=self.done,
                    rate=f"{per_s:.2f}/s · {gbps:.3f} GB/s",
                    eta=_eta(eta) if eta == eta else "?",
                )
            elif time.monotonic() - self._last_log >= LOG_EVERY_S:
                self._last_log = time.monotonic()
                print(f"wxstats: progress: {self._line()}", file=self.stream, flush=True)

    def close(self, success: bool) -> None:
        with self._lock:
            if self._live is not None:
                self._live.stop()
                self._live = None
            if success:
                elapsed = time.monotonic() - self.started
                per_s, gbps, _ = self._rates()
                print(
                    f"wxstats: {self.done} samples ({self.bytes_done / 1e9:.3f} GB) in "
                    f"{elapsed:.1f} s on {self.world} ranks: {per_s:.2f} samples/s, "
                    f"{gbps:.3f} GB/s",
                    file=self.stream,
                    flush=True,
                )
