"""Parallel runs through PyTorch Distributed: --nproc, torchrun (one node and
two), failures, resuming, and byte-identical results.

Every parallel run is compared with a single-process run of the same data
(itself checked against the float64 two-pass reference), file by file.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
from distributed_helpers import (
    assert_identical_outputs,
    compute_args,
    env,
    kill_leftovers,
    make_odd_dataset,
    odd_dataset_with_single_run,
    processes_mentioning,
    run,
    sample_path,
    world_size_of,
    wxstats_cmd,
)

from wxstats.cli import main
from wxstats.parallel.devices import resolve_backend
from wxstats.parallel.launch import (
    Launch,
    free_port,
)

pytestmark = [
    pytest.mark.slow,  # processes started: the full tier, not the quick loop
    # the 11-sample dataset lacks a member on purpose (test_meps asserts that warning)
    pytest.mark.filterwarnings("ignore:.*lack some of the members:UserWarning"),
]

# -- runs: byte identity -----------------------------------------------------------------


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    """(config, reference output dir): 11 samples and a single-process run."""
    return odd_dataset_with_single_run(tmp_path_factory.mktemp("odd"))


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7])
def test_nproc_is_byte_identical(odd, tmp_path, n):
    config, reference = odd
    out = tmp_path / "out"
    args = compute_args(config, out, "--nproc", str(n))
    if n == 2:
        args.remove("--quiet")  # and look at what the user sees
    result = run(wxstats_cmd(*args))
    assert result.returncode == 0, result.stderr
    assert world_size_of(out) == n
    assert_identical_outputs(reference, out)
    assert not processes_mentioning(str(config))
    if n == 2:
        # one closing progress line from rank 0 with every rank's samples; one table
        assert result.stderr.count("wxstats: 11 samples") == 1, result.stderr
        assert "on 2 ranks" in result.stderr and "GB/s" in result.stderr
        assert result.stdout.count("pres_0g") == 1
        # the warning about the missing member comes once (rank 0), not per rank
        assert result.stderr.count("lack some of the members") == 1


def test_more_ranks_than_samples(tmp_path):
    config = make_odd_dataset(tmp_path / "data", analysis_times=2)  # 3 samples
    reference = tmp_path / "single"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the missing member
        assert main(compute_args(config, reference)) == 0
    out = tmp_path / "out"
    result = run(wxstats_cmd(*compute_args(config, out, "--nproc", "4")))
    assert result.returncode == 0, result.stderr
    assert world_size_of(out) == 4
    assert_identical_outputs(reference, out)


# -- torchrun -------------------------------------------------------------------------------


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args]


@pytest.mark.parametrize("n", [2, 3])
def test_torchrun_single_node(odd, tmp_path, n):
    config, reference = odd
    out = tmp_path / "out"
    # N = 3 runs the installed ``wxstats`` command under torchrun, N = 2 the module
    target = ["--no-python", "wxstats"] if n == 3 else ["-m", "wxstats"]
    cmd = _torchrun(
        "--nproc-per-node",
        str(n),
        "--master-port",
        str(free_port()),
        *target,
        *compute_args(config, out),
    )
    result = run(cmd)
    assert result.returncode == 0, result.stderr
    assert world_size_of(out) == n
    assert_identical_outputs(reference, out)


def test_torchrun_two_nodes(odd, tmp_path):
    """Two torchrun agents (--nnodes 2) meeting at a c10d rendezvous on 127.0.0.1,
    two ranks each: a world of 4."""
    config, reference = odd
    out = tmp_path / "out"
    endpoint = f"127.0.0.1:{free_port()}"
    nodes = [
        subprocess.Popen(
            _torchrun(
                "--nnodes",
                "2",
                "--node-rank",
                str(node),
                "--nproc-per-node",
                "2",
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                endpoint,
                "--rdzv-id",
                "wxstats-test",
                "-m",
                "wxstats",
                *compute_args(config, out),
            ),
            env=env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for node in (0, 1)
    ]
    try:
        results = [p.communicate(timeout=240) for p in nodes]
    finally:
        kill_leftovers(nodes)
    assert [p.returncode for p in nodes] == [0, 0], results
    assert world_size_of(out) == 4
    assert_identical_outputs(reference, out)


# -- failures --------------------------------------------------------------------------------


@pytest.fixture
def odd_copy(odd, tmp_path):
    config, _ = odd
    shutil.copytree(config.parent, tmp_path / "data", ignore=shutil.ignore_patterns("static"))
    return tmp_path / "data" / config.name


def test_a_bad_file_on_one_rank_stops_the_job(odd_copy, tmp_path):
    bad = sample_path(odd_copy, 9)  # with 3 ranks (4, 4, 3 samples): rank 2's
    bad.write_bytes(bad.read_bytes()[:1000])
    out = tmp_path / "out"
    # a --timeout longer than run()'s hang guard: the job must end because rank 2 said
    # so, not because the others gave up waiting for it
    result = run(wxstats_cmd(*compute_args(odd_copy, out, "--nproc", "3", "--timeout", "900")))
    assert result.returncode == 2
    assert f"rank 2: {bad}: truncated" in result.stderr
    host = socket.gethostname()
    assert f"the job stopped: rank 2 on {host} failed" in result.stderr  # rank 0's summary
    assert "Traceback" not in result.stderr
    assert not out.exists() or not any(out.iterdir())
    assert not processes_mentioning(str(odd_copy))


def test_existing_outputs_stop_every_rank(odd_copy, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "parameter_std.pt").write_bytes(b"keep me")
    result = run(wxstats_cmd(*compute_args(odd_copy, out, "--nproc", "2")))
    assert result.returncode == 2
    assert "rank 0: output exists" in result.stderr and "--overwrite" in result.stderr
    assert (out / "parameter_std.pt").read_bytes() == b"keep me"
    assert sorted(p.name for p in out.iterdir()) == ["parameter_std.pt"]
    assert not processes_mentioning(str(odd_copy))


def _hang_on_sample(config: Path, index: int) -> tuple[Path, threading.Event]:
    """Replace sample ``index`` by a FIFO: the rank reading it blocks; the
    event is set at the moment it opens the file."""
    fifo = sample_path(config, index)
    fifo.unlink()
    os.mkfifo(fifo)
    opened = threading.Event()

    def writer():
        with open(fifo, "wb"):  # returns when the reader opens the FIFO
            opened.set()
            time.sleep(3600)

    threading.Thread(target=writer, daemon=True).start()
    return fifo, opened


def _pids_holding(path: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.path.realpath(fd) == str(path) for fd in (proc / "fd").iterdir()):
                pids.append(int(proc.name))
        except OSError:
            continue
    return [p for p in pids if p != os.getpid()]


def _wait_for_holder(path: Path, seconds: float = 60.0) -> list[int]:
    """The process reading ``path``: the prefetch hint opens and closes the file
    before the read that blocks, so look until a process holds it (the prefetch
    and the read are the same rank's process: either one is the reader)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pids = _pids_holding(path)
        if pids:
            return pids
        time.sleep(0.05)
    return []


def test_a_killed_rank_under_nproc_stops_the_job(odd_copy, tmp_path):
    fifo, opened = _hang_on_sample(odd_copy, 5)  # rank 1 of 3
    out = tmp_path / "out"
    job = subprocess.Popen(
        wxstats_cmd(*compute_args(odd_copy, out, "--nproc", "3", "--threads", "1")),
        env=env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert opened.wait(120), "no rank opened the sample"
        (victim,) = _wait_for_holder(fifo)
        os.kill(victim, signal.SIGKILL)
        _, err = job.communicate(timeout=60)
    finally:
        kill_leftovers([job])
    assert job.returncode == 1
    assert "rank 1 of 3 was killed by SIGKILL" in err
    assert not out.exists() or not any(out.iterdir())
    assert not processes_mentioning(str(odd_copy))


def test_a_killed_rank_is_noticed_without_a_launcher(odd_copy, tmp_path):
    """Ranks started by hand (as a scheduler would): no parent watches them, the
    liveness connection to rank 0 closes with the process: the survivors end at once."""
    fifo, opened = _hang_on_sample(odd_copy, 5)  # rank 1 of 3
    out = tmp_path / "out"
    port = str(free_port())
    ranks = []
    for rank in range(3):
        env_ = env()
        env_.update(RANK=str(rank), WORLD_SIZE="3", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        ranks.append(
            subprocess.Popen(
                # a --timeout beyond the hang guard below: only the closed connection
                # can end the survivors in time
                wxstats_cmd(*compute_args(odd_copy, out, "--threads", "1", "--timeout", "900")),
                env=env_,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        assert opened.wait(120), "no rank opened the sample"
        os.kill(ranks[1].pid, signal.SIGKILL)
        errs = [p.communicate(timeout=240)[1] for p in (ranks[0], ranks[2])]  # hang guard
    finally:
        kill_leftovers(ranks)
    assert ranks[0].returncode == 1 and ranks[2].returncode == 1, errs
    # its liveness connection closed at once: no need to wait for the heartbeat timeout
    assert f"rank 1 on {socket.gethostname()} failed: its connection closed" in errs[0]
    assert errs[1] == ""  # rank 2 stays quiet
    assert not out.exists() or not any(out.iterdir())


def test_rank_0_lost_after_the_gather_ends_the_waiting_ranks_at_once(odd_copy, tmp_path):
    """Rank 0 dies while writing the outputs, after the exact all-reduce: the
    other ranks, waiting for its result, stop at once (they used to wait for the
    collective timeout), saying so, and nothing is written."""
    from cluster import fault_hooks, fault_log, with_fault_hooks

    out = tmp_path / "out"
    log = tmp_path / "opens.log"
    # the weights file is opened with open() by rank 0 only, after the gather
    hooked = with_fault_hooks(
        env(), fault_hooks(tmp_path), hang="*/.parameter_weights.npy.*", log=str(log)
    )
    port = str(free_port())
    ranks = []
    for rank in range(2):
        env_ = dict(
            hooked, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port
        )
        # a --timeout beyond the hang guard below: waiting for the collective fails
        args = compute_args(odd_copy, out, "--threads", "1", "--timeout", "900")
        ranks.append(
            subprocess.Popen(wxstats_cmd(*args), env=env_, stderr=subprocess.PIPE, text=True)
        )
    try:
        deadline = time.monotonic() + 120
        while not fault_log(log):  # rank 0 is stuck writing: the gather is done
            assert time.monotonic() < deadline and ranks[1].poll() is None
            time.sleep(0.05)
        os.kill(ranks[0].pid, signal.SIGKILL)
        _, err = ranks[1].communicate(timeout=240)  # a hang guard only
    finally:
        kill_leftovers(ranks)
    assert ranks[1].returncode == 1, err
    assert "rank 0" in err and "Traceback" not in err, err
    assert not (out / "parameter_weights.npy").exists()
    assert not (out / "parameter_mean.pt").exists() or not (out / "summary.json").exists()


@pytest.mark.parametrize(
    ("victim", "call"),
    [(2, 2), (0, 4)],
    ids=["rank-2-in-the-sums-all-reduce", "rank-0-in-the-last-all-reduce"],
)
def test_a_rank_killed_inside_the_all_reduce_stops_the_others(odd_copy, tmp_path, victim, call):
    """Issue 33: one rank SIGKILLed while the others wait for it inside the exact
    all-reduce (the ``call``-th ``all_reduce`` of each rank: 1 checks the layouts,
    2 sums, 3 and 4 are the extremes). gloo reads the connection closed: the others
    used to end with its RuntimeError in a traceback ("unexpected RuntimeError"),
    not naming the rank. Now they stop at once, naming the lost rank and its host,
    and nothing is written. Ranks started by hand (no launcher stops them) with a
    --timeout beyond the hang guard: only the liveness connection can end them."""
    from cluster import fault_hooks, fault_log, with_fault_hooks

    out, log = tmp_path / "out", tmp_path / "calls.log"
    hooked = with_fault_hooks(
        env(),
        fault_hooks(tmp_path),
        call="torch.distributed:all_reduce",
        call_hang=f"{victim}:{call}",
        log=str(log),
    )
    port = str(free_port())
    ranks = []
    for rank in range(3):
        env_ = dict(
            hooked, RANK=str(rank), WORLD_SIZE="3", MASTER_ADDR="127.0.0.1", MASTER_PORT=port
        )
        args = compute_args(odd_copy, out, "--threads", "1", "--timeout", "900")
        ranks.append(
            subprocess.Popen(wxstats_cmd(*args), env=env_, stderr=subprocess.PIPE, text=True)
        )
    try:
        deadline = time.monotonic() + 120
        # every rank logged its call: the victim is blocked at its start, the others inside
        while len({e[1] for e in fault_log(log) if e[3].endswith(f"all_reduce#{call}")}) < 3:
            assert time.monotonic() < deadline and all(p.poll() is None for p in ranks)
            time.sleep(0.05)
        os.kill(ranks[victim].pid, signal.SIGKILL)
        others = [p for rank, p in enumerate(ranks) if rank != victim]
        errs = [p.communicate(timeout=120)[1] for p in others]  # a hang guard only
    finally:
        kill_leftovers(ranks)
    # stopped, not hung; (once in some twenty runs, a survivor whose message was out
    # already was then aborted by SIGABRT at interpreter exit, "terminate called without
    # an active exception": torch's teardown after a broken collective, not wxstats')
    assert all(p.returncode in (1, -signal.SIGABRT) for p in others), errs
    assert 1 in [p.returncode for p in others], errs
    lost = f"the job stopped: rank {victim} on {socket.gethostname()} failed: its connection closed"
    speakers = errs if victim == 0 else errs[:1]  # rank 0 speaks for the job while it lives
    for err in speakers:
        assert lost in err and "no output was written" in err, err
    for err in errs:
        assert "Traceback" not in err and "RuntimeError" not in err, err
    if victim != 0:
        assert errs[1] == "", errs[1]
    # nothing written (rank 0 killed leaves its temporary files: .NAME.*.tmp)
    assert not out.exists() or all(p.name.startswith(".") for p in out.iterdir())


# -- GPUs (NCCL) ---------------------------------------------------------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@needs_cuda
def test_nccl_on_cuda_is_byte_identical(odd, tmp_path):
    config, reference = odd
    n = min(torch.cuda.device_count(), 2)
    out = tmp_path / "out"
    cmd = wxstats_cmd(
        *compute_args(config, out, "--nproc", str(n), "--backend", "nccl", "--device", "cuda")
    )
    result = run(cmd)
    assert result.returncode == 0, result.stderr
    assert_identical_outputs(reference, out)


@needs_cuda
def test_auto_picks_nccl_with_a_gpu_per_rank():
    launch = Launch("nproc", 0, 1, 0, 1, "127.0.0.1", 1)
    assert resolve_backend("auto", "auto", launch) == ("nccl", "cuda:0")


def test_nproc_is_refused_inside_a_job_of_ranks(odd, monkeypatch, capsys):
    config, _ = odd
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_PORT", "29999")
    assert main(["compute", str(config), "--nproc", "2"]) == 2
    assert "do not combine it with torchrun" in capsys.readouterr().err


# -- killed and resumed (--checkpoint, --resume) -----------------------------------------------


def _done_in(folder: Path, config: Path) -> set[int]:
    """The samples of the MEPS datastore ``config`` in the checkpoint's parts
    (netCDF; ``meta`` names the sample files done)."""
    import netCDF4

    from wxstats.sources.meps import MepsSource

    names: set[str] = set()
    for path in folder.glob("part-*.wxstate"):
        with netCDF4.Dataset(path) as nc:
            names.update(json.loads(nc.getncattr("meta"))["done"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the odd dataset's missing member, said by the run
        samples = MepsSource(config).samples
    return {i for i, s in enumerate(samples) if s.path.name in names}


def _start_job(args: list[str]) -> subprocess.Popen:
    """A job in its own session, so that the whole of it can be killed at once."""
    return subprocess.Popen(
        wxstats_cmd(*args), env=env(), stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def _wait_until(condition, job: subprocess.Popen, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert job.poll() is None, f"the job ended first: {job.communicate()[1]}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


class _Blocker:
    """Once the run has recorded what the data is (its checkpoint manifest),
    swap sample ``index`` for a FIFO, so that the rank reading it blocks there;
    :meth:`restore` puts the very same file back (bytes and modification time)."""

    def __init__(self, config: Path, index: int, keep: Path) -> None:
        self.path = sample_path(config, index)
        self.keep = keep
        shutil.copy2(self.path, keep)
        self.stat = self.path.stat()

    def block(self) -> Path:
        fifo, self.opened = _hang_on_sample_path(self.path)
        return fifo

    def restore(self) -> None:
        self.path.unlink()
        shutil.copy2(self.keep, self.path)
        os.utime(self.path, ns=(self.stat.st_atime_ns, self.stat.st_mtime_ns))


def _hang_on_sample_path(fifo: Path) -> tuple[Path, threading.Event]:
    fifo.unlink()
    os.mkfifo(fifo)
    opened = threading.Event()

    def writer():
        with open(fifo, "wb"):
            opened.set()
            time.sleep(3600)

    threading.Thread(target=writer, daemon=True).start()
    return fifo, opened


def _block_rank_1_at_its_last_sample(odd_copy: Path, tmp_path: Path, *extra: str):
    """Start ``--nproc 2`` with a checkpoint saved after every sample; return
    (job, blocker, pid of rank 1) once rank 1 is stuck on sample 10, after
    saving samples 6 to 9 (rank 0 has 0 to 5)."""
    ck = tmp_path / "ck"
    blocker = _Blocker(odd_copy, 10, tmp_path / "sample10.npy")
    args = compute_args(odd_copy, tmp_path / "killed", "--nproc", "2", "--threads", "1")
    job = _start_job([*args, "--checkpoint", str(ck), "--checkpoint-interval", "0", *extra])
    _wait_until((ck / "manifest.json").exists, job)
    fifo = blocker.block()
    _wait_until(blocker.opened.is_set, job)
    (holder,) = _wait_for_holder(fifo)
    return job, blocker, holder


def _resume(config: Path, ck: Path, out: Path, *launch: str) -> None:
    args = compute_args(config, out, "--checkpoint", str(ck), "--resume", *launch)
    result = run(wxstats_cmd(*args))
    assert result.returncode == 0, result.stderr


def test_sigkill_part_way_then_resume_with_1_and_3_ranks(odd, odd_copy, tmp_path):
    _, reference = odd
    job, blocker, _ = _block_rank_1_at_its_last_sample(odd_copy, tmp_path)
    try:
        os.killpg(job.pid, signal.SIGKILL)  # the whole job at once, as a lost node
        job.wait(timeout=60)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    blocker.restore()
    done = _done_in(tmp_path / "ck", odd_copy)
    assert {6, 7, 8, 9} <= done and 10 not in done, done
    assert not processes_mentioning(str(odd_copy))
    for n in (1, 3):
        ck = tmp_path / f"ck{n}"
        shutil.copytree(tmp_path / "ck", ck)
        out = tmp_path / f"out{n}"
        _resume(odd_copy, ck, out, "--nproc", str(n))
        assert world_size_of(out) == n
        assert_identical_outputs(reference, out, same_path=False)
        summary = json.loads((out / "summary.json").read_text())
        assert summary["run"]["resumed_samples"] == len(done)


def test_sigkill_while_saving_then_resume_under_torchrun(odd, odd_copy, tmp_path):
    """Ranks that save after every sample spend most of their time writing part
    files: kill the job at once when the first appears, twice, then finish."""
    _, reference = odd
    ck = tmp_path / "ck"
    for attempt, launch in enumerate([("--nproc", "2"), ("--nproc", "3")]):
        args = compute_args(odd_copy, tmp_path / "killed", *launch, "--checkpoint", str(ck))
        args += ["--checkpoint-interval", "0"] + (["--resume"] if attempt else [])
        before = set(ck.glob("part-*.wxstate"))
        job = _start_job(args)
        try:
            deadline = time.monotonic() + 120
            while job.poll() is None and time.monotonic() < deadline:
                if set(ck.glob("part-*.wxstate")) - before:
                    break
                time.sleep(0.001)
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=60)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
    assert len(_done_in(ck, odd_copy)) < 11  # killed part-way (the finished case is tested above)
    out = tmp_path / "out"
    cmd = _torchrun("--nproc-per-node", "2", "--master-port", str(free_port()), "-m", "wxstats")
    result = run(cmd + compute_args(odd_copy, out, "--checkpoint", str(ck), "--resume"))
    assert result.returncode == 0, result.stderr
    assert_identical_outputs(reference, out, same_path=False)


def test_sigterm_stops_after_saving_and_a_single_process_resumes(odd, odd_copy, tmp_path):
    _, reference = odd
    job, blocker, _ = _block_rank_1_at_its_last_sample(odd_copy, tmp_path, "--timeout", "3")
    try:
        job.send_signal(signal.SIGTERM)  # to the launcher: it passes it on to the ranks
        _, err = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode == 143, err
    assert "rank 0: interrupted by SIGTERM" in err and "--resume to continue" in err
    assert "interrupted by SIGTERM; all ranks stopped, no output was written" in err
    assert "Traceback" not in err
    assert not (tmp_path / "killed").exists() or not any((tmp_path / "killed").iterdir())
    assert not processes_mentioning(str(odd_copy))
    blocker.restore()
    assert {6, 7, 8, 9} <= _done_in(tmp_path / "ck", odd_copy)
    out = tmp_path / "out"
    assert main(compute_args(odd_copy, out, "--checkpoint", str(tmp_path / "ck"), "--resume")) == 0
    assert_identical_outputs(reference, out, same_path=False)


def test_a_killed_rank_under_torchrun_stops_the_job(odd_copy, tmp_path):
    fifo, opened = _hang_on_sample(odd_copy, 5)  # rank 1 of 3
    out = tmp_path / "out"
    cmd = _torchrun("--nproc-per-node", "3", "--master-port", str(free_port()), "-m", "wxstats")
    job = subprocess.Popen(
        cmd + compute_args(odd_copy, out, "--threads", "1", "--timeout", "900"),
        env=env(),
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert opened.wait(120), "no rank opened the sample"
        (victim,) = _wait_for_holder(fifo)
        os.kill(victim, signal.SIGKILL)
        _, err = job.communicate(timeout=240)  # a hang guard below the --timeout
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
    assert job.returncode != 0
    assert "Signal 9 (SIGKILL)" in err, err
    assert not out.exists() or not any(out.iterdir())
    assert not processes_mentioning(str(odd_copy))


def test_two_slurm_jobs_on_one_port_never_join_each_other(odd, odd_copy, tmp_path):
    """Slurm jobs 1 and 5001 get the same port on a node: a rank of the second
    reaches the first one's store. It must refuse before any collective, and the
    first job must finish as if nothing happened (issue 15 item 8)."""
    from cluster import fault_hooks, fault_log, with_fault_hooks

    from wxstats.parallel.launch import slurm_port

    assert slurm_port(1, 0) == slurm_port(5001, 0)
    _, reference = odd
    log, gate = tmp_path / "opens.log", tmp_path / "gate"
    hooks = fault_hooks(tmp_path)

    def slurm_env(job: int, rank: int) -> dict[str, str]:
        # job 1's ranks wait at their first sample until the intruder has been
        # refused (its store is up: both joined), rather than being slowed down and
        # hoping that the intruder arrives before they finish
        out = with_fault_hooks(env(), hooks, match="*/nwp_20*_mbr*.npy", gate=gate, log=log)
        out.update(
            SLURM_JOB_ID=str(job), SLURM_STEP_ID="0", SLURM_PROCID=str(rank),
            SLURM_LOCALID=str(rank), SLURM_STEP_NUM_TASKS="2", SLURM_NTASKS="2",
            SLURM_STEP_NODELIST="localhost", SLURM_NODEID="0",
        )  # fmt: skip
        return out

    out_a, out_b = tmp_path / "a", tmp_path / "b"
    first = [
        subprocess.Popen(
            wxstats_cmd(*compute_args(odd_copy, out_a, "--threads", "1")),
            env=slurm_env(1, rank),
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    try:
        deadline = time.monotonic() + 120
        while len({e[1] for e in fault_log(log)}) < 2:  # both ranks read: the store is up
            assert time.monotonic() < deadline and all(p.poll() is None for p in first)
            time.sleep(0.05)
        intruder = run(
            wxstats_cmd(*compute_args(odd_copy, out_b, "--threads", "1")),
            env=slurm_env(5001, 1),
            timeout=60,
        )
        gate.touch()
        errs = [p.communicate(timeout=180)[1] for p in first]
    finally:
        kill_leftovers(first)
    assert intruder.returncode == 2, intruder.stderr
    assert "belongs to another job (slurm job 1 step 0), not to this one (slurm job 5001 " in (
        intruder.stderr
    )
    assert "no collective was joined" in intruder.stderr and "Traceback" not in intruder.stderr
    assert not out_b.exists() or not any(out_b.iterdir())
    assert [p.returncode for p in first] == [0, 0], errs
    assert_identical_outputs(reference, out_a, same_path=False)


@pytest.mark.parametrize(
    "rank1, words",
    [
        (["--step-length", "2"], "difference steps: 2 in rank 1, 3 in rank 0"),
        (["--period", "2022-04-02/2022-04-02"], "--period: 2022-04-02/2022-04-02 in rank 1"),
    ],
)
def test_ranks_started_with_other_options_are_refused(odd_copy, tmp_path, rank1, words):
    """Ranks joined by hand (as torchrun does) with other command lines: the same
    number of samples, so nothing else tells; rank 1 is refused before any data is
    read, naming the first difference, and rank 0 stops with its message."""
    out = tmp_path / "out"
    port = str(free_port())
    ranks = []
    for rank, extra in ((0, ["--period", "2022-04-01/2022-04-01"]), (1, rank1)):
        if rank == 1 and "--period" not in rank1:
            extra = [*extra, "--period", "2022-04-01/2022-04-01"]
        env_ = env()
        env_.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        args = compute_args(odd_copy, out, "--threads", "1", "--timeout", "30", *extra)
        ranks.append(
            subprocess.Popen(wxstats_cmd(*args), env=env_, stderr=subprocess.PIPE, text=True)
        )
    try:
        errs = [p.communicate(timeout=120)[1] for p in ranks]
    finally:
        kill_leftovers(ranks)
    assert [p.returncode for p in ranks] == [2, 2], errs
    line = errs[1].strip().splitlines()
    assert len(line) == 1 and line[0].startswith("wxstats: error: rank 1: "), errs[1]
    assert "this rank's run differs from rank 0's" in line[0] and words in line[0], line
    assert words in errs[0] and "no output was written" in errs[0], errs[0]
    assert not out.exists() or not any(out.iterdir())
