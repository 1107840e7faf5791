"""The marker of a write into a zarr store (:mod:`wxstats.io.zarrstore`): its
renames, written into the store before the first, read back to repair it.

A process killed between two renames (an OOM kill, a lost node) cannot put
anything back, so before the first rename the whole list of renames is
written, flushed, into the store as a marker (``.wxstats-replacing.json``);
it goes once every rename is done (the commit point), then the staging
folder. While it is there, wxstats' readers (``report``, ``compare``,
:func:`wxstats.read`, a run reading the store) refuse the store in one line
(:func:`interrupted_store`), and the next write into it
(``zarrstore.locked_store``, from a ``--write-into`` run's preparation)
repairs it first (:func:`recover_store`): every rename was done, so the new
arrays stay; else each one done is undone, last first, from the previous
versions kept in the staging folder (a previous value is never lost before
the commit point). Whether a rename was done is read from the files themselves (its
source gone from the staging folder, or the saved version present), so a
repair killed in turn is repaired again the same way.

The marker is a file in a folder others may write, so it is data, not an
instruction: it is honoured only if it is a regular file (not a link)
owned by the user running wxstats (POSIX), with one link, naming a staging
folder of wxstats' name that is a folder of the user's, and renames between
paths inside the store (no ``..``, no link on the way) whose sources and
saved versions lie in that staging folder. Anything else is refused in one
line and nothing is moved.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from wxstats.core.errors import InputError, WxstatsError
from wxstats.core.untrusted import UntrustedInput, owned_by_user, read_own_json
from wxstats.io.atomic import fsync_file
from wxstats.io.journal import fsync_dir
from wxstats.io.locks import LOCK_NAME

MARKER = ".wxstats-replacing.json"
STAGING_PREFIX = ".wxstats-"
_STAGING = re.compile(r"\.wxstats-[a-z0-9_]{8}")
"""``tempfile.mkdtemp(prefix=STAGING_PREFIX)``'s names."""
_MARKER_VERSION = 1
_MAX_MARKER_BYTES = 16 << 20
HOWS = ("file", "remove", "aside", "in")


@dataclass(frozen=True)
class Step:
    """One rename into a store (paths relative to it, ``/``-separated):

    - ``file``: ``new`` replaces the file ``target``; ``old`` is a hard link to
      the file it replaces (None: there was none);
    - ``remove``: the file ``target`` is removed; ``old`` is a hard link to it;
    - ``aside``: the folder ``target`` is moved to ``old`` (in the staging folder);
    - ``in``: the folder ``new`` (in the staging folder) is moved to ``target``.
    """

    how: str
    target: str
    new: str | None = None
    old: str | None = None


# -- one rename: do it, tell whether it was done, undo it -----------------------------------
def _path(root: Path, relative: str | None) -> Path:
    return root.joinpath(*PurePosixPath(relative).parts)  # type: ignore[arg-type]


def _lexists(path: Path) -> bool:
    return os.path.lexists(path)


def do_step(root: Path, step: Step) -> None:
    """Make the rename ``step`` names."""
    target = _path(root, step.target)
    if step.how == "file":
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(_path(root, step.new), target)
    elif step.how == "remove":
        os.unlink(target)
    elif step.how == "aside":
        os.rename(target, _path(root, step.old))
    else:
        os.rename(_path(root, step.new), target)


def _done(root: Path, step: Step) -> bool:
    """Whether ``step`` was done, read from the files (see module docstring)."""
    if step.how == "file" or step.how == "in":
        return not _lexists(_path(root, step.new))
    if step.how == "remove":
        return not _lexists(_path(root, step.target))
    return _lexists(_path(root, step.old))


def _undo(root: Path, step: Step) -> None:
    """Undo a done ``step``; a saved version already gone was put back by an
    earlier, interrupted repair."""
    target = _path(root, step.target)
    old = _path(root, step.old) if step.old is not None else None
    if step.how in ("file", "remove"):
        if old is None:
            target.unlink(missing_ok=True)
        elif _lexists(old):
            os.replace(old, target)
    elif step.how == "aside":
        if old is not None and _lexists(old):
            os.rename(old, target)
    elif _lexists(target):
        os.rename(target, _path(root, step.new))


def roll_back(root: Path, steps: list[Step]) -> None:
    """Undo every done step of ``steps``, last first (no space needed)."""
    for step in reversed(steps):
        if _done(root, step):
            _undo(root, step)


# -- the marker ---------------------------------------------------------------------------
def interrupted_store(path: str | Path) -> Path | None:
    """The marker of an interrupted write into the store at ``path``, if any:
    its arrays may be a mix of new and previous ones."""
    marker = Path(path) / MARKER
    return marker if os.path.lexists(marker) else None


def refuse_interrupted(path: str | Path) -> None:
    """Refuse, in one line, a store a wxstats write was interrupted in."""
    marker = interrupted_store(path)
    if marker is not None:
        raise InputError(
            f"{path}: a wxstats write into this store was interrupted ({MARKER}); its "
            "statistics may be a mix of new and previous ones: rerun the wxstats compute "
            "--write-into that writes them (it first puts a consistent store back)"
        )


