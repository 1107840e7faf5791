"""The engine against a float64 reference on random data (property-based)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reference import assert_close
from wxstats.core.errors import InputError
from wxstats.core.kernel import Block
from wxstats.core.streams import StreamSpec
from wxstats.runtime.engine import accumulate, empty_accumulator
from wxstats.runtime.run import partition
from wxstats.sources.meps import MepsSource


class ArraySource:
    """In-memory samples (T, G, F) for tests: state with diffs of the given lags."""

    kind = "arrays"

    def __init__(self, samples: list[np.ndarray], lags: tuple[int, ...]) -> None:
        self.samples = samples
        n_f = samples[0].shape[-1]
        names = [f"v{i}" for i in range(n_f)]
        self.streams = [StreamSpec("state", names, [""] * n_f, lags)]
        self.attrs: dict = {}
        self.lags = lags

    def __len__(self) -> int:
        return len(self.samples)

    def read(self, index: int) -> dict[str, Block]:
        a = self.samples[index]
        return {
            "state": Block(
                a, np.arange(a.shape[-1]), (0, a.shape[0]), {k: (k, a.shape[0]) for k in self.lags}
            )
        }

    def reference_blocks(self) -> dict[str, Block]:
        return self.read(0)

    def prefetch(self, index: int) -> None:
        pass

    def describe(self, index: int) -> str:
        return f"sample {index}"

    def nbytes(self, index: int) -> int:
        return self.samples[index].nbytes

    def identity(self, files: bool = True) -> dict:
        return {}


def _reference(samples, lags, skipna):
    flat = np.concatenate([s.reshape(-1, s.shape[-1]) for s in samples]).astype(np.float64)
    out = {}
    for f in range(flat.shape[1]):
        col = flat[:, f]
        col = col[~np.isnan(col)] if skipna else col
        m = col.mean()
        out[f] = (col.size, m, np.sqrt(((col - m) ** 2).mean()), col.min(), col.max())
    diffs = {}
    samples = [s.astype(np.float64) for s in samples]
    for k in lags:
        d = np.concatenate([(s[k:] - s[:-k]).reshape(-1, s.shape[-1]) for s in samples if
                            s.shape[0] > k]).astype(np.float64)  # fmt: skip
        diffs[k] = []
        for f in range(d.shape[1]):
            col = d[:, f][np.isfinite(d[:, f])]
            m = col.mean()
            diffs[k].append((col.size, m, np.sqrt(((col - m) ** 2).mean())))
    return out, diffs


def _run(source, world, skipna=False, reverse=False):
    total = empty_accumulator(source)
    ranks = range(world - 1, -1, -1) if reverse else range(world)
    for rank in ranks:
        total.merge(accumulate(source, partition(len(source), rank, world), skipna=skipna))
    return total.extract(source.streams, source.kind, time_splits=False)  # no time axis


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_samples=st.integers(1, 6),
    t=st.integers(3, 7),
    g=st.integers(1, 40),
    f=st.integers(1, 3),
    offset=st.sampled_from([0.0, 280.0, 1e5, -5e4]),
    spread=st.sampled_from([1e-2, 1.0, 1e3]),
    nan_fraction=st.sampled_from([0.0, 0.0, 0.05]),
    world=st.integers(1, 7),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**32 - 1),
)
# CI found it: a feature whose first pair is NaN, then a single pair (std exactly 0)
@example(
    n_samples=1, t=4, g=1, f=2, offset=0.0, spread=1.0, nan_fraction=0.05, world=1,
    dtype=np.float64, seed=33,
)  # fmt: skip
def test_random_data_matches_reference_for_any_world_size(
    n_samples, t, g, f, offset, spread, nan_fraction, world, dtype, seed
):
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(n_samples):
        x = (offset + spread * rng.standard_normal((t, g, f))).astype(dtype)
        x[rng.random(x.shape) < nan_fraction] = np.nan
        x[0, 0, :] = offset + spread  # at least one finite value per feature
        samples.append(x)
    lags = (1, 2)
    source = ArraySource(samples, lags)
    skipna = nan_fraction > 0
    stats = _run(source, world, skipna=skipna)
    again = _run(source, 1, skipna=skipna, reverse=True)
    assert stats.state.std.tobytes() == again.state.std.tobytes()
    assert stats.state.mean.tobytes() == again.state.mean.tobytes()
    ref, ref_diffs = _reference(samples, lags, skipna)
    for i in range(f):
        count, mean, std, lo, hi = ref[i]
        assert stats.state.count[i] == count
        assert_close(stats.state.mean[i], mean, 1e-10, "mean")
        if std > 1e-9 * abs(mean):
            assert_close(stats.state.std[i], std, 1e-9, "std")
        assert stats.state.minimum[i] == lo and stats.state.maximum[i] == hi
        for k in lags:
            dcount, dmean, dstd = ref_diffs[k][i]
            if all(ref_diffs[k][j][0] == 0 for j in range(f)):
                # no pair of step k without NaN in any feature: its statistics are absent
                assert k not in stats.state.diff
                continue
            assert stats.state.diff[k].count[i] == dcount
            if dcount == 0:
                assert np.isnan(stats.state.diff[k].mean[i])
                continue
            assert abs(stats.state.diff[k].mean[i] - dmean) <= 1e-10 * max(dstd, abs(dmean))
            assert_close(stats.state.diff[k].std[i], dstd, 1e-9, "diff std")


@pytest.mark.parametrize("magnitude", [1e160, -1e160, 1e-310, 3e-320])
def test_huge_and_denormal_values(magnitude):
    rng = np.random.default_rng(7)
    samples = [magnitude * (2.0 + rng.standard_normal((5, 30, 2))) for _ in range(3)]
    source = ArraySource(samples, (1,))
    stats = _run(source, 2)
    # the reference on data rescaled exactly by a power of two (no overflow/underflow)
    k = 2.0 ** np.frexp(abs(magnitude))[1]
    ref, ref_diffs = _reference([s / k for s in samples], (1,), False)

    def close(actual, expected_scaled):
        # a denormal result is exact only to its own spacing (5e-324): allow one of it
        expected = expected_scaled * k
        assert abs(actual - expected) <= max(1e-10 * abs(expected), np.spacing(0.0)), (
            actual,
            expected,
        )

    for i in range(2):
        close(stats.state.mean[i], ref[i][1])
        close(stats.state.std[i], ref[i][2])
        close(stats.state.diff[1].std[i], ref_diffs[1][i][2])
    assert np.isfinite(stats.state.std).all()


def test_constant_and_near_constant_variables():
    base = np.full((4, 10, 2), 101325.0)
    base[..., 1] += np.arange(10) * 1e-6  # near-constant: spread 1e-6 on 1e5
    stats = _run(ArraySource([base, base.copy()], (1,)), 2)
    assert stats.state.std[0] == 0.0 and stats.state.diff[1].std[0] == 0.0
    assert any("v0" in w and "std 0" in w for w in stats.warnings)
    assert not any("v1" in w for w in stats.warnings)
    ref, _ = _reference([base, base], (1,), False)
    assert_close(stats.state.std[1], ref[1][2], 1e-6, "near-constant std")


def test_all_nan_variable_is_an_error_even_with_skipna():
    x = np.random.default_rng(0).standard_normal((4, 10, 2))
    x[..., 1] = np.nan
    with pytest.raises(InputError, match="v1.*no finite values"):
        _run(ArraySource([x], (1,)), 1, skipna=True)


class Recording(MepsSource):
    """The MEPS source, noting the order of prefetch hints and reads."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.events: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def prefetch(self, index):
        with self.lock:
            self.events.append(("prefetch", index))
        super().prefetch(index)

    def read(self, index):
        with self.lock:
            self.events.append(("read", index))
        return super().read(index)


