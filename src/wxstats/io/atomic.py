"""All-or-nothing output: every file is written to a temporary name in its
final folder, flushed to disk, and renamed only when all of them are ready.

A crash or a failed write leaves earlier results untouched and no half-written
file behind; an existing result is replaced only when the caller allows it.

A set of several files (neural-lam's ``parameter_*.pt``, ``diff_*.pt``...) is
renamed one file at a time, so a set needs more than renames to be all or
nothing. Before the first rename every file being replaced gets a hard link
(``.NAME.wxstats-old``) and each folder a journal
(``.wxstats-replacing-TAG.json``); both go once all are in place. A rename
that fails puts the previous set back at once. A process killed between two
renames leaves the journal: the next write of a set into that folder
(:func:`recover_interrupted`, from :func:`check_writable`) keeps the new set
if every file had been moved, and otherwise puts the previous one back;
readers of wxstats (:func:`interrupted_write`) refuse the folder until then.
Programs that do not know the journal (neural-lam) may see a mixed set in
that window.

A journal is a file in a folder others may write (a datastore's ``static/``
received from a colleague, a shared results folder), so it is data, never an
instruction. It names files by name only, relative to its own folder, and is
honoured only if it is a regular file (not a link) of a name wxstats gives,
owned by the user running wxstats (POSIX), with one link, and every entry
names ``NAME`` in that folder with its temporary file ``.NAME.XXXXXXXX.tmp``
(``mkstemp``'s) and its link ``.NAME.wxstats-old``. Anything else is refused
in one line naming the journal and why; nothing is moved or removed. A set
spanning several folders (``static/`` and a ``--summary`` elsewhere) has one
journal per folder, all with the set's tag: each lists its own files and the
other folders (relative to its own); whether every file had moved is decided
over all of them, and another folder's journal is honoured under the same
rules and only if it names this folder back, so that the set comes back whole
(new everywhere, or previous everywhere). A listed journal that is absent was
never written (its run was killed before the first rename: nothing there
moved) or was removed by a recovery that had done its work.

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
import errno
import json
import os
import re
import shutil
import stat
import tempfile
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from wxstats.core.errors import WxstatsError
from wxstats.io.disk import NO_SPACE, disk_is_full, no_space
from wxstats.io.locks import LOCK_NAME, FolderLock

Writer = Callable[[Path], None]
"""Writes one output to the temporary path it is given."""


def check_writable(paths: list[Path], overwrite: bool) -> list[Path]:
    """Fail before any work if an output exists (without ``overwrite``) or its
    folder cannot be created or written; the folders it created, deepest first
    (a failed run removes them)."""
    if len(paths) > 1:
        for folder in sorted({p.parent for p in paths}):
            _recover_locked(folder)
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


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (a rename into it, a file made or removed)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


JOURNAL_GLOB = ".wxstats-replacing-*.json"
_JOURNAL = re.compile(r"\.wxstats-replacing-([0-9a-f]{32})\.json")
_JOURNAL_TEMP = re.compile(r"\.wxstats-replacing-[0-9a-f]{32}\.json\.tmp")
_RANDOM = r"[a-z0-9_]{8}"
"""The random part of a ``mkstemp`` name (:data:`tempfile.template` aside)."""
JOURNAL_VERSION = 2
MAX_JOURNAL_BYTES = 1 << 20
Entry = tuple[Path, Path, Path | None]
"""(final path, its temporary file, the hard link keeping the file it replaces)."""


def temp_pattern(names: list[str]) -> re.Pattern[str]:
    """The temporary files :func:`prepare_all` makes for outputs ``names``."""
    alternatives = "|".join(re.escape(n) for n in names)
    return re.compile(rf"\.(?:{alternatives})\.{_RANDOM}\.tmp")


def backup_name(name: str) -> str:
    """The hard link keeping the file ``name`` replaces until the set is in place."""
    return f".{name}.wxstats-old"


def _backup(final: Path) -> Path | None:
    """A hard link (a copy where links fail) to the file ``final`` replaces."""
    if not final.exists():
        return None
    backup = final.with_name(backup_name(final.name))
    backup.unlink(missing_ok=True)
    try:
        os.link(final, backup)
    except OSError:
        shutil.copy2(final, backup)
    return backup


def _create_exclusive(path: Path, text: str) -> None:
    """Write a new file that no one else made first (no link followed), flushed."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_journals(entries: list[Entry], written: list[Path]) -> None:
    """One journal per folder of the set, each naming its own files by name and
    the other folders (see module docstring); durable before the first rename.
    ``written`` gets each as it is made (to remove)."""
    tag = uuid.uuid4().hex
    folders = sorted({final.parent for final, _, _ in entries})
    real = {folder: os.path.realpath(folder) for folder in folders}
    for folder in folders:
        files = [
            [final.name, temp.name, backup.name if backup else None]
            for final, temp, backup in entries
            if final.parent == folder
        ]
        others = [os.path.relpath(real[o], real[folder]) for o in folders if o != folder]
        text = json.dumps(
            {"wxstats_journal": JOURNAL_VERSION, "tag": tag, "files": files, "folders": others},
            indent=1,
        )
        journal = folder / f".wxstats-replacing-{tag}.json"
        temp = journal.with_name(f"{journal.name}.tmp")
        try:
            _create_exclusive(temp, text)
            os.replace(temp, journal)
        finally:
            temp.unlink(missing_ok=True)
        written.append(journal)
        fsync_dir(journal.parent)


