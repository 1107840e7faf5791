"""The world a run happens in: one process, or one rank of a PyTorch Distributed job.

A run (:mod:`wxstats.runtime.run`) is written once, against :class:`World`:
every rank reduces a contiguous range of samples into an exact accumulator,
then :meth:`World.allreduce` combines them. :class:`Solo` is a world of size
one (no torch, nothing to exchange). :class:`Job` is a rank of a job: the
packed fixed-size tensors are combined with ``all_reduce`` (SUM of integer
limbs, MIN and MAX of the extremes); integer addition is exact, so the result
is the same bits for any number of ranks. Collectives only start once the
store shows that every rank is ready (:mod:`wxstats.parallel.monitor`), so a
slow rank never trips the collective timeout. Only rank 0 writes, after every
rank succeeded.
"""

from __future__ import annotations

import json
import os
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

import numpy as np

from wxstats.core.accumulator import RunMoments
from wxstats.core.errors import WxstatsError
from wxstats.core.untrusted import parse_json
from wxstats.parallel.devices import resolve_backend
from wxstats.parallel.launch import DEFAULT_TIMEOUT, Launch, check_master
from wxstats.parallel.liveness import Liveness
from wxstats.parallel.monitor import JobStopped, Monitor
from wxstats.parallel.progress import ProgressReporter


@dataclass(frozen=True)
class ProgressSettings:
    """How rank 0 reports progress (``mode``: bar, json or none)."""

    mode: str = "bar"
    interval: float = 30.0
    unit: str = "sample"
    """What the source calls one sample (``time block`` for zarr/netCDF), for the text."""


class World(Protocol):
    """What a run needs from the processes it runs on (see module docstring)."""

    rank: int
    world_size: int

    @property
    def label(self) -> str:
        """How messages name this process: ``""``, or ``"rank N: "``."""
        ...

    def begin(self, sizes: list[int], identity: Any, progress: ProgressSettings) -> None:
        """The samples (their sizes) and the run's identity are known (a job
        refuses a rank whose identity differs from rank 0's, before reading)."""
        ...

    def on_sample(self, nbytes: int) -> None:
        """A sample is done (main thread): count it, stop if another rank failed."""
        ...

    def raise_if_failed(self) -> None: ...

    def stopped_by(self) -> JobStopped | None:
        """This process was interrupted (SIGINT, SIGTERM): the other rank's failure
        that made its launcher send the signal, if the job published one."""
        ...

    def on_forced_exit(self, save: Callable[[], str]) -> None:
        """``save`` runs before a watchdog ends this process (its main thread stuck)."""
        ...

    def allreduce(self, acc: RunMoments) -> RunMoments:
        """The exact merge of every rank's accumulator, on every rank."""
        ...

    def broadcast_bytes(self, key: str, payload: bytes) -> bytes:
        """Rank 0's ``payload``, on every rank."""
        ...

    def fail(self, message: str, code: int) -> None:
        """Tell the other ranks that this one failed."""
        ...

    def succeed(self) -> None:
        """Rank 0: the outputs are written."""
        ...

    def wait_result(self) -> None:
        """Ranks > 0: wait until rank 0 has written the outputs (or failed)."""
        ...

    def close(self, code: int) -> None: ...


class Solo:
    """A world of one process: nothing to exchange, progress per sample."""

    rank = 0
    world_size = 1
    label = ""

    def __init__(self) -> None:
        self._progress: ProgressReporter | None = None

    def begin(self, sizes: list[int], identity: Any, progress: ProgressSettings) -> None:
        self._progress = ProgressReporter(
            len(sizes), sum(sizes), progress.mode, progress.interval, unit=progress.unit
        ).__enter__()

    def on_sample(self, nbytes: int) -> None:
        if self._progress is not None:
            self._progress.advance(nbytes)

    def raise_if_failed(self) -> None:
        pass

    def stopped_by(self) -> JobStopped | None:
        return None

    def on_forced_exit(self, save: Callable[[], str]) -> None:
        pass  # one process: no watchdog ends it

    def allreduce(self, acc: RunMoments) -> RunMoments:
        return acc

    def broadcast_bytes(self, key: str, payload: bytes) -> bytes:
        return payload

    def fail(self, message: str, code: int) -> None:
        pass

    def succeed(self) -> None:
        self._close_progress(True)

    def wait_result(self) -> None:
        pass

    def close(self, code: int) -> None:
        self._close_progress(code == 0)

    def _close_progress(self, success: bool) -> None:
        if self._progress is not None:
            self._progress.close(success)
            self._progress = None


