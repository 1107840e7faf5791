"""All-or-nothing output: every file is written to a temporary name in its
final folder, flushed to disk, and renamed only when all of them are ready.

A crash or a failed write leaves earlier results untouched and no half-written
file behind; an existing result is replaced only when the caller allows it.

A set of several files (neural-lam's ``parameter_*.pt``, ``diff_*.pt``...) is
renamed one file at a time, so a set needs more than renames to be all or
nothing: before the first rename every file being replaced gets a hard link
and each folder a journal (:mod:`wxstats.io.journal`); both go once all are
in place. A rename that fails puts the previous set back at once; a process
killed between two renames leaves the journal, and the next write of a set
into that folder puts one whole set back first (:func:`check_writable`).

Outputs are prepared before the data is read (:func:`prepare_all`): each
temporary file is made in its final folder and written once from a template of
the statistics (same names, dimensions and attributes, placeholder values),
so that an attribute a format refuses, a clash of names or a full disk ends a
run in its first seconds, not after hours. At the end :meth:`Prepared.commit`
writes the values over each template (the space is already taken) and renames
the set into place; :meth:`Prepared.discard` removes the temporary files and
every folder the run created. A full disk is named as such (``no space left
on ...``), whatever the library that hit it says (HDF5 reports one as an
``HDF error`` or even ``Permission denied``).

A run holds each output folder's lock (:mod:`wxstats.io.locks`) shared from
its preparation to the end of its commit. Putting a set back and removing
what a killed run left need it exclusive, tried without waiting: the
temporary files of these outputs (``.NAME.XXXXXXXX.tmp``), their links
(``.NAME.wxstats-old``) and a journal's own temporary file, where they are
regular files owned by the user, are removed only when no other run writes
into that folder (a live run's files are never taken for a dead one's; when
one is writing, they stay for a later run). A journal met while another run
holds the lock may be that run's own: a set is then refused in one line.

File modes are what a user of a shared cluster expects: a new file gets
``0666 & ~umask`` (``mkstemp`` alone would make every output 0600, unreadable to
the colleagues whose training jobs load a group-shared ``static/``), and a file
being replaced keeps its own mode.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from wxstats.core.errors import WxstatsError
from wxstats.io.disk import NO_SPACE, disk_is_full, no_space
from wxstats.io.journal import (
    Entry,
    fsync_dir,
    keep_previous,
    put_back,
    recover_locked,
    remove_stale,
    write_journals,
)
from wxstats.io.locks import FolderLock

Writer = Callable[[Path], None]
"""Writes one output to the temporary path it is given."""


def check_writable(paths: list[Path], overwrite: bool) -> list[Path]:
    """Fail before any work if an output exists (without ``overwrite``) or its
    folder cannot be created or written; the folders it created, deepest first
    (a failed run removes them)."""
    if len(paths) > 1:
        for folder in sorted({p.parent for p in paths}):
            recover_locked(folder)
    folders = [str(p) for p in paths if p.is_dir()]
    if folders:  # --overwrite would fail only at the end, after the whole run
        raise WxstatsError(
            f"output is an existing folder: {', '.join(folders)}; give a file name there"
        )
    existing = [str(p) for p in paths if p.exists()]
    if existing and not overwrite:
        raise WxstatsError(
            f"output exists: {', '.join(existing)}; pass --overwrite to replace, "
            "or choose another location"
        )
    created: list[Path] = []
    for folder in sorted({p.parent for p in paths}):
        new = [a for a in (folder, *folder.parents) if not a.exists()]
        created = new + created  # removed where made and empty (mkdir may fail midway)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".wxstats-probe-"):
                pass
        except OSError as exc:
            remove_folders(created)
            if exc.errno in NO_SPACE:
                raise no_space(folder) from None
            blocker = next((a for a in (folder, *folder.parents) if a.is_file()), None)
            reason = f"{blocker} is a file" if blocker else exc.strerror or exc
            raise WxstatsError(f"{folder}: output folder is not writable: {reason}") from None
    return created


def remove_folders(folders: list[Path]) -> None:
    """Remove the folders a run created (deepest first), where they are empty."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def fsync_file(path: Path) -> None:
    """Flush a written file to disk (before it is renamed into place)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process umask, read without changing it (``os.umask`` sets it, which
    races with other threads creating files)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def output_mode(final: Path) -> int:
    """The permission bits ``final`` gets: those of the file it replaces, else
    what ``open`` would give a new file under the umask."""
    try:
        return stat.S_IMODE(os.stat(final).st_mode)
    except OSError:
        return 0o666 & ~current_umask()


def _write(writer: Writer, temp: Path, final: Path) -> None:
    """Run ``writer`` into ``temp``; a failure is one line naming ``final``
    (a full disk as such)."""
    try:
        writer(temp)
    except WxstatsError:
        raise
    # what netCDF4/HDF5, numpy and torch raise for a file they cannot write
    except (OSError, RuntimeError, ValueError, TypeError, AttributeError) as exc:
        if (isinstance(exc, OSError) and exc.errno in NO_SPACE) or disk_is_full(final.parent):
            raise no_space(final) from None
        raise WxstatsError(f"{final}: cannot be written: {exc}") from None


@dataclass
class Prepared:
    """Outputs whose temporary files exist, each holding its template (see
    module docstring): committed at the end, or discarded."""

    temps: dict[Path, Path] = field(default_factory=dict)
    created: list[Path] = field(default_factory=list)
    """Folders made for these outputs (deepest first): a failed run removes them."""
    committed: bool = False
    """Every output renamed into place."""
    locks: list[FolderLock] = field(default_factory=list)
    """The output folders' locks, held shared until the commit ends (module docstring)."""
    held: list[Callable[[], None]] = field(default_factory=list)
    """What else the run holds until it ends (a store's lock), each given back by
    :meth:`discard`, after a commit too."""

    def _unlock(self) -> None:
        while self.locks:
            self.locks.pop().release()

    def _remove(self) -> None:
        for temp in self.temps.values():
            temp.unlink(missing_ok=True)
        self.temps = {}
        self._unlock()  # its file goes before the folders made for it
        remove_folders(self.created)

    def discard(self) -> None:
        """Remove the temporary files and the folders made for them (nothing
        after a commit: the outputs are in place), and give back what the run
        held."""
        if not self.committed:
            self._remove()
        self._unlock()
        while self.held:
            self.held.pop()()

    def commit(
        self, writers: dict[Path, Writer], before_renames: Callable[[], None] | None = None
    ) -> None:
        """Write every output over its template, then rename the set into
        place all or nothing (``before_renames``: a last call before the first
        rename). A failure removes everything this run made."""
        try:
            self._commit(writers, before_renames)
        finally:
            for final, temp in self.temps.items():
                if final not in writers:  # prepared, but nothing to write after all
                    temp.unlink(missing_ok=True)
            if self.committed:
                self._unlock()
            else:
                self._remove()

    def _commit(self, writers: dict[Path, Writer], before_renames) -> None:
        entries: list[Entry] = []
        journals: list[Path] = []
        moved: list[Entry] = []
        temps = {final: self.temps[final] for final in writers}
        try:
            for final, writer in writers.items():
                _write(writer, temps[final], final)
                os.chmod(temps[final], output_mode(final))  # the writer may recreate it
                fsync_file(temps[final])
            several = len(temps) > 1
            for final, temp in temps.items():  # a loop: links made before a failure go
                entries.append((final, temp, keep_previous(final) if several else None))
            if several:
                write_journals(entries, journals)
            if before_renames is not None:
                before_renames()
            for entry in entries:
                os.replace(entry[1], entry[0])
                moved.append(entry)
            self.committed = True
            for folder in {p.parent for p in temps}:
                fsync_dir(folder)
        except BaseException as exc:
            self.committed = False
            try:
                put_back(moved)
            except OSError:  # everything stays for the next write to put the set back
                self.temps, self.created, entries, journals = {}, [], [], []
                raise WxstatsError(
                    f"writing outputs failed and putting the previous files back failed too: "
                    f"{exc}; the next wxstats write into {moved[0][0].parent} restores them"
                ) from None
            if isinstance(exc, OSError):
                if exc.errno in NO_SPACE:
                    raise no_space(next(iter(temps))) from None
                raise WxstatsError(f"writing outputs failed, nothing was replaced: {exc}") from None
            raise
        finally:
            for journal in journals:  # first: a stray link without a journal is harmless
                journal.unlink(missing_ok=True)
            for _, temp, backup in entries:
                temp.unlink(missing_ok=True)
                if backup is not None:
                    backup.unlink(missing_ok=True)