def _put_back(moved: list[Entry]) -> None:
    """Undo renames: the previous file back from its link, a new file removed.
    A link already gone was put back by an earlier, interrupted recovery."""
    for final, _, backup in reversed(moved):
        if backup is None:
            final.unlink(missing_ok=True)
        elif os.path.lexists(backup):
            os.replace(backup, final)


def _refused(journal: Path, why: str) -> WxstatsError:
    return WxstatsError(
        f"{journal}: not honoured, {why}; nothing was moved or removed. Check the files of "
        "that folder (their previous versions may be in .NAME.wxstats-old) and remove it"
    )


def _plain_name(value: object) -> bool:
    """A file name of the folder itself: no separator, no parent, nothing else."""
    seps = {"/", "\0", os.sep, os.altsep or "/"}
    return (
        isinstance(value, str)
        and value not in ("", ".", "..")
        and not any(sep in value for sep in seps)
        and not _JOURNAL.fullmatch(value)
        and value != LOCK_NAME
    )


def _regular(path: Path) -> bool:
    """A regular file itself (a symbolic link to one is not)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _read_bounded(journal: Path) -> bytes:
    """The journal's bytes if it may be honoured (see module docstring)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(journal, flags)
    except OSError as exc:
        raise _refused(
            journal, "it is a symbolic link" if exc.errno == errno.ELOOP else str(exc.strerror)
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refused(journal, "it is not a regular file")
        if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            raise _refused(
                journal, f"it is owned by uid {st.st_uid}, not by you (uid {os.geteuid()})"
            )
        if st.st_nlink != 1:
            raise _refused(journal, f"it has {st.st_nlink} links (wxstats writes one)")
        if st.st_size > MAX_JOURNAL_BYTES:
            raise _refused(journal, f"it holds {st.st_size} bytes, more than a journal")
        chunks, size = [], 0
        while size <= MAX_JOURNAL_BYTES and (chunk := os.read(fd, 1 << 16)):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)[: MAX_JOURNAL_BYTES + 1]
    finally:
        os.close(fd)


def _read_journal(folder: Path, journal: Path) -> tuple[str, list[Entry], list[str]]:
    """(tag, entries in ``folder``, the other folders as written) of a journal
    that may be honoured; else refused in one line (see module docstring)."""
    named = _JOURNAL.fullmatch(journal.name)
    if named is None:
        raise _refused(journal, "it is not a name wxstats gives its journals")
    data = _read_bounded(journal)
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise _refused(journal, "it is not a wxstats journal (not JSON)") from None
    if not (
        isinstance(doc, dict)
        and doc.get("wxstats_journal") == JOURNAL_VERSION
        and doc.get("tag") == named.group(1)
        and isinstance(doc.get("files"), list)
        and isinstance(doc.get("folders"), list)
        and all(isinstance(f, str) and f for f in doc["folders"])
    ):
        raise _refused(journal, "it is not a journal of this wxstats version")
    entries: list[Entry] = []
    for item in doc["files"]:
        if not (isinstance(item, list) and len(item) == 3 and _plain_name(item[0])):
            raise _refused(journal, f"an entry is not a file of its folder: {str(item)[:80]}")
        name, temp, backup = item
        if not (isinstance(temp, str) and temp_pattern([name]).fullmatch(temp)):
            raise _refused(journal, f"{name}'s temporary file is not wxstats': {str(temp)[:80]}")
        if backup is not None and backup != backup_name(name):
            raise _refused(journal, f"{name}'s previous version is not wxstats' link")
        entries.append((folder / name, folder / temp, folder / backup if backup else None))
    if len({final for final, _, _ in entries}) != len(entries):
        raise _refused(journal, "it names a file twice")
    return named.group(1), entries, doc["folders"]


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _journals_of_set(folder: Path, journal: Path) -> dict[Path, tuple[Path, list[Entry]]]:
    """Every folder of the set ``journal`` belongs to, with its journal and entries
    (see module docstring: each honoured by the same rules, naming the others back)."""
    _, entries, others = _read_journal(folder, journal)
    found = {folder: (journal, entries)}
    for relative in others:
        other = folder / relative
        theirs = other / journal.name  # the same tag: the same name
        if not os.path.lexists(theirs):
            continue  # never written, or its recovery was done (module docstring)
        if any(_same_folder(other, seen) for seen in found):
            raise _refused(journal, f"it lists {other} twice")
        _, their_entries, their_others = _read_journal(other, theirs)
        if not any(_same_folder(other / back, folder) for back in their_others):
            raise _refused(journal, f"{theirs} does not name this folder back")
        found[other] = (theirs, their_entries)
    return found