TOKEN_KEY = "wxstats/job_token"
"""Where rank 0 puts its job's token in the store, before any collective."""


class Job:
    """This rank's membership of a job (see module docstring)."""

    def __init__(
        self,
        launch: Launch,
        refuse_other_rank: Callable[[dict[str, Any], dict[str, Any], int], None],
        backend: str = "auto",
        device: str = "auto",
        timeout: float = DEFAULT_TIMEOUT,
        show_progress: bool = True,
    ) -> None:
        self.launch = launch
        self.refuse_other_rank = refuse_other_rank
        """Raises when this rank's run identity differs from rank 0's (the caller
        knows what a run is: a job only exchanges the identities)."""
        self.rank = launch.rank
        self.world_size = launch.world_size
        self.label = f"rank {launch.rank}: "
        self.timeout = float(timeout)
        self.backend, self.device = resolve_backend(backend, device, launch)
        check_master(launch)  # before any rendezvous: a name that cannot resolve fails now
        self.show_progress = show_progress and self.rank == 0
        self.store: Any = None
        self.monitor: Monitor | None = None
        self.liveness: Liveness | None = None
        self._before_forced_exit: Callable[[], str] | None = None
        self._progress: ProgressReporter | None = None
        self._totals: tuple[int, int] | None = None

    @property
    def where(self) -> str:
        return f"{self.launch.master_addr}:{self.launch.master_port}"

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
            self._check_token(store)
            dist.init_process_group(
                self.backend, store=store, rank=self.rank, world_size=self.world_size, timeout=wait
            )
        except (RuntimeError, ValueError, OSError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise WxstatsError(
                f"rank {self.rank}: could not join the job at {self.where} "
                f"within {self.timeout:g} s ({self.backend}): {first}"
            ) from None
        # torchrun's agent store outlives restarted workers: one key space per attempt
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self.store = dist.PrefixStore(f"wxstats/{attempt}/", store)
        self.monitor = Monitor(
            self.store, self.rank, self.world_size, self.timeout, self.where, self._show
        )
        self.monitor.before_forced_exit = self._before_forced_exit
        self.monitor.start()
        try:
            self.liveness = Liveness(
                self.store,
                self.rank,
                self.world_size,
                self.launch.master_addr,
                self.monitor.connection_lost,
            ).start()
        except (OSError, RuntimeError) as exc:
            raise WxstatsError(
                f"rank {self.rank}: could not open the liveness connection of the job at "
                f"{self.where}: {exc}"
            ) from None
        return self

    def _check_token(self, store: Any) -> None:
        """Join only this job's store: two jobs on one node may pick one port (Slurm
        jobs 1 and 5001), and a rank of the second would otherwise enter the first
        one's collectives. Checked before any collective."""
        mine = self.launch.token or f"a job of {self.world_size} ranks"
        if self.rank == 0:
            store.set(TOKEN_KEY, mine)
            return
        theirs = store.get(TOKEN_KEY).decode()
        if theirs != mine:
            raise WxstatsError(
                f"rank {self.rank}: the job store at {self.where} belongs to another job "
                f"({theirs}), not to this one ({mine}): two jobs chose the same port on that "
                "node; no collective was joined. Give one of them another MASTER_PORT"
            )

    def on_forced_exit(self, save: Callable[[], str]) -> None:
        self._before_forced_exit = save
        if self.monitor is not None:
            self.monitor.before_forced_exit = save

    def close(self, code: int) -> None:
        """Leave the job; rank 0 (which may host the store) leaves last."""
        import torch.distributed as dist

        # not waited for: the dead or gone (also meanwhile), the rank that failed (it may be
        # stuck in a read, to be ended by its watchdog: waiting kept rank 0 up to --timeout)
        deadline = time.monotonic() + min(self.timeout, 30.0)
        try:
            while self.rank == 0 and time.monotonic() < deadline:
                gone = set(self.monitor.dead) if self.monitor is not None else set()
                gone |= self.liveness.gone if self.liveness is not None else set()
                if self.monitor is not None and self.monitor.failure is not None:
                    gone.add(self.monitor.failure[0])
                waiting = [f"left/{r}" for r in range(1, self.world_size) if r not in gone]
                if not waiting or self.store.check(waiting):
                    break
                time.sleep(0.05)
            if self.rank != 0:
                self.store.set(f"left/{self.rank}", "1")
        except Exception:  # noqa: BLE001 - the store may be gone: nothing to tell
            pass
        if self.liveness is not None:
            self.liveness.stop()
        if self.monitor is not None:
            self.monitor.stop()
        self._close_progress(success=code == 0)
        try:
            if code == 0:
                dist.destroy_process_group()
            # after a failure peers may be gone: leave the rest to process exit
        except Exception:  # noqa: BLE001
            pass

    # -- progress --------------------------------------------------------------------
    def begin(self, sizes: list[int], identity: Any, progress: ProgressSettings) -> None:
        self._totals = (len(sizes), sum(sizes))
        self._agree(identity)
        self.monitor.begin_share()
        if self.show_progress:
            self._progress = ProgressReporter(
                len(sizes),
                sum(sizes),
                progress.mode,
                progress.interval,
                ranks=self.world_size,
                unit=progress.unit,
            ).__enter__()

    def _agree(self, identity: dict[str, Any]) -> None:
        """Every rank compares its run's identity with rank 0's, and none reads data
        until all have: a rank started otherwise is refused, and the others stop."""
        text = json.dumps(identity, sort_keys=True, default=str).encode()
        sent = zlib.decompress(self.broadcast_bytes("identity", zlib.compress(text)))
        theirs = parse_json(sent, "rank 0's run identity")
        self.refuse_other_rank(identity, theirs, self.rank)
        self.store.add("agreed", 1)
        self.monitor.wait_for("agreed", self.world_size)

    def _show(self, samples: int, nbytes: int) -> None:
        if self._progress is not None:
            self._progress.set_done(samples, nbytes)

    def _close_progress(self, success: bool) -> None:
        if self._progress is not None:
            if success and self._totals:
                self._progress.set_done(*self._totals)
            self._progress.close(success)
            self._progress = None

    # -- what ranks tell each other ------------------------------------------------
    def on_sample(self, nbytes: int) -> None:
        self.monitor.count(nbytes)

    def raise_if_failed(self) -> None:
        self.monitor.raise_if_failed()

    def stopped_by(self) -> JobStopped | None:
        return self.monitor.published_failure() if self.monitor is not None else None

    def fail(self, message: str, code: int) -> None:
        """Tell every rank that this one failed (first failure wins the message)."""
        if self.monitor is not None:
            self.monitor.publish_failure(self.rank, message, code)

    def allreduce(self, acc: RunMoments) -> RunMoments:
        """Exact merge of every rank's accumulator through fixed-size tensors."""
        import torch
        import torch.distributed as dist

        self.monitor.end_share()
        self.monitor.push_progress()
        self.store.add("ready", 1)
        self.monitor.wait_for("ready", self.world_size)
        ints, minimum, maximum = acc.pack()
        device = torch.device(self.device)
        check = torch.tensor([ints.size, -ints.size], dtype=torch.int64).to(device)
        dist.all_reduce(check, op=dist.ReduceOp.MAX)
        if int(check[0]) != -int(check[1]):  # begin() compared the identities: a bug
            raise WxstatsError("the ranks' sums have other layouts; nothing was written")
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
        return bytes(self._await(key, lambda: self.store.get(key)))

    def succeed(self) -> None:
        """Rank 0: outputs are written; the others may exit with success."""
        self.store.set("result", "0")
        self._close_progress(success=True)

    def wait_result(self) -> None:
        """Ranks > 0: wait until rank 0 has written the outputs (or failed)."""
        self._await("result", lambda: None)

    def _await(self, key: str, then: Any) -> Any:
        """Wait for ``key`` in the store, stopping if a rank fails or the store goes."""
        while True:
            self.raise_if_failed()
            try:
                if self.store.check([key]):
                    return then()
            except Exception as exc:  # noqa: BLE001
                self.monitor.lost(exc)
            time.sleep(0.05)
