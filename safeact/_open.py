"""Opening a ledger: which backend a location names, and the store that keeps it.

Above the backends: they build on ``_store``; this module picks one and imports it.
"""

from __future__ import annotations

import os

from safeact._ledger import LEASE
from safeact._sqlite import SqliteStore
from safeact._store import Store

__all__ = ["get_store", "names_postgres"]

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


def get_store(
    location: str | os.PathLike[str],
    *,
    fsync_attempts: bool = True,
    lease: float = LEASE,
    heartbeat: float | None = None,
    host: str | None = None,
) -> Store:
    """Open the ledger at ``location``: a PostgreSQL database, or else a SQLite file path.

    ``postgresql://`` (or ``postgres://``) URLs and libpq keyword strings that start with
    a libpq keyword (``"host=db dbname=agents user=app"``) open a ``PostgresStore`` (the
    ``safeact[postgres]`` extra); anything else is a path, and a missing file is created
    (readable by its owner only). Write a file whose name starts like that as
    ``"./host=…"``. See ``Store`` for the settings; ``fsync_attempts`` applies to SQLite
    only.

    Raises:
        StoreError: the ledger cannot be opened or used, or the path names something other
            than a regular file (a directory, a device, a FIFO); it is left as it was.

    """
    if isinstance(location, str) and names_postgres(location):
        from safeact._postgres import PostgresStore  # noqa: PLC0415 - an optional extra

        return PostgresStore(location, lease=lease, heartbeat=heartbeat, host=host)
    return SqliteStore(
        location, fsync_attempts=fsync_attempts, lease=lease, heartbeat=heartbeat, host=host
    )
