"""The PostgreSQL backend: one ledger shared by the processes of many hosts.

Needs the ``safeact[postgres]`` extra (psycopg 3 and its connection pool). The schema is
created and upgraded only by ``migrate`` (``safeact migrate DSN``), never by opening.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from safeact._owner import Owner, is_gone
from safeact._protocol import Record, SagaState, State
from safeact._schema import SCHEMA_VERSION, UNSETTLED_SQL
from safeact._store import LEASE, Cursor, Store
from safeact.exceptions import StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["PostgresStore", "migrate_postgres"]

T = TypeVar("T")

APPLICATION = "safeact"
_MIGRATION_LOCK = 0x53414654  # "SAFT": one migrator at a time, across every worker

_STATES = ", ".join(f"'{s.value}'" for s in State)
_SAGA_STATES = ", ".join(f"'{s.value}'" for s in SagaState)

# Times are ISO 8601 text in UTC with microseconds, as in SQLite: they sort as they compare,
# and the logic above reads and writes one format on both databases.
_SCHEMA = (
    """CREATE TABLE safeact_meta (
        singleton   BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
        application TEXT NOT NULL,
        version     INTEGER NOT NULL
    )""",
    f"""CREATE TABLE calls (
        key            TEXT PRIMARY KEY,
        tool           TEXT NOT NULL,
        args_hash      TEXT NOT NULL,
        state          TEXT NOT NULL CHECK (state IN ({_STATES})),
        attempt_id     TEXT NOT NULL,
        attempted_at   TEXT NOT NULL,
        finished_at    TEXT,
        result         TEXT,
        error_type     TEXT,
        error_message  TEXT,
        owner_host     TEXT NOT NULL,
        owner_boot     TEXT NOT NULL,
        owner_pid      BIGINT NOT NULL,
        owner_started  BIGINT NOT NULL,
        lease_until    TEXT NOT NULL,
        doubt_reason   TEXT,
        schema_version INTEGER NOT NULL
    )""",
    """CREATE TABLE late_completions (
        key            TEXT NOT NULL,
        attempt_id     TEXT NOT NULL,
        state          TEXT NOT NULL,
        result         TEXT,
        error_type     TEXT,
        error_message  TEXT,
        finished_at    TEXT NOT NULL,
        schema_version INTEGER NOT NULL,
        PRIMARY KEY (key, attempt_id)
    )""",
    f"CREATE INDEX calls_unsettled ON calls (attempted_at) WHERE state IN ({UNSETTLED_SQL})",
    f"""CREATE TABLE sagas (
        saga_id        TEXT PRIMARY KEY,
        state          TEXT NOT NULL CHECK (state IN ({_SAGA_STATES})),
        started_at     TEXT NOT NULL,
        updated_at     TEXT NOT NULL,
        aborted_step   TEXT,
        abort_reason   TEXT,
        schema_version INTEGER NOT NULL
    )""",
    """CREATE TABLE saga_steps (
        saga_id      TEXT NOT NULL REFERENCES sagas (saga_id),
        step_index   INTEGER NOT NULL,
        name         TEXT NOT NULL,
        key          TEXT NOT NULL,
        compensation TEXT,
        PRIMARY KEY (saga_id, step_index)
    )""",
    "CREATE INDEX sagas_by_state ON sagas (state, started_at)",
    """CREATE TABLE history (
        seq        BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        kind       TEXT NOT NULL CHECK (kind IN ('key', 'saga')),
        subject    TEXT NOT NULL,
        attempt_id TEXT,
        from_state TEXT,
        to_state   TEXT,
        at         TEXT NOT NULL,
        by_kind    TEXT NOT NULL CHECK (by_kind IN ('process', 'operator')),
        by_host    TEXT NOT NULL,
        by_pid     BIGINT NOT NULL,
        why        TEXT NOT NULL,
        note       TEXT
    )""",
    "CREATE INDEX history_by_subject ON history (kind, subject, seq)",
    # Nothing rewrites history, not even safeact: refuse it in the database itself.
    """CREATE FUNCTION safeact_history_is_append_only() RETURNS trigger LANGUAGE plpgsql AS
    $$ BEGIN RAISE EXCEPTION 'the safeact history is append-only'; END $$""",
    """CREATE TRIGGER history_is_append_only BEFORE UPDATE OR DELETE ON history
    FOR EACH STATEMENT EXECUTE FUNCTION safeact_history_is_append_only()""",
)

_MIGRATIONS: dict[int, tuple[str, ...]] = {}
"""PostgreSQL ledgers start at schema 2; later versions add their steps here."""
_FIRST_VERSION = 2


def migrate_postgres(dsn: str) -> tuple[int, int]:
    """Create or upgrade the safeact schema in the database at ``dsn``; return (old, new).

    ``old`` is 0 when the schema was created. One transaction, serialised by an advisory
    lock, so many workers may run it at once: the first does the work, the others find the
    schema current.

    Raises:
        StoreError: the server cannot be reached, or its schema is newer than this safeact's.

    """
    where = _without_password(dsn)
    try:
        with psycopg.connect(dsn) as connection:
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            old = _version(connection, where)
            if old == 0:
                for statement in _SCHEMA:
                    connection.execute(statement)
                connection.execute(
                    "INSERT INTO safeact_meta (application, version) VALUES (%s, %s)",
                    (APPLICATION, _FIRST_VERSION),
                )
            for step in range(max(old, _FIRST_VERSION), SCHEMA_VERSION):
                for statement in _MIGRATIONS[step]:
                    connection.execute(statement)
            connection.execute("UPDATE safeact_meta SET version = %s", (SCHEMA_VERSION,))
    except psycopg.Error as exc:
        raise StoreError(f"{where}: {exc}".strip()) from exc
    return old, SCHEMA_VERSION


class PostgresStore(Store):
    """A ledger in a PostgreSQL database, shared by the processes of many hosts.

    ``dsn`` is a libpq connection string or ``postgresql://`` URL; the schema must have
    been created with ``safeact migrate DSN``. Each operation takes a connection from a
    pool of at most ``pool_size``. Every commit is synchronous: a claim is on the server's
    disk before the action runs. Owners are also known by a session-level advisory lock
    that this process holds while the store is open: when its connection dies (the process
    crashed, its host went away), the lock is released and other hosts see the owner gone
    at once, without waiting for the lease. See ``Store`` for the other settings.

    Raises:
        StoreError: the server cannot be reached, or the schema is missing or of another
            version.
        ValueError: the lease is not positive, or the heartbeat not shorter than the lease.

    """

    _FOR_UPDATE: ClassVar[str] = " FOR UPDATE"

    def __init__(
        self,
        dsn: str,
        *,
        lease: float = LEASE,
        heartbeat: float | None = None,
        host: str | None = None,
        pool_size: int = 8,
    ) -> None:
        """Connect and check the schema; see ``get_store``."""
        super().__init__(lease=lease, heartbeat=heartbeat, host=host)
        self._dsn = dsn
        self._where = _without_password(dsn)
        self._pool_size = pool_size
        self._pool = self._new_pool()
        with self._errors(), self._pool.connection() as connection:
            version = _version(connection, self._where)
        if version != SCHEMA_VERSION:
            self._pool.close()
            what = "no safeact schema" if version == 0 else f"schema version {version}"
            raise StoreError(
                f"{self._where}: the database has {what}, this safeact needs "
                f"{SCHEMA_VERSION}; run `safeact migrate DSN` first"
            )

    @property
    def location(self) -> str:
        """The connection string, without its password."""
        return self._where

    def owner_gone(self, owner: Owner) -> bool:
        """Whether ``owner`` provably no longer runs.

        On this host, its process is looked up; on any host, its advisory lock is tried:
        free means the owner's database session has ended.
        """
        if is_gone(owner, self.owner):
            return True
        lock = _owner_lock(owner)

        def lock_is_free(connection: psycopg.Connection[Any]) -> bool:
            free = connection.execute("SELECT pg_try_advisory_lock(%s)", (lock,)).fetchall()
            if free == [(True,)]:
                connection.execute("SELECT pg_advisory_unlock(%s)", (lock,))
            return free == [(True,)]

        return self._repeatable(lock_is_free)

    def claim(
        self, key: str, tool: str, args_hash: str, *, attempt_id: str, previous: Record | None
    ) -> Record | None:
        """Hold this process's liveness lock, then claim as ``Store.claim`` does."""
        self._hold_liveness()
        return super().claim(key, tool, args_hash, attempt_id=attempt_id, previous=previous)

    def _hold_liveness(self) -> None:
        """Make sure this process holds its advisory lock on this database.

        One session per process and database holds it, shared by every store of the process
        and kept until the process ends: a second session of the same process would wait
        for the lock forever, and a store that closes must not make the process look dead
        while other stores of it run actions.
        """
        self._after_fork()
        with self._errors():
            _liveness.hold(self._dsn, _owner_lock(self.owner))

    @contextlib.contextmanager
    def _transaction(self, *, sync: bool) -> Iterator[_Executor]:
        """One transaction on a pooled connection, at READ COMMITTED.

        That level is enough: every decision locks its row first (``FOR UPDATE``), and a
        claim's winner is decided by the primary key (``ON CONFLICT DO NOTHING``). Writes
        that need not be synced (an outcome, a mark) commit without waiting for the server's
        disk; like SQLite's NORMAL, they survive a crash of this process, not of the server.
        """
        self._check_open()
        with contextlib.ExitStack() as held:
            connection = self._begin(held)
            if not sync:
                connection.execute("SET LOCAL synchronous_commit = off")
            yield _Executor(connection)

    def _begin(self, held: contextlib.ExitStack) -> psycopg.Connection[Any]:
        """A pooled connection in a new transaction, kept open by ``held``.

        A pooled session may have died while idle (a server restart, a cut connection);
        that shows at ``BEGIN``, before anything was sent, so another connection is tried,
        once. A failure later in the transaction is never retried here.
        """
        for last in (False, True):
            attempt = contextlib.ExitStack()
            connection: psycopg.Connection[Any] = attempt.enter_context(self._pool.connection())
            try:
                attempt.enter_context(connection.transaction())
            except psycopg.OperationalError:
                attempt.close()  # the pool throws the broken connection away
                if last:
                    raise
                self._pool.check()  # and every idle session that died with it
                continue
            held.enter_context(attempt)
            return connection
        raise AssertionError  # pragma: no cover - the loop returns or raises

    def _read(self, sql: str, parameters: tuple[object, ...]) -> list[Any]:
        def query(connection: psycopg.Connection[Any]) -> list[Any]:
            return _Executor(connection).execute(sql, parameters).fetchall()

        return self._repeatable(query)

    def _repeatable(self, work: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Do ``work``, which may safely run twice, on a pooled connection.

        A session that died while idle is replaced, once, after the pool has thrown away
        every idle session that died with it.
        """
        self._check_open()
        with self._errors():
            for last in (False, True):
                try:
                    with self._pool.connection() as connection:
                        return work(connection)
                except psycopg.OperationalError:
                    if last:
                        raise
                    self._pool.check()
        raise AssertionError  # pragma: no cover - the loop returns or raises

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except psycopg.Error as exc:
            raise StoreError(f"{self._where}: {exc}".strip()) from exc

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self._where}: the store is closed")
        self._after_fork()

    def _close_connections(self) -> None:
        self._pool.close()

    def _forget_connections(self) -> None:
        # The parent's pool is the parent's: a child opens its own (and takes its own
        # liveness lock, under its own owner identity, when it first claims).
        self._pool = self._new_pool()

    def _new_pool(self) -> ConnectionPool[Any]:
        # Autocommit: a read is one round trip; a write opens its transaction explicitly.
        pool: ConnectionPool[Any] = ConnectionPool(
            self._dsn,
            min_size=1,
            max_size=self._pool_size,
            open=False,
            kwargs={"autocommit": True},
        )
        with self._errors():
            try:
                pool.open(wait=True, timeout=30.0)
            except Exception as exc:
                pool.close()
                raise StoreError(f"{self._where}: cannot connect: {exc}") from exc
        return pool


class _Liveness:
    """The sessions that hold this process's advisory locks: one per database and owner name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[tuple[int, str, int], psycopg.Connection[Any]] = {}

    def hold(self, dsn: str, lock: int) -> None:
        """Hold ``lock`` on the database of ``dsn`` from a session of this process."""
        where = (os.getpid(), _database(dsn), lock)
        with self._lock:
            session = self._sessions.get(where)
            if session is not None and not session.closed:
                try:
                    # A session the server ended (idle, so nobody noticed) lost the lock.
                    session.execute("SELECT 1")
                except psycopg.OperationalError:
                    session.close()
                else:
                    return
            session = psycopg.connect(dsn, autocommit=True)
            # Only a session of this very process could hold it, and one that has died
            # but not yet been noticed by the server is let go within this time.
            session.execute("SET lock_timeout = '30s'")
            session.execute("SELECT pg_advisory_lock(%s)", (lock,))
            self._sessions[where] = session


_liveness = _Liveness()


class _Executor:
    """A connection that takes the logic's ``?`` placeholders."""

    __slots__ = ("_connection",)

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self._connection = connection

    def execute(self, sql: str, parameters: tuple[object, ...] = (), /) -> Cursor:
        return self._connection.execute(sql.replace("?", "%s"), parameters)


def _version(connection: psycopg.Connection[Any], where: str) -> int:
    """The schema version of the database, 0 if it has no safeact schema.

    Raises:
        StoreError: another program's ``safeact_meta``, or a newer schema.

    """
    (table,) = connection.execute("SELECT to_regclass('safeact_meta')").fetchone() or (None,)
    if table is None:
        return 0
    row = connection.execute("SELECT application, version FROM safeact_meta").fetchone()
    if row is None or row[0] != APPLICATION:
        raise StoreError(f"{where}: its safeact_meta table is not safeact's")
    if row[1] > SCHEMA_VERSION:
        raise StoreError(
            f"{where}: the ledger has schema version {row[1]}, newer than this safeact "
            f"understands ({SCHEMA_VERSION}); upgrade safeact"
        )
    return int(row[1])


def _owner_lock(owner: Owner) -> int:
    """The advisory lock id of ``owner``: 64 bits of a hash of its identity."""
    identity = f"{owner.host}\0{owner.boot_id}\0{owner.pid}\0{owner.started}".encode()
    return int.from_bytes(hashlib.sha256(identity).digest()[:8], "big", signed=True)


def _database(dsn: str) -> str:
    """The database ``dsn`` names, whatever its session options (advisory locks span it)."""
    parts = conninfo_to_dict(dsn)
    return "|".join(
        str(parts.get(name, "")) for name in ("host", "hostaddr", "port", "dbname", "user")
    )


def _without_password(dsn: str) -> str:
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", re.sub(r"password=\S+", "password=***", dsn))
