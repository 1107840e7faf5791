"""What a filesystem says when an output does not fit: a full disk named as
such, with its device and mount point.

Libraries report a full disk in their own words (HDF5: ``NetCDF: HDF error``, or
``Permission denied`` when it cannot even open a file), so after a failed
write the disk itself is asked (:func:`disk_is_full`).
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from wxstats.core.errors import WxstatsError

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def _mount_of(path: Path) -> tuple[str, str]:
    """The device and mount point of the filesystem holding ``path``."""
    path = next((a for a in (path, *path.parents) if a.exists()), Path("/")).resolve()
    mounts: dict[str, str] = {}
    try:
        with open("/proc/self/mounts") as table:
            for line in table:
                fields = line.split()
                if len(fields) > 1:
                    mounts[fields[1].replace("\\040", " ")] = fields[0]
    except OSError:
        pass
    for candidate in (path, *path.parents):
        if str(candidate) in mounts:
            return mounts[str(candidate)], str(candidate)
    return "?", "/"


def full_disk(where: Path) -> str:
    """``no space left on DEVICE (mounted at MOUNT)`` for the filesystem of ``where``."""
    device, mount = _mount_of(where)
    return f"no space left on {device} (mounted at {mount})"


def no_space(where: Path) -> WxstatsError:
    """The one line a full disk (or quota) gets, naming its device and mount point."""
    return WxstatsError(
        f"{where}: {full_disk(where)}; free some space or write elsewhere. Nothing was "
        "written or replaced"
    )


def disk_is_full(folder: Path) -> bool:
    """Whether ``folder``'s filesystem has no room: asked after a write failed,
    because libraries report a full disk in their own words."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".wxstats-space-")
    except OSError as exc:
        return exc.errno in NO_SPACE
    try:
        os.posix_fallocate(fd, 0, 1 << 16)
    except OSError as exc:
        return exc.errno in NO_SPACE
    finally:
        os.close(fd)
        os.unlink(name)
    return False
