"""Changing arrays of a zarr store in place, all or nothing: the shared steps.

Writers into a user's store (mllam-data-prep's ``--write-into``, an anemoi
dataset's statistics) first write everything that takes disk space into a
staging folder inside the store (``.wxstats-XXXXXXXX``: the same filesystem),
flush it (:func:`fsync_tree`), then only rename (:class:`Replacement`: a
chunk or metadata file replaced, removed, an array folder moved aside or in).
A failure puts the store back (``storemarker.roll_back``); zarr's own writes
still in flight are waited for first (:func:`settle_zarr`). A full disk is
named as such (:func:`wxstats.io.disk.full_disk`'s words).

A process killed between two renames is repaired from a marker written
before the first (:mod:`wxstats.io.storemarker`): readers refuse the store
until then, and the next write into it (:func:`locked_store`, from a
``--write-into`` run's preparation) repairs it first.

Writes into a store hold its lock (:mod:`wxstats.io.locks`) exclusive, from
the run's pre-flight to the end of its write: a second run writing into the
same store is refused in one line. Under it, a staging folder left without a
marker (a run killed before its first rename, or after its commit point) is
removed.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from wxstats.core.errors import WxstatsError
from wxstats.io.atomic import fsync_file
from wxstats.io.disk import NO_SPACE, disk_is_full, full_disk
from wxstats.io.journal import fsync_dir
from wxstats.io.locks import LOCK_NAME, hold_exclusive, let_go
from wxstats.io.storemarker import (
    STAGING_PREFIX,
    Step,
    do_step,
    recover_store,
    remove_marker,
    roll_back,
    target_folders,
    write_marker,
)


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


@contextmanager
def locked_store(root: Path) -> Iterator[None]:
    """Hold the store's lock (refused in one line while another process
    writes into it) and repair an interrupted write first (module docstring)."""
    root = Path(root)
    hold_exclusive(
        root,
        lambda holder: (
            f"{root}: another wxstats run is writing into this store now (it holds "
            f"{root / LOCK_NAME}){holder}; rerun when it has finished"
        ),
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
        write_marker(self.root, self.tmp, self.steps)
        self.marked = True
        for step in self.steps:
            do_step(self.root, step)
        for parent in target_folders(self.root, self.steps):
            fsync_dir(parent)
        remove_marker(self.root)
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
                remove_marker(root)
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
