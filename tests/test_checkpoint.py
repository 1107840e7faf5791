"""Checkpoints: resumed runs give the same bytes; stale checkpoints are refused."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import time

import netCDF4
import numpy as np
import pytest
from distributed_helpers import assert_identical_outputs

from wxstats.cli import main
from wxstats.core.errors import InputError, Interrupted, WxstatsError
from wxstats.core.kernel import step_bytes
from wxstats.core.partial import Coverage
from wxstats.io import locks
from wxstats.runtime.checkpoint import FORMAT_VERSION, LOCK, Checkpoint
from wxstats.runtime.engine import accumulate, empty_accumulator
from wxstats.runtime.identity import run_identity
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.outputs import open_source
from wxstats.runtime.resumable import Resumable, resume_work
from wxstats.runtime.run import compute_source, partition
from wxstats.sources.meps import MepsSource


def _payload(variable) -> bytes | list:
    """A netCDF variable's values to compare: the bytes of numbers, the strings of a
    string variable (an object array's bytes are its pointers)."""
    values = np.asarray(variable[:])
    return values.tolist() if values.dtype == object else values.tobytes()


def _fingerprint(source, skipna=False):
    return run_identity(source, skipna)


def _steps_of(source, indices):
    """The time steps samples ``indices`` of ``source`` count, as a part records them."""
    spans = {(s.unit, s.start, s.stop) for i in indices for s in source.covers(i).values()}
    return Coverage.of(spans)  # a set: another stream's span is the same


def _stats_bytes(stats):
    s = stats.state
    parts = [s.mean, s.std, s.minimum, s.maximum, s.diff[3].mean, s.diff[3].std]
    flux = stats.streams["toa_downwelling_shortwave_flux"]
    return b"".join(np.asarray(p).tobytes() for p in parts + [flux.mean, flux.std])


@pytest.mark.parametrize("first_world,second_world", [(2, 1), (2, 3), (3, 2)])
def test_resume_with_another_world_size_is_byte_identical(
    meps_small, tmp_path, first_world, second_world
):
    source = open_source(ComputeOptions(dataset=meps_small))
    clean = compute_source(source)
    # first run: each rank finished part of its range, then was killed
    for rank in range(first_world):
        mine = list(partition(len(source), rank, first_world))[:2]
        ck = Checkpoint(tmp_path / "ck", _fingerprint(source))
        ck.prepare(resume=rank > 0)
        ck.save(_steps_of(source, mine), accumulate(source, mine))
    # second run: load, share out the rest, merge
    ck = Checkpoint(tmp_path / "ck", _fingerprint(source))
    ck.prepare(resume=True)
    loaded = ck.load(empty_accumulator(source))
    done, carried = loaded.coverage, loaded.sums
    assert len(done.ranges) == 2 * first_world  # a MEPS part records sample files
    work = resume_work(source, done)
    assert work.skipped == 2 * first_world and not work.partial
    remaining = work.todo
    total = carried
    for rank in range(second_world):
        total.merge(
            accumulate(
                source, [remaining[i] for i in partition(len(remaining), rank, second_world)]
            )
        )
    resumed = total.extract(source.streams, source.kind, source.capabilities.time_splits)
    assert _stats_bytes(resumed) == _stats_bytes(clean)


def test_part_files_are_replaced_atomically(meps_small, tmp_path):
    source = open_source(ComputeOptions(dataset=meps_small))
    ck = Checkpoint(tmp_path / "ck", _fingerprint(source))
    ck.prepare(resume=False)
    ck.save(_steps_of(source, [0]), accumulate(source, [0]))
    ck.save(_steps_of(source, [0, 1]), accumulate(source, [0, 1]))
    # a write killed half-way leaves only a hidden temporary file, which is ignored
    (tmp_path / "ck" / f".{ck.part.name}.xyz.tmp").write_bytes(b"half a file")
    assert len(list((tmp_path / "ck").glob("part-*.wxstate"))) == 1
    done = (
        Checkpoint(tmp_path / "ck", _fingerprint(source)).load(empty_accumulator(source)).coverage
    )
    assert done.ranges == _steps_of(source, [0, 1]).ranges


def test_existing_checkpoint_needs_resume(meps_small, tmp_path):
    source = open_source(ComputeOptions(dataset=meps_small))
    Checkpoint(tmp_path / "ck", _fingerprint(source)).prepare(resume=False)
    with pytest.raises(WxstatsError, match="--resume"):
        Checkpoint(tmp_path / "ck", _fingerprint(source)).prepare(resume=False)


def test_changed_options_or_data_are_refused(meps_copy, tmp_path):
    source = open_source(ComputeOptions(dataset=meps_copy))
    Checkpoint(tmp_path / "ck", _fingerprint(source, skipna=False)).prepare(resume=False)
    with pytest.raises(WxstatsError, match="--skipna: False in the checkpoint, True in this run"):
        Checkpoint(tmp_path / "ck", _fingerprint(source, skipna=True)).prepare(resume=True)
    victim = sorted((meps_copy.parent / "samples" / "train").glob("nwp_*_mbr*.npy"))[2]
    x = np.load(victim)
    np.save(victim, x + 1)
    changed = open_source(ComputeOptions(dataset=meps_copy))
    with pytest.raises(WxstatsError, match=f"files modified: {victim.name}"):
        Checkpoint(tmp_path / "ck", _fingerprint(changed, skipna=False)).prepare(resume=True)


def test_overlapping_parts_are_refused(meps_small, tmp_path):
    source = open_source(ComputeOptions(dataset=meps_small))
    for resume in (False, True):
        ck = Checkpoint(tmp_path / "ck", _fingerprint(source))
        ck.prepare(resume=resume)
        ck.save(_steps_of(source, [3]), accumulate(source, [3]))
    with pytest.raises(WxstatsError, match="two part files"):
        Checkpoint(tmp_path / "ck", _fingerprint(source)).load(empty_accumulator(source))


def test_resume_without_a_checkpoint_is_refused(meps_small, tmp_path):
    source = open_source(ComputeOptions(dataset=meps_small))
    missing = tmp_path / "typo"
    with pytest.raises(WxstatsError, match=f"{missing}: checkpoint folder does not exist"):
        Checkpoint(missing, _fingerprint(source)).prepare(resume=True)
    assert not missing.exists()  # not created as a side effect
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(WxstatsError, match=f"{empty}: checkpoint folder is empty"):
        Checkpoint(empty, _fingerprint(source)).prepare(resume=True)
    assert list(empty.iterdir()) == []
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(WxstatsError, match="has no manifest.json"):
        Checkpoint(other, _fingerprint(source)).prepare(resume=True)


def test_a_new_checkpoint_goes_only_into_a_new_or_empty_folder(meps_small, tmp_path):
    source = open_source(ComputeOptions(dataset=meps_small))
    other = tmp_path / "results"
    other.mkdir()
    (other / "era5_stats.nc").write_text("someone's file")
    with pytest.raises(WxstatsError, match=f"{other}: not empty \\(era5_stats.nc\\)"):
        Checkpoint(other, _fingerprint(source)).prepare(resume=False)
    assert sorted(p.name for p in other.iterdir()) == ["era5_stats.nc"]
    # an empty folder, or one holding only what a killed manifest write left, is fine
    for name, leftovers in (("empty", []), ("killed", [".manifest.json.abc123.tmp"])):
        folder = tmp_path / name
        folder.mkdir()
        for leftover in leftovers:
            (folder / leftover).write_text("half")
        Checkpoint(folder, _fingerprint(source)).prepare(resume=False)
        assert (folder / "manifest.json").exists()


# -- one run at a time ---------------------------------------------------------------


IN_USE = "checkpoint folder in use by another run"


def test_a_checkpoint_in_use_is_refused_to_a_second_run(meps_small, tmp_path):
    """Issue 33: two runs on one checkpoint folder at once (both resuming it, or a
    fresh run into it) would each write parts of the same steps; the second is
    refused in one line naming the folder, whatever it asked, until the first ends."""
    source = open_source(ComputeOptions(dataset=meps_small))
    ck = tmp_path / "ck"
    first = Checkpoint(ck, _fingerprint(source))
    first.prepare(resume=False)
    for resume in (True, False):
        with pytest.raises(WxstatsError) as refused:
            Checkpoint(ck, _fingerprint(source)).prepare(resume=resume)
        line = str(refused.value)
        assert line.startswith(f"{ck}: {IN_USE} (its lock file says: pid {os.getpid()} on ")
        assert "\n" not in line
    first.release()  # the first run ended
    refused = Checkpoint(ck, _fingerprint(source))  # kept: a refusal alone frees the folder
    with pytest.raises(WxstatsError, match="holds a checkpoint already"):
        refused.prepare(resume=False)
    resumed = Checkpoint(ck, _fingerprint(source))
    resumed.prepare(resume=True)
    assert sorted(p.name for p in ck.iterdir()) == [LOCK, "manifest.json"]
    resumed.release()  # the last holder removes the lock file
    assert sorted(p.name for p in ck.iterdir()) == ["manifest.json"]


def test_the_lock_file_is_never_followed_nor_trusted(meps_small, tmp_path):
    """The lock file may be anyone's: a symbolic link or a FIFO planted under its
    name is refused in one line (nothing written through it, no open that blocks),
    a hard link's other name is never written, and what a held lock file says is
    shown only as a short printable hint."""
    source = open_source(ComputeOptions(dataset=meps_small))
    victim = tmp_path / "bashrc"
    victim.write_text("mine\n")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / LOCK).symlink_to(victim)
    with pytest.raises(WxstatsError, match=f"{linked / LOCK}: a symbolic link, not a lock file"):
        Checkpoint(linked, _fingerprint(source)).prepare(resume=False)
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / LOCK)
    with pytest.raises(WxstatsError, match=f"{fifo / LOCK}: not a regular file"):
        Checkpoint(fifo, _fingerprint(source)).prepare(resume=False)
    hard = tmp_path / "hard"
    hard.mkdir()
    os.link(victim, hard / LOCK)
    held = Checkpoint(hard, _fingerprint(source))
    held.prepare(resume=False)  # locks, and writes no hint into a file with two names
    assert victim.read_text() == "mine\n"
    held.release()
    # a lock file held by someone else, saying anything
    other = tmp_path / "other"
    Checkpoint(other, _fingerprint(source)).prepare(resume=False)
    (other / LOCK).write_bytes(b"\x1b[2J\x1b]0;owned\x07 pid 1\n" + b"A" * 10_000)
    with open(other / LOCK, "rb") as theirs:
        fcntl.flock(theirs, fcntl.LOCK_EX)
        with pytest.raises(WxstatsError) as refused:
            Checkpoint(other, _fingerprint(source)).prepare(resume=True)
    line = str(refused.value)
    assert "\x1b" not in line and "\x07" not in line and "\n" not in line
    assert f"(its lock file says: [2J ]0;owned pid 1 {'A' * 60}" in line, line
    assert len(line) < 400, line
    assert victim.read_text() == "mine\n"


