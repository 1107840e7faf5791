"""The compiled kernel alone against a float32 sum of the same block, same run.

A MEPS-shaped block (20 steps, 238 x 268 grid, 18 channels, float32, 92 MB)
summed by :func:`wxstats.core.kernel.block_sums` with no difference step, one
and two, each against ``numpy``'s float32 ``sum`` of the block (a memory-speed
reference). Best of ``--repeat``; one thread.

    python benchmarks/bench_kernel.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from wxstats.core.kernel import Block, block_sums  # noqa: E402


def best(fn, repeat: int) -> float:
    fn()  # numba loads the kernel on the first call
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--grid", type=int, nargs=2, default=(238, 268))
    parser.add_argument("--channels", type=int, default=18)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n_grid = args.grid[0] * args.grid[1]
    shape = (args.steps, n_grid, args.channels)
    a = (280 + 10 * rng.standard_normal(shape)).astype(np.float32)
    channels = np.arange(args.channels)
    reference = best(lambda: a.sum(dtype=np.float32), args.repeat)
    print(f"block {a.nbytes / 1e6:.0f} MB; float32 numpy sum {reference * 1e3:.1f} ms "
          f"({a.nbytes / reference / 1e9:.2f} GB/s)")  # fmt: skip
    for lags in ((), (1,), (1, 2)):
        block = Block(a, channels, (0, args.steps), {k: (k, args.steps) for k in lags})

        def kernel(block=block, lags=lags) -> None:
            block_sums(block)  # each step's own reference derived, as in a run

        seconds = best(kernel, args.repeat)
        print(
            f"kernel, difference steps {lags or '()'}: {seconds * 1e3:.1f} ms "
            f"({a.nbytes / seconds / 1e9:.2f} GB/s, {reference / seconds:.2f}x the float32 sum)"
        )


if __name__ == "__main__":
    main()
