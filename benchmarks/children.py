"""What every benchmark's timed processes share: their environment (this tree's
``src`` first, its bytecode kept), a cold page cache (``evict``), a child's wall
time and peak memory (``run_child``) and a large MEPS datastore of links
(``linked_datastore``).

Its own module so that the benchmarks import it, and never each other in a circle
(``run.py`` and ``bench_zarr.py`` once did, and ``run.py`` and ``bench_scale.py``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from datetime import timedelta
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


def run_child(args: list[str], cwd: Path | None = None) -> tuple[float, int, str]:
    """(wall seconds, peak RSS in bytes, stderr+stdout tail) of one subprocess."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        args,
        cwd=cwd,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark: {' '.join(args)} failed ({proc.returncode}):\n{output}")
    return wall, usage.ru_maxrss * 1024, output[-2000:]


def linked_datastore(source_config: Path, target: Path, times: int, interval: int) -> Path:
    """A datastore of ``times`` analysis times whose files are links to the
    source's (cycled): same data, more bytes read, no more disk or cache."""
    src_dir = source_config.parent / "samples" / "train"
    stamps = sorted({p.name[4:14] for p in src_dir.glob("nwp_??????????_mbr*.npy")})
    out = target / "samples" / "train"
    out.mkdir(parents=True)
    shutil.copytree(source_config.parent / "static", target / "static")
    shutil.copy(source_config, target / source_config.name)
    from wxstats.tools.example import ExampleSpec  # the importer put this tree's src first

    first = ExampleSpec().first_time
    for i in range(times):
        stamp = (first + timedelta(hours=interval * i)).strftime("%Y%m%d%H")
        old = stamps[i % len(stamps)]
        for path in src_dir.glob(f"*{old}*.npy"):
            (out / path.name.replace(old, stamp)).symlink_to(path.resolve())
    return target / source_config.name