def test_a_file_system_without_locks_warns_and_goes_on(meps_small, tmp_path, monkeypatch):
    """Some network file systems cannot lock (ENOLCK): the run goes on after one
    warning saying that a second run there would not be refused."""

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(locks.fcntl, "flock", no_locks)
    source = open_source(ComputeOptions(dataset=meps_small))
    ck = tmp_path / "ck"
    with pytest.warns(UserWarning, match="cannot lock files .* would not be refused") as said:
        Checkpoint(ck, _fingerprint(source)).prepare(resume=False)
    assert len(said) == 1 and str(ck) in str(said[0].message)
    assert (ck / "manifest.json").exists()


@pytest.mark.slow
def test_two_runs_on_one_checkpoint_at_once(meps_small, tmp_path):
    """The first run is held (by the test's fault hooks) at the open of a sample it
    reads only while summing, so it holds the folder; a second run resuming it and
    a fresh run into it are refused in one line each; once the first ends, the
    resume goes on."""
    from cluster import fault_hooks, fault_log, with_fault_hooks
    from distributed_helpers import compute_args, env, wxstats_cmd

    ck, log, gate = tmp_path / "ck", tmp_path / "opens.log", tmp_path / "gate"
    later = MepsSource(meps_small).samples[5].path  # read only in the sums
    hooked = with_fault_hooks(env(), fault_hooks(tmp_path), match=str(later), gate=gate, log=log)

    def args(out, *extra):
        return wxstats_cmd(*compute_args(meps_small, out, "--threads", "1", "--checkpoint",
                                         str(ck), *extra))  # fmt: skip

    first = subprocess.Popen(args(tmp_path / "a"), env=hooked, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not fault_log(log):  # the first run sums: it holds the folder
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        second = [
            subprocess.run(
                args(tmp_path / name, *extra),
                env=env(),
                capture_output=True,
                text=True,
                timeout=120,
            )  # fmt: skip
            for name, extra in (("b", ["--resume"]), ("c", []))
        ]
        gate.touch()
        _, first_err = first.communicate(timeout=240)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, first_err
    for name, result in zip("bc", second, strict=True):
        assert result.returncode == 2, result.stderr
        lines = result.stderr.splitlines()
        assert lines == [f"wxstats: error: {ck}: {IN_USE}" + lines[0].split(IN_USE, 1)[1]]
        assert not (tmp_path / name).exists() or not any((tmp_path / name).iterdir())
    again = subprocess.run(args(tmp_path / "b", "--resume"), env=env(), capture_output=True,
                           text=True, timeout=240)  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert_identical_outputs(tmp_path / "a", tmp_path / "b", same_path=False)


def test_manifest_records_identity(meps_small, tmp_path):
    source = open_source(ComputeOptions(dataset=meps_small))
    Checkpoint(tmp_path / "ck", _fingerprint(source)).prepare(resume=False)
    manifest = json.loads((tmp_path / "ck" / "manifest.json").read_text())
    assert len(manifest["files"]["files"]) == 20 and manifest["data"]["split"] == "train"


# -- wxstats compute --checkpoint / --resume, in this process ---------------------------


def _compute(config, out, *extra):
    return main(
        [
            "compute",
            str(config),
            "--quiet",
            "--threads",
            "1",
            "--output-dir",
            str(out),
            "--summary",
            str(out / "summary.json"),
            *extra,
        ]
    )


def _parts_in(folder):
    """The time steps the parts in ``folder`` hold, read independently of
    wxstats' reader (netCDF, each part's ``meta``: JSON with ``done``, ranges by unit)."""
    done = {}
    for path in folder.glob("part-*"):
        with netCDF4.Dataset(path) as nc:
            assert nc.getncattr("wxstats_state_format") == "wxstats-state"
            meta = json.loads(nc.getncattr("meta"))
        assert meta["checkpoint_part"] == FORMAT_VERSION
        for unit, ranges in meta["done"].items():
            done.setdefault(unit, []).extend(tuple(r) for r in ranges)
    return {unit: sorted(ranges) for unit, ranges in done.items()}


def _done_in(folder, config):
    """The samples of the MEPS datastore ``config`` that the parts hold: its
    parts record each sample's file, all of its steps."""
    parts = _parts_in(folder)
    samples = MepsSource(config).samples
    steps = MepsSource(config).num_timesteps
    assert all(parts[s.path.name] == [(0, steps)] for s in samples if s.path.name in parts)
    return {i for i, s in enumerate(samples) if s.path.name in parts}


def _signal_at(monkeypatch, cls, index, signum):
    """Make reading sample ``index`` deliver a real ``signum`` to this process."""
    read = cls.read

    def reading(self, i):
        if i == index:
            os.kill(os.getpid(), signum)
        return read(self, i)

    monkeypatch.setattr(cls, "read", reading)


@pytest.mark.parametrize("signum,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_saves_then_stops_and_the_resumed_run_is_identical(
    meps_copy, tmp_path, monkeypatch, capsys, signum, code
):
    clean, out, ck = tmp_path / "clean", tmp_path / "out", tmp_path / "ck"
    assert _compute(meps_copy, clean) == 0
    _signal_at(monkeypatch, MepsSource, 4, signum)
    # an hour between saves: what is saved here is saved because of the signal
    assert (
        _compute(meps_copy, out, "--checkpoint", str(ck), "--checkpoint-interval", "3600") == code
    )
    err = capsys.readouterr().err
    assert f"interrupted by {signal.Signals(signum).name}" in err and "--resume" in err
    # the sample being read when it came, then stopped
    assert _done_in(ck, meps_copy) == {0, 1, 2, 3, 4}
    assert not out.exists() or not any(out.iterdir())
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers given back
    monkeypatch.undo()
    assert _compute(meps_copy, out, "--checkpoint", str(ck), "--resume") == 0
    assert_identical_outputs(clean, out)
    assert json.loads((out / "summary.json").read_text())["run"]["resumed_samples"] == 5


@pytest.mark.parametrize("threads", ["1", "3"])
def test_a_failed_run_saves_its_progress_and_resumes(
    meps_copy, tmp_path, monkeypatch, capsys, threads
):
    clean, out, ck = tmp_path / "clean", tmp_path / "out", tmp_path / "ck"
    assert _compute(meps_copy, clean) == 0
    read = MepsSource.read

    def flaky(self, i):  # a transient read error (a network filesystem's hiccup)
        if i == 6:
            raise InputError(f"{self.samples[i].path}: cannot read: Input/output error")
        return read(self, i)

    monkeypatch.setattr(MepsSource, "read", flaky)
    args = ["--checkpoint", str(ck), "--checkpoint-interval", "3600", "--threads", threads]
    assert _compute(meps_copy, out, *args) == 2
    err = capsys.readouterr().err
    assert "Input/output error" in err and "rerun the same command with --resume" in err
    assert _done_in(ck, meps_copy) == set(range(6))
    monkeypatch.undo()
    assert _compute(meps_copy, out, "--checkpoint", str(ck), "--resume") == 0
    assert_identical_outputs(clean, out)


def test_the_cli_refuses_what_would_mix_two_runs(meps_copy, tmp_path, capsys):
    out, ck = tmp_path / "out", tmp_path / "ck"
    assert _compute(meps_copy, out, "--checkpoint", str(ck)) == 0
    assert (ck / "manifest.json").exists()  # kept after success
    capsys.readouterr()

    def refused(*extra):
        assert _compute(meps_copy, tmp_path / "other", *extra) == 2
        return capsys.readouterr().err

    assert "holds a checkpoint already; pass --resume" in refused("--checkpoint", str(ck))
    assert "--resume needs --checkpoint" in refused("--resume")
    typo = tmp_path / "ck2"
    assert f"{typo}: checkpoint folder does not exist" in refused(
        "--checkpoint", str(typo), "--resume"
    )
    assert f"{meps_copy.parent}: not empty" in refused("--checkpoint", str(meps_copy.parent))
    err = refused("--checkpoint", str(ck), "--resume", "--skipna")
    assert (
        "checkpoint is of another run (--skipna: False in the checkpoint, True in this run)" in err
    )
    err = refused("--checkpoint", str(ck), "--resume", "--step-length", "1")
    assert "difference steps: 3 in the checkpoint, 1 in this run" in err
    victim = MepsSource(meps_copy).samples[3].flux_path
    np.save(victim, np.load(victim) * 2)
    assert f"files modified: {victim.name}" in refused("--checkpoint", str(ck), "--resume")
    assert not (tmp_path / "other").exists() or not any((tmp_path / "other").iterdir())


def _corrupt(path, how):
    data = path.read_bytes()
    path.write_bytes(
        {
            "garbage": b"\x80\x04 not a netCDF file at all" * 4,
            "empty": b"",
            "truncated": data[: len(data) // 2],
            "flipped": data[:-9] + bytes([data[-9] ^ 0xFF]) + data[-8:],  # in the sums
        }[how]
    )


@pytest.mark.parametrize("how", ["garbage", "empty", "truncated", "flipped"])
def test_a_damaged_part_is_one_line_saying_what_to_do(
    meps_copy, tmp_path, monkeypatch, capsys, how
):
    clean, out, ck = tmp_path / "clean", tmp_path / "out", tmp_path / "ck"
    assert _compute(meps_copy, clean) == 0
    _signal_at(monkeypatch, MepsSource, 4, signal.SIGTERM)
    assert _compute(meps_copy, out, "--checkpoint", str(ck)) == 143
    monkeypatch.undo()
    (part,) = ck.glob("part-*")
    _corrupt(part, how)
    capsys.readouterr()
    assert _compute(meps_copy, out, "--checkpoint", str(ck), "--resume") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "pickle" not in err, err
    assert err.startswith(f"wxstats: error: {part}: the checkpoint is damaged"), err
    assert f"remove the folder {ck} and rerun without --resume" in err
    # the advice works: without the damaged part its samples are done again
    assert "remove this file to redo only its samples" in err
    part.unlink()
    assert _compute(meps_copy, out, "--checkpoint", str(ck), "--resume") == 0
    assert_identical_outputs(clean, out)


def test_a_damaged_manifest_is_one_line_saying_what_to_do(meps_copy, tmp_path, capsys):
    ck = tmp_path / "ck"
    assert _compute(meps_copy, tmp_path / "out", "--checkpoint", str(ck)) == 0
    (ck / "manifest.json").write_text('{"format": 1, "ident')
    capsys.readouterr()
    assert _compute(meps_copy, tmp_path / "again", "--checkpoint", str(ck), "--resume") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checkpoint is damaged" in err, err
    assert f"{ck / 'manifest.json'}:" in err and "rerun without --resume" in err


def test_resuming_a_finished_checkpoint_writes_the_same_result(meps_copy, tmp_path):
    first, again, ck = tmp_path / "first", tmp_path / "again", tmp_path / "ck"
    assert _compute(meps_copy, first, "--checkpoint", str(ck), "--checkpoint-interval", "0") == 0
    assert _done_in(ck, meps_copy) == set(range(10))
    assert _compute(meps_copy, again, "--checkpoint", str(ck), "--resume") == 0
    assert_identical_outputs(first, again)


def test_zarr_run_resumes_identically(tmp_path, monkeypatch, capsys):
    from gridded_data import gridded, write_zarr

    from wxstats.sources.xarray import XarraySource

    ds, _ = gridded(n_time=16)
    store = write_zarr(ds, tmp_path / "era.zarr", time_chunk=4)
    args = ["compute", str(store), "--diff-steps", "1,3", "--quiet", "--threads", "1"]
    args += ["--block-mb", "1e-6", "--split", "train=2021-01-01T00/2021-01-01T13"]
    assert main([*args, "--output", str(tmp_path / "clean.nc")]) == 0
    resumed = [
        *args,
        "--output",
        str(tmp_path / "resumed.nc"),
        "--checkpoint",
        str(tmp_path / "ck"),
    ]
    _signal_at(monkeypatch, XarraySource, 2, signal.SIGTERM)
    assert main(resumed) == 143
    assert _parts_in(tmp_path / "ck") == {"train": [(0, 12)]}
    monkeypatch.undo()
    assert main([*resumed, "--resume"]) == 0
    assert "interrupted by SIGTERM" in capsys.readouterr().err
    with netCDF4.Dataset(tmp_path / "clean.nc") as a, netCDF4.Dataset(tmp_path / "resumed.nc") as b:
        assert sorted(a.variables) == sorted(b.variables)
        for name in a.variables:
            assert _payload(a[name]) == _payload(b[name]), name


def _killed_zarr_run(tmp_path, monkeypatch, zarr_format):
    """A zarr (or, with format "nc", netCDF) run stopped by SIGTERM after 3 of its
    samples; (dataset, resume args, clean output)."""
    from gridded_data import gridded, write_zarr

    from wxstats.sources.xarray import XarraySource

    ds, _ = gridded(n_time=16)
    if zarr_format == "nc":
        store = tmp_path / "era.nc"
        chunks = {v: (4, *ds[v].shape[1:]) for v in ds.data_vars if "time" in ds[v].dims}
        ds.to_netcdf(store, encoding={v: {"chunksizes": c} for v, c in chunks.items()})
    else:
        store = write_zarr(ds, tmp_path / "era.zarr", time_chunk=4, zarr_format=zarr_format)
    args = ["compute", str(store), "--quiet", "--threads", "1", "--block-mb", "1e-6"]
    assert main([*args, "--output", str(tmp_path / "clean.nc")]) == 0
    args += ["--output", str(tmp_path / "resumed.nc"), "--checkpoint", str(tmp_path / "ck")]
    _signal_at(monkeypatch, XarraySource, 2, signal.SIGTERM)
    assert main(args) == 143
    monkeypatch.undo()
    assert _parts_in(tmp_path / "ck") == {"train": [(0, 12)]}
    return store, [*args, "--resume"], tmp_path / "clean.nc"


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_resume_refuses_a_zarr_store_changed_in_place(tmp_path, monkeypatch, capsys, zarr_format):
    import xarray as xr

    store, resume, _ = _killed_zarr_run(tmp_path, monkeypatch, zarr_format)
    capsys.readouterr()
    # a region write: new values in existing chunks; the store's folder keeps its time
    before = os.stat(store).st_mtime_ns
    with xr.open_zarr(store, consolidated=zarr_format == 2) as ds:
        new = (ds[["t2m"]].isel(time=slice(8, 12)).load() + 100).drop_vars(["y", "x"])
    new.to_zarr(store, region={"time": slice(8, 12)}, consolidated=zarr_format == 2)
    assert os.stat(store).st_mtime_ns == before  # what the old fingerprint looked at
    assert main(resume) == 2
    err = capsys.readouterr().err.strip()
    assert "checkpoint is of another run" in err and len(err.splitlines()) == 1
    assert "array t2m changed in the store: chunks rewritten" in err
    assert "array msl" not in err and "array z " not in err
    assert not (tmp_path / "resumed.nc").exists()


def test_resume_refuses_a_netcdf_file_changed_in_place(tmp_path, monkeypatch, capsys):
    store, resume, _ = _killed_zarr_run(tmp_path, monkeypatch, "nc")
    capsys.readouterr()
    size = os.path.getsize(store)
    with netCDF4.Dataset(store, "a") as nc:
        nc["t2m"][8:12] = nc["t2m"][8:12] + 100
    assert os.path.getsize(store) == size  # same size: only the time tells
    assert main(resume) == 2
    assert f"files modified: {store}" in capsys.readouterr().err


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_resume_ignores_arrays_the_run_does_not_read(tmp_path, monkeypatch, zarr_format):
    import xarray as xr

    store, resume, clean = _killed_zarr_run(tmp_path, monkeypatch, zarr_format)
    # e.g. statistics written into the store: a new array, new consolidated metadata
    extra = xr.Dataset({"t2m__stats": (("y", "x"), np.ones((6, 7)))})
    extra.to_zarr(store, mode="a", consolidated=zarr_format == 2)
    assert main(resume) == 0  # a variable without time is not read
    with netCDF4.Dataset(clean) as a, netCDF4.Dataset(tmp_path / "resumed.nc") as b:
        for name in a.variables:
            assert _payload(a[name]) == _payload(b[name]), name


@pytest.mark.parametrize("fmt", [3, "nc"])
def test_resume_from_another_cwd_or_with_a_trailing_slash(tmp_path, monkeypatch, fmt):
    store, resume, clean = _killed_zarr_run(tmp_path, monkeypatch, fmt)
    # resumed from the dataset's folder by a relative path (and a trailing / for the
    # store), the checkpoint named from elsewhere
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "data").symlink_to(tmp_path)
    monkeypatch.chdir(elsewhere)
    relative = f"data/{store.name}" + ("/" if fmt != "nc" else "")
    assert main([resume[0], relative, *resume[2:]]) == 0
    with netCDF4.Dataset(clean) as a, netCDF4.Dataset(tmp_path / "resumed.nc") as b:
        for name in a.variables:
            assert _payload(a[name]) == _payload(b[name]), name


def test_a_signal_after_the_last_sample_still_stops_the_run(meps_small, tmp_path):
    source = open_source(ComputeOptions(dataset=meps_small))
    run = Resumable(tmp_path / "ck", interval=3600)
    todo, carried = run.start(source, skipna=False)
    assert todo == list(range(10)) and run.done_before == 0
    acc = empty_accumulator(source)
    stopped = pytest.raises(Interrupted, match="interrupted by SIGTERM")
    with stopped as info, run.tracking(acc) as after_sample:
        accumulate(source, todo[:2], on_sample=after_sample, into=acc)
        os.kill(os.getpid(), signal.SIGTERM)
        run.finish()
    assert info.value.code == 143
    assert _done_in(tmp_path / "ck", meps_small) == {0, 1}
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_watchdog_saves_between_merges_never_during_one(meps_small, tmp_path):
    """The main thread is stuck (here: waiting inside a read); the watchdog's save
    keeps exactly the samples merged so far. While a merge holds the lock, it
    saves nothing rather than a half-merged accumulator."""
    import threading

    source = open_source(ComputeOptions(dataset=meps_small))
    run = Resumable(tmp_path / "ck", interval=3600)
    todo, _ = run.start(source, skipna=False)
    acc = empty_accumulator(source)
    stuck, release = threading.Event(), threading.Event()
    read = source.read

    def hanging_read(index):
        if index == 3:
            stuck.set()
            release.wait(30)
        return read(index)

    source.read = hanging_read

    def main_thread():
        with run.tracking(acc) as after_sample:
            accumulate(source, todo[:4], on_sample=after_sample, into=acc, guard=run.merging)

    worker = threading.Thread(target=main_thread)
    worker.start()
    assert stuck.wait(30)
    with run.merging:  # as if a merge were under way: nothing is saved
        words = run.save_if_consistent(wait=0.1)
    assert "lost" in words and _done_in(tmp_path / "ck", meps_small) == set()
    words = run.save_if_consistent(wait=1.0)
    assert "saved" in words and _done_in(tmp_path / "ck", meps_small) == {0, 1, 2}
    release.set()
    worker.join(30)


def test_resume_refuses_other_channels_or_config(meps_copy, tmp_path, monkeypatch, capsys):
    """The channels read (remove_state_features_with_index) and the datastore
    config's content are part of what the sums are: a resume with others would
    add old sums of some channels to new sums of others under the same names."""
    out, ck = tmp_path / "out", tmp_path / "ck"
    _signal_at(monkeypatch, MepsSource, 4, signal.SIGTERM)
    assert _compute(meps_copy, out, "--checkpoint", str(ck)) == 143
    monkeypatch.undo()
    capsys.readouterr()
    original = meps_copy.read_text()
    meps_copy.write_text(
        original.replace(
            "remove_state_features_with_index:\n  - 15", "remove_state_features_with_index:\n  - 14"
        )
    )
    assert _compute(meps_copy, out, "--checkpoint", str(ck), "--resume") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checkpoint is of another run (channels read" in err[0], err
    assert (
        "13, 14, 16, 17 in the checkpoint, 0, " in err[0] and "13, 15, 16, 17 in this run" in err[0]
    )
    meps_copy.write_text(original + "\n# another comment\n")
    assert _compute(meps_copy, out, "--checkpoint", str(ck), "--resume") == 2
    assert "(datastore config file content: " in capsys.readouterr().err
    assert not out.exists() or not any(out.iterdir())
    assert _done_in(ck, meps_copy) == {0, 1, 2, 3, 4}


def test_a_checkpoint_of_an_older_format_is_refused(meps_copy, tmp_path, capsys):
    out, ck = tmp_path / "out", tmp_path / "ck"
    assert _compute(meps_copy, out, "--checkpoint", str(ck)) == 0
    manifest = ck / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "format": 1}))
    capsys.readouterr()
    assert _compute(meps_copy, tmp_path / "again", "--checkpoint", str(ck), "--resume") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "checkpoint written by another wxstats (manifest format 1" in err[0]
    assert "start afresh" in err[0]


