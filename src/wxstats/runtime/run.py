"""One run, for any number of processes: source → engine → gather → finalize → writers.

:func:`execute` is ``wxstats compute``: open the source, check the outputs,
reduce this rank's share of the samples (resuming from a checkpoint if asked),
combine the ranks' exact sums (:meth:`World.allreduce`), round once, and on
rank 0 write the outputs. A single process is a world of size one
(:class:`~wxstats.parallel.job.Solo`); torchrun, Slurm and ``--nproc`` only
decide how the world is formed (:mod:`wxstats.parallel.launch`).
:func:`compute` is the same computation for a notebook, returning the
statistics without writing anything.
"""

from __future__ import annotations

import getpass
import os
import platform
import signal
import socket
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from wxstats import __version__
from wxstats.core.errors import Interrupted, WxstatsError
from wxstats.core.stats import Stats
from wxstats.io.atomic import Prepared
from wxstats.io.result import Result
from wxstats.parallel.job import ProgressSettings, Solo, World
from wxstats.parallel.monitor import JobStopped
from wxstats.runtime import preload
from wxstats.runtime.engine import accumulate, empty_accumulator
from wxstats.runtime.grow import Growth
from wxstats.runtime.identity import run_identity
from wxstats.runtime.options import ComputeOptions
from wxstats.runtime.outputs import open_source, plan_outputs, prepare_outputs, write_outputs
from wxstats.runtime.preflight import preflight
from wxstats.runtime.resumable import Resumable, resume_hint
from wxstats.sources.base import Source, sample_sizes


def partition(n_samples: int, rank: int, world_size: int) -> range:
    """Contiguous, balanced ranges: every sample exactly once, no padding."""
    base, extra = divmod(n_samples, world_size)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))


def resumable(options: ComputeOptions) -> Resumable | None:
    """The checkpoint the options ask for (``None``: no checkpoint)."""
    if options.checkpoint is None:
        if options.resume:
            raise WxstatsError("--resume needs --checkpoint DIR (the folder to resume from)")
        return None
    return Resumable(
        options.checkpoint, resume=options.resume, interval=options.checkpoint_interval
    )


def default_threads() -> int:
    """The CPUs available to this process, at most 8."""
    from wxstats.core.machine import available_cpus

    return max(1, min(available_cpus(), 8))


def compute_source(
    source: Source,
    *,
    skipna: bool = False,
    threads: int = 1,
    world: World | None = None,
    on_sample: Callable[[int], None] | None = None,
    checkpoint: Resumable | None = None,
    growth: Growth | None = None,
) -> Stats:
    """Statistics of ``source``: this rank's share, then the exact all-reduce.
    Byte-identical results for any split of the work.

    With ``checkpoint``, only the time steps no earlier run summed are shared
    out (by sample; a sample partly summed, after a change of the block size,
    only over the rest), progress is saved as it goes, and rank 0 adds the earlier runs' exact
    sums before the all-reduce: the same bytes as one uninterrupted run.

    With ``growth`` (``--state``, ``update``) the sums are joined to a state's
    sums (:mod:`wxstats.runtime.grow`)."""
    world = world if world is not None else Solo()
    started = time.time()
    todo, carried = range(len(source)), None
    if checkpoint is not None:
        todo, carried = checkpoint.start(source, skipna=skipna, world=world)
    mine = [todo[i] for i in partition(len(todo), world.rank, world.world_size)]
    acc = empty_accumulator(source)
    tracking = checkpoint.tracking(acc, on_sample) if checkpoint else nullcontext(on_sample)
    guard = checkpoint.merging if checkpoint else None
    if checkpoint is not None:
        world.on_forced_exit(checkpoint.save_if_consistent)
    with tracking as after_sample:
        accumulate(
            source,
            mine,
            skipna=skipna,
            threads=threads,
            on_sample=after_sample,
            into=acc,
            guard=guard,
            steps=checkpoint.partial if checkpoint is not None else None,
        )
        if checkpoint is not None:
            checkpoint.finish()
        if carried is not None:
            acc.merge(carried)
        acc = world.allreduce(acc)
    if growth is not None and world.rank == 0:
        stats = growth.grown(source, acc, skipna)
    elif growth is not None:  # only rank 0 reads the edges, joins and writes
        stats = Stats(source.kind, {})
    else:
        stats = acc.extract(source.streams, source.kind, source.capabilities.time_splits)
    _record(stats, source, skipna, started, world_size=world.world_size, threads_per_rank=threads)
    if checkpoint is not None:
        stats.run["resumed_samples"] = checkpoint.done_before
    return stats


