"""Changing arrays of a zarr store in place, all or nothing: the shared steps.

Writers into a user's store (mllam-data-prep's ``--write-into``, an anemoi
dataset's statistics) first write everything that takes disk space into a
staging folder inside the store (the same filesystem), flush it
(:func:`fsync_tree`), then only rename. Each rename is recorded so that a
failure puts the store back (:func:`roll_back`); zarr's own writes still in
flight are waited for first (:func:`settle_zarr`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from wxstats.core.errors import WxstatsError
from wxstats.io.atomic import fsync_file

Undo = tuple[str, Path, Path | None]
"""(how, path in the store, where its previous version is): ``array`` renames the
folder at the path back to the saved place; ``file`` puts the saved file back
(or removes a new file when there was none)."""


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


def roll_back(undo: list[Undo]) -> None:
    """Put back what the recorded renames changed, last first (no space needed)."""
    for how, target, saved in reversed(undo):
        if how == "array":
            os.rename(target, saved)  # type: ignore[arg-type]
        elif saved is not None:
            os.replace(saved, target)
        else:
            target.unlink(missing_ok=True)


@contextmanager
def all_or_nothing(tmp: Path, undo: list[Undo], failed: str) -> Iterator[None]:
    """Run the writes of a store; on any error put back what ``undo`` records and
    raise ``failed: <why>`` in one line. ``tmp`` (the staging folder) goes in any case."""
    try:
        yield
    except BaseException as exc:
        settle_zarr()
        roll_back(undo)
        if isinstance(exc, Exception):
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise WxstatsError(f"{failed}: {why}") from None
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