def recover_interrupted(folder: Path) -> None:
    """Finish a replacement of a set that a killed process left (see module
    docstring): the new set if every file was moved, else the previous one;
    a journal that may not be honoured is refused in one line."""
    for journal in sorted(folder.glob(JOURNAL_GLOB)) if folder.is_dir() else []:
        if os.path.lexists(journal):  # not removed with an earlier journal of its set
            _recover_set(folder, journal)


def _recover_set(folder: Path, journal: Path) -> None:
    sets = _journals_of_set(folder, journal)
    locks = [FolderLock(other) for other in sets if other != folder]
    try:
        for lock in locks:  # this folder's own is held by the caller
            if not lock.try_exclusive():
                raise WxstatsError(
                    f"{lock.path.parent}: another wxstats run is writing into this folder "
                    f"now; the set {journal.name} names it: rerun when that run has finished"
                )
        everything = [entry for _, entries in sets.values() for entry in entries]
        complete = not any(os.path.lexists(temp) for _, temp, _ in everything)
        moved = [] if complete else [e for e in everything if not os.path.lexists(e[1])]
        for final, _, backup in moved:
            if backup is not None and os.path.lexists(backup) and not _regular(backup):
                raise _refused(journal, f"{backup.name} is not a regular file")
            if backup is None and os.path.lexists(final) and not _regular(final):
                raise _refused(journal, f"{final.name} is not a regular file")
        _put_back(moved)
        for _, temp, backup in everything:
            temp.unlink(missing_ok=True)
            if backup is not None:
                backup.unlink(missing_ok=True)
        for other, (theirs, _) in sets.items():  # this folder's last
            if other != folder:
                theirs.unlink(missing_ok=True)
        journal.unlink(missing_ok=True)
    finally:
        for lock in locks:
            lock.release()
    names = ", ".join(final.name for final, _, _ in everything)
    warnings.warn(
        f"{folder}: an earlier write of {names} was interrupted between renames; "
        + (
            "all new files were in place and are kept"
            if complete
            else "put the previous files back"
        ),
        UserWarning,
        stacklevel=3,
    )


def interrupted_write(folder: Path) -> Path | None:
    """The journal of an interrupted replacement in ``folder``, if any: its
    files may be a mix of the new set and the previous one."""
    return next(iter(sorted(folder.glob(JOURNAL_GLOB))), None) if folder.is_dir() else None


def _recover_locked(folder: Path) -> None:
    """Recover ``folder`` (:func:`recover_interrupted`) under its lock: a journal
    met while another run writes there may be that run's own."""
    journal = interrupted_write(folder)
    if journal is None:
        return
    lock = FolderLock(folder)
    try:
        if not lock.try_exclusive():
            raise WxstatsError(
                f"{folder}: another wxstats run is writing into this folder now "
                f"({journal.name} may be its own); rerun when it has finished"
            )
        recover_interrupted(folder)
    finally:
        lock.release()


def remove_stale(folder: Path, names: list[str]) -> list[str]:
    """Remove what a killed run left in ``folder`` for outputs ``names``: their
    temporary files, their links and a journal's temporary file, where each is
    a regular file owned by the user. Only under the folder's exclusive lock,
    and never beside a journal (its recovery needs them). The names removed."""
    if not names or interrupted_write(folder) is not None:
        return []
    temps, links = temp_pattern(names), {backup_name(n) for n in names}
    uid = os.geteuid() if hasattr(os, "geteuid") else None
    removed = []
    try:
        candidates = list(os.scandir(folder))
    except OSError:
        return []
    for entry in candidates:
        name = entry.name
        if not (temps.fullmatch(name) or name in links or _JOURNAL_TEMP.fullmatch(name)):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and (uid is None or st.st_uid == uid):
                os.unlink(entry.path)
                removed.append(name)
        except OSError:
            continue
    return removed


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
                entries.append((final, temp, _backup(final) if several else None))
            if several:
                _write_journals(entries, journals)
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
                _put_back(moved)
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
