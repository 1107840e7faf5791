"""Changing arrays of a zarr store in place, all or nothing: the shared steps.

Writers into a user's store (mllam-data-prep's ``--write-into``, an anemoi
dataset's statistics) first write everything that takes disk space into a
staging folder inside the store (``.wxstats-XXXXXXXX``: the same filesystem),
flush it (:func:`fsync_tree`), then only rename (:class:`Replacement`: a
chunk or metadata file replaced, removed, an array folder moved aside or in).
A failure puts the store back (:func:`roll_back`); zarr's own writes still in
flight are waited for first (:func:`settle_zarr`). A full disk is named as
such (:func:`wxstats.io.disk.no_space`'s words).

A process killed between two renames (an OOM kill, a lost node) cannot put
anything back, so before the first rename the whole list of renames is
written, flushed, into the store as a marker (``.wxstats-replacing.json``);
it goes once every rename is done (the commit point), then the staging
folder. While it is there, wxstats' readers (``report``, ``compare``,
:func:`wxstats.read`, a run reading the store) refuse the store in one line
(:func:`interrupted_store`), and the next write into it
(:func:`locked_store`, from a ``--write-into`` run's pre-flight) repairs it
first (:func:`recover_store`): every rename was done, so the new arrays stay;
else each one done is undone, last first, from the previous versions kept in
the staging folder (a previous value is never lost before the commit
point). Whether a rename was done is read from the files themselves (its
source gone from the staging folder, or the saved version present), so a
repair killed in turn is repaired again the same way.

The marker is a file in a folder others may write, so it is data, not an
instruction: it is honoured only if it is a regular file (not a link)
owned by the user running wxstats (POSIX), with one link, naming a staging
folder of wxstats' name that is a folder of the user's, and renames between
paths inside the store (no ``..``, no link on the way) whose sources and
saved versions lie in that staging folder. Anything else is refused in one
line and nothing is moved.

Writes into a store hold its lock (:mod:`wxstats.io.locks`) exclusive, from
the run's pre-flight to the end of its write: a second run writing into the
same store is refused in one line. Under it, a staging folder left without a
marker (a run killed before its first rename, or after its commit point) is
removed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from wxstats.core.errors import InputError, WxstatsError
from wxstats.io.atomic import fsync_dir, fsync_file
from wxstats.io.disk import NO_SPACE, disk_is_full, full_disk
from wxstats.io.locks import LOCK_NAME, hold_exclusive, let_go

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


def fsync_tree(folder: Path) -> None:
    """Flush every file under ``folder`` to disk (before it is renamed into place)."""
    for path in folder.rglob("*"):
        if path.is_file():
            fsync_file(path)


def settle_zarr(timeout: float = 30.0) -> None:
    """Wait for zarr writes still in flight: zarr 3 writes an array's chunks and
    metadata as concurrent tasks, and when one fails (a full disk) the others
    go on, recreating files in the staging folder after it was removed."""
    import asyncio

    async def drain() -> None:
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if others:
            await asyncio.wait(others, timeout=timeout)

    try:
        from zarr.core.sync import sync

        sync(drain())
    except Exception:  # noqa: BLE001 - another zarr: nothing to wait for, or no way to
        pass


def array_names(group) -> set[str]:
    """The arrays of a zarr group, without zarr 3's warning about each of our own
    files in it (the lock, a staging folder): they are not zarr's."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Object at \.wxstats-")
        return set(group.array_keys())


# -- one rename: do it, tell whether it was done, undo it -----------------------------------
def _path(root: Path, relative: str | None) -> Path:
    return root.joinpath(*PurePosixPath(relative).parts)  # type: ignore[arg-type]


def _lexists(path: Path) -> bool:
    return os.path.lexists(path)


def _do(root: Path, step: Step) -> None:
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


def _owned(st: os.stat_result) -> bool:
    return not hasattr(os, "geteuid") or st.st_uid == os.geteuid()


