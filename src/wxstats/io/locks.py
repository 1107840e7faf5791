"""Locks on a folder wxstats uses, held with ``flock``: the one implementation.

Three uses, two file names:

- an output folder (:mod:`wxstats.io.atomic`), ``FOLDER/.wxstats-outputs.lock``
  (:data:`LOCK_NAME`): every run with outputs prepared there holds the lock
  *shared* from its pre-flight to the end of its commit; what only a folder
  without a live writer may do (putting back a set an interrupted run left,
  removing the temporary files a killed run left) needs it *exclusive*, tried
  without waiting: while another run holds it, those files may be that run's
  own, so they are left alone;
- a store rewritten in place (``--write-into``, :mod:`wxstats.io.zarrstore`),
  the same file: the run holds it *exclusive* from its pre-flight to the end of
  its write (:func:`hold_exclusive`); a second run is refused in one line
  rather than made to wait (it would compute for hours and then replace the
  first run's statistics with its own);
- a checkpoint folder (:mod:`wxstats.runtime.checkpoint`), ``.wxstats.lock``:
  rank 0 holds it *exclusive* for the run's life (:func:`take_exclusive`); a
  second run on the folder is refused in one line. It is a file of its own
  because every rank writes its part files into that folder atomically, under
  the folder's output lock held shared, while rank 0 holds the run's.

The lock is the kernel's (``flock``), so a process killed in any way lets go
of it. The file is removed by the last holder (it takes the lock exclusive,
without waiting, before removing it), so a folder keeps no trace of a run;
whoever locks a file checks that the path still names it and otherwise locks
its successor. The file is opened without following a symbolic link and
without waiting (``O_NONBLOCK``: a FIFO planted under that name does not block
the open), and must be a regular file: anything else planted under that name
is refused in one line. An exclusive holder writes who it is (process, host,
since when) into the file, only where the file is the user's own and has one
link (never another file's contents replaced through a hard link); a run
refused shows what the file says as a hint, at most 120 printable characters
(the file may be anyone's, saying anything), and never uses it otherwise.

A folder on a file system that cannot lock (some NFS or Lustre mounts:
``ENOLCK``, ``EOPNOTSUPP``; or a platform without ``fcntl``) is used
unlocked, after one warning per folder and process, whatever the use: what
the lock protects (a second run refused, a live run's files told from a dead
one's) is then not checked, and the user is told so once.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from wxstats.core.errors import WxstatsError
from wxstats.core.untrusted import owned_by_user

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no locks
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".wxstats-outputs.lock"
"""The lock of an output folder and of a store written into (module docstring)."""
NO_LOCKS = {errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF}
"""``flock`` errors of a file system that cannot lock (not another run's lock; EBADF:
NFS emulates ``flock`` with a write lock, refused on someone else's read-only file)."""
HINT_BYTES = 200
"""At most this much of a lock file is read, for the hint of who holds it."""
HINT_CHARS = 120
"""At most this many characters of that hint are shown."""
_SHARED_WAIT = 10.0
"""Seconds a shared lock waits for an exclusive holder: one tidies a folder for
a moment; longer is another process holding it on purpose."""
_WARNED: set[str] = set()
"""Folders already warned of in this process as unable to lock."""


class FolderLock:
    """The lock file ``name`` of one folder (see module docstring); not held until asked."""

    def __init__(self, folder: Path, name: str = LOCK_NAME) -> None:
        self.folder = Path(folder)
        self.path = self.folder / name
        self.fd: int | None = None
        self.unsupported = fcntl is None
        if self.unsupported:  # pragma: no cover - not POSIX
            _warn_unlocked(self.folder, "no flock on this platform")

    def _open(self) -> int:
        flags = (
            os.O_CREAT
            | getattr(os, "O_NOFOLLOW", 0)
            | getattr(os, "O_NONBLOCK", 0)
            | getattr(os, "O_CLOEXEC", 0)
        )
        try:
            try:
                fd = os.open(self.path, os.O_RDWR | flags, 0o644)
            except PermissionError:  # another user's lock file: reading is enough to lock
                fd = os.open(self.path, os.O_RDONLY | flags & ~os.O_CREAT)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise WxstatsError(
                    f"{self.path}: a symbolic link, not a lock file of wxstats; remove it, "
                    "or use another folder"
                ) from None
            raise WxstatsError(
                f"{self.path}: cannot open wxstats' lock file of that folder: "
                f"{exc.strerror or exc}; remove it, or use another folder"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise WxstatsError(
                f"{self.path}: not a regular file, so not a lock file of wxstats; remove it, "
                "or use another folder"
            )
        return fd

    def _same_file(self) -> bool:
        """The path still names the file locked (its last holder did not remove it)."""
        try:
            named = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return False
        held = os.fstat(self.fd)  # type: ignore[arg-type]
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def _try(self, op: int) -> bool:
        """``flock(op | LOCK_NB)`` on the file the path names; False while held elsewhere."""
        if self.unsupported:
            return True
        while True:
            if self.fd is None:
                self.fd = self._open()
            try:
                fcntl.flock(self.fd, op | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            except OSError as exc:
                if exc.errno not in NO_LOCKS:
                    raise WxstatsError(f"{self.path}: cannot lock: {exc.strerror or exc}") from None
                self.unsupported = True
                _warn_unlocked(self.folder, exc.strerror or str(exc))
                return True
            if self._same_file():
                return True
            os.close(self.fd)  # removed by its last holder meanwhile: lock the new one
            self.fd = None

    def try_exclusive(self) -> bool:
        """Take the lock exclusive if no other process holds it (never waits)."""
        return self._try(fcntl.LOCK_EX if fcntl else 0)

    def shared(self) -> None:
        """Hold the lock shared (from exclusive, or from nothing); an exclusive
        holder tidies the folder for a moment, so wait for it, within bounds."""
        deadline = time.monotonic() + _SHARED_WAIT
        while not self._try(fcntl.LOCK_SH if fcntl else 0):
            if time.monotonic() > deadline:
                self.release()
                raise WxstatsError(
                    f"{self.path}: another process holds this folder's lock exclusively"
                    f"{self.holder()}; wait for it to finish, or write elsewhere"
                )
            time.sleep(0.05)

    def holder(self) -> str:
        """What the lock file says of its holder, for display only: `` (its lock
        file says: ...)`` with the printable characters of its first bytes, or ``""``."""
        if self.fd is None:
            return ""
        try:
            raw = os.pread(self.fd, HINT_BYTES, 0).decode(errors="replace")
        except OSError:
            return ""
        text = " ".join("".join(c if c.isprintable() else " " for c in raw).split())
        return f" (its lock file says: {text[:HINT_CHARS]})" if text else ""

    def say_holder(self) -> None:
        """Write who holds the lock (held exclusive), in a file of this user's
        only, with one link (never another file's contents replaced through a
        hard link); a file opened read-only is locked without its hint."""
        if self.fd is None or self.unsupported:
            return
        try:
            info = os.fstat(self.fd)
            if not owned_by_user(info) or info.st_nlink != 1:
                return
            when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            hint = f"pid {os.getpid()} on {socket.gethostname()} since {when}\n"
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, hint.encode(), 0)
        except OSError:
            pass

    def release(self) -> None:
        """Let go; the last holder removes the file (see module docstring)."""
        if self.fd is None:
            return
        try:
            if not self.unsupported:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else holds it
                if self._same_file():
                    os.unlink(self.path)
        except OSError:  # held by others (they remove it), or gone
            pass
        finally:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None

    def __del__(self) -> None:  # dropped unreleased (a test's several ranks)
        with contextlib.suppress(Exception):
            self.release()


def _warn_unlocked(folder: Path, why: str) -> None:
    """The one warning of a folder that cannot be locked (module docstring)."""
    key = os.path.realpath(folder)
    if key in _WARNED:
        return
    _WARNED.add(key)
    warnings.warn(
        f"{folder}: this file system cannot lock files ({why}): another run using this "
        "folder at the same time would not be refused, nor its files told from a dead "
        "run's",
        UserWarning,
        stacklevel=2,
    )


def take_exclusive(
    folder: Path, refused: Callable[[str], str], name: str = LOCK_NAME
) -> FolderLock:
    """Take ``folder``'s lock file ``name`` exclusive without waiting and say who
    holds it, or raise ``refused(hint)`` (one line; ``hint`` is what the holder's
    file says, :meth:`FolderLock.holder`) while another holds it. Each call is a
    holder of its own, in this process too."""
    lock = FolderLock(folder, name)
    try:
        if not lock.try_exclusive():
            raise WxstatsError(refused(lock.holder()))
        lock.say_holder()
    except BaseException:
        lock.release()
        raise
    return lock


_EXCLUSIVE: dict[str, tuple[FolderLock, int]] = {}
"""Exclusive locks this process holds, by folder, with how many holders: the
run's pre-flight and its write take a store's lock in turn (two descriptors of
one process would lock each other out)."""


def hold_exclusive(folder: Path, refused: Callable[[str], str]) -> FolderLock:
    """:func:`take_exclusive` of ``folder``'s :data:`LOCK_NAME`; again in this
    process: counted, not taken twice. Give it back with :func:`let_go`."""
    key = os.path.realpath(folder)
    held = _EXCLUSIVE.get(key)
    if held is not None:
        _EXCLUSIVE[key] = (held[0], held[1] + 1)
        return held[0]
    lock = take_exclusive(Path(folder), refused)
    _EXCLUSIVE[key] = (lock, 1)
    return lock


def let_go(folder: Path) -> None:
    """One holder of ``folder``'s exclusive lock is done (the last one releases it)."""
    key = os.path.realpath(folder)
    held = _EXCLUSIVE.get(key)
    if held is None:
        return
    if held[1] > 1:
        _EXCLUSIVE[key] = (held[0], held[1] - 1)
        return
    del _EXCLUSIVE[key]
    held[0].release()