# -- resuming with another block size, thread count, world size or wxstats version --------

SPLITS = {"train": (0, 24), "val": (24, 36), "mid": (18, 30)}  # steps of mdp_store's hours
SPLIT_ARGS = [
    "--split", "train=2021-01-01T00/2021-01-01T23",
    "--split", "val=2021-01-02T00/2021-01-02T11",
    "--split", "mid=2021-01-01T18/2021-01-02T05",  # overlaps both: its steps are its own
]  # fmt: skip
STEP_BYTES = 20 * 4 * 4  # a step of mdp_store: 20 grid points, 3 + 1 float32 features
STEP_BYTES += step_bytes(3, 2) + step_bytes(1, 2)  # the kernel's, lag 1


def _block_mb(steps: int) -> str:
    """``--block-mb`` giving blocks of ``steps`` one-step chunks."""
    return f"{(steps + 0.5) * STEP_BYTES / 2**20:.10f}"


def _mdp(tmp_path):
    from gridded_data import mdp_store

    store = tmp_path / "m.zarr"
    truth = mdp_store(store)
    base = ["compute", str(store), *SPLIT_ARGS, "--quiet"]
    return store, truth, base


def _blocks(store, steps):
    source = open_source(ComputeOptions(dataset=str(store), block_mb=float(_block_mb(steps))))
    return [(b.start, b.stop) for b in source.blocks]


