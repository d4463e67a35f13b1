"""Opening a ledger: which backend a location names, and the store that keeps it.

Above the backends: they build on ``_store``; this module picks one and imports it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from safeact._dsn import parse_location
from safeact._ledger import LEASE
from safeact._sqlite import SqliteStore
from safeact._store import Store

__all__ = ["StoreHandle", "get_store", "located", "names_postgres"]


def names_postgres(location: str) -> bool:
    r"""Whether ``location`` names a PostgreSQL database; else it is a SQLite file path.

    A URL (``postgresql://``, ``postgres://``, in any case, or SQLAlchemy's
    ``postgresql+DRIVER://``) or libpq keyword pairs (a ``=``, and no ``/`` or ``\`` before
    it), white space around it allowed: never a file, which would be named with the
    password and found by no other host. ``"./host=..."`` keeps a file of such a name a file.

    Raises:
        ValueError: a URL of another scheme, or a PostgreSQL location libpq would refuse or
            misread (see ``safeact._dsn.parse_location``); the message says what to write.

    """
    return parse_location(location) is not None


def get_store(  # noqa: PLR0913 - one keyword per setting
    location: str | os.PathLike[str],
    *,
    fsync_attempts: bool = True,
    lease: float = LEASE,
    heartbeat: float | None = None,
    host: str | None = None,
    connect_timeout: int | None = None,
) -> Store:
    """Open the ledger at ``location``: a PostgreSQL database, or else a SQLite file path.

    ``postgresql://`` (or ``postgres://``) URLs, the scheme in any case, SQLAlchemy's
    ``postgresql+DRIVER://`` ones (read as ``postgresql://``) and libpq keyword strings
    (``"host=db dbname=agents user=app"``: a ``=`` with no ``/`` before it) open a
    ``PostgresStore`` (the ``safeact[postgres]`` extra); white space around them is dropped.
    Anything else is a path, and a missing file is created (readable by its owner only).
    Write a file whose name looks like keyword pairs as ``"./host=…"``. See ``Store`` for
    the settings; ``fsync_attempts`` applies to SQLite only, ``connect_timeout`` to
    PostgreSQL only: the whole seconds a connection waits for the server, by default the
    connection string's own ``connect_timeout``, else 5.

    Raises:
        StoreError: the ledger cannot be opened or used, the path names something other
            than a regular file (a directory, a device, a FIFO), or the file has a second
            name (a hard link: one ledger must not be two); it is left as it was. For
            PostgreSQL, one line with the server's (or libpq's) own reason, without the
            password, within the connect timeout.
        ValueError: ``location`` is a URL of another kind (``sqlite:///x.db``: write the
            path; ``mysql://``...), or a PostgreSQL location libpq would refuse or misread;
            one line saying what to write, without the password. Nothing is created.

    """
    postgres = parse_location(location) if isinstance(location, str) else None
    if postgres is not None:
        from safeact._postgres import PostgresStore  # noqa: PLC0415 - an optional extra

        return PostgresStore(
            postgres.dsn,
            lease=lease,
            heartbeat=heartbeat,
            host=host,
            connect_timeout=connect_timeout,
        )
    return SqliteStore(
        location, fsync_attempts=fsync_attempts, lease=lease, heartbeat=heartbeat, host=host
    )


class StoreHandle:
    """A tool's hold on its ledger: a store given open, or a location opened at first use.

    Making a handle on a location opens, creates and connects to nothing; ``open`` does, once
    for all the threads that ask (the others wait for it and get the same store). A failed
    open is not kept: each ``open`` tries again until one succeeds.
    """

    __slots__ = ("_lock", "_pid", "_store", "_where", "location")

    location: str
    """Where the ledger is, as its store's ``location`` shows it (without a password)."""

    def __init__(self, ledger: str | os.PathLike[str] | Store) -> None:
        """Hold ``ledger``: a ``Store`` as it is, or a path or URL to open later.

        Raises:
            TypeError: ``ledger`` is neither a store, nor a path, nor a URL.
            ValueError: ``ledger`` is a location ``get_store`` refuses.

        """
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._store: Store | None
        self._where: str | os.PathLike[str]
        if isinstance(ledger, Store):
            self._store = ledger
            self._where = self.location = ledger.location
        else:
            self._store = None
            self.location, self._where = located(ledger)

    def open(self) -> Store:
        """The store, opened now if this is its first use.

        Raises:
            StoreError: as ``get_store``.

        """
        store = self._store
        if store is None:
            if self._pid != os.getpid():
                # Forked while another thread may have held the lock: the child's copy
                # would stay locked forever, and no thread of the child holds it.
                self._lock, self._pid = threading.Lock(), os.getpid()
            with self._lock:
                if self._store is None:
                    self._store = get_store(self._where)
                store = self._store
        return store

    @property
    def is_open(self) -> bool:
        """Whether the store is open already (``open`` then neither blocks nor connects)."""
        return self._store is not None

    def __repr__(self) -> str:
        store = self._store
        return repr(store) if store is not None else f"<ledger {self.location}, not opened yet>"


def located(ledger: str | os.PathLike[str]) -> tuple[str, str | Path]:
    """Where ``ledger`` is: as its store will show it (without a password), and to open.

    Raises:
        TypeError: ``ledger`` is neither a ``str`` nor a path.
        ValueError: as ``get_store``.

    """
    postgres = parse_location(ledger) if isinstance(ledger, str) else None
    if postgres is not None:
        return postgres.shown, postgres.dsn
    # A relative path names a file in the working directory of now, when the tool is made:
    # a chdir before the first call (a daemon's, say) must not move the ledger, or a key
    # recorded in one file would run again against another.
    path = Path(ledger)
    return str(path), path.absolute()
