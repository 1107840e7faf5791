"""Progress reporting: JSON lines at intervals for batch jobs, a closing line on a pipe."""

from __future__ import annotations

import io
import json

import pytest

from wxstats.cli import main
from wxstats.parallel.progress import ProgressReporter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_json_lines_at_intervals():
    clock, out = Clock(), io.StringIO()
    with ProgressReporter(10, 55_000, "json", interval=5.0, stream=out, clock=clock) as progress:
        for i in range(10):
            clock.now += 1.0  # one sample per second
            progress.advance(1000 * (i + 1))
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [e["event"] for e in lines] == ["start", "progress", "progress", "done"]
    first = lines[1]
    assert first["samples_done"] == 5 and first["bytes_done"] == 15_000
    assert first["elapsed_s"] == 5.0 and first["gb_per_s"] == round(3_000 / 1e9, 4)
    assert first["eta_s"] == round(40_000 / 3_000, 1)
    done = lines[-1]
    assert done["samples_done"] == done["samples_total"] == 10 and done["percent"] == 100.0
    assert done["bytes_done"] == 55_000 and done["eta_s"] == 0.0


def test_failure_is_logged_and_bar_mode_is_silent_on_a_pipe():
    out = io.StringIO()
    with pytest.raises(RuntimeError), ProgressReporter(3, 3, "json", stream=out):
        raise RuntimeError
    assert json.loads(out.getvalue().splitlines()[-1])["event"] == "failed"
    piped = io.StringIO()
    with ProgressReporter(3, 3, "bar", stream=piped) as progress:
        for _ in range(3):
            progress.advance(1)
    # no bar on a pipe and no line before the interval: only the closing totals
    assert piped.getvalue().splitlines() == [piped.getvalue().strip()]
    assert piped.getvalue().startswith("wxstats: 3 samples") and "GB/s" in piped.getvalue()
    silent = io.StringIO()
    with ProgressReporter(3, 3, "none", stream=silent) as progress:
        progress.advance(1)
    assert silent.getvalue() == ""
    with pytest.raises(ValueError):
        ProgressReporter(1, 1, "xml")


def test_compute_log_format_json(meps_small, tmp_path, capsys):
    args = ["compute", str(meps_small), "--output-dir", str(tmp_path), "--quiet"]
    assert main(args + ["--log-format", "json", "--log-interval", "0"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert lines[0]["event"] == "start" and lines[-1]["event"] == "done"
    assert [e["samples_done"] for e in lines if e["event"] == "progress"] == list(range(1, 11))
    assert lines[-1]["bytes_total"] == lines[-1]["bytes_done"] > 0


def test_a_zarr_run_counts_time_blocks_in_words_with_singulars(tmp_path, capsys):
    """The closing line names the source's unit of work ("1 samples" read oddly, and
    a zarr store has no samples), and the summary of what was written too."""
    import numpy as np
    import xarray as xr
    from gridded_data import hourly

    from wxstats.cli import main

    store = tmp_path / "one.zarr"
    xr.Dataset({"t": (("time", "y"), np.arange(12.0).reshape(6, 2))},
               coords={"time": hourly(6)}).to_zarr(store)  # fmt: skip
    assert main(["compute", str(store), "--output", str(tmp_path / "o.nc")]) == 0
    captured = capsys.readouterr()
    assert "wxstats: 1 time block (" in captured.err and "time blocks/s" in captured.err
    assert "wrote 1 file: " in captured.out
    with ProgressReporter(3, 3, "bar", stream=io.StringIO(), unit="sample") as progress:
        progress.advance(1)
    assert progress._line().startswith("1/3 samples, ")
