"""``wxstats``: parse the command line once, run the command, turn errors into one line.

Errors about the input (:class:`~wxstats.core.errors.WxstatsError`) are
printed on one line, without a traceback, and exit with status 2.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import warnings
from typing import Any

from wxstats.cli import commands, grow
from wxstats.cli.parser import build_parser, compute_options
from wxstats.core.errors import Interrupted, WxstatsError

__all__ = ["console", "main"]


class _WarningLines:
    """Warnings during a command as ``wxstats: warning: ...`` lines, each text once
    (zarr repeats its notes per array); with ``--quiet`` only wxstats' own, about
    the data, not the libraries'. Installed for the command only
    (:func:`warnings.catch_warnings` restores the caller's display afterwards)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.seen: set[str] = set()

    def __call__(self, message: Any, category: Any, filename: str, lineno: int, *rest: Any) -> None:
        text = str(message)
        own = str(filename).startswith(_PACKAGE_DIR)
        if text in self.seen or (self.quiet and not own):
            return
        self.seen.add(text)
        print(f"wxstats: warning: {text}", file=sys.stderr)


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv: list[str] | None = None) -> int:
    """A command in the caller's process, which gets its SIGINT and SIGTERM
    handlers back (a run ignores both once its outputs are in place:
    :func:`wxstats.runtime.run.outputs_final`)."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        return _command(argv)
    finally:
        for signum, handler in saved.items():
            if handler is not None:
                signal.signal(signum, handler)


def _command(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            # zarr's note that v3 has no consolidated metadata concerns its authors, not
            # our users (mllam-data-prep stores are consolidated; we keep them so)
            warnings.filterwarnings("ignore", message="Consolidated metadata is currently not")
            warnings.showwarning = _WarningLines(bool(getattr(args, "quiet", False)))
            if args.command == "compute":
                return commands.run_compute(compute_options(args, argv))
            if args.command == "update":
                return grow.run_update(args, argv)
            if args.command == "merge":
                return grow.run_merge(args)
            if args.command == "example":
                return commands.run_example(args)
            if args.command == "report":
                return commands.run_report(args)
            if args.command == "compare":
                return commands.run_compare(args)
            if args.command == "inspect":
                return commands.run_inspect(
                    compute_options(args, argv), args.no_measure, args.nodes, args.storage_gbps
                )
            if args.command == "doctor":
                return commands.run_doctor(args)
    except Interrupted as exc:
        print(f"wxstats: {exc}", file=sys.stderr)
        return exc.code
    except WxstatsError as exc:
        print(f"wxstats: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wxstats: interrupted; no output was written", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of our output went away (`wxstats compare A B | head`): stop quietly,
        # pointing stdout at /dev/null so the interpreter's final flush cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return 1


def console() -> int:
    """The ``wxstats`` command and ``python -m wxstats``: :func:`main` in a process
    of its own, which may block dask. xarray imports dask (and with it scipy)
    whenever it is installed, only to ask whether an array is a dask array;
    wxstats never makes one, and the import costs about half a second of every
    run's start-up. A library caller's process is left alone (``main``)."""
    sys.modules.setdefault("dask", None)  # None: "not installed" to importlib
    # numpy's OpenBLAS threads spin after any BLAS call (1.6 % of a run's CPU);
    # wxstats' sums use no BLAS. Set before numpy is first imported.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from wxstats.cli import process

    process.tune_for_one_command()  # memory reuse, the collector, numba's BLAS probe
    # torch's C++ warnings (a peer's socket closed, with a C++ stack) would bury the
    # one line wxstats says about it; its errors still show
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    signal.signal(signal.SIGINT, _first_interrupt)
    code = _command()  # not main: the handlers a finished run set stay until the end
    # everything still alive stays until the process ends: frozen, the interpreter's
    # final collections skip it (0.17 s of every run with xarray, zarr and numba
    # loaded, against 0.02 s); objects are still released and atexit still runs
    gc.freeze()
    # the command has said what happened; a Ctrl-C (or SIGTERM) while the process
    # ends (threads finishing their block, torch's atexit) stops it at once, quietly,
    # instead of a KeyboardInterrupt traceback from the interpreter's shutdown, with
    # the status of the command (which has finished: a launcher reads its outcome)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda signum, frame: _stop_now(signum, frame, code))
    return code


def _first_interrupt(signum: int, frame: Any) -> None:
    """Ctrl-C: stop the command (``KeyboardInterrupt``, said in one line); from
    now on another one ends the process at once, wherever it is."""
    signal.signal(signum, _stop_now)
    raise KeyboardInterrupt


def _stop_now(signum: int, frame: Any, code: int | None = None) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + signum if code is None else code)
