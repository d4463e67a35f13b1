"""An in-memory ledger: the SQLite ledger's code on a database in this process's memory.

For unit tests of guarded tools: ``memory_ledger()`` returns an open store whose ledger is
a new, empty SQLite database held in memory, shared by the threads of this process (each
with its own connection, as on a file) and dropped when the store is closed. Its schema,
statements and transactions are the SQLite ledger's own (``MemoryStore`` is a
``SqliteStore``); only what is about a file is replaced.

SQLite's ``memdb`` VFS (``file:/NAME?vfs=memdb``) gives every connection of the process
that names it the same database, with SQLite's ordinary locks, so a connection waits for
another's write lock within its busy timeout, as on a file. (Shared-cache ``:memory:``
answers such a wait at once with ``SQLITE_LOCKED``.) The database lives while one
connection to it is open: the store holds one of its own until ``close``. It has no WAL
(``PRAGMA journal_mode=WAL`` answers ``memory``): a reader waits for a writer's commit.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import uuid
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

from safeact._ledger import LEASE
from safeact._schema import BUSY_TIMEOUT, create_new
from safeact._sqlite import SqliteStore, _Connection
from safeact._store import Store
from safeact.exceptions import StoreError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from safeact._protocol import Approval, Record

__all__ = ["MemoryStore", "memory_ledger"]


def memory_ledger(
    *, lease: float = LEASE, heartbeat: float | None = None, host: str | None = None
) -> Store:
    """Open a new, empty ledger in this process's memory: for unit tests of guarded tools.

    It behaves as a SQLite ledger file does within one process (the same schema, statements
    and transactions; the threads of the process share it, each with its own connection),
    but it is never a file, and it is gone when the store is closed. Each call makes a ledger
    of its own, independent of every other. Its ``location`` (``memory:`` and 8 hex digits)
    names it for people only: no location opens it again, so pass the store itself
    (``safe(memory_ledger())``).

    What it does not do: survive its process, or the store's ``close`` (nothing is ever
    synced to a disk), or serve another process: a forked child has a copy, not the ledger,
    and is refused. For crash tests and several processes, use a ledger file (``get_store``).
    See ``Store`` for ``lease``, ``heartbeat`` and ``host``.

    Raises:
        ValueError: the lease is not positive, or the heartbeat not shorter than the lease.

    """
    return MemoryStore(lease=lease, heartbeat=heartbeat, host=host)


class MemoryStore(SqliteStore):
    """A SQLite ledger in this process's memory; see ``memory_ledger``.

    What a file needs is replaced: connections open the store's own in-memory database; no
    file is checked (the claim's and each connection's ``stat``, the one-name check across
    stores, which this one does not join) and none is synced, as every commit is in memory
    once made.

    Raises:
        ValueError: the lease is not positive, or the heartbeat not shorter than the lease.

    """

    def __init__(
        self, *, lease: float = LEASE, heartbeat: float | None = None, host: str | None = None
    ) -> None:
        """Make a new, empty in-memory ledger; see ``memory_ledger``."""
        # Store's, not SqliteStore's: that one creates, checks and opens a file.
        Store.__init__(self, lease=lease, heartbeat=heartbeat, host=host)
        name = uuid.uuid4()
        self._location = f"memory:{name.hex[:8]}"
        # A leading "/" names a database shared by every connection of the process that
        # gives the same name; without it, each connection would get a database of its own.
        self._uri = f"file:/safeact-{name.hex}?vfs=memdb"
        self._home = os.getpid()
        # What SqliteStore's methods read. ``_id`` is the ledger's identity, compared as a
        # file's (device, inode) is (a saga's tools must be on its ledger): -1 is no
        # device's number, so it is never taken for a file's. With nothing to sync, the
        # group commit (``_group``, ``_wal``) is never asked for.
        self._path = Path(self._location)
        self._name = self._uri
        self._id = (-1, name.int)
        self._fsync_attempts = False
        self._local = threading.local()
        self._connections = weakref.WeakSet()
        self._writing = threading.RLock()
        # The database lives while a connection to it is open: this one, until close().
        # (If creating the schema fails, the connection is closed as it is dropped.)
        with self._errors():
            self._anchor = self._connect()
            create_new(self._anchor)

    @property
    def path(self) -> Path:
        """Never there: an in-memory ledger has no file.

        Raises:
            AttributeError: always.

        """
        raise AttributeError(f"{self._location}: an in-memory ledger has no file path")

    @property
    def location(self) -> str:
        """``memory:`` and 8 hex digits: a name for people, which opens nothing."""
        return self._location

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"{self._location}: {exc}") from exc

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
        """Claim as ``Store`` does: there is no file to check first."""
        # Store's claim, skipping SqliteStore's, which first checks the file under its name.
        return Store._claim(
            self,
            key,
            tool,
            args_hash,
            attempt_id=attempt_id,
            previous=previous,
            shape=shape,
            approval=approval,
            arguments=arguments,
        )

    def _close_connections(self) -> None:
        """Close what ``SqliteStore`` closes, then the anchor: the ledger goes with the last.

        A connection of a thread still running closes when that thread ends (closing it
        under a running statement would crash the process); the store is closed already,
        so nothing uses it meanwhile.
        """
        super()._close_connections()
        self._anchor.close()

    def _open(self) -> _Connection:
        """A new connection to this ledger, for the calling thread.

        Raises:
            StoreError: the store is closed, or this is a forked child of the process that
                made the ledger: it has a copy, and claims made in the copy would be seen by
                no one else, so the action could run in both processes.

        """
        if os.getpid() != self._home:
            raise StoreError(
                f"{self._location}: an in-memory ledger lives in the process that made it; "
                "this forked child has only a copy, which no other process would see. For "
                "several processes, use a ledger file (get_store)"
            )
        with self._errors():
            held = _Connection(self._connect())
        with self._lock:
            if self._closed:
                held.close()
                raise StoreError(f"{self._location}: the store is closed")
            self._connections.add(held)
        return held

    def _connect(self) -> sqlite3.Connection:
        """A connection to this ledger's database, waiting up to 30 s for another's lock."""
        return sqlite3.connect(
            self._uri,
            uri=True,
            isolation_level=None,
            check_same_thread=False,
            timeout=BUSY_TIMEOUT,
        )
