"""How the processes of a job are started and find each other.

* ``wxstats compute CONFIG --nproc N`` — :func:`launch_local` starts N ranks
  (``python -m wxstats``) on this machine with a free port and watches them;
* ``torchrun`` — ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
  ``MASTER_PORT`` (one node or many);
* ``srun`` — ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``; the first
  host of ``SLURM_JOB_NODELIST`` (:mod:`wxstats.parallel.slurm`) is the master
  and the port comes from the job and step ids, so that two jobs sharing a
  node do not meet; ``MASTER_ADDR``/``MASTER_PORT`` win when set.

:func:`detect_launch` says which (``None``: a plain single process), and
refuses at once a rank that cannot belong to its job; :func:`check_master`
refuses a master host that does not resolve, before any rendezvous.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wxstats.core.errors import WxstatsError
from wxstats.core.machine import available_cpus
from wxstats.parallel.slurm import expand_nodelist, slurm_port, tasks_per_node

DEFAULT_TIMEOUT = 120.0
"""Seconds to wait for all ranks to join, for a silent rank before it is
declared dead, and for a rank to stop after another failed."""

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
    token: str = ""
    """What this job is (``slurm job 12 step 0``, torchrun's run id...): ranks that
    reach a store holding another token refuse to join (two jobs on one port)."""
    master_from: str = field(default="", compare=False)
    """The variable ``master_addr`` came from, for the message if it does not resolve."""

    def default_threads(self) -> int:
        """Threads so that ranks × threads ≈ the CPUs this node gives the job."""
        if self.cpus_per_rank:
            return max(1, min(self.cpus_per_rank, 8))
        return max(1, min(available_cpus() // max(1, self.local_world_size), 8))


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


def _first_set(env: Mapping[str, str], *names: str) -> str:
    """The first of ``names`` set in ``env`` (the last one if none is)."""
    return next((name for name in names if env.get(name)), names[-1])


def detect_launch(env: Mapping[str, str] | None = None) -> Launch | None:
    """The job this process belongs to, or ``None`` for a plain single process.

    torchrun's variables win over Slurm's (torchrun inside an allocation). A
    Slurm batch script or ``salloc`` shell (no ``srun`` step) is not a job of
    ranks: wxstats then runs as one process there.
    """
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        world = _int(env, "WORLD_SIZE")
        rank, local_rank = _int(env, "RANK"), _int(env, "LOCAL_RANK", 0)
        local_world = _int(env, "LOCAL_WORLD_SIZE", 0)
        _check_place(
            env,
            (rank, "RANK"),
            (world, "WORLD_SIZE"),
            (local_rank, "LOCAL_RANK"),
            (local_world, "LOCAL_WORLD_SIZE"),
        )
        return Launch(
            launcher=env.get("WXSTATS_LAUNCHER", "torchrun"),
            rank=rank,
            world_size=world,
            local_rank=local_rank,
            local_world_size=local_world or 1,
            master_addr=env.get("MASTER_ADDR") or "127.0.0.1",
            master_port=_int(env, "MASTER_PORT"),
            master_from="MASTER_ADDR" if env.get("MASTER_ADDR") else "",
            token=env.get("WXSTATS_JOB_TOKEN")
            or (
                f"torchrun run {env['TORCHELASTIC_RUN_ID']}"
                if env.get("TORCHELASTIC_RUN_ID")
                else ""
            ),
        )
    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        world_var = _first_set(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
        world = _int(env, world_var, 1)
        list_var = _first_set(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
        nodelist = env.get(list_var)
        if env.get("MASTER_ADDR"):
            master, list_var = env["MASTER_ADDR"], "MASTER_ADDR"
        elif nodelist:
            try:
                master = expand_nodelist(nodelist)[0]
            except (ValueError, IndexError) as exc:
                raise WxstatsError(f"cannot read SLURM node list {nodelist!r}: {exc}") from None
        else:
            raise WxstatsError("SLURM_JOB_NODELIST is not set: cannot find the master node")
        local_world = 0  # unknown
        per_node_var = _first_set(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
        per_node = env.get(per_node_var)
        if per_node:
            try:
                counts = tasks_per_node(per_node)
                local_world = counts[min(_int(env, "SLURM_NODEID", 0), len(counts) - 1)]
            except ValueError:
                local_world = 0
        rank, local_rank = _int(env, "SLURM_PROCID"), _int(env, "SLURM_LOCALID", 0)
        _check_place(
            env,
            (rank, "SLURM_PROCID"),
            (world, world_var),
            (local_rank, "SLURM_LOCALID"),
            (local_world, per_node_var),
        )
        step = env.get("SLURM_STEP_ID", "0")
        port = (
            _int(env, "MASTER_PORT")
            if env.get("MASTER_PORT")
            else slurm_port(_int(env, "SLURM_JOB_ID", 0), int(step) if step.isdigit() else 0)
        )
        cpus = env.get("SLURM_CPUS_PER_TASK")
        return Launch(
            launcher="slurm",
            rank=rank,
            world_size=world,
            local_rank=local_rank,
            local_world_size=local_world or 1,
            master_addr=master,
            master_port=port,
            master_from=list_var,
            cpus_per_rank=int(cpus) if cpus and cpus.isdigit() else None,
            token=env.get("WXSTATS_JOB_TOKEN")
            or f"slurm job {env.get('SLURM_JOB_ID', '?')} step {step}",
        )
    return None


def _check_place(
    env: Mapping[str, str],
    rank: tuple[int, str],
    world: tuple[int, str],
    local: tuple[int, str],
    local_world: tuple[int, str],
) -> None:
    """Refuse a rank that cannot be part of its job, in one line, before torch waits
    for ranks that never come. Pairs are (value, variable); local world 0: not given."""

    def said(pair: tuple[int, str]) -> str:
        return f"{pair[1]}={env.get(pair[1], pair[0])}"

    if world[0] < 1:
        raise WxstatsError(f"launcher environment: {said(world)}: a job has at least 1 rank")
    if not 0 <= rank[0] < world[0]:
        raise WxstatsError(
            f"launcher environment: {said(rank)} is not a rank of a job of {said(world)} "
            f"(ranks are 0 to {world[0] - 1})"
        )
    if local[0] < 0 or local[0] > rank[0]:
        raise WxstatsError(
            f"launcher environment: {said(local)} with {said(rank)}: a local rank is "
            "0 or more and at most the rank"
        )
    if local_world[0] > world[0]:
        raise WxstatsError(
            f"launcher environment: {said(local_world)} gives this node {local_world[0]} "
            f"ranks, more than the job's {said(world)}"
        )
    if local_world[0] and local[0] >= local_world[0]:
        raise WxstatsError(
            f"launcher environment: {said(local)} but this node runs {local_world[0]} ranks "
            f"({said(local_world)}): local ranks are 0 to {local_world[0] - 1}"
        )


def check_master(launch: Launch) -> None:
    """Refuse at once a master host that does not resolve (it would show only as a
    connect timeout after ``--timeout`` seconds)."""
    try:
        socket.getaddrinfo(launch.master_addr, launch.master_port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        origin = f" (from {launch.master_from})" if launch.master_from else ""
        reason = getattr(exc, "strerror", None) or exc
        raise WxstatsError(
            f"rank {launch.rank}: the job's master host {launch.master_addr!r}{origin} "
            f"cannot be resolved: {reason}"
        ) from None


# -- --nproc: ranks started here ---------------------------------------------------


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 now (the OS picks it)."""
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
    cpus = available_cpus()
    if nproc > cpus:
        warnings.warn(
            f"--nproc {nproc} starts more ranks than the {cpus} CPUs this process may use: "
            "they share the CPUs (no faster) and each holds its own memory (a few hundred MB)",
            stacklevel=2,
        )
    port = free_port()
    token = f"--nproc job {os.getpid()} on port {port}"
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
            WXSTATS_JOB_TOKEN=token,
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
        if codes[0] == 0:  # rank 0 ends with 0 only once every output is in place
            print(f"wxstats: {name} came after the outputs were written; the run is complete")
            return 0
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
