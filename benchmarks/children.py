"""What every benchmark's timed processes share: their environment (this tree's
``src`` first, its bytecode kept) and a cold page cache (``evict``).

Its own module so that the benchmarks import it, and never each other in a circle
(``run.py`` and ``bench_zarr.py`` once did, for these two functions).
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child_env() -> dict[str, str]:
    """A timed process's environment: this tree's ``src`` first, and its bytecode
    kept (``PYTHONDONTWRITEBYTECODE`` dropped, as an installed package has its
    ``.pyc`` files: compiling wxstats' sources cost ~0.1 s of every command)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    return env


def evict(files) -> None:
    """Drop ``files`` from the page cache (cold reads)."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
