"""Nothing fails after the computation for a reason that could be known before:
every output is prepared (its temporary file written from a template of the
statistics) before any data is read, a full disk is named as such, a failed
run leaves no folder it made, and a run whose outputs are in place says so
whatever signal arrives after (issue 22)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from gridded_data import gridded, write_zarr

import wxstats.runtime.run as run
from wxstats.cli import main

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """Each time the run starts reading data (the statistics pass), its dataset."""
    calls: list[str] = []
    original = run.compute_source

    def counting(source, **kwargs):
        calls.append(str(source.path))
        return original(source, **kwargs)

    monkeypatch.setattr(run, "compute_source", counting)
    return calls


def _one_error_line(capsys, *words: str) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    lines = [e for e in err if not e.startswith("wxstats: warning:")]
    assert len(lines) == 1 and lines[0].startswith("wxstats: error: "), err
    assert "Traceback" not in "".join(err)
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def _float_levels(path: Path, n_time: int = 8) -> xr.Dataset:
    """A netCDF file as xarray writes it: the float ``level`` gets ``_FillValue = NaN``."""
    rng = np.random.default_rng(3)
    ds = xr.Dataset(
        {"z": (("time", "level", "lat", "lon"), rng.normal(5e4, 300, (n_time, 3, 4, 5)))},
        coords={
            "time": pd.date_range("2021-01-01", periods=n_time, freq="6h"),
            "level": ("level", np.array([500.0, 850.0, 1000.0]), {"units": "hPa"}),
            "lat": np.linspace(-60, 60, 4),
            "lon": np.arange(5.0),
        },
    )
    ds.to_netcdf(path)
    return ds


@pytest.mark.parametrize(
    "args, written",
    [
        (["--output", "{out}/o.nc"], "o.nc"),
        (["--format", "graphcast", "--output-dir", "{out}"], "mean_by_level.nc"),
        (["--state", "{out}/s.wxstate"], "s.stats.nc"),
    ],
)
def test_a_float_level_written_by_xarray_is_written_back_right(tmp_path, args, written):
    """Case 5: the netCDF writer set ``_FillValue`` after creating the variable,
    which netCDF4 refuses: every such run failed after the whole computation."""
    ds = _float_levels(tmp_path / "d.nc")
    out = tmp_path / "out"
    assert main(["compute", str(tmp_path / "d.nc"), *[a.format(out=out) for a in args]]) == 0
    with xr.open_dataset(out / written) as out:
        np.testing.assert_array_equal(out["level"].values, ds["level"].values)
        assert out["level"].attrs["units"] == "hPa"
        if "z__train__mean" in out:
            expected = ds["z"].values.mean(axis=(0, 2, 3))  # float64 two-pass reference
            np.testing.assert_allclose(out["z__train__mean"].values, expected, rtol=1e-13)
        else:
            np.testing.assert_allclose(
                out["z"].values, ds["z"].values.mean(axis=(0, 2, 3)), rtol=1e-13
            )


@pytest.mark.parametrize(
    "args, n_time, words",
    [
        (["--format", "makani", "--diff-steps", "20"], 10, ["10 time steps", "over 20 steps"]),
        (["--format", "graphcast"], 1, ["1 time step,", "over 1 step;"]),
    ],
)
def test_a_set_without_its_difference_files_is_refused_before_reading(
    tmp_path, capsys, reads, args, n_time, words
):
    """Case 6: makani failed with a KeyError after the run (an empty folder left),
    GraphCast wrote a differences file without variables."""
    _float_levels(tmp_path / "d.nc", n_time)
    capsys.readouterr()
    out = tmp_path / "out"
    assert main(["compute", str(tmp_path / "d.nc"), *args, "--output-dir", str(out)]) == 2
    _one_error_line(capsys, "split train", *words, "--diff-steps")
    assert reads == [] and not out.exists()


# -- the class: every format's preparation fails before any data is read ----------------
def _refused_attribute_store(path: Path) -> Path:
    """A zarr store whose ``level`` carries an attribute netCDF reserves for itself."""
    ds, _ = gridded(n_time=8)
    ds["level"].attrs["_NCProperties"] = "version=2"
    return write_zarr(ds, path, time_chunk=4)


@pytest.mark.parametrize(
    "args, named",
    [
        (["--output", "{out}/o.nc"], "o.nc"),
        (["--format", "graphcast", "--output-dir", "{out}"], "mean_by_level.nc"),
        (["--state", "{out}/s.wxstate"], "s.stats.nc"),
    ],
)
def test_an_attribute_netcdf_refuses_ends_the_run_before_reading(
    tmp_path, capsys, reads, args, named
):
    store = _refused_attribute_store(tmp_path / "g.zarr")
    out = tmp_path / "new" / "folder"
    argv = ["compute", str(store), "--split", "train=2021-01-01T00/2021-01-01T07"]
    assert main([*argv, *[a.format(out=out) for a in args]]) == 2
    _one_error_line(capsys, named, "cannot be written", "_NCProperties")
    assert reads == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.zarr"]  # no folder left


@pytest.fixture
def full_disk(tmp_path):
    """A 64 KiB tmpfs filled to the last page (tests run as root; skipped where
    mounting is not permitted)."""
    mount = tmp_path / "full"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    try:
        with open(mount / "filler", "wb", buffering=0) as f:
            for size in (4096, 1):
                try:
                    while True:
                        f.write(b"\0" * size)
                except OSError:
                    pass
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


@pytest.mark.parametrize(
    "args",
    [
        ["--output", "{out}/o.nc"],
        ["--summary", "{out}/s.json"],
        ["--format", "graphcast", "--output-dir", "{out}"],
        ["--format", "makani", "--weights", "none", "--output-dir", "{out}"],
        ["--state", "{out}/s.wxstate"],
        "meps",
    ],
)
def test_a_full_disk_ends_the_run_before_reading_naming_it(
    tmp_path, capsys, reads, full_disk, meps_small, args
):
    """Case 9: a full disk was an unexpected RuntimeError from netCDF4 after the
    run (``Permission denied`` with no room at all), and left empty folders."""
    out = full_disk / "new" / "folder"
    if args == "meps":
        argv = ["compute", str(meps_small), "--output-dir", str(out)]
    else:
        ds, _ = gridded(n_time=8)
        store = write_zarr(ds, tmp_path / "g.zarr", time_chunk=4)
        argv = ["compute", str(store), "--split", "train=2021-01-01T00/2021-01-01T07"]
        argv += [a.format(out=out) for a in args]
    assert main(argv) == 2
    _one_error_line(capsys, "no space left on tmpfs", f"mounted at {full_disk}")
    assert reads == []
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]


# -- a signal after the outputs are in place -------------------------------------------
def test_a_signal_right_after_the_commit_does_not_undo_the_run(tmp_path, capsys, monkeypatch):
    """Case 16: SIGINT delivered the moment the output is renamed into place
    (synchronously, from the rename itself) undid the run and said "no output
    was written"; from the first rename on the run ends as the success it is."""
    ds, _ = gridded(n_time=8)
    store = write_zarr(ds, tmp_path / "g.zarr", time_chunk=4)
    out = tmp_path / "o.nc"
    rename = os.replace

    def rename_then_signal(src, dst, *args, **kwargs) -> None:
        rename(src, dst, *args, **kwargs)
        if Path(dst) == out:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(os, "replace", rename_then_signal)
    handler = signal.getsignal(signal.SIGINT)
    assert main(["compute", str(store), "--output", str(out)]) == 0
    captured = capsys.readouterr()
    assert "no output was written" not in captured.err and "interrupted" not in captured.err
    assert f"wrote 1 file: {out}" in captured.out
    with xr.open_dataset(out) as got:
        np.testing.assert_allclose(
            got["t2m__train__mean"].values, ds["t2m"].values.astype(np.float64).mean(), rtol=1e-12
        )
    assert signal.getsignal(signal.SIGINT) is handler  # given back to the caller