@pytest.mark.parametrize("threads", [1, 3])
def test_every_sample_is_prefetched_before_it_is_read(meps_small, threads):
    source = Recording(meps_small)
    source.events.clear()
    indices = [7, 2, 5, 0, 9, 4]
    one = accumulate(source, indices, threads=threads)
    hinted = [i for kind, i in source.events if kind == "prefetch"]
    assert sorted(hinted) == sorted(indices)  # each once, nothing else
    for i in indices:
        assert source.events.index(("prefetch", i)) < source.events.index(("read", i))
    # hints run ahead by a bounded amount (3 * threads + 1 samples at most)
    reads = hints = 0
    for kind, _ in source.events:
        if kind == "read":
            reads += 1
        else:
            hints += 1
            assert hints <= reads + 3 * threads + 1
    # and they change nothing
    plain = accumulate(MepsSource(meps_small), indices, threads=1)
    assert [p.tobytes() for p in one.pack()] == [p.tobytes() for p in plain.pack()]


# -- Ctrl-C with several threads ------------------------------------------------------------
class _GatedSource(MepsSource):
    """Reads wait at a gate the test opens; records which samples were started
    and which finished, and says when ``running`` reads are under way."""

    def __init__(self, *args, running: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.running = running
        self.started: list[int] = []
        self.finished: list[int] = []
        self.all_running = threading.Event()
        self.gate = threading.Event()
        self._lock = threading.Lock()

    def read(self, index):
        with self._lock:
            self.started.append(index)
            if len(self.started) == self.running:
                self.all_running.set()
        self.gate.wait(timeout=60)  # a hang guard only: the test opens the gate
        blocks = super().read(index)
        with self._lock:
            self.finished.append(index)
        return blocks

    def prefetch(self, index):
        pass


def test_ctrl_c_with_threads_never_starts_the_queued_samples(meps_small, monkeypatch):
    """The window holds 2 x threads samples; after Ctrl-C only the running ones
    finish their block (they used to be followed by every queued one), and the
    interrupt is not held back until they do. Ordered by events, not by time."""
    import signal
    from concurrent.futures import ThreadPoolExecutor

    from wxstats.runtime import engine

    threads = 3
    window_full = threading.Event()  # 2 x threads samples submitted: some are queued

    class CountingPool(ThreadPoolExecutor):
        submitted = 0

        def submit(self, *args, **kwargs):
            future = super().submit(*args, **kwargs)
            CountingPool.submitted += 1
            if CountingPool.submitted == 2 * threads:
                window_full.set()
            return future

    monkeypatch.setattr(engine, "ThreadPoolExecutor", CountingPool)
    source = _GatedSource(meps_small, running=threads)
    source.gate.set()
    source.gate.clear()
    source.started.clear()
    source.finished.clear()
    before = set(threading.enumerate())

    main = threading.main_thread().ident
    raised = threading.Event()

    def on_sigint(signum, frame):
        if not raised.is_set():  # once: a repeated signal must not hit the clean-up
            raised.set()
            raise KeyboardInterrupt

    def interrupt() -> None:
        if not (source.all_running.wait(timeout=60) and window_full.wait(timeout=60)):
            return
        # to the main thread, where Ctrl-C lands, again until its handler ran: one that
        # arrives as the main thread goes to sleep on a result runs only on a later one
        while not raised.is_set():
            signal.pthread_kill(main, signal.SIGINT)
            raised.wait(timeout=0.1)

    previous = signal.signal(signal.SIGINT, on_sigint)
    sender = threading.Thread(target=interrupt)
    sender.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            accumulate(source, range(len(source)), threads=threads)
        # the interrupt came back while every running read still waited at the gate
        assert source.finished == []
    finally:
        raised.set()
        source.gate.set()
        sender.join()
        signal.signal(signal.SIGINT, previous)
    # let the pool's threads end: the running reads finish, then nothing is left to start
    for worker in set(threading.enumerate()) - before:
        worker.join(timeout=60)
        assert not worker.is_alive()
    assert CountingPool.submitted == 2 * threads  # three of them were queued
    assert sorted(source.started) == list(range(threads))
    assert sorted(source.finished) == list(range(threads))


@pytest.mark.parametrize("signals", [1, 2])
def test_ctrl_c_once_or_twice_ends_the_command_quietly(tmp_path, signals):
    """A run with threads stopped by Ctrl-C, and again while the process ends (its
    threads finishing their blocks): one line, status 130, no traceback from the
    interpreter's shutdown."""
    import signal
    import subprocess
    import time

    from cluster import fault_hooks, fault_log, with_fault_hooks
    from distributed_helpers import compute_args, env, make_odd_dataset, wxstats_cmd

    config = make_odd_dataset(tmp_path / "data", analysis_times=7)  # 13 samples
    log = tmp_path / "opens.log"
    hooked = with_fault_hooks(
        env(), fault_hooks(tmp_path), match="*/nwp_20*_mbr*.npy", delay="1.0", log=str(log)
    )
    cmd = wxstats_cmd(*compute_args(config, tmp_path / "out", "--threads", "3"))
    proc = subprocess.Popen(cmd, env=hooked, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(fault_log(log)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read()
    proc.send_signal(signal.SIGINT)
    lines = []
    if signals == 2:  # again once the command has said so: while the process ends
        while not any("interrupted" in line for line in lines):
            lines.append(proc.stderr.readline())
        proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=60)
    err = "".join(lines) + rest
    # the second Ctrl-C may land after the interpreter has put the default handlers back
    # (the last milliseconds of the process): then the signal itself ends it, which a
    # shell reports as status 130 too, just as quietly
    assert proc.returncode == 130 or (signals == 2 and proc.returncode == -signal.SIGINT), err
    assert "Traceback" not in err and "interrupted" in err
    assert not (tmp_path / "out" / "parameter_mean.pt").exists()


def test_a_feature_missing_at_the_first_step_takes_its_reference_later():
    """Feature 1 is NaN at the first step (and so in the first pair) and then
    constant far from 0: its std and diff std are exactly 0, as a reference
    taken from its first finite values gives (a shift of 0 left ~1e-5 here)."""
    x = np.empty((6, 3, 2))
    x[..., 0] = np.arange(18.0).reshape(6, 3)
    x[..., 1] = 1234.5679  # fl(x * x) > x * x: a shift of 0 leaves a positive variance
    x[0, :, 1] = np.nan
    source = ArraySource([x], (1,))
    stats = _run(source, 1, skipna=True)
    assert stats.state.count[1] == 15 and stats.state.mean[1] == 1234.5679
    assert stats.state.std[1] == 0.0
    assert stats.state.diff[1].count[1] == 12 and stats.state.diff[1].std[1] == 0.0
    assert_close(stats.state.std[0], np.arange(18.0).std(), 1e-15, "std of feature 0")
