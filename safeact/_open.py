"""Opening a ledger: which backend a location names, and the store that keeps it.

Above the backends: they build on ``_store``; this module picks one and imports it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from safeact._ledger import LEASE
from safeact._sqlite import SqliteStore
from safeact._store import Store

__all__ = ["StoreHandle", "get_store", "names_postgres"]

_LIBPQ_KEYWORDS = frozenset(
    {
        *("host", "hostaddr", "port", "dbname", "user", "password", "passfile", "service"),
        *("options", "connect_timeout", "client_encoding", "application_name", "sslmode"),
        *("sslrootcert", "sslcert", "sslkey", "sslpassword", "sslcrl", "sslcrldir", "sslsni"),
        *("gssencmode", "channel_binding", "require_auth", "target_session_attrs"),
        *("load_balance_hosts", "keepalives", "krbsrvname", "fallback_application_name"),
    }
)


def names_postgres(location: str) -> bool:
    """Whether ``location`` names a PostgreSQL database: a URL, or libpq keyword pairs.

    A keyword string would otherwise become a SQLite file of that name (password and all)
    on every host. libpq takes any string that is not a URL as keyword pairs; a known
    keyword first is the sign, and ``"./host=..."`` keeps a file of such a name a file.
    """
    return location.startswith(("postgresql://", "postgres://")) or (
        "=" in location and location.split("=", 1)[0].strip() in _LIBPQ_KEYWORDS
    )


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

    ``postgresql://`` (or ``postgres://``) URLs and libpq keyword strings that start with
    a libpq keyword (``"host=db dbname=agents user=app"``) open a ``PostgresStore`` (the
    ``safeact[postgres]`` extra); anything else is a path, and a missing file is created
    (readable by its owner only). Write a file whose name starts like that as
    ``"./host=…"``. See ``Store`` for the settings; ``fsync_attempts`` applies to SQLite
    only, ``connect_timeout`` to PostgreSQL only: the whole seconds a connection waits for
    the server, by default the connection string's own ``connect_timeout``, else 5.

    Raises:
        StoreError: the ledger cannot be opened or used, or the path names something other
            than a regular file (a directory, a device, a FIFO); it is left as it was. For
            PostgreSQL, one line with the server's (or libpq's) own reason, without the
            password, within the connect timeout.

    """
    if isinstance(location, str) and names_postgres(location):
        from safeact._postgres import PostgresStore  # noqa: PLC0415 - an optional extra

        return PostgresStore(
            location, lease=lease, heartbeat=heartbeat, host=host, connect_timeout=connect_timeout
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
            self.location = _shown(ledger)
            # A relative path names a file in the working directory of now, when the tool
            # is made: a chdir before the first call (a daemon's, say) must not move the
            # ledger, or a key recorded in one file would run again against another.
            postgres = isinstance(ledger, str) and names_postgres(ledger)
            self._where = ledger if postgres else Path(ledger).absolute()

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


def _shown(location: str | os.PathLike[str]) -> str:
    """``location`` as the store opened there will show it, without a password.

    Raises:
        TypeError: ``location`` is neither a ``str`` nor a path.

    """
    if isinstance(location, str) and names_postgres(location):
        from safeact._postgres import _without_password  # noqa: PLC0415 - an optional extra

        return _without_password(location)
    return str(Path(location))