def _record(stats: Stats, source: Source, skipna: bool, started: float, **how: Any) -> None:
    """The source's attributes and the run's record (``how``: its parallel layout)."""
    stats.attrs = stats.attrs or dict(source.attrs)
    stats.attrs["skipna"] = int(skipna)
    stats.run = {
        "wxstats_version": __version__,
        "started": datetime.fromtimestamp(started, timezone.utc).isoformat(),
        "seconds": round(time.time() - started, 3),
        "host": socket.gethostname(),
        "user": _user(),
        "python": platform.python_version(),
        **how,
        "samples": len(source),
        "bytes": sum(sample_sizes(source)),
    }


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def compute(
    path: str | Path | Any, *, engine: str | None = None, client: Any = None, **options: Any
) -> Result:
    """Statistics of the dataset at ``path`` (one process, nothing written;
    ``threads`` as ``--threads``, by default the available CPUs, at most 8).
    ``path`` may be an ``xarray.Dataset`` already open (see docs/api.md).
    On a Dask cluster (``client=``, ``engine="dask"``, or a dask-backed Dataset
    while a ``distributed.Client`` is current): each sample on the workers, the
    exact partials merged there (:mod:`wxstats.runtime.cluster`, docs/dask.md).

    >>> stats = wxstats.compute("meps.datastore.yaml", split="train")
    >>> stats.state.mean, stats.state.diff[3].std
    """
    from wxstats.runtime.cluster import choose_client

    given = None if isinstance(path, (str, os.PathLike)) else path
    opts = ComputeOptions.of("" if given is not None else path, **options)
    cluster = choose_client(engine, client, given)
    source = open_source(opts, given)
    if cluster is None:
        # the command's default (the bits never depend on it): a notebook is as fast as the shell
        threads = opts.threads or default_threads()
        return Result.of(compute_source(source, skipna=opts.skipna, threads=threads))
    from wxstats.runtime.cluster import compute_on_cluster

    started = time.time()
    sums, workers = compute_on_cluster(source, cluster, skipna=opts.skipna)
    stats = sums.extract(source.streams, source.kind, source.capabilities.time_splits)
    _record(stats, source, opts.skipna, started, engine="dask", workers=workers)
    return Result.of(stats)


@dataclass
class Outcome:
    """How a run ended: its exit status, and on rank 0 what it computed and wrote."""

    code: int
    stats: Stats | None = None
    written: list[Path] = field(default_factory=list)


def _say(text: str) -> None:
    print(f"wxstats: {text}", file=sys.stderr, flush=True)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def outputs_final() -> None:
    """From the first rename of the outputs on, SIGINT and SIGTERM are ignored
    for the rest of the process: a set is never left half renamed by them, and
    a run whose outputs are in place ends as the success it is (status 0; a
    launcher reads it) instead of saying that nothing was written. The caller
    of a command run in its own process (``wxstats.cli.main``) restores them."""
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)