def _refused(marker: Path, why: str) -> WxstatsError:
    return WxstatsError(
        f"{marker}: not honoured, {why}; nothing was moved or removed. Check the store's "
        "arrays (their previous versions may be in its .wxstats-* folder) and remove it"
    )


def _confined(root: Path, relative: object, staging: str, inside_staging: bool) -> bool:
    """``relative`` names a path inside the store (inside the staging folder or
    outside it), with no ``..`` and no symbolic link on the way."""
    if not isinstance(relative, str) or "\\" in relative or "\0" in relative:
        return False
    parts = relative.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return False
    if inside_staging != (parts[0] == staging) or (inside_staging and len(parts) < 2):
        return False
    if not inside_staging and parts[0] in (MARKER, LOCK_NAME):
        return False
    for depth in range(1, len(parts)):
        try:
            mode = os.lstat(root.joinpath(*parts[:depth])).st_mode
        except FileNotFoundError:
            continue
        except OSError:
            return False
        if not stat.S_ISDIR(mode):
            return False
    return True


def _read_marker(root: Path, marker: Path) -> tuple[str, list[Step]]:
    """(staging folder's name, steps) of a marker that may be honoured; else
    refused in one line (see module docstring)."""
    try:
        doc = read_own_json(marker, _MAX_MARKER_BYTES)
    except UntrustedInput as exc:
        raise _refused(marker, exc.why) from None
    if not (
        isinstance(doc, dict)
        and doc.get("wxstats_store_replacement") == _MARKER_VERSION
        and isinstance(doc.get("staging"), str)
        and isinstance(doc.get("steps"), list)
    ):
        raise _refused(marker, "it is not a marker of this wxstats version")
    staging = doc["staging"]
    if not _STAGING.fullmatch(staging):
        raise _refused(marker, f"its staging folder is not of wxstats' name: {staging[:80]}")
    try:
        st = os.lstat(root / staging)
    except OSError:
        raise _refused(marker, f"its staging folder {staging} is missing") from None
    if not stat.S_ISDIR(st.st_mode) or not owned_by_user(st):
        raise _refused(marker, f"its staging folder {staging} is not a folder of yours")
    steps = []
    for item in doc["steps"]:
        if not (isinstance(item, list) and len(item) == 4 and item[0] in HOWS):
            raise _refused(marker, f"a step is not a rename wxstats makes: {str(item)[:80]}")
        how, target, new, old = item
        needs_new, needs_old = how in ("file", "in"), how in ("remove", "aside")
        ok = _confined(root, target, staging, False)
        ok = ok and (_confined(root, new, staging, True) if needs_new else new is None)
        ok = ok and (
            _confined(root, old, staging, True)
            if needs_old or (how == "file" and old is not None)
            else old is None
        )
        if not ok:
            raise _refused(marker, f"a step leaves the store or its staging: {str(item)[:120]}")
        steps.append(Step(how, target, new, old))
    return staging, steps


def write_marker(root: Path, staging: Path, steps: list[Step]) -> Path:
    """The marker, durable in the store before the first rename (module docstring)."""
    doc = {
        "wxstats_store_replacement": _MARKER_VERSION,
        "staging": staging.name,
        "steps": [[s.how, s.target, s.new, s.old] for s in steps],
    }
    temp = staging / "marker"
    temp.write_text(json.dumps(doc, indent=1))
    fsync_file(temp)
    os.replace(temp, root / MARKER)
    fsync_dir(root)
    return root / MARKER


def remove_marker(root: Path) -> None:
    (root / MARKER).unlink(missing_ok=True)
    fsync_dir(root)


def _remove_stale_staging(root: Path) -> None:
    """Staging folders of wxstats' name and the user's, left without a marker."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        if not _STAGING.fullmatch(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and owned_by_user(st):
            shutil.rmtree(entry.path, ignore_errors=True)


def recover_store(root: Path) -> bool:
    """Repair a store a killed write left (see module docstring); True if there
    was one. Call it holding the store's lock (``zarrstore.locked_store``)."""
    marker = root / MARKER
    if not os.path.lexists(marker):
        _remove_stale_staging(root)
        return False
    staging, steps = _read_marker(root, marker)
    complete = all(_done(root, step) for step in steps)
    if not complete:
        roll_back(root, steps)
    for parent in target_folders(root, steps):
        fsync_dir(parent)
    remove_marker(root)  # the commit point (of the repair too)
    shutil.rmtree(root / staging, ignore_errors=True)
    warnings.warn(
        f"{root}: an earlier wxstats write into this store was interrupted between renames; "
        + (
            "every new array was in place and is kept"
            if complete
            else "put the previous statistics back"
        ),
        UserWarning,
        stacklevel=2,
    )
    return True


def target_folders(root: Path, steps: list[Step]) -> set[Path]:
    """The folders the renames of ``steps`` change (to flush before the commit point)."""
    return {_path(root, s.target).parent for s in steps}
