"""Durable partial results, so a killed run resumes without redoing its work.

Every rank keeps one part file ``part-<unique id>.wxstate`` in the checkpoint
folder, in the state file's codec (:mod:`wxstats.io.formats.wxstate`: netCDF
with a format version and a checksum): the time steps it has summed
(a :class:`~wxstats.core.partial.Coverage`: by split, ranges of time indices
whose values and the differences ending at them are in the part; a MEPS
datastore's by sample file, see :meth:`~wxstats.sources.base.Source.covers`)
and the exact accumulator of exactly those steps: a
:class:`~wxstats.core.partial.Partial` (``meta`` holds ``checkpoint_part``,
:data:`FORMAT_VERSION`, and ``done``, the coverage's JSON form).
Files are replaced atomically (temporary file, fsync, rename), so a kill at
any moment, even during a write, leaves the previous version. Every time step
is summed on its own with its own reference, so the union of the part files of
any earlier runs, whatever their number of ranks, threads or block size, plus
the remaining steps gives the same bytes as an uninterrupted run.

``manifest.json`` records what the checkpoint is of: the run identity that a
checkpoint compares (:mod:`wxstats.runtime.identity`: options, grid, time
steps, files with sizes and modification times; not the samples nor the
wxstats version). Resuming against anything else is refused in one line
naming the first difference; so is a folder or a part of another
:data:`FORMAT_VERSION`.

One run at a time: rank 0 holds an exclusive ``flock`` on ``.wxstats.lock`` in
the folder from before it reads the manifest until the run ends (its process
ending releases it, however it ends; the run's end removes the file). A second
run on the folder, resuming it or starting afresh there, is refused in one
line, with what the lock file says of its holder as a hint. The lock is
:mod:`wxstats.io.locks`' (how the file is opened and trusted, and the one
warning where the file system cannot lock: two runs at once would not be
refused there).

How a run uses the folder is :mod:`wxstats.runtime.resumable`.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from wxstats import __version__
from wxstats.core.accumulator import RunMoments
from wxstats.core.errors import WxstatsError
from wxstats.core.partial import Coverage, CoverageOverlap, Partial
from wxstats.core.untrusted import UntrustedInput, read_json
from wxstats.io.atomic import write_all
from wxstats.io.formats.wxstate import StateFile, StateFileError, read_state_file, state_writer
from wxstats.io.locks import LOCK_NAME, FolderLock, take_exclusive
from wxstats.runtime.identity import first_difference

MANIFEST = "manifest.json"
FORMAT_VERSION = 3
"""Of the manifest and the parts (1: before the run's identity held a MEPS
config and the grid; 2: parts recorded sample indices, not time steps, in
``.npz`` files)."""
PART = "part-{}.wxstate"
LOCK = ".wxstats.lock"
"""The file rank 0 holds locked while a run uses the folder (see module docstring)."""


def _contents(folder: Path) -> list[str]:
    """Names in ``folder`` other than temporary files a killed write of ours
    left (``.manifest.json.*.tmp``, ``.part-*.tmp``), the run's lock file and the
    lock an atomic write of the folder takes (:mod:`wxstats.io.locks`), sorted."""
    return sorted(
        p.name
        for p in folder.iterdir()
        if p.name not in (LOCK, LOCK_NAME)
        and not (p.name.endswith(".tmp") and p.name.startswith((f".{MANIFEST}.", ".part-")))
    )


class Checkpoint:
    """One rank's view of a checkpoint folder (see module docstring)."""

    def __init__(self, directory: str | Path, identity: dict[str, Any]) -> None:
        self.directory = Path(directory)
        self.fingerprint = {"format": FORMAT_VERSION, **json.loads(json.dumps(identity))}
        self.part = self.directory / PART.format(uuid.uuid4().hex)
        self._lock: FolderLock | None = None

    # -- set-up (rank 0 first, then every rank) ----------------------------
    def prepare(self, resume: bool) -> None:
        """Lock the folder for this run (until :meth:`release`), then create the
        folder and manifest, or check it for ``--resume``.

        Without ``resume`` an existing checkpoint is refused (it would be
        silently mixed in otherwise). The lock is taken only in a folder that
        holds a checkpoint or is new or empty (no file is made in someone's other
        folder), and the manifest is looked at again once it is held."""
        manifest = self.directory / MANIFEST
        if not manifest.exists():
            self._refuse_foreign(resume)
            try:
                self.directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise WxstatsError(
                    f"{self.directory}: cannot create checkpoint folder: {exc}"
                ) from None
        self.release()
        self._lock = take_exclusive(self.directory, self._in_use, LOCK)
        try:
            self._begin(manifest, resume)
        except BaseException:
            self.release()  # refused: the folder stays free
            raise

    def _begin(self, manifest: Path, resume: bool) -> None:
        """The folder is locked: check the checkpoint it holds, or start one."""
        if manifest.exists():
            if not resume:
                raise WxstatsError(
                    f"{self.directory}: holds a checkpoint already; pass --resume to continue "
                    "it, or remove the folder to start afresh"
                )
            self.verify()
            return
        self._refuse_foreign(resume)
        text = json.dumps(self.fingerprint, indent=1, sort_keys=True)
        write_all({manifest: lambda p: p.write_text(text)}, overwrite=True)

    def _in_use(self, holder: str) -> str:
        return (
            f"{self.directory}: checkpoint folder in use by another run{holder}; wait until "
            "it ends, or use another --checkpoint folder"
        )

    def release(self) -> None:
        """Let other runs use the folder (the run is over)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

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
            if any(self.directory.glob("part-*")):
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
            old = read_json(manifest)
            why = "" if isinstance(old, dict) else "not a manifest"
        except OSError as exc:
            raise WxstatsError(f"{manifest}: cannot read: {exc.strerror or exc}") from None
        except UntrustedInput as exc:
            why = exc.why
        if why:
            raise WxstatsError(
                f"{manifest}: the checkpoint is damaged ({why}); remove the folder "
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
    def load(self, template: RunMoments) -> Partial:
        """All part files merged into one partial: the time steps summed and their
        exact sums (``template``: an empty accumulator giving the layout)."""
        total = Partial.empty(template, {})
        for path in sorted(self.directory.glob(PART.format("*"))):
            try:
                total = total.merge(self._read(path, template))
            except CoverageOverlap as exc:
                raise WxstatsError(
                    f"{path}: time steps of {exc.series} are in two part files; "
                    "the checkpoint is inconsistent, remove the folder and start afresh"
                ) from None
        return total

    def _read(self, path: Path, template: RunMoments) -> Partial:
        """One part file as a partial, or refused in one line."""
        try:
            part = read_state_file(path)
        except StateFileError as exc:
            if exc.version is not None:
                raise self._other_format(path, f"state format {exc.version}") from None
            raise self._damaged(path, exc.why) from None
        version = part.meta.get("checkpoint_part") if isinstance(part.meta, dict) else None
        if version != FORMAT_VERSION:
            raise self._other_format(path, f"{version or 'not a checkpoint part'}")
        try:
            steps = Coverage.from_json(part.meta["done"])
        except (KeyError, ValueError, TypeError):
            raise self._damaged(path, "its time steps are unreadable") from None
        sums = template.empty_like()
        try:
            sums.unpack_like(part.sums, part.minimum, part.maximum)
        except (ValueError, IndexError):
            raise self._damaged(path, "its sums do not fit this run's layout") from None
        return Partial(sums, steps)

    def _other_format(self, path: Path, what: str) -> WxstatsError:
        return WxstatsError(
            f"{path}: a checkpoint part of another format ({what}, this wxstats reads "
            f"{FORMAT_VERSION}); remove the folder {self.directory} and rerun without --resume "
            "to start afresh"
        )

    def _damaged(self, path: Path, why: str) -> WxstatsError:
        """One line: which part is damaged, and the two ways on (each part holds
        its own time steps and their sums, so removing one part redoes only those)."""
        return WxstatsError(
            f"{path}: the checkpoint is damaged ({why}); remove this file to redo only its "
            f"samples, or remove the folder {self.directory} and rerun without --resume "
            "to start afresh"
        )

    # -- saving this rank's progress --------------------------------------
    def save(self, done: Coverage, acc: RunMoments) -> None:
        """Atomically replace this rank's part file with its current state."""
        ints, minimum, maximum = acc.pack()
        meta = {"checkpoint_part": FORMAT_VERSION, "done": done.to_json()}
        part = StateFile(meta=meta, sums=ints, minimum=minimum, maximum=maximum)
        write_all({self.part: state_writer(part, __version__)}, overwrite=True)