def _discard_on_sigterm(prepared: Prepared, world: World) -> Callable[[], None]:
    """SIGTERM ends a process at once (a launcher stopping its ranks, a scheduler):
    first remove the outputs prepared for a run that will never finish, and say
    which rank's failure stopped the job if one did, then end as before. Returns
    what puts the previous handler back (unless the outputs' commit has replaced
    it: :func:`outputs_final`)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGTERM)

    def discard_then_stop(signum: int, frame: Any) -> None:
        prepared.discard()
        if (cause := world.stopped_by()) is not None:
            _say_stopped(world, cause)
        signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, discard_then_stop)

    def release() -> None:
        if signal.getsignal(signal.SIGTERM) is discard_then_stop:
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)

    return release


def _say_stopped(world: World, exc: JobStopped) -> None:
    """Another rank failed: rank 0 says so (every rank, when rank 0 is the one lost)."""
    if world.rank == 0 or exc.rank == 0:
        _say(f"error: {'' if world.rank == 0 else world.label}the job stopped: {exc}; "
             "no output was written")  # fmt: skip


def _succeed(world: World, written: list[Path]) -> None:
    """Tell the other ranks; a failure now (a rank lost) cannot undo the outputs."""
    try:
        world.succeed()
    except Exception as exc:  # noqa: BLE001 - said, and the run stays a success
        _say(f"warning: {world.label}{exc}; after the outputs were written, complete: "
             + ", ".join(map(str, written)))  # fmt: skip


def execute(
    options: ComputeOptions,
    world: World,
    threads: int,
    *,
    after_start_up: Callable[[], None] = lambda: None,
) -> Outcome:
    """``wxstats compute`` on this process of ``world`` (see module docstring);
    ``after_start_up`` runs once the source is open and the ranks have met (the
    command's process settings, :func:`wxstats.cli.process.end_of_start_up`).

    Every failure ends as one line naming this process (``rank N:`` in a job)
    and an exit status; other ranks are told, and stop at their next sample.
    """
    try:
        checkpoint = resumable(options)
        growth = Growth.of(options)
    except WxstatsError as exc:
        _say(f"error: {exc}")
        return Outcome(2)
    if world.rank != 0:
        warnings.simplefilter("ignore")  # rank 0 reports what concerns the whole job
    progress = ProgressSettings(
        "json" if options.log_format == "json" else ("none" if options.quiet else "bar"),
        options.log_interval,
    )
    label = world.label
    outcome = Outcome(1)
    interrupted = False
    prepared = None
    release: Callable[[], None] = lambda: None  # noqa: E731
    try:
        source = open_source(options)
        # every refusal of the outputs (preflight.py), then of the state, before any data is read
        plan = plan_outputs(source, options) if world.rank == 0 else preflight(source, options)
        if growth is not None:
            growth.check(source, options.skipna)
        if world.rank == 0:  # every output made (from a template) before any data is read
            prepared = prepare_outputs(source, options, plan)
            release = _discard_on_sigterm(prepared, world)
        sizes = sample_sizes(source)
        # what every rank must agree on (not the files: data staged per node is fine)
        many = world.world_size > 1
        identity = run_identity(source, options.skipna, who="ranks") if many else {}
        world.begin(sizes, identity, replace(progress, unit=source.work_unit))
        after_start_up()
        world.raise_if_failed()
        # import the writers' libraries while the (GIL-free) kernel reads the data
        after_first = preload.after_first() if world.rank == 0 else (lambda index: None)

        def on_sample(index: int) -> None:
            world.on_sample(sizes[index])
            after_first(index)

        stats = compute_source(
            source,
            skipna=options.skipna,
            threads=threads,
            world=world,
            on_sample=on_sample,
            checkpoint=checkpoint,
            growth=growth,
        )
        if world.rank == 0:
            extra = growth.writers() if growth else {}
            written = write_outputs(
                source,
                stats,
                options,
                extra,
                prepared=prepared,
                plan=plan,
                before_renames=outputs_final,
            )
            outcome = Outcome(0, stats, written)
            _succeed(world, written)
        else:
            world.wait_result()
            outcome = Outcome(0)
    except JobStopped as exc:
        outcome.code = exc.code or 1
        _say_stopped(world, exc)
    except Interrupted as exc:
        outcome.code = exc.code
        if (cause := world.stopped_by()) is not None:  # the launcher stopped the job for it
            _say_stopped(world, cause)
        else:
            interrupted = True
            world.fail(str(exc), exc.code)
            _say(f"{label}{exc}")
    except WxstatsError as exc:
        outcome.code = 2
        world.fail(str(exc), 2)
        _say(f"error: {label}{exc}")
    except KeyboardInterrupt:
        outcome.code = 130
        if (cause := world.stopped_by()) is not None:
            _say_stopped(world, cause)
        else:
            world.fail("interrupted", 130)
            _say(f"{label}interrupted; no output was written")
    except Exception as exc:  # noqa: BLE001 - a bug: say where, stop the others
        world.fail(f"unexpected {type(exc).__name__}: {exc}", 1)
        traceback.print_exc()
        _say(f"error: {label}unexpected {type(exc).__name__}")
    finally:
        if prepared is not None:
            prepared.discard()  # a failed run's temporary files and new folders
            release()
        world.close(outcome.code)
        if checkpoint is not None:
            checkpoint.close()  # after the others left: the folder is free for another run
    started = checkpoint is not None and checkpoint.started
    if outcome.code and started and world.rank == 0 and not interrupted:
        _say(resume_hint(checkpoint.directory))
    return outcome
