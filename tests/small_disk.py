"""A small filesystem to fill, for the full-disk tests of writes into a store: a
tmpfs the test mounts (root and mount rights; skipped, saying why, otherwise)
and removes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


@pytest.fixture
def small_fs(tmp_path):
    """A 4 MiB tmpfs (needs root and mount rights; skipped with the reason otherwise)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    cmd = ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except OSError as exc:
        pytest.skip(f"cannot mount a small tmpfs to fill (mount: {exc})")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill: {done.stderr.strip() or done.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def tree(path: Path) -> dict[str, bytes | None]:
    """Every file's bytes and every folder (None): a leftover empty folder counts."""
    return {
        str(p.relative_to(path)): (p.read_bytes() if p.is_file() else None) for p in path.rglob("*")
    }


def fill(folder: Path, leave_pages: int) -> Path:
    """A file taking all the free space of ``folder``'s filesystem but ``leave_pages`` 4 KiB."""
    st = os.statvfs(folder)
    filler = folder / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave_pages * 4096))
    return filler
