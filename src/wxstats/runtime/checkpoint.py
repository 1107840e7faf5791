"""Durable partial results, so a killed run resumes without redoing its work.

Every rank keeps one part file ``part-<unique id>.npz`` in the checkpoint
folder: the indices of the samples it has finished and the exact accumulator
of exactly those samples (packed int64/float64 arrays). Files are replaced
atomically (temporary file, fsync, rename), so a kill at any moment, even
during a write, leaves the previous version. Sums are exact, so the union of
the part files of any earlier runs, whatever their number of ranks, plus the
remaining samples gives the same bytes as an uninterrupted run.

``manifest.json`` records what the checkpoint is of: the whole run identity
(:mod:`wxstats.runtime.identity`: options, grid, time steps and samples,
files with sizes and modification times). Resuming against anything else is
refused in one line naming the first difference.

How a run uses the folder is :mod:`wxstats.runtime.resumable`.
"""

from __future__ import annotations

import json
import uuid
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from wxstats.core.accumulator import RunMoments
from wxstats.core.errors import WxstatsError
from wxstats.io.atomic import write_all
from wxstats.runtime.identity import first_difference

MANIFEST = "manifest.json"
FORMAT_VERSION = 2
"""Of the manifest (1: before the run's identity held a MEPS config and the grid)."""


def _contents(folder: Path) -> list[str]:
    """Names in ``folder`` other than temporary files a killed write of ours
    left (``.manifest.json.*.tmp``, ``.part-*.tmp``), sorted."""
    return sorted(
        p.name
        for p in folder.iterdir()
        if not (p.name.endswith(".tmp") and p.name.startswith((f".{MANIFEST}.", ".part-")))
    )


