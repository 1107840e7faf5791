"""The journal of a set of files being replaced (:mod:`wxstats.io.atomic`): written
before the first rename, read back by the next write of a set into the folder.

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

What a killed run left beside a set's files (their temporary files
``.NAME.XXXXXXXX.tmp``, their links ``.NAME.wxstats-old``, a journal's own
temporary file) is removed by :func:`remove_stale`, under the folder's
exclusive lock (:mod:`wxstats.io.locks`), where each is a regular file owned
by the user: only when no other run writes into that folder, so a live run's
files are never taken for a dead one's. A journal met while another run
holds the lock may be that run's own: a set is then refused in one line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import uuid
import warnings
from pathlib import Path

from wxstats.core.errors import WxstatsError
from wxstats.core.untrusted import UntrustedInput, owned_by_user, read_own_json
from wxstats.io.locks import LOCK_NAME, FolderLock


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


def keep_previous(final: Path) -> Path | None:
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


def write_journals(entries: list[Entry], written: list[Path]) -> None:
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


def put_back(moved: list[Entry]) -> None:
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


def _read_journal(folder: Path, journal: Path) -> tuple[str, list[Entry], list[str]]:
    """(tag, entries in ``folder``, the other folders as written) of a journal
    that may be honoured; else refused in one line (see module docstring)."""
    named = _JOURNAL.fullmatch(journal.name)
    if named is None:
        raise _refused(journal, "it is not a name wxstats gives its journals")
    try:
        doc = read_own_json(journal, MAX_JOURNAL_BYTES)
    except UntrustedInput as exc:
        raise _refused(journal, exc.why) from None
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
        put_back(moved)
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


def recover_locked(folder: Path) -> None:
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
            if stat.S_ISREG(st.st_mode) and owned_by_user(st):
                os.unlink(entry.path)
                removed.append(name)
        except OSError:
            continue
    return removed
