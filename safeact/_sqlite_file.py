"""A SQLite ledger is its file (device and inode), never a path: one file, one name.

SQLite names a ledger's WAL and shared-memory index after the path it opened the file by.
Two names of one file (hard links) therefore make two WALs: a process using one name
never sees the claims made under the other, and both run the action. A symbolic link is
not a second name: the store opens the file by its ``real_name`` (links resolved), and
SQLite resolves links itself too. So a ledger file with a second name is refused, at open,
at each new connection and at each claim (one ``stat``), as is a WAL or index that is not
a plain file of the ledger's own.

SQLite's own words for trouble with the file and its side files mislead (a full disk can
be "disk I/O error"; a directory where they cannot be created, "unable to open database
file"): ``explained`` says which case it is and what to do.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path
from typing import TypeAlias

from safeact.exceptions import StoreError

__all__ = ["FileId", "check_one_name", "check_still_one_name", "explained", "real_name"]

FileId: TypeAlias = tuple[int, int]
"""A file's device and inode numbers: what makes it the same file under any path."""

_SIDE_FILES = (("-wal", "write-ahead log"), ("-shm", "shared-memory index"))


def real_name(path: str | os.PathLike[str]) -> str:
    """The absolute path, symbolic links resolved, that SQLite names the WAL after."""
    return os.path.realpath(path)


def check_one_name(name: str) -> FileId:
    """Check the ledger file ``name`` (a ``real_name``) has no other name; return its id.

    Nothing is written. Its WAL and index, if they exist, must be plain files with no other
    name either: one shared with another ledger would mix the two.

    Raises:
        StoreError: the file cannot be looked at, has more than one hard link, or its WAL or
            index is a link, not a regular file, or has more than one hard link.

    """
    try:
        found = Path(name).stat()
    except (OSError, ValueError) as exc:
        raise StoreError(f"{name}: cannot look at the ledger file: {exc}") from exc
    _check_links(name, found)
    for suffix, what in _SIDE_FILES:
        _check_side_file(f"{name}{suffix}", what)
    return found.st_dev, found.st_ino


def check_still_one_name(name: str, opened: FileId) -> None:
    """Check that ``name`` still names the file opened as ``opened``, and it alone.

    For a store open for a while: the file may since have been moved, replaced or given a
    second name, and whoever opens it under its new name would use another WAL.

    Raises:
        StoreError: ``name`` is gone or names another file now, or the file has more than
            one hard link.

    """
    try:
        found = os.stat(name)  # noqa: PTH116 - per claim: a Path costs more than the stat
    except FileNotFoundError as exc:
        raise StoreError(
            f"{name}: the ledger file is no longer at this path (moved or removed while "
            "open); under another name it has another WAL, which would not see this "
            "process's claims. Nothing was changed: open the store again where the ledger "
            "is now, once no process uses it under its old name"
        ) from exc
    except OSError as exc:
        raise StoreError(f"{name}: cannot look at the ledger file: {exc}") from exc
    if (found.st_dev, found.st_ino) != opened:
        raise StoreError(
            f"{name}: another file is at the ledger's path now (the ledger was replaced "
            "while open). Nothing was changed: open the store again, once no process uses "
            "the old file"
        )
    _check_links(name, found)


def _check_links(name: str, found: os.stat_result) -> None:
    """Refuse a ledger file with a second hard link.

    Raises:
        StoreError: it has one, with what to do about it.

    """
    if found.st_nlink > 1:
        raise StoreError(
            f"{name}: the ledger file has {found.st_nlink} names (hard links). SQLite names "
            "a ledger's WAL after the name it was opened by, so processes using different "
            "names would not see each other's claims and could run an action twice. Remove "
            f"the other names (`find / -xdev -samefile {name}` lists them) and, where a "
            "second path is needed, make it a symbolic link; nothing was changed"
        )


def _check_side_file(side: str, what: str) -> None:
    """Refuse a WAL or index that is a link, not a regular file, or has a second name.

    A missing one is fine: SQLite creates it.

    Raises:
        StoreError: it is one of those, with what to do about it.

    """
    try:
        found = os.lstat(side)
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:
        raise StoreError(f"{side}: cannot look at the ledger's {what}: {exc}") from exc
    if stat.S_ISLNK(found.st_mode):
        problem = "a symbolic link"
    elif not stat.S_ISREG(found.st_mode):
        problem = "not a regular file"
    elif found.st_nlink > 1:
        problem = f"a file with {found.st_nlink} names (hard links)"
    else:
        return
    raise StoreError(
        f"{side}: the ledger's {what} is {problem}; SQLite would share it with whatever "
        "else it names, and two ledgers sharing one mix their writes. Nothing was changed: "
        "with no process using the ledger, find out whose file it is, and leave this "
        "ledger a plain file of its own under this name (or none)"
    )


_NEARLY_FULL = 1 << 20
"""Free bytes below which a disk counts as full: SQLite's index alone grows by 32 KiB."""


def explained(exc: sqlite3.Error, name: str) -> str:
    """SQLite's error ``exc`` on the ledger file ``name`` (a ``real_name``), and what to do.

    A full disk (SQLite says "database or disk is full", or "disk I/O error" when there is
    no room for its shared-memory index); another failure to read or write; a directory
    where the WAL and index cannot be created beside a ledger that is there ("unable to
    open database file", or "attempt to write a readonly database"); or a file or
    directory not writable. Any other error is returned as SQLite words it.
    """
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF  # the primary code; 0 from Python
    directory, base = os.path.split(name)
    side_files = f"{base}-wal and {base}-shm"
    if code == sqlite3.SQLITE_FULL or (code == sqlite3.SQLITE_IOERR and _disk_full(directory)):
        return f"{exc}: the disk holding {directory} is full; free space on it, then try again"
    if code == sqlite3.SQLITE_IOERR:
        return (
            f"{exc} ({getattr(exc, 'sqlite_errorname', 'SQLITE_IOERR')}): reading or writing "
            f"{base} or its {side_files} in {directory} failed; check that disk (its health, "
            "its free space, a file size limit), then try again"
        )
    # SQLite says "unable to open database file" (CANTOPEN) or, if the directory refused
    # with EACCES, "attempt to write a readonly database" (READONLY_DIRECTORY): the file
    # itself may well be writable.
    if (
        code in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY)
        and _side_files_missing(name)
        and not _writable(directory)
    ):
        return (
            f"{exc}: the directory {directory} is not writable, and SQLite must create the "
            f"ledger's {side_files} there, beside it (a writable ledger file is not "
            "enough); make the directory writable by this user, then try again"
        )
    if code in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM):
        return (
            f"{exc}: check that {base} and the directory {directory} are readable and "
            f"writable by this user (SQLite creates the ledger's {side_files} beside it)"
        )
    return str(exc)


def _disk_full(directory: str) -> bool:
    """Whether the disk holding ``directory`` has next to no room left for this user."""
    try:
        found = os.statvfs(directory)
    except OSError:
        return False  # cannot tell: the message then names the disk without guessing
    return found.f_bavail * found.f_frsize < _NEARLY_FULL


def _side_files_missing(name: str) -> bool:
    """Whether the ledger ``name`` lacks its WAL or its index, which SQLite then creates."""
    return not all(os.path.lexists(f"{name}{suffix}") for suffix, _ in _SIDE_FILES)


def _writable(directory: str) -> bool:
    """Whether this user may create files in ``directory``.

    Not even root may on a read-only mount or in an immutable directory.
    """
    return os.access(directory, os.W_OK | os.X_OK)