SIGNAL_PARENT = """
import os, signal, sys
import wxstats.runtime.run as run
original = run.write_outputs
def write_then_signal(*args, **kwargs):
    written = original(*args, **kwargs)
    if os.environ.get("RANK", "0") == "0":
        os.kill(int(os.environ["SIGNAL_PID"]), signal.SIGTERM)
    return written
run.write_outputs = write_then_signal
"""


def test_sigterm_to_the_launcher_after_the_outputs_are_written_tells_the_truth(
    tmp_path, meps_small
):
    """Case 16 with ``--nproc``: SIGTERM reaching the launcher once rank 0 has
    written all 7 outputs printed "no output was written" and exit 143. Rank 0
    sends it itself, right after its commit (a ``sitecustomize`` in the ranks)."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SIGNAL_PARENT)
    out = tmp_path / "static"
    code = (
        "import os, sys; os.environ['SIGNAL_PID'] = str(os.getpid()); "
        "from wxstats.cli import console; sys.exit(console())"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hook), SRC])}
    argv = [sys.executable, "-c", code, "compute", str(meps_small), "--nproc", "2"]
    done = subprocess.run(
        [*argv, "--output-dir", str(out), "--quiet"], env=env, capture_output=True, text=True
    )
    assert "no output was written" not in done.stderr, done.stderr
    assert "SIGTERM came after the outputs were written" in done.stdout, done.stdout
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in out.iterdir())
    assert len(written) == 7 and not [n for n in written if n.startswith(".")]
    with xr.open_dataset(out / "wxstats_stats.nc") as got:
        assert got["state__train__mean"].size == 17