def _assert_matches_reference(summary, truth):
    """Every split's statistics in the summary against a float64 two-pass reference."""
    from gridded_data import reference

    from reference import assert_close

    data = json.loads(summary.read_text())
    for split, (a, b) in SPLITS.items():
        entry = data["splits"][split]
        state = reference(truth["state"][a:b], 0, b - a, (1,))
        forcing = reference(truth["forcing"][a:b], 0, b - a, (1,))
        static = reference(truth["static"], 0, 1, ())
        flux = entry["forcing"]["toa_radiation"]
        assert entry["state"]["count"] == state["count"].tolist(), split
        assert entry["diff"]["1"]["count"] == state["diff"][1]["count"].tolist(), split
        for key in ("mean", "std"):
            what = f"{split} {key}"
            assert_close(entry["state"][key], state[key], 1e-10, what)
            assert_close(entry["diff"]["1"][key], state["diff"][1][key], 1e-10, what)
            assert_close(flux[key], forcing[key][0], 1e-10, what)
            assert_close(flux["diff"]["1"][key], forcing["diff"][1][key][0], 1e-10, what)
            for f, name in enumerate(("orography", "lsm")):
                assert_close(entry["static"][name][key], static[key][f], 1e-10, what)


def _killed_mdp_run(tmp_path, monkeypatch):
    """An mdp_store run in blocks of 5 steps stopped by SIGTERM after 3 blocks
    (steps 0..14); (truth, resume args without --block-mb, clean output folder)."""
    from wxstats.sources.xarray import XarraySource

    store, truth, base = _mdp(tmp_path)
    clean = tmp_path / "clean"
    clean.mkdir()
    run = ["--output", "{}/o.nc", "--summary", "{}/s.json"]
    assert main([*base, "--threads", "1", *[a.format(clean) for a in run]]) == 0
    out = tmp_path / "out"
    out.mkdir()
    args = [*base, *[a.format(out) for a in run], "--checkpoint", str(tmp_path / "ck")]
    assert _blocks(store, 5)[:4] == [(0, 5), (5, 10), (10, 15), (15, 20)]
    _signal_at(monkeypatch, XarraySource, 2, signal.SIGTERM)
    assert main([*args, "--threads", "1", "--block-mb", _block_mb(5)]) == 143
    monkeypatch.undo()
    # the steps of each split in blocks 0..2, and the values without time (block 0)
    assert _parts_in(tmp_path / "ck") == {
        "train": [(0, 15)], "train (no time)": [(0, 1)],
        "val (no time)": [(0, 1)], "mid (no time)": [(0, 1)],
    }  # fmt: skip
    return truth, [*args, "--resume"], clean, out