def _read_marker(root: Path, marker: Path) -> tuple[str, list[Step]]:
    """(staging folder's name, steps) of a marker that may be honoured; else
    refused in one line (see module docstring)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(marker, flags)
    except OSError as exc:
        raise _refused(marker, f"it cannot be opened ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refused(marker, "it is not a regular file")
        if not _owned(st):
            raise _refused(marker, f"it is owned by uid {st.st_uid}, not by you")
        if st.st_nlink != 1:
            raise _refused(marker, f"it has {st.st_nlink} links (wxstats writes one)")
        if st.st_size > _MAX_MARKER_BYTES:
            raise _refused(marker, f"it holds {st.st_size} bytes, more than a marker")
        data = os.read(fd, _MAX_MARKER_BYTES + 1)
    finally:
        os.close(fd)
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise _refused(marker, "it is not a wxstats marker (not JSON)") from None
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
    if not stat.S_ISDIR(st.st_mode) or not _owned(st):
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


def _write_marker(root: Path, staging: Path, steps: list[Step]) -> Path:
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


def _remove_marker(root: Path) -> None:
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
        if stat.S_ISDIR(st.st_mode) and _owned(st):
            shutil.rmtree(entry.path, ignore_errors=True)


def recover_store(root: Path) -> bool:
    """Repair a store a killed write left (see module docstring); True if there
    was one. Call it holding the store's lock (:func:`locked_store`)."""
    marker = root / MARKER
    if not os.path.lexists(marker):
        _remove_stale_staging(root)
        return False
    staging, steps = _read_marker(root, marker)
    complete = all(_done(root, step) for step in steps)
    if not complete:
        roll_back(root, steps)
    for parent in {_path(root, s.target).parent for s in steps}:
        fsync_dir(parent)
    _remove_marker(root)  # the commit point (of the repair too)
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


@contextmanager
def locked_store(root: Path) -> Iterator[None]:
    """Hold the store's lock (refused in one line while another process
    writes into it) and repair an interrupted write first (module docstring)."""
    root = Path(root)
    hold_exclusive(
        root,
        f"{root}: another wxstats run is writing into this store now (it holds "
        f"{root / LOCK_NAME}); rerun when it has finished",
    )
    try:
        recover_store(root)
        yield
    finally:
        let_go(root)


def hold_store(root: Path) -> Callable[[], None]:
    """:func:`locked_store` entered for the rest of a run: what gives it back."""
    held = locked_store(root)
    held.__enter__()
    return lambda: held.__exit__(None, None, None)


# -- a write into the store -----------------------------------------------------------------
@dataclass
class Replacement:
    """A write into a store under way: its staging folder and its renames."""

    root: Path
    tmp: Path
    steps: list[Step] = field(default_factory=list)
    marked: bool = False

    def _relative(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def file(self, target: Path, new: Path, old: Path | None) -> None:
        saved = None if old is None else self._relative(old)
        self.steps.append(Step("file", self._relative(target), self._relative(new), saved))

    def remove(self, target: Path, old: Path) -> None:
        self.steps.append(Step("remove", self._relative(target), None, self._relative(old)))

    def aside(self, target: Path, old: Path) -> None:
        self.steps.append(Step("aside", self._relative(target), None, self._relative(old)))

    def move_in(self, target: Path, new: Path) -> None:
        self.steps.append(Step("in", self._relative(target), self._relative(new), None))

    def apply(self) -> None:
        """Everything is staged and flushed: mark the store, rename, commit."""
        _write_marker(self.root, self.tmp, self.steps)
        self.marked = True
        for step in self.steps:
            _do(self.root, step)
        for parent in {_path(self.root, s.target).parent for s in self.steps}:
            fsync_dir(parent)
        _remove_marker(self.root)
        self.marked = False


def _why(exc: BaseException, root: Path) -> str:
    """A failure in one phrase; a full disk named as such."""
    if (isinstance(exc, OSError) and exc.errno in NO_SPACE) or disk_is_full(root):
        return f"{full_disk(root)}; free some space there"
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


@contextmanager
def replacing(root: Path, failed: str) -> Iterator[Replacement]:
    """A write into the store ``root`` (hold :func:`locked_store`): its staging
    folder, then :meth:`Replacement.apply`. On any error, put back what was
    renamed and raise ``failed: <why>`` in one line; the staging folder goes in
    any case, unless putting back failed too (the next write repairs from it)."""
    rep = None
    keep = False
    try:
        rep = Replacement(root, Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=root)))
        yield rep
    except BaseException as exc:
        settle_zarr()
        if rep is not None and rep.marked:
            try:
                roll_back(root, rep.steps)
                _remove_marker(root)
            except OSError as again:
                keep = True
                raise WxstatsError(
                    f"{failed}: {_why(exc, root)}; putting the previous statistics back failed "
                    f"too ({again.strerror}): the next wxstats --write-into into {root} "
                    "repairs it"
                ) from None
        if isinstance(exc, Exception):
            raise WxstatsError(f"{failed}: {_why(exc, root)}") from None
        raise
    finally:
        if rep is not None and not keep:
            shutil.rmtree(rep.tmp, ignore_errors=True)
