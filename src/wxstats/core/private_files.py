"""Folders and files only this user can change: the rule for anything wxstats
would run as code (the compiled kernel's store, numba's cache of it, whose
index files are pickles).

A folder is *private* when it, and every folder above it, belongs to this user
or to root and no one else can write it: not writable by others (a folder
with the sticky bit, such as ``/tmp``, lets no one else rename what is ours in
it), nor by its group unless that group is this user's own (named as the user,
with no other member: the user-private groups of Red Hat and Debian, whose
``umask 002`` makes every new folder group-writable). A file in it is private
on the same terms, checked on the open descriptor (``fstat``) after opening it
without following a symbolic link, so that nothing can be swapped between the
check and the read. Files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW``,
mode 0600, under a random name, and renamed into place by their folder's
descriptor; folders are made with mode 0700. Root owns the system and may own
what we read (an administrator's store); anyone else may not.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import stat
from pathlib import Path

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class NotPrivate(OSError):
    """A folder or file that someone else can change: never read as code."""


@functools.cache
def _own_group(gid: int) -> bool:
    """Whether group ``gid`` is this user's private group (see the module docstring)."""
    try:
        import grp
        import pwd

        user = pwd.getpwuid(os.geteuid()).pw_name
        group = grp.getgrgid(gid)
    except (ImportError, KeyError):
        return False
    return gid == os.getegid() and group.gr_name == user and set(group.gr_mem) <= {user}


def problem(st: os.stat_result, folder: bool) -> str | None:
    """Why an object of status ``st`` is not private, or None."""
    if not hasattr(os, "geteuid"):  # Windows: ownership is not in the mode bits
        return None
    if st.st_uid not in (os.geteuid(), 0):
        return f"it belongs to user id {st.st_uid}"
    sticky = folder and st.st_mode & stat.S_ISVTX
    if st.st_mode & stat.S_IWOTH and not sticky:
        return "anyone can write it"
    if st.st_mode & stat.S_IWGRP and not sticky and not _own_group(st.st_gid):
        return f"its group (id {st.st_gid}) can write it"
    return None


def folder_problem(path: Path | str) -> str | None:
    """Why folder ``path`` is not private (itself or a folder above it), or None.
    Symbolic links on the way are resolved first; the folders of the resolved
    path are what could be changed."""
    real = Path(os.path.realpath(path))
    st = os.lstat(real)  # FileNotFoundError for a folder not made yet
    if not stat.S_ISDIR(st.st_mode):
        return f"{real} is not a folder"
    why = problem(st, folder=False)  # ours alone: a sticky bit does not keep others' files out
    if why:
        return f"{real}: {why}"
    for above in real.parents:
        why = problem(os.lstat(above), folder=True)
        if why:
            return f"{above} (above {real}): {why}"
    return None


def open_folder(path: Path | str, create: bool) -> int:
    """A descriptor of private folder ``path`` (made, mode 0700, if ``create``);
    :class:`NotPrivate` where it is not private, OSError where it cannot be made."""
    path = Path(path)
    if create and not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
    why = folder_problem(path)
    if why:
        raise NotPrivate(why)
    fd = os.open(os.path.realpath(path), os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC)
    why = problem(os.fstat(fd), folder=False)  # the folder opened is the folder checked
    if why:
        os.close(fd)
        raise NotPrivate(f"{path}: {why}")
    return fd


def read(folder: int, name: str) -> bytes | None:
    """The bytes of private file ``name`` in the folder of descriptor ``folder``;
    None where there is none; :class:`NotPrivate` for anything else of that name
    (a link, a file others can write)."""
    try:
        fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _CLOEXEC | os.O_NONBLOCK, dir_fd=folder)
    except FileNotFoundError:
        return None
    except OSError as e:  # ELOOP: a symbolic link
        raise NotPrivate(f"{name}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        why = "not a plain file" if not stat.S_ISREG(st.st_mode) else problem(st, folder=False)
        if why:
            raise NotPrivate(f"{name}: {why}")
        return f.read()


def write(folder: int, name: str, data: bytes) -> None:
    """``data`` as file ``name`` of the folder of descriptor ``folder``, whole or
    not at all: written to a new file of a random name (never through a link
    or into someone else's file), mode 0600, then renamed."""
    partial = f".{name}.{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    fd = os.open(partial, flags, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(partial, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial, dir_fd=folder)
        raise


def files_problem(path: Path | str, suffixes: tuple[str, ...]) -> str | None:
    """Why a file of private folder ``path`` whose name ends in one of
    ``suffixes`` is not private (a link, another user's file), or None."""
    for entry in os.scandir(path):
        if entry.name.endswith(suffixes):
            st = entry.stat(follow_symlinks=False)
            why = "a link" if not stat.S_ISREG(st.st_mode) else problem(st, folder=False)
            if why:
                return f"{entry.path}: {why}"
    return None