def _assert_same_files(clean, out):
    with netCDF4.Dataset(clean / "o.nc") as a, netCDF4.Dataset(out / "o.nc") as b:
        assert sorted(a.variables) == sorted(b.variables)
        for name in a.variables:
            assert _payload(a[name]) == _payload(b[name]), name
    x, y = (json.loads((d / "s.json").read_text()) for d in (clean, out))
    for d in (x, y, *x["splits"].values(), *y["splits"].values()):
        d.pop("run", None)  # when, where, how many samples
    assert x == y


@pytest.mark.parametrize("steps,threads", [(3, "1"), (11, "3"), (2, "2")])
def test_resume_with_another_block_size_or_threads_is_byte_identical(
    tmp_path, monkeypatch, steps, threads
):
    """Killed in blocks of 5 steps; resumed in blocks of 3 (the block of steps
    15..17 is new and whole; 12..14 is done), 11 (the block of 11..21 is partly
    done: only 15..21 are summed) or 2 (14..15: a block half done), with other
    thread counts: the bytes of an uninterrupted run, the reference's numbers."""
    truth, resume, clean, out = _killed_mdp_run(tmp_path, monkeypatch)
    assert main([*resume, "--block-mb", _block_mb(steps), "--threads", threads]) == 0
    _assert_same_files(clean, out)
    _assert_matches_reference(out / "s.json", truth)


