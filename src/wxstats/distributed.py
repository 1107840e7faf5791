"""One job on many processes and machines through PyTorch Distributed.

How a job starts (see :func:`detect_launch`):

* ``wxstats compute CONFIG --nproc N`` — :func:`launch_local` starts N ranks
  (``python -m wxstats``) on this machine with a free port and watches them;
* ``torchrun`` — ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
  ``MASTER_PORT`` (one node or many);
* ``srun`` — ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``; the first
  host of ``SLURM_JOB_NODELIST`` (expanded here, no ``scontrol``) is the master
  and the port comes from the job and step ids, so that two jobs sharing a
  node never meet; ``MASTER_ADDR``/``MASTER_PORT`` win when set.

What a job does (see :class:`Job`): every rank reduces a contiguous range of
samples (:func:`wxstats.api.partition`) into an exact accumulator, then the
packed fixed-size tensors are combined with ``all_reduce`` (SUM of integer
limbs, MIN and MAX of the extremes): integer addition is exact, so the result
is the same bits for any number of ranks. Only rank 0 writes, after every rank
succeeded.

Why it cannot hang: besides the process group, every rank talks to the job's
key-value store (the ``TCPStore`` behind the process group). A monitor thread
per rank publishes progress and a heartbeat each second and looks for failure
reports. A rank that fails publishes the reason; the others stop at their next
sample and exit with a message naming that rank. A rank that dies without a
word (killed) stops its heartbeat and is declared failed after ``--timeout``
seconds (default 120); ``--nproc``, ``torchrun`` and Slurm notice a dead
process sooner. Collectives only start once the store shows that every rank is
ready, so a slow rank never trips the collective timeout, and a rank that
cannot stop within ``--timeout`` seconds of a failure is ended by its monitor.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
import warnings
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np

from wxstats.accumulate import RunAccumulator
from wxstats.errors import WxstatsError
from wxstats.sources.base import sample_sizes

DEFAULT_TIMEOUT = 120.0
"""Seconds to wait for all ranks to join, for a silent rank before it is
declared dead, and for a rank to stop after another failed."""

HEARTBEAT_S = 1.0
"""How often each rank's monitor publishes progress and checks for failures."""

SLURM_PORT_BASE = 20000


# -- Slurm ---------------------------------------------------------------------


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in {text!r}")
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '[' in {text!r}")
    items.append(text[start:])
    return [item for item in items if item]


def _expand_range(spec: str, whole: str) -> list[str]:
    values = []
    for part in spec.split(","):
        low, sep, high = part.partition("-")
        if not low.isdigit() or (sep and not high.isdigit()):
            raise ValueError(f"bad range {part!r} in {whole!r}")
        width = len(low)  # "01-03" keeps its zero padding
        for n in range(int(low), int(high if sep else low) + 1):
            values.append(str(n).zfill(width))
    return values


def expand_nodelist(text: str) -> list[str]:
    """Host names of a Slurm node list, in order: ``node[01-03,07]`` →
    node01 node02 node03 node07; ``a1,b[2-4]``; ``r[1-2]-n[1-2]`` (products)."""
    hosts: list[str] = []
    for item in _split_top(text.strip()):
        match = re.search(r"\[([^\[\]]*)\]", item)
        if match is None:
            if "]" in item:
                raise ValueError(f"unbalanced ']' in {text!r}")
            hosts.append(item)
            continue
        head, tail = item[: match.start()], item[match.end() :]
        for value in _expand_range(match.group(1), text):
            hosts.extend(expand_nodelist(head + value + tail))
    return hosts


