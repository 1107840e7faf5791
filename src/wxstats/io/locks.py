"""Locks on a folder wxstats writes into: ``FOLDER/.wxstats-outputs.lock``, held with ``flock``.

Two uses, one file name:

- an output folder (:mod:`wxstats.io.atomic`): every run with outputs
  prepared there holds the lock *shared* from its pre-flight to the end of its
  commit; what only a folder without a live writer may do (putting back a set
  an interrupted run left, removing the temporary files a killed run left)
  needs it *exclusive*, tried without waiting: while another run holds it,
  those files may be that run's own, so they are left alone;
- a store rewritten in place (``--write-into``, :mod:`wxstats.io.zarrstore`):
  the run holds it *exclusive* from its pre-flight to the end of its write; a
  second run is refused in one line rather than made to wait (it would compute
  for hours and then replace the first run's statistics with its own).

The lock is the kernel's (``flock``), so a process killed in any way lets go
of it. The file is removed by the last holder (it takes the lock exclusive,
without waiting, before removing it), so a folder keeps no trace of a run;
whoever locks a file checks that the path still names it and otherwise locks
its successor. The file is opened without following a symbolic link, and
must be a regular file: anything else planted under that name is refused in
one line. A folder on a filesystem without ``flock`` (or a platform without
``fcntl``) is written unlocked, as before these locks.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import Path

from wxstats.core.errors import WxstatsError

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no locks
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".wxstats-outputs.lock"
_UNSUPPORTED = {errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF}
_SHARED_WAIT = 10.0
"""Seconds a shared lock waits for an exclusive holder: one tidies a folder for
a moment; longer is another process holding it on purpose."""


class FolderLock:
    """The lock of one folder (see module docstring); not held until asked."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / LOCK_NAME
        self.fd: int | None = None
        self.unsupported = fcntl is None

    def _open(self) -> int:
        flags = os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            try:
                fd = os.open(self.path, os.O_RDWR | flags, 0o644)
            except PermissionError:  # another user's lock file: reading is enough to lock
                fd = os.open(self.path, os.O_RDONLY | flags & ~os.O_CREAT)
        except OSError as exc:
            why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror or exc
            raise WxstatsError(
                f"{self.path}: cannot open wxstats' lock of that folder ({why}); remove it"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise WxstatsError(f"{self.path}: not a regular file, not wxstats' lock; remove it")
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
                if exc.errno not in _UNSUPPORTED:
                    raise WxstatsError(f"{self.path}: cannot lock: {exc.strerror}") from None
                self.unsupported = True  # a filesystem without flock: unlocked, as before
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
                    f"{self.path}: another process holds this folder's lock exclusively; "
                    "wait for it to finish, or write elsewhere"
                )
            time.sleep(0.05)

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
            os.close(self.fd)
            self.fd = None


_EXCLUSIVE: dict[str, tuple[FolderLock, int]] = {}
"""Exclusive locks this process holds, by folder, with how many holders: the
run's pre-flight and its write take a store's lock in turn (two descriptors of
one process would lock each other out)."""


def hold_exclusive(folder: Path, refused: str) -> FolderLock:
    """Take ``folder``'s lock exclusive, or raise ``refused`` (one line) when
    another process holds it; again in this process: counted, not taken twice.
    Give it back with :func:`let_go`."""
    key = os.path.realpath(folder)
    held = _EXCLUSIVE.get(key)
    if held is not None:
        _EXCLUSIVE[key] = (held[0], held[1] + 1)
        return held[0]
    lock = FolderLock(Path(folder))
    if not lock.try_exclusive():
        lock.release()
        raise WxstatsError(refused)
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
