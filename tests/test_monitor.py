"""The monitor thread: progress pushed to the store, failures seen, and the
watchdog that ends a process whose main thread is stuck."""

from __future__ import annotations

import threading
import time

from wxstats.parallel import monitor as monitor_module


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