def test_a_block_partly_done_in_two_places_is_summed_in_two_pieces(tmp_path):
    """Two ranks each stopped after their first block of 5 steps (0..4 and
    10..14); the resume has one block of all steps: its train steps are summed
    in two pieces (5..9, 15..23), the values without time not again."""
    store, truth, base = _mdp(tmp_path)
    clean, out, ck = tmp_path / "clean", tmp_path / "out", tmp_path / "ck"
    run = ["--output", "{}/o.nc", "--summary", "{}/s.json"]
    for folder in (clean, out):
        folder.mkdir()
    assert main([*base, "--threads", "1", *[a.format(clean) for a in run]]) == 0
    splits = tuple(SPLIT_ARGS[1::2])
    source = open_source(ComputeOptions(str(store), splits=splits, block_mb=float(_block_mb(5))))
    for resume, index in ((False, 0), (True, 2)):
        part = Checkpoint(ck, _fingerprint(source))
        part.prepare(resume=resume)
        part.save(_steps_of(source, [index]), accumulate(source, [index]))
        part.release()  # the run was killed: its lock on the folder went with it
    whole = open_source(ComputeOptions(str(store), splits=splits, block_mb=float(_block_mb(40))))
    assert len(whole) == 1
    done = Checkpoint(ck, _fingerprint(whole)).load(empty_accumulator(whole)).coverage
    assert resume_work(whole, done).partial == {
        0: {"train": [(5, 10), (15, 24)], "val": [(24, 36)], "mid": [(18, 30)]}
    }
    resume = [*base, *[a.format(out) for a in run], "--checkpoint", str(ck), "--resume"]
    assert main([*resume, "--threads", "2", "--block-mb", _block_mb(40)]) == 0
    _assert_same_files(clean, out)
    _assert_matches_reference(out / "s.json", truth)