class Checkpoint:
    """One rank's view of a checkpoint folder (see module docstring)."""

    def __init__(self, directory: str | Path, identity: dict[str, Any]) -> None:
        self.directory = Path(directory)
        self.fingerprint = {"format": FORMAT_VERSION, **json.loads(json.dumps(identity))}
        self.part = self.directory / f"part-{uuid.uuid4().hex}.npz"

    # -- set-up (rank 0 first, then every rank) ----------------------------
    def prepare(self, resume: bool) -> None:
        """Create the folder and manifest, or check it for ``--resume``.

        Without ``resume`` an existing checkpoint is refused (it would be
        silently mixed in otherwise)."""
        manifest = self.directory / MANIFEST
        if manifest.exists():
            if not resume:
                raise WxstatsError(
                    f"{self.directory}: holds a checkpoint already; pass --resume to continue "
                    "it, or remove the folder to start afresh"
                )
            self.verify()
            return
        self._refuse_foreign(resume)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WxstatsError(
                f"{self.directory}: cannot create checkpoint folder: {exc}"
            ) from None
        text = json.dumps(self.fingerprint, indent=1, sort_keys=True)
        write_all({manifest: lambda p: p.write_text(text)}, overwrite=True)

    def _refuse_foreign(self, resume: bool) -> None:
        """Without a manifest: ``--resume`` has nothing to continue (a typo in
        the path must not silently start hours of work afresh), and a new
        checkpoint goes only into a new or empty folder (never mixed with, or
        later removed together with, someone's other files)."""
        if resume:
            if not self.directory.exists():
                raise WxstatsError(
                    f"{self.directory}: checkpoint folder does not exist, nothing to resume; "
                    "check the path, or run without --resume to start afresh"
                )
            if any(self.directory.glob("part-*.npz")):
                raise WxstatsError(
                    f"{self.directory}: part files without {MANIFEST}; cannot resume, "
                    "remove the folder and start afresh without --resume"
                )
            what = "is empty" if not _contents(self.directory) else f"has no {MANIFEST}"
            raise WxstatsError(
                f"{self.directory}: checkpoint folder {what}, it holds no wxstats checkpoint to "
                "resume; check the path, or run without --resume to start afresh"
            )
        if self.directory.is_dir() and _contents(self.directory):
            shown = ", ".join(_contents(self.directory)[:3])
            raise WxstatsError(
                f"{self.directory}: not empty ({shown}) and holds no wxstats checkpoint; "
                "choose a new or empty folder for --checkpoint"
            )

    def verify(self) -> None:
        """Refuse a checkpoint of other data or other options."""
        manifest = self.directory / MANIFEST
        try:
            old = json.loads(manifest.read_text())
        except OSError as exc:
            raise WxstatsError(f"{manifest}: cannot read: {exc.strerror or exc}") from None
        except ValueError:
            raise WxstatsError(
                f"{manifest}: the checkpoint is damaged (not valid JSON); remove the folder "
                f"{self.directory} and rerun without --resume to start afresh"
            ) from None
        if not isinstance(old, dict):
            raise WxstatsError(
                f"{manifest}: the checkpoint is damaged (not a manifest); remove the folder "
                f"{self.directory} and rerun without --resume to start afresh"
            )
        if old.get("format") != FORMAT_VERSION:
            raise WxstatsError(
                f"{self.directory}: checkpoint written by another wxstats (manifest format "
                f"{old.get('format')}, this one reads {FORMAT_VERSION}); remove the folder and "
                "rerun without --resume to start afresh"
            )
        change = first_difference(old, self.fingerprint, "the checkpoint", "this run")
        if change:
            raise WxstatsError(
                f"{self.directory}: checkpoint is of another run ({change}); "
                "rerun with the original data and options, or remove the folder"
            )

    # -- reading what earlier runs did ------------------------------------
    def load(self, template: RunMoments) -> tuple[set[int], RunMoments]:
        """(finished sample indices, their exact accumulator) of all part files.

        ``template`` is an empty accumulator giving the layout; it is filled.
        """
        done: set[int] = set()
        for path in sorted(self.directory.glob("part-*.npz")):
            try:
                # our own file object: np.load leaks the one it opens when the zip is bad
                with open(path, "rb") as f, np.load(f, allow_pickle=False) as part:
                    indices = part["done"].astype(np.int64).tolist()
                    ints, minimum, maximum = part["ints"], part["minimum"], part["maximum"]
            except OSError as exc:  # not damage: permissions, an I/O error
                raise WxstatsError(f"{path}: cannot read: {exc.strerror or exc}") from None
            except (ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error):
                raise self._damaged(path, "not a complete part file") from None
            overlap = done.intersection(indices)
            if overlap:
                raise WxstatsError(
                    f"{path}: samples {sorted(overlap)[:5]} are in two part files; "
                    "the checkpoint is inconsistent, remove the folder and start afresh"
                )
            done.update(indices)
            piece = template.empty_like()
            try:
                piece.unpack_like(ints, minimum, maximum)
            except (ValueError, IndexError):
                raise self._damaged(path, "its sums do not fit this run's layout") from None
            template.merge(piece)
        return done, template

    def _damaged(self, path: Path, why: str) -> WxstatsError:
        """One line: which part is damaged, and the two ways on (each part holds
        its own samples and their sums, so removing one part redoes only those)."""
        return WxstatsError(
            f"{path}: the checkpoint is damaged ({why}); remove this file to redo only its "
            f"samples, or remove the folder {self.directory} and rerun without --resume "
            "to start afresh"
        )

    # -- saving this rank's progress --------------------------------------
    def save(self, done: list[int], acc: RunMoments) -> None:
        """Atomically replace this rank's part file with its current state."""
        ints, minimum, maximum = acc.pack()
        indices = np.array(sorted(done), dtype=np.int64)

        def write(path: Path) -> None:
            with open(path, "wb") as f:
                np.savez(f, done=indices, ints=ints, minimum=minimum, maximum=maximum)

        write_all({self.part: write}, overwrite=True)