def prepare_all(outputs: dict[Path, Writer | None], overwrite: bool) -> Prepared:
    """Check every output and make its temporary file, written from its
    template where one is given (see module docstring); nothing is left
    behind if any fails."""
    prepared = Prepared(created=check_writable(list(outputs), overwrite))
    try:
        for folder in sorted({final.parent for final in outputs}):
            lock = FolderLock(folder)
            prepared.locks.append(lock)
            if lock.try_exclusive():  # no other run writes here: what is left is a dead one's
                remove_stale(folder, [final.name for final in outputs if final.parent == folder])
            lock.shared()
        for final, template in outputs.items():
            try:
                fd, name = tempfile.mkstemp(
                    dir=final.parent, prefix=f".{final.name}.", suffix=".tmp"
                )
            except OSError as exc:
                if exc.errno in NO_SPACE:
                    raise no_space(final) from None
                raise WxstatsError(f"{final}: cannot be written: {exc}") from None
            os.close(fd)
            prepared.temps[final] = Path(name)
            if template is not None:
                _write(template, Path(name), final)
    except BaseException:
        prepared.discard()
        raise
    return prepared


def write_all(outputs: dict[Path, Writer], overwrite: bool) -> None:
    """Write every output atomically, or none of them (see module docstring)."""
    prepare_all(dict.fromkeys(outputs), overwrite).commit(outputs)
