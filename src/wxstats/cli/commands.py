"""What each command does with its parsed arguments: call the library, print.

``compute`` forms the world the run happens in (one process, ``--nproc``
ranks started here, or a rank of a torchrun/Slurm job) and hands the options
to :func:`wxstats.runtime.run.execute`; the other commands read, draw,
compare or inspect.
"""

from __future__ import annotations

import argparse
import sys
import time

from wxstats.cli import process
from wxstats.core.errors import WxstatsError
from wxstats.runtime.options import ComputeOptions


def run_compute(options: ComputeOptions) -> int:
    from wxstats.parallel import launch
    from wxstats.parallel.devices import check_local_devices, require_torch
    from wxstats.parallel.job import Job, Solo
    from wxstats.runtime.identity import refuse_other_rank
    from wxstats.runtime.run import default_threads, execute

    found = launch.detect_launch()
    ranks = _needs_ranks(options, found)
    if ranks:
        require_torch(ranks)
    if options.nproc:
        if found is not None and found.world_size > 1:
            raise WxstatsError(
                "--nproc starts ranks itself: do not combine it with torchrun or srun -n N>1"
            )
        check_local_devices(options.backend, options.device, options.nproc)
        return launch.launch_local(
            launch.strip_nproc(list(options.argv)), options.nproc, options.timeout
        )
    if found is None:
        world, threads = Solo(), options.threads or default_threads()
    else:
        try:
            world = Job(
                found,
                refuse_other_rank,
                backend=options.backend,
                device=options.device,
                timeout=options.timeout,
                show_progress=not options.quiet or options.log_format == "json",
            ).start()
        except WxstatsError as exc:
            print(f"wxstats: error: {exc}", file=sys.stderr, flush=True)
            return 2
        threads = options.threads or found.default_threads()
    outcome = execute(options, world, threads, after_start_up=process.end_of_start_up)
    if outcome.stats is not None:
        from wxstats.parallel.progress import plural
        from wxstats.tools.report import format_table

        for note in outcome.stats.warnings:
            print(f"wxstats: warning: {note}", file=sys.stderr)
        if not options.quiet:
            print(format_table(outcome.stats))
            written = outcome.written
            print(f"wrote {plural(len(written), 'file')}: " + ", ".join(str(p) for p in written))
    return outcome.code


def _needs_ranks(options: ComputeOptions, found: object) -> str | None:
    """What in this command needs ranks, in words (None: one process, no torch)."""
    if options.nproc:
        return f"--nproc {options.nproc}"
    if found is not None:
        return f"a {found.launcher} rank"
    if options.device == "cuda":
        return "--device cuda"
    if options.backend != "auto":
        return f"--backend {options.backend}"
    return None


def run_example(args: argparse.Namespace) -> int:
    from wxstats.tools.example import ExampleSpec, earlier_statistics, example_in

    started = time.perf_counter()
    spec = ExampleSpec(analysis_times=args.times, members=args.members, grid=tuple(args.grid))
    config, reused = example_in(args.directory, spec, args.overwrite)
    said = "using the example dataset already in" if reused else "wrote example dataset:"
    print(f"{said} {config}")
    earlier = earlier_statistics(config) if reused else None
    if earlier is not None:  # the README's promise: a rerun reuses the example
        from wxstats.io.read import read_stats
        from wxstats.tools.report import format_table

        print(f"statistics computed earlier: {earlier}")
        print(format_table(read_stats(earlier)))
        status = 0
    else:
        status = run_compute(ComputeOptions(dataset=str(config), overwrite=args.overwrite))
    if status == 0:
        print(f"example finished in {time.perf_counter() - started:.1f} s")
    return status


def run_report(args: argparse.Namespace) -> int:
    from wxstats.io.read import read_stats
    from wxstats.tools.drift import format_drift
    from wxstats.tools.report import write_stats_report

    stats = read_stats(args.stats, args.split)
    written, found, series = write_stats_report(stats, args.output_dir, args.split, args.last_years)
    if series:
        print(format_drift(series))
    for f in found:
        print(f"warning: {f.category} {f.variable}: {f.message}")
    print("wrote " + ", ".join(str(p) for p in written))
    return 0


def run_compare(args: argparse.Namespace) -> int:
    from wxstats.io.read import read_stats
    from wxstats.tools.compare import compare, format_comparison

    if not args.rtol >= 0:
        raise WxstatsError(f"--rtol must be a number >= 0, got {args.rtol}")
    result = compare(read_stats(args.a, args.split), read_stats(args.b, args.split), args.rtol)
    print(format_comparison(result))
    return result.exit_code


def run_inspect(
    options: ComputeOptions, no_measure: bool, nodes: int = 1, storage_gbps: float | None = None
) -> int:
    from dataclasses import replace

    from wxstats.runtime.run import default_threads
    from wxstats.tools.inspect import format_plan, inspect_dataset

    options = replace(options, threads=options.threads or default_threads())
    print(format_plan(inspect_dataset(options, not no_measure, nodes, storage_gbps)))
    return 0


def run_doctor(args: argparse.Namespace) -> int:
    import json

    from wxstats.tools.doctor import format_report, report

    info = report()
    print(json.dumps(info, indent=1) if args.json else format_report(info))
    return 0
