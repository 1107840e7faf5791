"""Hard-link a fresh environment's files to identical ones of the other cached environments.

Usage: share-files.py ENV_DIR CACHE_DIR (scripts/cached-env.sh runs it after a build).

The interoperability environments install many of the same packages (numpy, pandas,
scipy, xarray...) from the same wheels. A file of ENV_DIR's site-packages whose twin, at
the same place in another environment's site-packages under CACHE_DIR, has the same bytes
is replaced by a hard link to that twin. A module's bytecode (``__pycache__/*.pyc``)
records its source's modification time, so a ``.py`` file is linked only together with
its bytecode files, each to the twin's (which match the twin's source, now shared).
pip never writes an installed file in place (an upgrade or an uninstall unlinks it) and
Python writes bytecode by renaming, so a change to one environment never reaches another,
and removing an environment leaves the others' files. What cannot be linked (another file
system, no hard links) is left as it is. Prints the megabytes shared to stderr.
"""

from __future__ import annotations

import filecmp
import os
import sys
from pathlib import Path


def site_packages(env: Path) -> Path | None:
    found = sorted(env.glob("lib/python*/site-packages"))
    return found[0] if found else None


def same(path: Path, twin: Path) -> bool:
    """Two regular files of the same bytes, on one file system, not yet one file."""
    try:
        a, b = path.lstat(), twin.lstat()
    except OSError:
        return False
    return (
        path.is_file()
        and twin.is_file()
        and not twin.is_symlink()
        and a.st_size == b.st_size
        and a.st_dev == b.st_dev
        and a.st_ino != b.st_ino
        and filecmp.cmp(path, twin, shallow=False)
    )


def link(twin: Path, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.wxstats-link")
    os.link(twin, tmp)
    try:
        os.replace(tmp, path)
    except OSError:
        tmp.unlink()
        raise


def bytecode(source: Path) -> list[Path]:
    return sorted((source.parent / "__pycache__").glob(f"{source.stem}.*.pyc"))


def main(env: Path, cache: Path) -> int:
    mine = site_packages(env)
    if mine is None:
        return 0
    others = [
        sp
        for other in sorted(cache.iterdir())
        if other.resolve() != env.resolve() and (other / "pyvenv.cfg").is_file()
        for sp in [site_packages(other)]
        if sp is not None
    ]
    shared = 0
    for folder, _, files in os.walk(mine):
        if Path(folder).name == "__pycache__":
            continue  # linked with their sources
        for name in files:
            path = Path(folder, name)
            rel = path.relative_to(mine)
            for sp in others:
                twin = sp / rel
                if not same(path, twin):
                    continue
                pairs = [(twin, path)]
                if name.endswith(".py"):
                    pycs = [(sp / p.relative_to(mine), p) for p in bytecode(path)]
                    if not all(t.is_file() and not t.is_symlink() for t, _ in pycs):
                        continue  # a twin without the bytecode this one has
                    pairs += pycs
                try:
                    for source, target in pairs:
                        size = target.stat().st_size
                        link(source, target)
                        shared += size
                except OSError:
                    pass
                break
    print(
        f"scripts/share-files.py: {shared / 1e6:.0f} MB shared with other environments",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