def _newer_wxstats(monkeypatch):
    """As if wxstats had been upgraded between the two runs (the same checkpoint format)."""
    import wxstats
    import wxstats.runtime.identity
    import wxstats.runtime.run

    for module in (wxstats, wxstats.runtime.identity, wxstats.runtime.run):
        monkeypatch.setattr(module, "__version__", "99.0.0")


def test_resume_with_a_newer_wxstats_and_more_threads(meps_copy, tmp_path, monkeypatch):
    from reference import assert_close, meps_reference

    clean, out, ck = tmp_path / "clean", tmp_path / "out", tmp_path / "ck"
    assert _compute(meps_copy, clean) == 0
    _signal_at(monkeypatch, MepsSource, 4, signal.SIGTERM)
    assert _compute(meps_copy, out, "--checkpoint", str(ck)) == 143
    monkeypatch.undo()
    _newer_wxstats(monkeypatch)
    resumed = ["--checkpoint", str(ck), "--resume", "--threads", "3"]
    assert _compute(meps_copy, out, *resumed) == 0
    assert_identical_outputs(clean, out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["run"]["resumed_samples"] == 5 and summary["run"]["wxstats_version"] == "99.0.0"
    ref = meps_reference(meps_copy)
    assert_close(summary["state"]["mean"], ref["mean"], 1e-10, "mean")
    assert_close(summary["state"]["std"], ref["std"], 1e-10, "std")
    assert_close(summary["diff"]["3"]["std"], ref["diff_std"], 1e-10, "diff std")


@pytest.mark.parametrize("other", ["state format 4", "part format 4"])
def test_a_part_of_another_format_is_refused(meps_copy, tmp_path, monkeypatch, capsys, other):
    from wxstats.io.formats.wxstate import read_state_file, state_writer

    out, ck = tmp_path / "out", tmp_path / "ck"
    _signal_at(monkeypatch, MepsSource, 4, signal.SIGTERM)
    assert _compute(meps_copy, out, "--checkpoint", str(ck)) == 143
    monkeypatch.undo()
    (part,) = ck.glob("part-*.wxstate")
    if other == "state format 4":  # a codec this wxstats does not read
        with netCDF4.Dataset(part, "a") as nc:
            nc.setncattr("wxstats_state_version", np.int32(4))
    else:  # the codec, but a part layout this wxstats does not read
        state = read_state_file(part)
        state.meta["checkpoint_part"] = FORMAT_VERSION + 1
        state_writer(state, "99")(part)
    capsys.readouterr()
    assert _compute(meps_copy, out, "--checkpoint", str(ck), "--resume") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{part}: a checkpoint part of another format" in err and "start afresh" in err, err


@pytest.mark.slow
def test_resume_on_two_ranks_with_another_block_size(tmp_path, monkeypatch):
    from distributed_helpers import run, wxstats_cmd

    truth, resume, clean, out = _killed_mdp_run(tmp_path, monkeypatch)
    result = run(wxstats_cmd(*resume, "--block-mb", _block_mb(11), "--nproc", "2"))
    assert result.returncode == 0, result.stderr
    _assert_same_files(clean, out)
    _assert_matches_reference(out / "s.json", truth)


def _latitude_store(path):
    """24 six-hourly steps on a small latitude/longitude grid, one step per chunk."""
    import pandas as pd
    import xarray as xr

    rng = np.random.default_rng(11)
    lats = np.linspace(80.0, -80.0, 5)
    t2m = 250 + 40 * np.cos(np.deg2rad(lats))[None, :, None] + 3 * rng.standard_normal((24, 5, 6))
    ds = xr.Dataset(
        {"t2m": (("time", "lat", "lon"), t2m.astype(np.float32), {"units": "K"})},
        coords={
            "time": pd.date_range("2020-01-01", periods=24, freq="6h"),
            "lat": ("lat", lats, {"units": "degrees_north"}),
            "lon": np.arange(6) * 60.0,
        },
    )
    ds.to_zarr(path, mode="w", encoding={"t2m": {"chunks": (1, 5, 6)}}, consolidated=False)
    return path


@pytest.mark.parametrize(
    "options",
    [
        ["--format", "makani"],  # weighted by cos(latitude), time means per grid point
        ["--by", "hour", "--weights", "coslat", "--diff-steps", "1,2", "--output", "{}/o.nc"],
    ],
)
def test_resume_with_another_block_size_keeps_weights_time_means_and_groups(
    tmp_path, monkeypatch, options
):
    from wxstats.sources.xarray import XarraySource

    store = _latitude_store(tmp_path / "era.zarr")
    step = 5 * 6 * 4  # bytes of a step of t2m, and what it costs the kernel (1 + its lags)
    step += step_bytes(1, 3 if "--diff-steps" in options else 2)
    clean, out, ck = tmp_path / "clean", tmp_path / "out", tmp_path / "ck"

    def args(folder, steps):
        mb = f"{(steps + 0.5) * step / 2**20:.10f}"
        where = [a.format(folder) for a in options] + ["--output-dir", str(folder)]
        return ["compute", str(store), "--quiet", "--block-mb", mb, *where]

    for folder in (clean, out):
        folder.mkdir()
    assert main([*args(clean, 24), "--threads", "1"]) == 0
    _signal_at(monkeypatch, XarraySource, 2, signal.SIGTERM)
    assert main([*args(out, 5), "--checkpoint", str(ck), "--threads", "1"]) == 143
    monkeypatch.undo()
    assert _parts_in(ck)["train"] == [(0, 15)]
    # blocks of 7 steps: the one of steps 14..20 is summed over 15..20 only
    assert main([*args(out, 7), "--checkpoint", str(ck), "--resume", "--threads", "2"]) == 0
    written = sorted(p.name for p in clean.iterdir())
    assert written == sorted(p.name for p in out.iterdir()) and written
    for name in written:
        if name.endswith(".nc"):
            with netCDF4.Dataset(clean / name) as a, netCDF4.Dataset(out / name) as b:
                for var in a.variables:
                    assert _payload(a[var]) == _payload(b[var]), (name, var)
        elif name.endswith(".json"):  # all but the run's description
            a, b = (json.loads((d / name).read_text()) for d in (clean, out))
            assert a.pop("run") != b.pop("run") and a == b, name
        else:
            assert (clean / name).read_bytes() == (out / name).read_bytes(), name


def test_anemoi_resume_with_another_block_size(tmp_path, monkeypatch):
    from test_anemoi import assert_matches, make_dataset, reference, stored

    from wxstats.sources.anemoi import AnemoiSource

    path = tmp_path / "an.zarr"
    data = make_dataset(path)  # 23 six-hourly dates, one per chunk; window: dates 0..17
    step = 3 * 2 * 30 * 4 + step_bytes(3, 3)  # a date's bytes, and the kernel's (lags 1, 3)

    def args(out, steps, *extra):
        mb = f"{(steps + 0.5) * step / 2**20:.10f}"
        return ["compute", str(path), "--format", "anemoi", "--output", str(out), "--quiet",
                "--diff-steps", "1,3", "--block-mb", mb, *extra]  # fmt: skip

    clean, out, ck = tmp_path / "clean.zarr", tmp_path / "out.zarr", tmp_path / "ck"
    assert main(args(clean, 18, "--threads", "1")) == 0
    _signal_at(monkeypatch, AnemoiSource, 2, signal.SIGTERM)
    assert main(args(out, 4, "--checkpoint", str(ck), "--threads", "1")) == 143
    monkeypatch.undo()
    assert _parts_in(ck) == {"train": [(0, 12)]}
    # blocks of 7 dates: the one of dates 7..13 is summed over 12..13 only
    assert main(args(out, 7, "--checkpoint", str(ck), "--resume", "--threads", "2")) == 0
    got = stored(out)
    assert {k: v.tobytes() for k, v in got.items()} == {
        k: v.tobytes() for k, v in stored(clean).items()
    }
    assert_matches(got, reference(data, 0, 18))
    assert_matches(got, reference(data, 0, 18, 3), "statistics_tendencies_18h_")
