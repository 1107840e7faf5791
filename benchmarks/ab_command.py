"""Two source trees' ``wxstats`` commands, alternated: is a change faster?

This machine's speed drifts by a tenth between minutes, so one run of each
says little. Each round runs the same ``wxstats`` arguments once with each
tree (``PYTHONPATH=TREE/src``, a fresh process each time), alternating; it
prints each tree's best and median wall time and median CPU time (user +
system of the process and its children).

    python benchmarks/ab_command.py /path/to/main /path/to/change -- \\
        compute /tmp/wxstats-bench/era5-2gb.zarr --quiet --overwrite --output /tmp/o.nc

Run each tree once before (numba compiles the kernel in a new tree).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time


def run_once(tree: str, args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one ``python -m wxstats ARGS`` with ``tree``'s source."""
    env = {**os.environ, "PYTHONPATH": os.path.join(tree, "src")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "wxstats", *args], env=env, check=True, stdout=subprocess.DEVNULL
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs="+", help="source trees (each has src/wxstats)")
    parser.add_argument("--rounds", type=int, default=6)
    argv = sys.argv[1:]
    if "--" not in argv:
        parser.error("give the wxstats arguments after --")
    cut = argv.index("--")
    opts = parser.parse_args(argv[:cut])
    command = argv[cut + 1 :]
    times: dict[str, list[tuple[float, float]]] = {t: [] for t in opts.trees}
    for _ in range(opts.rounds):
        for tree in opts.trees:
            times[tree].append(run_once(tree, command))
    for tree, rows in times.items():
        walls = [w for w, _ in rows]
        cpus = [c for _, c in rows]
        print(
            f"{tree:40} wall best {min(walls):.2f} s median {statistics.median(walls):.2f} s"
            f"  CPU median {statistics.median(cpus):.2f} s"
        )


if __name__ == "__main__":
    main()
