"""Put this interpreter's torch into DIR, the one torch of the interoperability environments.

Usage: python link-torch.py DIR PIN (scripts/cached-env.sh runs it; exits 3 when this
interpreter has no torch satisfying PIN, and cached-env.sh then installs PIN with pip).

scripts/test.sh has just installed PIN next to wxstats, the build its user chose (the CPU
wheel where pip is set up for it, README): its files (those its RECORD lists under
site-packages: torch, torchgen, functorch and its .dist-info) are hard-linked into DIR,
or copied where links cannot be made. Nothing is downloaded again, and the environments
get the very build wxstats' own tests use. pip never writes an installed file in place,
so a later upgrade or removal of that torch leaves DIR's files as they are.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import sys
from pathlib import Path


def satisfies(version: str, pin: str) -> bool:
    try:
        from packaging.requirements import Requirement
    except ImportError:  # pip's own copy, where packaging is not installed
        from pip._vendor.packaging.requirements import Requirement
    req = Requirement(pin)
    return req.name == "torch" and req.specifier.contains(version, prereleases=True)


def main(target: Path, pin: str) -> int:
    try:
        dist = importlib.metadata.distribution("torch")
    except importlib.metadata.PackageNotFoundError:
        return 3
    if not satisfies(dist.version, pin) or not dist.files:
        return 3
    site = Path(dist.locate_file("")).resolve()
    for entry in dist.files:
        if entry.parts[0] == "..":  # console scripts (torchrun) in bin/: not needed
            continue
        source = site / entry
        if not source.is_file():
            continue
        dest = target / entry
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(source, dest)
        except OSError:
            shutil.copy2(source, dest)
    print(f"scripts/link-torch.py: torch {dist.version} of {site} shared", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2]))
