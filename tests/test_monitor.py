"""The monitor thread: progress pushed to the store, failures seen, and the
watchdog that ends a process whose main thread is stuck."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from wxstats.parallel import monitor as monitor_module
from wxstats.parallel.job import Solo
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.run import execute


class Store:
    """What the monitor asks of torch's store, in memory; ``add`` takes a while,
    as a round trip to a real store does, so that races show."""

    def __init__(self, delay: float = 0.0) -> None:
        self.data: dict[str, object] = {}
        self.delay = delay
        self._lock = threading.Lock()

    def add(self, key, n):
        time.sleep(self.delay)
        with self._lock:
            self.data[key] = int(self.data.get(key, 0)) + n
            return self.data[key]

    def set(self, key, value):
        self.data[key] = value

    def get(self, key):
        return self.data[key]

    def check(self, keys):
        return all(k in self.data for k in keys)


def test_progress_pushed_from_two_threads_is_counted_once():
    store = Store(delay=0.002)
    watch = monitor_module.Monitor(store, rank=1, world_size=2, timeout=60, where="test")
    watch.samples_done, watch.bytes_done = 40, 4000
    threads = [threading.Thread(target=watch.push_progress) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert store.data["samples"] == 40 and store.data["bytes"] == 4000


def test_the_watchdog_runs_the_save_before_it_ends_the_process(monkeypatch, capsys):
    """A failure elsewhere and a main thread that never notices: after the
    timeout the watchdog ends the process, after the save, and says so."""
    ended = threading.Event()
    codes = []
    monkeypatch.setattr(monitor_module, "HEARTBEAT_S", 0.05)
    monkeypatch.setattr(monitor_module.os, "_exit", lambda code: (codes.append(code), ended.set()))
    watch = monitor_module.Monitor(Store(), rank=1, world_size=2, timeout=0.3, where="test")
    calls = []
    watch.before_forced_exit = lambda: calls.append("save") or "; its progress is saved in ck"
    watch.publish_failure(0, "NaN in sample 5", 2)
    watch.start()
    try:
        assert ended.wait(120)  # a hang guard only
    finally:
        watch.stop()
    assert calls[:1] == ["save"] and codes[:1] == [2]
    assert "rank 0 failed: NaN in sample 5; its progress is saved in ck" in capsys.readouterr().err


STALL = "no progress for 21 s while its heartbeat went on (stuck in a read?)"


def _job_with_stall(store: Store) -> None:
    """Rank 3 on wxs1 published its stall, as its own monitor does."""
    rank3 = monitor_module.Monitor(store, rank=3, world_size=4, timeout=20, where="test")
    store.set("host/3", b"wxs1")
    rank3.publish_failure(3, STALL, 1)


def test_an_interrupted_rank_reads_the_failure_its_monitor_had_not_seen():
    """torchrun stops rank 0 before its monitor polled: the store still tells why."""
    store = Store()
    _job_with_stall(store)
    rank0 = monitor_module.Monitor(store, rank=0, world_size=4, timeout=20, where="test")
    assert rank0.failure is None  # its thread never polled
    stopped = rank0.published_failure()
    assert stopped is not None and stopped.rank == 3 and stopped.code == 1
    assert str(stopped) == f"rank 3 on wxs1 failed: {STALL}"
    assert rank0.failure == (3, STALL, 1)  # so it does not wait for rank 3 to leave


def test_no_cause_for_an_interruption_that_is_the_first_failure_or_this_ranks_own():
    store = Store()
    rank0 = monitor_module.Monitor(store, rank=0, world_size=4, timeout=20, where="test")
    assert rank0.published_failure() is None  # nothing published: a plain interruption
    rank1 = monitor_module.Monitor(store, rank=1, world_size=4, timeout=20, where="test")
    rank1.publish_failure(1, "interrupted by SIGTERM: progress is saved in ck", 143)
    assert rank0.published_failure() is None  # scancel reached rank 1 first: the same signal
    assert rank1.published_failure() is None  # its own


class GoneStore(Store):
    def add(self, key, n):
        raise ConnectionResetError("connection reset by peer")


class SilentStore(Store):
    """A store whose host vanished: every call waits (until released)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def add(self, key, n):
        self.release.wait()
        return super().add(key, n)


def test_a_store_gone_or_silent_leaves_what_this_rank_knew():
    gone = monitor_module.Monitor(GoneStore(), rank=0, world_size=4, timeout=20, where="test")
    assert gone.published_failure() is None
    silent_store = SilentStore()
    silent = monitor_module.Monitor(silent_store, rank=0, world_size=4, timeout=20, where="test")
    try:
        assert silent.published_failure(wait=0.1) is None
        silent.failure = (2, "its connection closed", 1)  # seen before, by its thread
        stopped = silent.published_failure(wait=0.1)
        assert str(stopped) == "rank 2 failed: its connection closed" and stopped.rank == 2
    finally:
        silent_store.release.set()


class RankZero(Solo):
    """Rank 0 of four, in this process: its share of the samples, the job's store
    in memory (no all-reduce: the sums are not what is tested); after its first
    sample its launcher sends SIGTERM."""

    rank, world_size, label = 0, 4, "rank 0: "

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.monitor = monitor_module.Monitor(store, rank=0, world_size=4, timeout=20, where="t")

    def on_sample(self, nbytes: int) -> None:
        os.kill(os.getpid(), signal.SIGTERM)

    def stopped_by(self):
        return self.monitor.published_failure()


@pytest.mark.parametrize("stall", [True, False])
def test_a_rank_stopped_by_its_launcher_names_the_failure_that_stopped_the_job(
    meps_small, tmp_path, capsys, stall
):
    """SIGTERM (through the checkpoint's handler, as under torchrun) after rank 3
    published its stall: rank 0 says that rank 3 failed, not only that it was
    interrupted; with nothing published it says it was interrupted."""
    store = Store()
    if stall:
        _job_with_stall(store)
    options = ComputeOptions.of(
        meps_small, output_dir=tmp_path / "out", checkpoint=tmp_path / "ck", checkpoint_interval=0
    )
    outcome = execute(options, RankZero(store), threads=1)
    err = capsys.readouterr().err
    assert outcome.code == 143
    assert not list((tmp_path / "out").glob("*"))
    assert "--resume" in err  # the checkpoint resumes it
    if stall:
        assert f"error: the job stopped: rank 3 on wxs1 failed: {STALL}; no output was" in err
    else:
        assert "rank 3" not in err and "rank 0: interrupted by SIGTERM" in err


class Ended(BaseException):
    """What SIGTERM's own disposition does to the process, here an exception."""


def test_without_a_checkpoint_sigterm_still_ends_at_once_naming_the_failure(
    meps_small, tmp_path, capsys
):
    """No checkpoint: SIGTERM ends rank 0 at once (its outputs discarded), after
    one line naming the failure that stopped the job."""
    store = Store()
    _job_with_stall(store)
    options = ComputeOptions.of(meps_small, output_dir=tmp_path / "out")

    def end(signum, frame):
        raise Ended

    previous = signal.signal(signal.SIGTERM, end)
    try:
        with pytest.raises(Ended):
            execute(options, RankZero(store), threads=1)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert not list((tmp_path / "out").glob("*"))
    err = capsys.readouterr().err
    assert f"error: the job stopped: rank 3 on wxs1 failed: {STALL}; no output was" in err
