"""A test-only ``sitecustomize`` that SIGKILLs a wxstats process between two renames
into a zarr store (an OOM kill, a lost node), for the ``--write-into`` repair tests.

Put :func:`kill_hooks`' folder first on ``PYTHONPATH`` of the process to kill, with

WXS_KILL_STORE      the store (an absolute path); renames whose source or destination
                    is in it, outside wxstats' own ``.wxstats-*`` files, are counted
WXS_KILL_AFTER      SIGKILL right after that many of them
WXS_KILL_AT_COMMIT  (any value) SIGKILL right before the store's marker is removed:
                    every rename done, the commit point not reached
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from distributed_helpers import env

_SITECUSTOMIZE = """\
import os
import signal

_store = os.environ.get("WXS_KILL_STORE", "")
if _store:
    _after = int(os.environ.get("WXS_KILL_AFTER", "0") or 0)
    _count = [0]

    def _in_store(path):
        path = os.path.abspath(os.fsdecode(os.fspath(path)))
        if not path.startswith(_store + os.sep):
            return False
        return not path[len(_store) + 1 :].startswith(".wxstats-")

    def _counted(real):
        def rename(src, dst, *args, **kwargs):
            result = real(src, dst, *args, **kwargs)
            if _in_store(src) or _in_store(dst):
                _count[0] += 1
                if _count[0] == _after:
                    os.kill(os.getpid(), signal.SIGKILL)
            return result

        return rename

    os.replace = _counted(os.replace)
    os.rename = _counted(os.rename)
    if os.environ.get("WXS_KILL_AT_COMMIT"):
        _unlink = os.unlink

        def unlink(path, *args, **kwargs):
            if os.path.basename(os.fsdecode(os.fspath(path))) == ".wxstats-replacing.json":
                os.kill(os.getpid(), signal.SIGKILL)
            return _unlink(path, *args, **kwargs)

        os.unlink = unlink
"""


def kill_hooks(directory: Path) -> Path:
    """A folder holding the killing ``sitecustomize``."""
    folder = Path(directory) / "rename_faults"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    return folder


def killing_env(directory: Path, store: Path, kill: int | str) -> dict[str, str]:
    """The environment of a wxstats process killed in its write into ``store``:
    after ``kill`` renames, or at the commit point (``kill="commit"``)."""
    out = env()
    out["PYTHONPATH"] = os.pathsep.join([str(kill_hooks(directory)), out["PYTHONPATH"]])
    out["WXS_KILL_STORE"] = str(Path(store).resolve())
    if kill == "commit":
        out["WXS_KILL_AT_COMMIT"] = "1"
    else:
        out["WXS_KILL_AFTER"] = str(kill)
    return out


def wxstats(*args: str) -> list[str]:
    return [sys.executable, "-m", "wxstats", *args]