def _tasks_per_node(text: str) -> list[int]:
    """``SLURM_STEP_TASKS_PER_NODE`` such as ``2(x3),1`` → [2, 2, 2, 1]."""
    counts = []
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if match is None:
            raise ValueError(f"bad tasks-per-node list {text!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return counts


def slurm_port(job_id: int, step_id: int) -> int:
    """A port for the job's store, from 20000 to 59999: two jobs whose ids
    differ by less than 5000 never share one, nor do 8 consecutive steps."""
    return SLURM_PORT_BASE + (job_id % 5000) * 8 + step_id % 8


# -- launch environment -----------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """Where this process sits in the job, whichever launcher started it."""

    launcher: str  # "nproc", "torchrun" or "slurm"
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    cpus_per_rank: int | None = None

    def default_threads(self) -> int:
        """Threads so that ranks × threads ≈ the CPUs this node gives the job."""
        if self.cpus_per_rank:
            return max(1, min(self.cpus_per_rank, 8))
        return max(1, min(_available_cpus() // max(1, self.local_world_size), 8))


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _int(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    value = env.get(name)
    if value is None or value == "":
        if default is None:
            raise WxstatsError(f"environment variable {name} is not set")
        return default
    try:
        return int(value)
    except ValueError:
        raise WxstatsError(f"environment variable {name}={value!r} is not an integer") from None


def detect_launch(env: Mapping[str, str] | None = None) -> Launch | None:
    """The job this process belongs to, or ``None`` for a plain single process.

    torchrun's variables win over Slurm's (torchrun inside an allocation). A
    Slurm batch script or ``salloc`` shell (no ``srun`` step) is not a job of
    ranks: wxstats then runs as one process there.
    """
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        world = _int(env, "WORLD_SIZE")
        return Launch(
            launcher=env.get("WXSTATS_LAUNCHER", "torchrun"),
            rank=_int(env, "RANK"),
            world_size=world,
            local_rank=_int(env, "LOCAL_RANK", 0),
            local_world_size=_int(env, "LOCAL_WORLD_SIZE", 1),
            master_addr=env.get("MASTER_ADDR") or "127.0.0.1",
            master_port=_int(env, "MASTER_PORT"),
        )
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        world = _int(env, "SLURM_STEP_NUM_TASKS", _int(env, "SLURM_NTASKS", 1))
        nodelist = (
            env.get("SLURM_STEP_NODELIST")
            or env.get("SLURM_JOB_NODELIST")
            or env.get("SLURM_NODELIST")
        )
        if env.get("MASTER_ADDR"):
            master = env["MASTER_ADDR"]
        elif nodelist:
            try:
                master = expand_nodelist(nodelist)[0]
            except (ValueError, IndexError) as exc:
                raise WxstatsError(f"cannot read SLURM node list {nodelist!r}: {exc}") from None
        else:
            raise WxstatsError("SLURM_JOB_NODELIST is not set: cannot find the master node")
        local_world = 1
        per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
        if per_node:
            try:
                counts = _tasks_per_node(per_node)
                local_world = counts[min(_int(env, "SLURM_NODEID", 0), len(counts) - 1)]
            except ValueError:
                local_world = 1
        step = env.get("SLURM_STEP_ID", "0")
        port = (
            _int(env, "MASTER_PORT")
            if env.get("MASTER_PORT")
            else slurm_port(_int(env, "SLURM_JOB_ID", 0), int(step) if step.isdigit() else 0)
        )
        cpus = env.get("SLURM_CPUS_PER_TASK")
        return Launch(
            launcher="slurm",
            rank=_int(env, "SLURM_PROCID"),
            world_size=world,
            local_rank=_int(env, "SLURM_LOCALID", 0),
            local_world_size=local_world,
            master_addr=master,
            master_port=port,
            cpus_per_rank=int(cpus) if cpus and cpus.isdigit() else None,
        )
    return None


def resolve_backend(backend: str, device: str, launch: Launch) -> tuple[str, str]:
    """(backend, device) from ``--backend auto|gloo|nccl`` and ``--device auto|cpu|cuda``:
    CUDA when asked, or on ``auto`` when there is a GPU for every local rank."""
    import torch

    cuda = torch.cuda.is_available()
    if device == "auto":
        use_cuda = cuda and torch.cuda.device_count() >= launch.local_world_size
        if backend == "gloo":
            use_cuda = False
        device = "cuda" if use_cuda or backend == "nccl" else "cpu"
    if device == "cuda":
        if not cuda:
            raise WxstatsError("--device cuda: no CUDA device is available to this process")
        if launch.local_rank >= torch.cuda.device_count():
            raise WxstatsError(
                f"--device cuda: local rank {launch.local_rank} has no GPU "
                f"({torch.cuda.device_count()} visible); start at most one rank per GPU"
            )
        device = f"cuda:{launch.local_rank}"
    if backend == "auto":
        backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl" and not device.startswith("cuda"):
        raise WxstatsError("--backend nccl needs --device cuda (NCCL reduces GPU tensors)")
    return backend, device


# -- the job: store, process group, monitor ------------------------------------------


class JobStopped(WxstatsError):
    """This rank stops because another rank failed (the message names it)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _fingerprint(identity: Any) -> int:
    text = json.dumps(identity, sort_keys=True, default=str).encode()
    return zlib.crc32(text) | (zlib.adler32(text) << 32) & 0x7FFFFFFFFFFFFFFF


class Job:
    """This rank's membership of a job: a :class:`wxstats.api.Communicator`."""

    def __init__(
        self,
        launch: Launch,
        backend: str = "auto",
        device: str = "auto",
        timeout: float = DEFAULT_TIMEOUT,
        show_progress: bool = True,
        progress_mode: str = "bar",
        progress_interval: float = 30.0,
    ) -> None:
        self.launch = launch
        self.rank = launch.rank
        self.world_size = launch.world_size
        self.timeout = float(timeout)
        self.backend, self.device = resolve_backend(backend, device, launch)
        self.show_progress = show_progress and self.rank == 0
        self.progress_mode, self.progress_interval = progress_mode, progress_interval
        self.samples_done = 0
        self.bytes_done = 0
        self._pushed = (0, 0)
        self.failure: tuple[int, str, int] | None = None  # (rank, message, exit code)
        self._stop = threading.Event()
        self._failed_at: float | None = None
        self._monitor: threading.Thread | None = None
        self._progress = None
        self._totals: tuple[int, int] | None = None
        self._identity = 0
        self._dead: set[int] = set()  # ranks declared dead: rank 0 does not wait for them
        self._started = time.monotonic()
        self.store = None

    # -- start and stop ---------------------------------------------------------
    def start(self) -> Job:
        import torch
        import torch.distributed as dist

        os.environ["MASTER_ADDR"] = self.launch.master_addr
        os.environ["MASTER_PORT"] = str(self.launch.master_port)
        if self.device.startswith("cuda"):
            torch.cuda.set_device(torch.device(self.device))
        wait = timedelta(seconds=self.timeout)
        try:
            store, _, _ = next(
                dist.rendezvous("env://", rank=self.rank, world_size=self.world_size, timeout=wait)
            )
            dist.init_process_group(
                self.backend, store=store, rank=self.rank, world_size=self.world_size, timeout=wait
            )
        except (RuntimeError, ValueError, OSError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise WxstatsError(
                f"rank {self.rank}: could not join the job at {self.launch.master_addr}:"
                f"{self.launch.master_port} within {self.timeout:g} s ({self.backend}): {first}"
            ) from None
        # torchrun's agent store outlives restarted workers: one key space per attempt
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self.store = dist.PrefixStore(f"wxstats/{attempt}/", store)
        self._beat = {r: (-1, time.monotonic()) for r in self._watched()}
        self._monitor = threading.Thread(target=self._watch, name="wxstats-monitor", daemon=True)
        self._monitor.start()
        return self

    def close(self, code: int) -> None:
        """Leave the job; rank 0 (which may host the store) leaves last."""
        import torch.distributed as dist

        try:
            if self.rank == 0:
                deadline = time.monotonic() + min(self.timeout, 30.0)
                while time.monotonic() < deadline and self.world_size > 1:
                    if self.store.add("left", 0) >= self.world_size - 1 - len(self._dead):
                        break
                    time.sleep(0.05)
            else:
                self.store.set(f"left/{self.rank}", "1")
                self.store.add("left", 1)
        except Exception:  # noqa: BLE001 - the store may be gone: nothing to tell
            pass
        self._stop.set()
        if self._monitor is not None:
            self._monitor.join(timeout=5)
        self._close_progress(success=code == 0)
        try:
            if code == 0:
                dist.destroy_process_group()
            # after a failure peers may be gone: leave the rest to process exit
        except Exception:  # noqa: BLE001
            pass

    # -- what ranks tell each other ------------------------------------------------
    def set_totals(self, samples: int, nbytes: int, identity: Any) -> None:
        self._totals = (samples, nbytes)
        self._identity = _fingerprint(identity)
        if self.show_progress:
            from wxstats.progress import ProgressReporter

            self._progress = ProgressReporter(
                samples,
                None,
                nbytes,
                self.progress_mode,
                self.progress_interval,
                ranks=self.world_size,
            ).__enter__()

    def on_sample(self, nbytes: int) -> None:
        """Called by the main thread after each sample: count it, stop if asked."""
        self.samples_done += 1
        self.bytes_done += nbytes
        self.raise_if_failed()

    def raise_if_failed(self) -> None:
        if self.failure is not None:
            rank, message, code = self.failure
            raise JobStopped(f"rank {rank} failed: {message}", code)

    def fail(self, message: str, code: int) -> None:
        """Tell every rank that this one failed (first failure wins the message)."""
        self._publish_failure(self.rank, message, code)

    def _publish_failure(self, rank: int, message: str, code: int) -> None:
        if self.store is None:
            return
        try:
            payload = json.dumps({"rank": rank, "message": message, "code": code})
            self.store.set(f"error/{rank}", payload)
            if self.store.add("failures", 1) == 1:
                self.store.set("first_error", payload)
        except Exception:  # noqa: BLE001 - store gone: peers notice through it too
            pass
        if self.failure is None:
            self.failure = (rank, message, code)

    def _wait_for(self, key: str, target: int) -> None:
        """Wait until counter ``key`` reaches ``target`` or a rank fails."""
        while True:
            self.raise_if_failed()
            try:
                if self.store.add(key, 0) >= target:
                    return
            except Exception as exc:  # noqa: BLE001
                self._lost(exc)
            time.sleep(0.05)

    # -- Communicator --------------------------------------------------------------
    def allreduce(self, acc: RunAccumulator) -> RunAccumulator:
        """Exact merge of every rank's accumulator through fixed-size tensors."""
        import torch
        import torch.distributed as dist

        self._push_progress()
        self.store.add("ready", 1)
        self._wait_for("ready", self.world_size)
        ints, minimum, maximum = acc.pack()
        device = torch.device(self.device)
        check = torch.tensor([self._identity, -self._identity, ints.size], dtype=torch.int64)
        check = check.to(device)
        dist.all_reduce(check, op=dist.ReduceOp.MAX)
        first, neg, size = (int(v) for v in check.cpu())
        if first != -neg or size != ints.size:
            raise WxstatsError(
                "the ranks do not see the same dataset (different files, sizes or options): "
                "run every rank on the same data"
            )
        t_ints = torch.from_numpy(ints.astype(np.int64)).to(device)
        t_min = torch.from_numpy(minimum.astype(np.float64)).to(device)
        t_max = torch.from_numpy(maximum.astype(np.float64)).to(device)
        dist.all_reduce(t_ints, op=dist.ReduceOp.SUM)
        dist.all_reduce(t_min, op=dist.ReduceOp.MIN)
        dist.all_reduce(t_max, op=dist.ReduceOp.MAX)
        acc.unpack_like(t_ints.cpu().numpy(), t_min.cpu().numpy(), t_max.cpu().numpy())
        return acc

    def broadcast_bytes(self, key: str, payload: bytes) -> bytes:
        """Rank 0's ``payload`` on every rank, through the job's store."""
        if self.rank == 0:
            self.store.set(key, payload)
            return payload
        while True:
            self.raise_if_failed()
            try:
                if self.store.check([key]):
                    return bytes(self.store.get(key))
            except Exception as exc:  # noqa: BLE001
                self._lost(exc)
            time.sleep(0.05)

    def succeed(self) -> None:
        """Rank 0: outputs are written; the others may exit with success."""
        self.store.set("result", "0")

    def wait_result(self) -> None:
        """Ranks > 0: wait until rank 0 has written the outputs (or failed)."""
        while not self.store.check(["result"]):
            self.raise_if_failed()
            time.sleep(0.05)

    # -- the monitor thread ------------------------------------------------------------
    def _watched(self) -> list[int]:
        return list(range(1, self.world_size)) if self.rank == 0 else [0]

    def _push_progress(self) -> None:
        done = (self.samples_done, self.bytes_done)
        ds, db = done[0] - self._pushed[0], done[1] - self._pushed[1]
        if ds or db:
            self.store.add("samples", ds)
            self.store.add("bytes", db)
            self._pushed = done

    def _lost(self, exc: Exception) -> None:
        if self.failure is None and not self._stop.is_set():
            self.failure = (
                0,
                f"lost contact with the job's store at {self.launch.master_addr}:"
                f"{self.launch.master_port} (rank 0 or the launcher ended): {exc}",
                1,
            )

    def _watch(self) -> None:
        while not self._stop.wait(HEARTBEAT_S if self.failure is None else 0.2):
            try:
                self._watch_once()
            except Exception as exc:  # noqa: BLE001
                self._lost(exc)
            if self.failure is not None:
                if self._failed_at is None:
                    self._failed_at = time.monotonic()
                elif time.monotonic() - self._failed_at > self.timeout:
                    # the main thread is stuck (e.g. in a hung read): end the process
                    rank, message, code = self.failure
                    print(
                        f"wxstats: error: rank {self.rank}: stopping, rank {rank} failed: "
                        f"{message}",
                        file=sys.stderr,
                        flush=True,
                    )
                    os._exit(code or 1)

    def _watch_once(self) -> None:
        store = self.store
        self._push_progress()
        store.add(f"hb/{self.rank}", 1)
        if self.failure is None and store.add("failures", 0) > 0:
            first = json.loads(store.get("first_error"))
            self.failure = (int(first["rank"]), str(first["message"]), int(first["code"]))
        now = time.monotonic()
        for r in list(self._beat):
            count = store.add(f"hb/{r}", 0)
            last, since = self._beat[r]
            if count != last:
                self._beat[r] = (count, now)
            elif now - since > self.timeout and self.failure is None:
                if store.check([f"left/{r}"]) or store.check(["result"]):
                    del self._beat[r]
                    continue
                self._dead.add(r)
                self._publish_failure(
                    r,
                    f"no sign of life for {self.timeout:g} s (killed, or its node failed?)",
                    1,
                )
        if self._progress is not None:
            self._progress.set_done(store.add("samples", 0), store.add("bytes", 0))

    def _close_progress(self, success: bool) -> None:
        if self._progress is not None:
            if success and self._totals:
                self._progress.set_done(*self._totals)
            self._progress.close(success)
            self._progress = None


# -- a rank's whole run --------------------------------------------------------------


def run_rank(args: Any, launch: Launch) -> int:
    """``wxstats compute`` as one rank of a job: returns the exit status."""
    from wxstats.api import check_outputs, compute_source, open_source, write_outputs
    from wxstats.checkpoint import resume_hint
    from wxstats.cli import options_from_args
    from wxstats.errors import Interrupted
    from wxstats.report import format_table

    quiet = bool(getattr(args, "quiet", False))
    options = options_from_args(args)
    try:
        checkpoint = options.resumable()
    except WxstatsError as exc:
        print(f"wxstats: error: {exc}", file=sys.stderr, flush=True)
        return 2
    if getattr(args, "threads", None) is None:
        options.threads = launch.default_threads()
    who = f"rank {launch.rank}"
    try:
        job = Job(
            launch,
            backend=getattr(args, "backend", "auto"),
            device=getattr(args, "device", "auto"),
            timeout=getattr(args, "timeout", None) or DEFAULT_TIMEOUT,
            show_progress=not quiet or getattr(args, "log_format", "text") == "json",
            progress_mode="json" if getattr(args, "log_format", "text") == "json" else "bar",
            progress_interval=getattr(args, "log_interval", 30.0),
        ).start()
    except WxstatsError as exc:
        print(f"wxstats: error: {exc}", file=sys.stderr, flush=True)
        return 2
    if launch.rank != 0:
        warnings.simplefilter("ignore")  # rank 0 reports what concerns the whole job
    code = 1
    hinted = False
    try:
        source = open_source(args.dataset, options)
        if launch.rank == 0:
            check_outputs(source, options)
        n = len(source)
        sizes = sample_sizes(source)
        # what every rank must agree on (not mtimes: data staged per node is fine)
        layout = [source.kind, [[s.name, list(s.features)] for s in source.streams], sizes]
        job.set_totals(n, int(sum(sizes)), layout)
        job.raise_if_failed()
        stats = compute_source(
            source,
            skipna=options.skipna,
            threads=options.threads,
            comm=job,
            on_sample=lambda i: job.on_sample(sizes[i]),
            checkpoint=checkpoint,
        )
        if launch.rank == 0:
            written = write_outputs(source, stats, options)
            job.succeed()
            job._close_progress(success=True)
            for note in stats.warnings:
                print(f"wxstats: warning: {note}", file=sys.stderr)
            if not quiet:
                print(format_table(stats))
                print(f"wrote {len(written)} files: " + ", ".join(str(p) for p in written))
        else:
            job.wait_result()
        code = 0
    except JobStopped as exc:
        code = exc.code or 1
        if launch.rank == 0:
            print(
                f"wxstats: error: the job stopped: {exc}; no output was written",
                file=sys.stderr,
                flush=True,
            )
    except Interrupted as exc:
        code = exc.code
        hinted = True
        job.fail(str(exc), code)
        print(f"wxstats: {who}: {exc}", file=sys.stderr, flush=True)
    except WxstatsError as exc:
        code = 2
        job.fail(str(exc), code)
        print(f"wxstats: error: {who}: {exc}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        code = 130
        job.fail("interrupted", code)
        print(f"wxstats: {who}: interrupted; no output was written", file=sys.stderr)
    except Exception as exc:  # noqa: BLE001 - a bug: say where, stop the others
        code = 1
        job.fail(f"unexpected {type(exc).__name__}: {exc}", code)
        traceback.print_exc()
        print(f"wxstats: error: {who}: unexpected {type(exc).__name__}", file=sys.stderr)
    finally:
        job.close(code)
    if code and checkpoint is not None and checkpoint.started and launch.rank == 0 and not hinted:
        print(f"wxstats: {resume_hint(checkpoint.directory)}", file=sys.stderr, flush=True)
    return code


# -- --nproc: ranks started here ---------------------------------------------------


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 now (the OS picks it)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def strip_nproc(argv: list[str]) -> list[str]:
    """The command line without ``--nproc N`` (what each rank runs)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            out.append(arg)
    return out


def _die_with_parent() -> None:
    """Ranks get SIGTERM if the launching process dies (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - best effort only
        pass


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def launch_local(argv: list[str], nproc: int, timeout: float = DEFAULT_TIMEOUT) -> int:
    """Run ``wxstats`` with ``argv`` as ``nproc`` ranks on this machine.

    If a rank fails, the others stop by themselves through the job's store;
    any still running ``timeout`` seconds later (or at once, if a rank was
    killed by a signal) are terminated. Nothing is left running.

    SIGINT (Ctrl-C reaches every rank through the terminal) and SIGTERM
    (passed on to every rank) give the ranks :data:`STOP_GRACE_S` seconds to
    save their progress (``--checkpoint``) and stop, before they are ended.
    """
    port = free_port()
    children: list[subprocess.Popen] = []
    base = dict(os.environ)
    for key in ("TORCHELASTIC_USE_AGENT_STORE", "GROUP_RANK", "ROLE_RANK"):
        base.pop(key, None)
    for rank in range(nproc):
        env = dict(base)
        env.update(
            RANK=str(rank),
            WORLD_SIZE=str(nproc),
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE=str(nproc),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            WXSTATS_LAUNCHER="nproc",
        )
        children.append(
            subprocess.Popen(
                [sys.executable, "-m", "wxstats", *argv],
                env=env,
                preexec_fn=_die_with_parent,
            )
        )
    first_failure: tuple[int, int] | None = None
    deadline = None
    grace = 0.0
    previous = _raise_on_sigterm()
    try:
        while True:
            codes = [c.poll() for c in children]
            if all(c is not None for c in codes):
                break
            for rank, c in enumerate(codes):
                if c not in (None, 0) and first_failure is None:
                    first_failure = (rank, c)
                    # a killed rank said nothing: stop the rest now
                    deadline = time.monotonic() + (0 if c < 0 else timeout)
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        first_failure = first_failure or (-1, 130)
        grace = STOP_GRACE_S
    except _Terminated:
        first_failure = first_failure or (-1, 143)
        grace = STOP_GRACE_S
        for c in children:
            if c.poll() is None:
                c.send_signal(signal.SIGTERM)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        _stop_all(children, grace)
    codes = [c.returncode for c in children]
    if first_failure is None:
        bad = [(r, c) for r, c in enumerate(codes) if c != 0]
        first_failure = bad[0] if bad else None
    if first_failure is None:
        return 0
    rank, c = first_failure
    if rank < 0:
        name = "SIGTERM" if c == 143 else "SIGINT"
        print(
            f"wxstats: interrupted by {name}; all ranks stopped, no output was written",
            file=sys.stderr,
        )
        return c
    if c < 0:
        print(
            f"wxstats: error: rank {rank} of {nproc} {_describe_exit(c)}; the other ranks "
            "were stopped, no output was written",
            file=sys.stderr,
        )
        return 1
    return max(c for c in codes if c and c > 0) if any(c and c > 0 for c in codes) else 1


STOP_GRACE_S = 10.0
"""Seconds ranks get to save and stop after SIGINT/SIGTERM reached ``--nproc``."""


class _Terminated(Exception):
    """SIGTERM reached the ``--nproc`` launcher."""


def _raise_on_sigterm() -> Any:
    def handler(signum: int, frame: Any) -> None:
        raise _Terminated

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, handler)


def _stop_all(children: list[subprocess.Popen], grace: float = 0.0) -> None:
    """Wait ``grace`` seconds for the ranks to stop, then terminate, then kill them."""
    end = time.monotonic() + grace
    for c in children:
        if grace > 0:
            with contextlib.suppress(subprocess.TimeoutExpired):
                c.wait(timeout=max(0.0, end - time.monotonic()))
    for c in children:
        if c.poll() is None:
            c.terminate()
    end = time.monotonic() + 5
    for c in children:
        try:
            c.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            c.kill()
            c.wait()
