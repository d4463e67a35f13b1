"""The SQLite backend: one ledger file, WAL, a connection per thread, durability per commit."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from safeact._audit import APPEND_IF_CHANGED, FINISH_ATTEMPTING, finish_values
from safeact._group_commit import GroupCommit
from safeact._ledger import LEASE
from safeact._rows import event_values
from safeact._schema import APPLICATION_ID, BUSY_TIMEOUT, check_usable, prepare
from safeact._settings import flag
from safeact._sqlite_file import (
    FileId,
    check_one_name,
    check_still_one_name,
    explained,
    real_name,
)
from safeact._store import Store
from safeact._tables import SCHEMA_VERSION
from safeact.exceptions import StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterator

    from safeact._history import Event
    from safeact._ledger import Cursor, Executor
    from safeact._protocol import Approval, Record

__all__ = ["SqliteStore"]

_T = TypeVar("_T")


_HISTORY_GUARD = "history_is_append_only_delete"
"""The trigger that refuses deletes of history (``safeact._tables``, and schema 2's step)."""

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


_OPEN: weakref.WeakValueDictionary[int, SqliteStore] = weakref.WeakValueDictionary()
"""The stores this process opened, by ``id``: one file open here under two names is refused."""


def _check_regular_file(path: str | os.PathLike[str]) -> None:
    """Refuse a path that names something other than a regular file, before SQLite opens it.

    SQLite would hang on a FIFO, create side files next to a device, and fail late on a
    directory. A missing file is fine: it gets created.

    Raises:
        StoreError: the path is empty, or names a directory, a device, a FIFO or a socket.

    """
    if not os.fspath(path):
        raise StoreError("'': an empty path names no ledger file; give the ledger's file path")
    try:
        mode = Path(path).stat().st_mode
    except (OSError, ValueError):
        return  # missing (it gets created) or unreachable: creating the file says which
    if not stat.S_ISREG(mode):
        what = next(
            (name for test, name in _KINDS if test(mode)), "something other than a regular file"
        )
        raise StoreError(f"{os.fspath(path)}: is {what}, not a ledger file; give a file path")


class SqliteStore(Store):
    """A ledger in one SQLite file, shared safely by the threads and processes of a machine.

    Each thread gets its own connection. ``fsync_attempts=False`` stops syncing the
    ATTEMPTING record to disk before the action runs: it then survives a process crash but
    not an OS crash or power loss, after which the action can run a second time.
    See ``Store`` for the other settings.

    Raises:
        StoreError: the path names something other than a regular file (a directory, a
            device, a FIFO), or the file cannot be created or opened, is not a SQLite
            database, is corrupt, is some other program's database, or was written by
            another schema version of safeact. The file is left as it was. Or the file has
            a second name (a hard link; a symbolic link is fine), its WAL or index is not a
            plain file of its own, or this process has it open under another name: the
            ledger is its file, and another name would have another WAL (``_sqlite_file``).
        ValueError: the lease is not positive, or the heartbeat not shorter than the lease.

    """

    _ONE_WRITER = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        fsync_attempts: bool = True,
        lease: float = LEASE,
        heartbeat: float | None = None,
        host: str | None = None,
    ) -> None:
        """Open (or create) the ledger; see ``get_store``."""
        super().__init__(lease=lease, heartbeat=heartbeat, host=host)
        self._path = Path(path)
        # Every connection, in whatever thread and after whatever chdir, opens the file the
        # store was opened on: a relative path is fixed against the directory of now.
        self._file = self._path.absolute()
        self._fsync_attempts = flag("fsync_attempts", fsync_attempts)
        self._local = threading.local()
        self._connections: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._group = GroupCommit(self._sync_wal)
        self._writing = threading.RLock()
        _check_regular_file(path)
        if self._read_only:
            self._check_exists()  # under replay-only nothing is created, not even a ledger
        else:
            self._create_file()
        # Every connection opens the file by its real path, as resolved now, and SQLite names
        # the WAL after it (a later chdir, or a symlink given as the path, moves neither).
        self._name = real_name(self._file)
        self._wal = f"{self._name}-wal"
        self._id = check_one_name(self._name)  # before anything opens it: see _sqlite_file
        self._check_only_name_here()
        check_usable(self._path)  # before any writable connection: see check_usable
        with self._errors():
            self._connection()
        _OPEN[id(self)] = self

    @property
    def path(self) -> Path:
        """The ledger file."""
        return self._path

    @property
    def location(self) -> str:
        """The ledger file's path, as given."""
        return str(self._path)

    @contextlib.contextmanager
    def _transaction(self, *, sync: bool) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT``: the write lock for the whole transaction.

        Every commit is durable across a crash of this process (``synchronous=NORMAL``: it
        is in the WAL). With ``sync`` it is on disk before the block's exit returns: the
        WAL is fsynced after the commit, outside the write lock, by one fsync shared with
        the commits made meanwhile (``GroupCommit``).

        Raises:
            StoreError: the store was opened read-only, under replay-only.

        """
        self._check_writable()
        connection = self._connection()
        # The threads of this process queue here for SQLite's write lock: one that waits in
        # SQLite's busy handler sleeps 1 ms, then longer, however soon the lock is free.
        with self._writing:
            # A transaction of this thread's is open already only if this one is nested in
            # it (its BEGIN then fails): that one is its own block's to end, never this one's.
            enclosed = connection.in_transaction
            # BEGIN inside the try: a Ctrl-C lands as soon as BEGIN returns with the lock,
            # and must find the rollback armed, or a worker that goes on holds the lock.
            try:
                connection.execute("BEGIN IMMEDIATE")
                yield connection
                connection.execute("COMMIT")
            finally:
                if connection.in_transaction and not enclosed:
                    connection.execute("ROLLBACK")
        if sync and self._fsync_attempts:
            try:
                self._group.durable()
            except OSError as exc:
                raise self._not_on_disk(exc) from exc

    def _finish_attempting(self, db: Executor, outcome: tuple[object, ...], event: Event) -> Cursor:
        """The outcome, then its event if the outcome changed the row: two statements."""
        db.execute(FINISH_ATTEMPTING, finish_values(outcome, event))
        return db.execute(APPEND_IF_CHANGED, event_values("key", event))

    @contextlib.contextmanager
    def _unguarded_history(self, db: Executor) -> Iterator[None]:
        """Drop the trigger refusing deletes of history; make it again, from its own text.

        Both in the caller's ``BEGIN IMMEDIATE`` transaction: no other connection sees the
        trigger gone, and a rollback restores it.
        """
        row = db.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ?", (_HISTORY_GUARD,)
        ).fetchone()
        if row is None:
            raise StoreError(
                f"{self._path}: the trigger {_HISTORY_GUARD} that keeps the history "
                "append-only is missing (the file was changed outside safeact); nothing was "
                "dropped. Restore it from a backup of the ledger before archiving"
            )
        db.execute(f"DROP TRIGGER {_HISTORY_GUARD}")
        yield
        db.execute(row[0])

    def _sync_wal(self) -> None:
        """Sync the WAL to disk: every commit made so far is on disk when it returns."""
        fd = os.open(self._wal, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def _read(self, sql: str, parameters: tuple[object, ...]) -> list[Any]:
        with self._errors():
            return self._connection().execute(sql, parameters).fetchall()

    def _read_stream(
        self,
        sql: str,
        parameters: tuple[object, ...],
        batch: int,
        read: Callable[[list[Any]], _T],
    ) -> Generator[_T, None, None]:
        with self._errors():
            cursor = self._connection().execute(sql, parameters)
        try:
            while True:
                with self._errors():
                    rows = cursor.fetchmany(batch)
                if not rows:
                    return
                yield read(rows)
        finally:
            cursor.close()

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"{self._path}: {explained(exc, self._name)}") from exc

    def _reset_connection(self) -> None:
        # Close this thread's connection here and now, not whenever (and in whatever state)
        # the interpreter gets round to the thread's storage.
        held: _Connection | None = getattr(self._local, "held", None)
        if held is not None:
            del self._local.held
            held.close()

    def _close_connections(self) -> None:
        """Close the connections of this thread and of ended threads.

        A connection of another running thread is closed when that thread ends, since
        closing it under a statement it is running would crash the process.
        """
        with self._lock:
            connections = list(self._connections)
            self._connections.clear()
        for connection in connections:
            if connection.thread is threading.current_thread() or not connection.thread.is_alive():
                connection.close()

    def _forget_connections(self) -> None:
        self._connections = weakref.WeakSet()
        # A parent thread may have held either lock at the fork.
        self._group = GroupCommit(self._sync_wal)
        self._writing = threading.RLock()

    def _check_exists(self) -> None:
        """Refuse to open a missing file read-only: there is no ledger there to replay.

        Raises:
            StoreError: nothing is at the path.

        """
        if not os.path.lexists(self._file):
            raise StoreError(
                f"{self._path}: there is no ledger here, and under replay-only a ledger is "
                "opened read-only, so none is created; give the path of the ledger to replay"
            )

    def _create_file(self) -> None:
        """Create the ledger file with owner-only permissions, if it does not exist."""
        try:
            fd = os.open(self._file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return
        except (OSError, ValueError) as exc:
            raise StoreError(f"{self._path}: cannot create the ledger: {exc}") from exc
        os.close(fd)

    def _claim(  # noqa: PLR0913 - Store._claim's parameters
        self,
        key: str,
        tool: str,
        args_hash: str,
        *,
        attempt_id: str,
        previous: Record | None,
        shape: str | None = None,
        approval: Approval | None = None,
        arguments: str | None = None,
    ) -> Record | None:
        """Check the file is still this ledger's under its one name, then claim as ``Store``.

        One ``stat``: the file may have been given a second name, moved or replaced since
        it was opened, and a process opening it under another name would not see the claim.

        Raises:
            StoreError: it was (nothing was claimed), or as ``Store``'s claim.

        """
        check_still_one_name(self._name, self._id)
        return super()._claim(
            key,
            tool,
            args_hash,
            attempt_id=attempt_id,
            previous=previous,
            shape=shape,
            approval=approval,
            arguments=arguments,
        )

    def _check_only_name_here(self) -> None:
        """Refuse the file if another store of this process holds it open under another name.

        In one process SQLite shares a file's locks and index among its connections whatever
        name they used, while each name has its own WAL: the two would corrupt each other.

        Raises:
            StoreError: another open store has the same file (device and inode) under
                another real name (it was renamed, or is mounted at two paths).

        """
        for ref in _OPEN.valuerefs():
            other = ref()
            held = None if other is None else other._name_holding(self._id)  # noqa: SLF001 - stores of one class
            if held is not None and held != self._name:
                raise StoreError(
                    f"{self._path}: this process has the ledger file open already as {held} "
                    "(renamed since, or mounted at two paths); under two names it has two "
                    "WALs, and claims made under one are not seen under the other. Open it "
                    "under one name only; nothing was changed"
                )

    def _name_holding(self, file_id: FileId) -> str | None:
        """The real name this store holds the file ``file_id`` open by, if it does.

        Only a store with an open connection holds its file: the inode number of a file no
        longer open anywhere may be given to another file once that one is removed.
        """
        with self._lock:
            if self._closed or file_id != self._id:
                return None
            return self._name if any(held.is_open for held in self._connections) else None

    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError(f"{self._path}: the store is closed")
        self._after_fork()
        held: _Connection | None = getattr(self._local, "held", None)
        if held is None or held.pid != os.getpid():
            # A connection must not cross a fork; each process and thread opens its own.
            held = self._local.held = self._open()
        return held.sqlite

    def _open(self) -> _Connection:
        # Still the file opened, under its one name: else this connection would open (or
        # create) another file, or use another WAL than the processes sharing the ledger.
        check_still_one_name(self._name, self._id)
        # Read-only (replay-only): SQLite itself refuses every write on the connection, and
        # the file is neither made a ledger nor switched to WAL (``_check_read_only``).
        where = f"{Path(self._name).as_uri()}?mode=ro" if self._read_only else self._name
        with self._errors():
            connection = sqlite3.connect(
                where,
                isolation_level=None,
                check_same_thread=False,
                timeout=BUSY_TIMEOUT,
                uri=self._read_only,
            )
        try:
            with self._errors():
                if self._read_only:
                    self._check_read_only(connection)
                else:
                    prepare(connection, self._path)
        except BaseException:
            connection.close()
            raise
        held = _Connection(connection)
        with self._lock:
            if self._closed:
                held.close()
                raise StoreError(f"{self._path}: the store is closed")
            self._connections.add(held)
        return held

    def _check_read_only(self, connection: sqlite3.Connection) -> None:
        """Check a read-only connection finds a current ledger in WAL mode, changing nothing.

        ``prepare`` would create the schema of an empty file and switch a new ledger to WAL:
        both writes. ``check_usable`` has refused another program's database and another
        schema version already.

        Raises:
            StoreError: the file is empty (no ledger yet), or not in WAL mode (a safeact
                ledger always is: it was changed outside safeact).

        """
        connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
        application_id, version = connection.execute(
            "SELECT (SELECT application_id FROM pragma_application_id), "
            "(SELECT user_version FROM pragma_user_version)"
        ).fetchone()
        if (application_id, version) != (APPLICATION_ID, SCHEMA_VERSION):
            raise StoreError(
                f"{self._path}: the file holds no ledger yet (it is empty), and under "
                "replay-only a ledger is opened read-only, so none is created; give the "
                "path of the ledger to replay"
            )
        mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
        if mode != "wal":
            raise StoreError(
                f"{self._path}: the ledger is not in WAL mode ({mode!r}), as safeact leaves "
                "every ledger: it was changed outside safeact. Under replay-only it is opened "
                "read-only and cannot be switched back; open it once outside replay-only"
            )


class _Connection:
    """One thread's connection; closed when the thread ends and drops it, or by ``close``.

    Never closed by the interpreter's exit: another thread (a heartbeat, a daemon worker)
    may still be executing on it, and closing a connection under a running statement
    crashes the process. The operating system closes what is left.
    """

    __slots__ = ("__weakref__", "_finalizer", "pid", "sqlite", "thread")

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.sqlite = connection
        self.pid = os.getpid()
        self.thread = threading.current_thread()
        self._finalizer = weakref.finalize(self, connection.close)
        self._finalizer.atexit = False

    @property
    def is_open(self) -> bool:
        """Whether the connection is still open."""
        return self._finalizer.alive

    def close(self) -> None:
        self._finalizer()
