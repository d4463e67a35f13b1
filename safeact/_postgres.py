"""The PostgreSQL backend: one ledger shared by the processes of many hosts.

Needs the ``safeact[postgres]`` extra (psycopg 3 and its connection pool). The schema is
created and upgraded only by ``migrate`` (``safeact migrate DSN``), never by opening.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import itertools
import logging
import os
import re
import select
import threading
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo, timeout_from_conninfo
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool

from safeact._audit import FINISH_ATTEMPTING_WITH_EVENT, finish_values
from safeact._dsn import PostgresLocation, parse_location
from safeact._ledger import LEASE, Cursor
from safeact._liveness import stop_heartbeats
from safeact._owner import Owner
from safeact._protocol import Approval, Record
from safeact._rows import event_values
from safeact._schema import BUSY_TIMEOUT
from safeact._settings import whole
from safeact._store import Store
from safeact._tables import SCHEMA_VERSION, TABLES, postgres_ddl
from safeact.exceptions import StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterator

    from safeact._history import Event
    from safeact._ledger import Executor

__all__ = ["CONNECT_TIMEOUT", "LOCK_TIMEOUT", "PostgresStore", "migrate_postgres"]

T = TypeVar("T")

logger = logging.getLogger("safeact")

APPLICATION = "safeact"
CONNECT_TIMEOUT = 5
"""Seconds a new connection waits for the server, unless the connection string says otherwise."""
LOCK_TIMEOUT = BUSY_TIMEOUT
"""Seconds a statement waits for a lock another session holds, whatever the server says: as
long as a SQLite ledger waits for another connection's lock."""
_MIGRATION_LOCK = 0x53414654  # "SAFT": one migrator at a time, across every worker

# The sessions holding an advisory lock given as one bigint (shown as two 32-bit halves) in
# this database; advisory locks are per database, pg_locks shows the whole server's.
_HOLDERS = (
    "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "AND classid = %s::bigint::oid AND objid = %s::bigint::oid"
)
# The liveness session lives as long as its process, mostly idle. libpq's probes keep its
# TCP connection open through firewalls and NAT, and show a dead server within a minute; a
# connection string that sets one of these keeps its own value.
_LIVENESS_CONNECT = {
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
}
# Set on the liveness session, whatever the server, database, role or connection string
# say. No idle timeout may end it; the server's own probes end the session of a host that
# vanished (its lock is then free); and only a session of this very process could hold the
# lock, one that died but is not yet noticed by the server being let go within the lock
# timeout (LOCK_TIMEOUT, the parameter). Settings the server does not know
# (idle_session_timeout before PostgreSQL 14) are skipped.
_LIVENESS_SETTINGS = """SELECT set_config(name, wanted.value, false) FROM (VALUES
    ('idle_session_timeout', '0'),
    ('idle_in_transaction_session_timeout', '0'),
    ('tcp_keepalives_idle', '30'),
    ('tcp_keepalives_interval', '10'),
    ('tcp_keepalives_count', '3'),
    ('lock_timeout', %s)
) AS wanted (name, value) JOIN pg_settings USING (name)"""
# Every other session of safeact gives up waiting for a lock as the liveness session does:
# set once it is open, after the connection string's, role's and database's settings.
_BOUNDED = "SELECT set_config('lock_timeout', %s, false)"
# Which database a session is on, whatever the DSN's spelling (address, name, socket, port,
# proxy): the server's system identifier, which EXECUTE on pg_control_system() shows (every
# role's by default), else the port and start of the running server (in seconds since the
# epoch: a timestamp's text follows each session's TimeZone and DateStyle); and the database's
# oid.
_IDENTITY = (
    "SELECT 'system ' || system_identifier, "
    "(SELECT oid FROM pg_database WHERE datname = current_database()) FROM pg_control_system()"
)
_IDENTITY_BY_START = (
    "SELECT 'port ' || current_setting('port') || ' started at epoch ' "
    "|| extract(epoch FROM pg_postmaster_start_time()), "
    "(SELECT oid FROM pg_database WHERE datname = current_database())"
)
# The sessions holding, or queued ahead of safeact for, a lock on one of the ledger's tables
# that its statements wait behind (the weaker modes are its own readers' and writers').
_TABLE_LOCKS = """SELECT c.relname, l.mode, l.granted, l.pid, a.application_name, a.state, a.query
FROM pg_locks l JOIN pg_class c ON c.oid = l.relation LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'relation'
AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
AND l.relation IN (SELECT to_regclass(name) FROM unnest(%s::text[]) AS name)
AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
ORDER BY NOT l.granted, c.relname, l.pid"""
_LEDGER_TABLES = [*(table.name for table in TABLES), "safeact_meta"]
_LOCK_ADVICE = (
    "Another transaction keeps the ledger (a migration, a long ALTER TABLE or VACUUM FULL, "
    "an operator's LOCK TABLE or forgotten open transaction): let it finish, or end it with "
    "pg_terminate_backend(pid), then try again; the transaction that waited was rolled back"
)


# History: the steps that took a ledger of version N to N + 1, as they were written then.
# They never change; a new ledger is created from safeact._tables and does not run them.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    # 2 -> 3: an owner's machine id and PID namespace (see safeact._schema).
    2: (
        "ALTER TABLE calls ADD COLUMN owner_machine TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE calls ADD COLUMN owner_pidns TEXT NOT NULL DEFAULT ''",
    ),
    # 3 -> 4: an owner's process group (see safeact._schema).
    3: ("ALTER TABLE calls ADD COLUMN owner_group BIGINT NOT NULL DEFAULT 0",),
    # 4 -> 5: each tool's description of its results (see safeact._schema).
    4: (
        """CREATE TABLE tools (
            name           TEXT NOT NULL,
            result_shape   TEXT NOT NULL,
            written_at     TEXT NOT NULL,
            schema_version INTEGER NOT NULL,
            PRIMARY KEY (name)
        )""",
    ),
    # 5 -> 6: approvals, and a call's arguments kept for display (see safeact._schema).
    5: (
        "ALTER TABLE calls ADD COLUMN arguments TEXT",
        """CREATE TABLE approvals (
            key            TEXT NOT NULL,
            tool           TEXT NOT NULL,
            args_hash      TEXT NOT NULL,
            state          TEXT NOT NULL
                           CHECK (state IN ('pending', 'approved', 'denied', 'consumed')),
            requested_at   TEXT NOT NULL,
            decided_at     TEXT,
            decided_by     TEXT,
            note           TEXT,
            attempt_id     TEXT,
            arguments      TEXT,
            schema_version INTEGER NOT NULL,
            PRIMARY KEY (key)
        )""",
        "CREATE INDEX approvals_pending ON approvals (requested_at) WHERE state = 'pending'",
    ),
    # 6 -> 7: the settled keys counted by tool and state (see safeact._schema), each session
    # in its own shard. The trigger comes before the count: creating it waits for the writes
    # in flight to end and keeps new ones out until the migration commits, so the count of
    # the keys of before misses none and counts none twice (a million keys: 1.1 s in all).
    6: (
        """CREATE TABLE key_counts (
            tool  TEXT NOT NULL,
            state TEXT NOT NULL,
            shard INTEGER NOT NULL,
            n     BIGINT NOT NULL,
            PRIMARY KEY (tool, state, shard)
        )""",
        """CREATE FUNCTION safeact_count_calls() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN
IF TG_OP <> 'INSERT' AND OLD.state NOT IN ('attempting', 'in_doubt') THEN
INSERT INTO key_counts (tool, state, shard, n)
VALUES (OLD.tool, OLD.state, pg_backend_pid() % 64, -1)
ON CONFLICT (tool, state, shard) DO UPDATE SET n = key_counts.n + excluded.n;
END IF;
IF TG_OP <> 'DELETE' AND NEW.state NOT IN ('attempting', 'in_doubt') THEN
INSERT INTO key_counts (tool, state, shard, n)
VALUES (NEW.tool, NEW.state, pg_backend_pid() % 64, 1)
ON CONFLICT (tool, state, shard) DO UPDATE SET n = key_counts.n + excluded.n;
END IF;
RETURN NULL;
END $$""",
        """CREATE TRIGGER calls_counted_insert AFTER INSERT ON calls
        FOR EACH ROW WHEN (NEW.state NOT IN ('attempting', 'in_doubt'))
        EXECUTE FUNCTION safeact_count_calls()""",
        """CREATE TRIGGER calls_counted_delete AFTER DELETE ON calls
        FOR EACH ROW WHEN (OLD.state NOT IN ('attempting', 'in_doubt'))
        EXECUTE FUNCTION safeact_count_calls()""",
        """CREATE TRIGGER calls_counted_update AFTER UPDATE OF tool, state ON calls
        FOR EACH ROW
        WHEN (OLD.tool IS DISTINCT FROM NEW.tool OR OLD.state IS DISTINCT FROM NEW.state)
        EXECUTE FUNCTION safeact_count_calls()""",
        """INSERT INTO key_counts (tool, state, shard, n)
        SELECT tool, state, 0, count(*) FROM calls
        WHERE state NOT IN ('attempting', 'in_doubt') GROUP BY tool, state""",
    ),
}
"""PostgreSQL ledgers began at schema 2: there is no step from 1."""


def migrate_postgres(dsn: str, *, connect_timeout: int | None = None) -> tuple[int, int]:
    """Create or upgrade the safeact schema in the database at ``dsn``; return (old, new).

    ``old`` is 0 when the schema was created. One transaction, serialised by an advisory
    lock, so many workers may run it at once: the first does the work, the others find the
    schema current. A migration that fails is rolled back: the database is left as it was.
    It waits for a lock (the other migrators', or the readers' and writers' of a table it
    alters) up to ``LOCK_TIMEOUT``, as every session of safeact does. ``connect_timeout`` is
    as for ``PostgresStore``.

    Raises:
        StoreError: the server cannot be reached (with its own reason); the schema is not
            safeact's or newer than this safeact's; a lock was held for ``LOCK_TIMEOUT`` (the
            message names who holds it); or the migration failed, and the message says what
            to do. Without the password, also where libpq or the server quote it.
        ValueError: ``connect_timeout`` is less than 1, or ``dsn`` is not a PostgreSQL
            location (see ``safeact._dsn.parse_location``).

    """
    location = _location(dsn)
    where = location.shown
    with _connect(_timed(dsn, connect_timeout, where), where, autocommit=False) as connection:
        try:
            _bound_waits(connection)
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            old = _version(connection, where)
        except psycopg.errors.LockNotAvailable as exc:
            raise StoreError(f"{where}: {_lock_wait(location.dsn, exc)}") from None
        except psycopg.Error as exc:
            raise StoreError(f"{where}: {_scrubbed(exc, location)}") from _cause(exc, location)
        if old == SCHEMA_VERSION:  # a current ledger is left as it is, not even rewritten
            return old, old
        try:
            _upgrade(connection, old)
            connection.commit()
        except psycopg.errors.LockNotAvailable as exc:
            raise StoreError(f"{where}: {_lock_wait(location.dsn, exc)}") from None
        except psycopg.Error as exc:  # leaving the block rolls it back, if the server has not
            failed = _migration_failed(location, old, exc, lost=connection.broken)
            raise failed from _cause(exc, location)
    return old, SCHEMA_VERSION


def _upgrade(connection: psycopg.Connection[Any], old: int) -> None:
    """Within the connection's transaction, take the schema from ``old`` (0: none) to current."""
    if old == 0:
        for statement in postgres_ddl():
            connection.execute(statement)
        connection.execute(
            "INSERT INTO safeact_meta (application, version) VALUES (%s, %s)",
            (APPLICATION, SCHEMA_VERSION),
        )
        return
    for step in range(old, SCHEMA_VERSION):
        for statement in _MIGRATIONS[step]:
            connection.execute(statement)
    connection.execute("UPDATE safeact_meta SET version = %s", (SCHEMA_VERSION,))


# What to do about a migration that failed, by the SQLSTATE (or its class) of its error. The
# statements are plain DDL, so anything else is a bug to report.
_MIGRATION_ADVICE = {
    "42501": "the role may not change the ledger's tables; migrate as their owner",
    "42": (
        "its tables are not as a safeact of that schema left them (changed outside "
        "safeact?): restore them from a backup, or report it to safeact with this message"
    ),
    "53": (
        "the server is out of disk space, memory or connections: free some, then run "
        "`safeact migrate` again"
    ),
    "55": (
        "another session held a lock on the ledger's tables too long (a running worker?): "
        "run `safeact migrate` again when they are idle"
    ),
    "57": (
        "the migration was cancelled (a statement_timeout?) or the server is shutting down: "
        "run `safeact migrate` again"
    ),
}


def _migration_failed(
    location: PostgresLocation, old: int, exc: psycopg.Error, *, lost: bool
) -> StoreError:
    """The error of a failed migration at ``location``: what failed, what is left, what to do.

    A transaction that failed is rolled back, unless the connection was lost (``lost``):
    then its commit may have reached the server.
    """
    what = "creating the safeact schema" if old == 0 else f"migrating from schema {old}"
    failed = f"{location.shown}: {what} to {SCHEMA_VERSION} failed ({_scrubbed(exc, location)})"
    if lost:
        return StoreError(
            f"{failed}; the connection was lost, so it may or may not have been committed: "
            "run `safeact migrate` again, which finishes it or finds it done"
        )
    left = "nothing was created" if old == 0 else f"the database is unchanged, at schema {old}"
    state = exc.sqlstate or ""
    advice = (
        _MIGRATION_ADVICE.get(state)
        or _MIGRATION_ADVICE.get(state[:2])
        or f"report it to safeact with this message (schema {old} to {SCHEMA_VERSION})"
    )
    return StoreError(f"{failed}; it was rolled back and {left}. To do: {advice}")


_HISTORY_GUARD = "history_is_append_only"
"""The trigger that refuses updates and deletes of history (``safeact._tables``)."""

_SYNCED = "SET LOCAL synchronous_commit = on"
_UNSYNCED = "SET LOCAL synchronous_commit = off"
"""Each transaction's durability, set for it alone: no server, role or DSN setting overrides it."""


class PostgresStore(Store):
    """A ledger in a PostgreSQL database, shared by the processes of many hosts.

    ``dsn`` is a libpq connection string or ``postgresql://`` URL; the schema must have
    been created with ``safeact migrate DSN``. Each operation takes a connection from a
    pool of at most ``pool_size``. A new connection waits ``connect_timeout`` whole seconds
    for the server (libpq waits at least 2, per address tried); by default the connection
    string's own ``connect_timeout`` (or ``PGCONNECT_TIMEOUT``), else ``CONNECT_TIMEOUT``
    (5 s). Opening fails then, or as soon as the server refuses, with its own reason.

    A claim and a resolve commit with ``synchronous_commit`` on, set for their own
    transaction whatever the server, database, role or connection string say: a claim is
    on the server's disk (and on a synchronous standby, if one is configured) before the
    action runs. Outcomes, marks and lease renewals commit with it off: a server crash may
    lose one, which leaves the key in doubt, never runs it twice.

    Owners are also known by a session-level advisory lock that this process holds, on a
    session of its own, from its first claim on. When that session ends, the lock is free
    and other hosts see the owner lost at once, without waiting for the lease: a
    suspicion, since an administrator, a proxy or a server restart also ends the session of
    a live process (see ``owner_lost``). The heartbeat checks the session, logs its loss
    and takes the lock again. Every store of the process on one database shares that
    session, however their connection strings spell the database (``127.0.0.1`` or
    ``localhost``, the unix socket, the port left out, a proxy): the server says which
    database a connection is on.

    Every session of the store gives up waiting for a lock that another session holds (a
    migration, a long ``ALTER TABLE``, an operator's ``LOCK TABLE``) after ``LOCK_TIMEOUT``
    (30 s, as a SQLite ledger waits), whatever the connection string, role or database say;
    the operation then raises ``StoreError`` naming the table and who holds its lock. See
    ``Store`` for the other settings.

    Raises:
        StoreError: the server cannot be reached or refuses the connection (one line with
            its reason, the password masked), the schema is missing or of another version,
            or another session held a lock on it for ``LOCK_TIMEOUT``.
        ValueError: the lease is not positive, the heartbeat not shorter than the lease,
            ``connect_timeout`` less than 1, or ``dsn`` not a PostgreSQL location (see
            ``get_store``).

    """

    _FOR_UPDATE: ClassVar[str] = " FOR UPDATE"

    def __init__(  # noqa: PLR0913 - one keyword per setting
        self,
        dsn: str,
        *,
        lease: float = LEASE,
        heartbeat: float | None = None,
        host: str | None = None,
        pool_size: int = 8,
        connect_timeout: int | None = None,
    ) -> None:
        """Connect and check the schema; see ``get_store``."""
        super().__init__(lease=lease, heartbeat=heartbeat, host=host)
        self._where = _without_password(dsn)
        self._dsn = _timed(dsn, connect_timeout, self._where)
        self._pool_size = whole("pool_size", pool_size, least=1)
        # The first connection is made here, not by the pool: the pool connects in the
        # background, retrying and logging each failure, and tells whoever waits for it only
        # that it ran out of time.
        with _connect(self._dsn, self._where, autocommit=True) as connection, self._errors():
            self._configure(connection)
            version = _version(connection, self._where)
            self._database = _identify(connection)
        if version != SCHEMA_VERSION:
            what = "no safeact schema" if version == 0 else f"schema version {version}"
            raise StoreError(
                f"{self._where}: the database has {what}, this safeact needs "
                f"{SCHEMA_VERSION}; run `safeact migrate DSN` first"
            )
        self._pool = self._new_pool()

    @property
    def location(self) -> str:
        """The connection string, without its password."""
        return self._where

    def _owner_lost(self, owner: Owner) -> bool:
        """Whether ``owner``'s advisory lock on this database is free: suspicion, not proof.

        Free means the session that held it has ended. A crashed process's session ends (at
        once on its host's death, or when the server's probes find the host gone), but so
        does a live owner's when an administrator terminates it, a proxy or an idle timeout
        drops it, or the server restarts; that owner takes its lock again at its next
        heartbeat or claim. Read from ``pg_locks``: asking never takes the lock.
        """
        halves = _halves(_owner_lock(owner))

        def holders(connection: psycopg.Connection[Any]) -> list[Any]:
            return connection.execute(_HOLDERS, halves).fetchall()

        return self._repeatable(holders) == []

    def _owner_gone(self, record: Record) -> bool:
        """Whether the owner of ``record``'s attempt provably no longer runs: proof.

        Proof needs both the owner's machine (its process table, its boot) to say it is gone,
        as ``Ledger._owner_gone`` reads it, and its advisory lock here to be free. A lock
        still held is a session the owner opened and something still keeps open: a child
        its action forked, which kept the socket, or the owner itself on a machine that
        only looks like this one. The lock is read from ``pg_locks`` only once the machine
        says gone, so a live owner costs no round trip.

        Raises:
            StoreError: the server cannot be reached to read the lock.

        """
        return super()._owner_gone(record) and self._owner_lost(record.owner)

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
        """Hold this process's liveness lock, then claim as ``Store.claim`` does."""
        self._hold_liveness()
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

    def _hold_liveness(self) -> None:
        """Make sure this process holds its advisory lock on this database.

        One session per process and database holds it, shared by every store of the process
        whatever their DSNs (``_identify``) and kept until the process ends: a second session
        of the same process would wait for the lock, and a store that closes must not make
        the process look dead while other stores of it run actions.

        Raises:
            StoreError: the server cannot be reached, or another session held the lock for
                ``LOCK_TIMEOUT`` (the message names it).

        """
        self._after_fork()
        lock = _owner_lock(self.owner)
        with self._errors():
            try:
                lost = _liveness.hold(self._dsn, self._database, lock)
            except psycopg.errors.LockNotAvailable as exc:
                raise StoreError(f"{self._where}: {_liveness_wait(self._dsn, lock)}") from exc
        if lost:
            self._report_lost("took its lock again")

    def _check_liveness(self) -> None:
        """Heartbeat: make sure this process's liveness session still holds its lock.

        Only once this process has taken it on this database. A session that ended (an
        administrator's ``pg_terminate_backend``, a proxy, a server restart) let the lock
        go, and other hosts may have taken this live process's attempts for lost: that is
        logged at ERROR on the ``safeact`` logger, and the lock is taken again at once,
        without waiting for it. Never raises: a lock that cannot be taken again is logged
        too, and the next beat or claim tries again.
        """
        if self._closed:
            return
        try:
            lost = _liveness.check(self._dsn, self._database, _owner_lock(self.owner))
        except (psycopg.Error, StoreError) as exc:
            said = _location(self._dsn).scrub(str(exc))  # libpq may quote the DSN's values
            self._report_lost(f"could not take its lock again: {said}")
        else:
            if lost:
                self._report_lost("took its lock again")

    def _report_lost(self, then: str) -> None:
        owner = self.owner
        logger.error(
            "%s: the liveness session of this process (owner pid %d on host %r) had ended, "
            "so its advisory lock was free and other hosts may have taken its attempts in "
            "flight for lost; %s",
            self._where,
            owner.pid,
            owner.host,
            then,
        )

    @contextlib.contextmanager
    def _transaction(self, *, sync: bool) -> Iterator[_Executor]:
        """One transaction on a pooled connection, at READ COMMITTED, in few round trips.

        That level is enough: every decision locks its row first (``FOR UPDATE``), and a
        claim's winner is decided by the primary key (``ON CONFLICT DO NOTHING``). Writes
        that need not be synced (an outcome, a mark) commit without waiting for the server's
        disk; like SQLite's NORMAL, they survive a crash of this process, not of the server.
        Synced ones set ``synchronous_commit`` on for their transaction, so that neither the
        server, the database, the role nor the connection string can turn it off.

        ``BEGIN`` and that setting are one round trip; then the statements are pipelined up
        to the ``COMMIT``: the server is waited on only where a statement's rows are read,
        and at the end. A claim is two round trips, an owner's outcome three.

        Raises:
            StoreError: the store was opened read-only, under replay-only.

        """
        self._check_writable()
        self._check_open()
        with contextlib.ExitStack() as held:
            connection = self._begin(held, sync=sync)
            try:
                with connection.pipeline() as pipeline:
                    yield _Executor(connection, pipeline)
                    connection.execute("COMMIT")
            except BaseException:
                if connection.info.transaction_status != TransactionStatus.IDLE:
                    with contextlib.suppress(psycopg.Error):
                        connection.execute("ROLLBACK")
                raise

    def _begin(self, held: contextlib.ExitStack, *, sync: bool) -> psycopg.Connection[Any]:
        """A pooled connection in a new transaction, kept open by ``held``.

        A pooled session may have died while idle (a server restart, a cut connection);
        that shows when ``BEGIN`` is answered, before anything was written, so another
        connection is tried, once. A failure later in the transaction is never retried here.
        """
        for last in (False, True):
            attempt = contextlib.ExitStack()
            connection: psycopg.Connection[Any] = attempt.enter_context(self._pool.connection())
            try:
                with connection.pipeline():
                    connection.execute("BEGIN")
                    connection.execute(_SYNCED if sync else _UNSYNCED)
            except psycopg.OperationalError:
                attempt.close()  # the pool throws the broken connection away
                if last:
                    raise
                self._pool.check()  # and every idle session that died with it
                continue
            except BaseException:
                attempt.close()
                raise
            held.enter_context(attempt)
            return connection
        raise AssertionError  # pragma: no cover - the loop returns or raises

    def _lock_history(self, db: Executor) -> None:
        # Waits for every transaction that appended to it; later ones wait for this one.
        db.execute("LOCK TABLE history IN SHARE ROW EXCLUSIVE MODE")

    def _finish_attempting(self, db: Executor, outcome: tuple[object, ...], event: Event) -> Cursor:
        """The outcome and its event in one statement (a data-modifying ``WITH``)."""
        return db.execute(
            FINISH_ATTEMPTING_WITH_EVENT,
            (*finish_values(outcome, event), *event_values("key", event)),
        )

    @contextlib.contextmanager
    def _unguarded_history(self, db: Executor) -> Iterator[None]:
        """Disable the trigger refusing deletes of history for the block, in its transaction.

        Under the lock ``_lock_history`` took, which this needs (so no other session writes
        the history meanwhile); only the table's owner may do it.
        """
        db.execute(f"ALTER TABLE history DISABLE TRIGGER {_HISTORY_GUARD}")
        yield
        db.execute(f"ALTER TABLE history ENABLE TRIGGER {_HISTORY_GUARD}")

    def _read(self, sql: str, parameters: tuple[object, ...]) -> list[Any]:
        def query(connection: psycopg.Connection[Any]) -> list[Any]:
            return connection.execute(_placeholders(sql), parameters).fetchall()

        return self._repeatable(query)

    def _read_stream(
        self,
        sql: str,
        parameters: tuple[object, ...],
        batch: int,
        read: Callable[[list[Any]], T],
    ) -> Generator[T, None, None]:
        # A server-side cursor: the server keeps the rows, the client takes a batch a time.
        self._check_open()
        with (
            self._errors(),
            self._pool.connection() as connection,
            connection.transaction(),
            connection.cursor(name="safeact_listing") as cursor,
        ):
            cursor.execute(_placeholders(sql), parameters)
            while rows := cursor.fetchmany(batch):
                yield read(rows)

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
                except psycopg.errors.LockNotAvailable:
                    raise  # it waited the whole lock timeout: a second wait would double it
                except psycopg.OperationalError:
                    if last:
                        raise
                    self._pool.check()
        raise AssertionError  # pragma: no cover - the loop returns or raises

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Turn psycopg's errors into ``StoreError``; a lock waited for says whose it was."""
        try:
            yield
        except psycopg.errors.LockNotAvailable as exc:
            raise StoreError(f"{self._where}: {_lock_wait(self._dsn, exc)}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"{self._where}: {_reason(exc)}") from exc

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

    def _configure(self, connection: psycopg.Connection[Any]) -> None:
        """Set up a new session of the store: bounded waits, and read-only under replay-only.

        A store opened under replay-only refuses writes itself (``_check_writable``); its
        sessions are read-only too (``default_transaction_read_only``, set after the
        connection string's and the role's settings), so that the server refuses whatever
        would reach it. The liveness session is not one of them: it takes a lock, writes
        nothing, and a read-only store never claims.
        """
        _bound_waits(connection)
        if self._read_only:
            connection.execute("SELECT set_config('default_transaction_read_only', 'on', false)")

    def _new_pool(self) -> ConnectionPool[Any]:
        # Autocommit: a read is one round trip; a write opens its transaction explicitly.
        pool: ConnectionPool[Any] = ConnectionPool(
            self._dsn,
            min_size=1,
            max_size=self._pool_size,
            open=False,
            kwargs={"autocommit": True},
            configure=self._configure,
        )
        try:
            pool.open(wait=True, timeout=_timeout(self._dsn))
        except Exception as exc:
            pool.close()
            said = _location(self._dsn).scrub(str(exc))  # libpq may quote the DSN's values
            raise StoreError(f"{self._where}: cannot connect: {said}") from exc
        return pool


def _timed(dsn: str, connect_timeout: int | None, where: str) -> str:
    """``dsn`` as libpq takes it (``parse_location``), with the seconds a connection waits.

    An explicit ``connect_timeout`` wins; then the string's own (or ``PGCONNECT_TIMEOUT``,
    which libpq reads); then ``CONNECT_TIMEOUT``. Without one, psycopg would wait 130 s for
    each address of a host that does not answer.

    Raises:
        StoreError: libpq cannot read ``dsn`` as a connection string (an unknown keyword,
            say); its reason without any secret value of ``dsn``, which it may quote.
        ValueError: ``connect_timeout`` is less than 1, or ``dsn`` is not a PostgreSQL
            location.

    """
    if connect_timeout is not None:
        whole("connect_timeout", connect_timeout, least=1)
    location = _location(dsn)
    try:
        given = conninfo_to_dict(location.dsn)
    except psycopg.Error as exc:
        raise StoreError(
            f"{where}: not a PostgreSQL connection string: {_scrubbed(exc, location)}"
        ) from _cause(exc, location)
    if connect_timeout is None:
        if "connect_timeout" in given or os.environ.get("PGCONNECT_TIMEOUT"):
            return location.dsn
        connect_timeout = CONNECT_TIMEOUT
    return make_conninfo(location.dsn, connect_timeout=connect_timeout)


def _timeout(dsn: str) -> int:
    """The seconds psycopg gives each connection attempt to ``dsn`` (2 at least)."""
    return timeout_from_conninfo(conninfo_to_dict(dsn))


def _connect(dsn: str, where: str, *, autocommit: bool) -> psycopg.Connection[Any]:
    """A new connection to ``dsn``, made in this thread.

    Raises:
        StoreError: the server refused the connection or did not answer in time, with its
            (or libpq's) own reason, on one line and without the password.
        ValueError: ``dsn`` is not a PostgreSQL location.

    """
    location = _location(dsn)
    try:
        return psycopg.connect(location.dsn, autocommit=autocommit)
    except psycopg.errors.ConnectionTimeout as exc:
        raise StoreError(
            f"{where}: cannot connect: no answer within {_timeout(location.dsn)} s "
            f"(connect_timeout): {_scrubbed(exc, location)}"
        ) from _cause(exc, location)
    except psycopg.Error as exc:
        refused = StoreError(f"{where}: cannot connect: {_scrubbed(exc, location)}")
        raise refused from _cause(exc, location)


def _reason(exc: psycopg.Error) -> str:
    """What ``exc`` says, on one line: libpq's and the server's lines, joined."""
    said = ""
    for line in str(exc).splitlines():
        if line.strip():
            gap = "" if not said else " " if said.endswith(":") else "; "
            said += gap + line.strip()
    return said.removeprefix("connection failed: ")


def _scrubbed(exc: psycopg.Error, location: PostgresLocation) -> str:
    """``_reason(exc)`` without the secret values of ``location`` that libpq may quote."""
    return location.scrub(_reason(exc))


def _cause(exc: psycopg.Error, location: PostgresLocation) -> psycopg.Error | None:
    """``exc`` to chain to the ``StoreError`` made of it, or None if its text holds a secret.

    A traceback prints the cause's text whole: libpq quotes the pieces of a connection
    string it cannot read, the password among them.
    """
    said = str(exc)
    return exc if location.scrub(said) == said else None


class _Liveness:
    """The sessions that hold this process's advisory locks: one per database and owner name.

    A database is named by ``_identify``, not by a DSN: advisory locks span a database, so a
    second session of this process there, however its DSN spells the server or whoever it
    logs in as, would wait for the first one's lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # None: the lock was held once, then lost, and could not be taken again yet.
        self._sessions: dict[tuple[int, str, int], psycopg.Connection[Any] | None] = {}

    def hold(self, dsn: str, database: str, lock: int) -> bool:
        """Hold ``lock`` on ``database``; return whether this process had lost it.

        A session is opened through ``dsn`` (a DSN of ``database``) only if this process
        holds none there; it waits for the lock up to ``LOCK_TIMEOUT``.

        Raises:
            psycopg.Error: the server cannot be reached, or the lock was not granted in time.

        """
        return self._keep(dsn, database, lock, wait=True)

    def check(self, dsn: str, database: str, lock: int) -> bool:
        """Like ``hold``, without waiting, and only for a lock this process held there before.

        Raises:
            psycopg.Error: the server cannot be reached.
            StoreError: another session holds the lock.

        """
        return self._keep(dsn, database, lock, wait=False)

    def _keep(self, dsn: str, database: str, lock: int, *, wait: bool) -> bool:
        where = (os.getpid(), database, lock)
        with self._lock:
            lost = where in self._sessions
            if lost:
                session = self._sessions[where]
                if session is not None:
                    if (wait and _quiet(session)) or _holds(session, lock):
                        return False
                    session.close()
                self._sessions[where] = None
            elif not wait:
                return False  # never taken here: nothing to check
            self._sessions[where] = _take(dsn, lock, wait=wait)
            return lost

    def close(self) -> None:
        """At exit: end this process's sessions, as its end would a moment later.

        Only its own: a forked child holds copies of its parent's connections, and closing
        one would end the parent's session (the server sees one socket).
        """
        with self._lock:
            mine = [where for where in self._sessions if where[0] == os.getpid()]
            for where in mine:
                session = self._sessions.pop(where)
                if session is not None:
                    session.close()


def _quiet(session: psycopg.Connection[Any]) -> bool:
    """Whether ``session``'s server has sent nothing since its last answer: no round trip.

    A session that ends is told so and its socket closed (``pg_terminate_backend``, a server
    restart or shutdown), which makes the socket readable; a claim then asks the server
    (``_holds``). A quiet session is taken to hold its lock still, and the heartbeat asks
    the server itself: it finds what makes no sound, a cut connection (its keepalives) or a
    proxy that swapped the backend.
    """
    if session.closed:
        return False
    try:
        heard = select.poll()  # not select(): a process with many files has descriptors > 1023
        heard.register(session.fileno(), select.POLLIN)
        return not heard.poll(0)
    except (AttributeError, OSError, ValueError):  # no poll() (Windows), or a closed socket
        return False  # then ask the server


def _holds(session: psycopg.Connection[Any], lock: int) -> bool:
    """Whether ``session`` is alive and holds ``lock`` (a proxy may have swapped it)."""
    try:
        mine = session.execute(_HOLDERS + " AND pid = pg_backend_pid()", _halves(lock))
        return mine.fetchall() != []
    except psycopg.Error:
        return False


def _take(dsn: str, lock: int, *, wait: bool) -> psycopg.Connection[Any]:
    """A new liveness session on the database of ``dsn``, holding ``lock``.

    Raises:
        psycopg.Error: the server cannot be reached, or (``wait``) the lock was not granted
            within the lock timeout.
        StoreError: (not ``wait``) another session holds the lock.

    """
    given = conninfo_to_dict(dsn)
    options = {name: value for name, value in _LIVENESS_CONNECT.items() if name not in given}
    session = psycopg.connect(make_conninfo(dsn, **options), autocommit=True)
    with contextlib.ExitStack() as on_failure:
        on_failure.callback(session.close)
        session.execute(_LIVENESS_SETTINGS, (_milliseconds(LOCK_TIMEOUT),))
        if wait:
            session.execute("SELECT pg_advisory_lock(%s)", (lock,))
        elif session.execute("SELECT pg_try_advisory_lock(%s)", (lock,)).fetchall() != [(True,)]:
            raise StoreError(f"another session holds lock {lock}")
        on_failure.pop_all()
    return session


_liveness = _Liveness()


@atexit.register
def _end_sessions() -> None:
    """At exit: stop the heartbeats first (they check the sessions), then end the sessions.

    Exit handlers run newest first, and this module is imported after ``_liveness``, whose
    own handler would otherwise stop the heartbeats only after the sessions had ended.
    """
    stop_heartbeats()
    _liveness.close()


class _Executor:
    """A connection in pipeline mode that takes the logic's ``?`` placeholders."""

    __slots__ = ("_connection", "_pipeline")

    def __init__(self, connection: psycopg.Connection[Any], pipeline: psycopg.Pipeline) -> None:
        self._connection = connection
        self._pipeline = pipeline

    def execute(self, sql: str, parameters: tuple[object, ...] = (), /) -> Cursor:
        return _Answer(self._connection.execute(_placeholders(sql), parameters), self._pipeline)


def _placeholders(sql: str) -> str:
    """``sql`` with the logic's ``?`` placeholders as psycopg's ``%s``."""
    return sql.replace("?", "%s")


class _Answer:
    """A pipelined statement's cursor: reading its rows or its row count waits for the server."""

    __slots__ = ("_cursor", "_pipeline")

    def __init__(self, cursor: psycopg.Cursor[Any], pipeline: psycopg.Pipeline) -> None:
        self._cursor = cursor
        self._pipeline = pipeline

    @property
    def rowcount(self) -> int:
        if self._cursor.rowcount == -1:  # not answered yet: the count is the server's to give
            self._pipeline.sync()
        return self._cursor.rowcount

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()


def _version(connection: psycopg.Connection[Any], where: str) -> int:
    """The schema version of the database, 0 if it has no safeact schema.

    Raises:
        StoreError: another program's ``safeact_meta``, a newer schema, or a version no
            safeact wrote.

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
    if row[1] not in _MIGRATIONS and row[1] != SCHEMA_VERSION:
        raise StoreError(
            f"{where}: its safeact_meta says schema version {row[1]}, which no safeact wrote "
            "on PostgreSQL (they began at 2): the table was changed outside safeact; restore "
            "it from a backup"
        )
    return int(row[1])


def _milliseconds(seconds: float) -> str:
    """``seconds`` as a PostgreSQL duration setting: whole milliseconds, 1 at least (0 is none)."""
    return f"{max(1, round(seconds * 1000))}ms"


def _bound_waits(connection: psycopg.Connection[Any]) -> None:
    """Make ``connection``'s statements give up waiting for a lock after ``LOCK_TIMEOUT``.

    Set once the session is open, so neither the connection string's options nor the role's
    or database's settings (applied as it opened) lift it; and for the session, so every
    transaction on it, pipelined or not, runs under it without a statement of its own.
    ``connection`` is in autocommit mode, so the setting is not rolled back with a
    transaction.
    """
    connection.execute(_BOUNDED, (_milliseconds(LOCK_TIMEOUT),))


def _identify(connection: psycopg.Connection[Any]) -> str:
    """Which database ``connection`` is on: the same text through every DSN that reaches it.

    The server's system identifier (made with the cluster, kept across restarts) where the
    role may run ``pg_control_system()``, as every role may unless an administrator revoked
    it; else the port and start time of the running server, which tell two servers apart
    but change when it restarts (a store opened after a restart then keeps a liveness
    session apart from an older store's, and waits for its lock). Then the database's oid.
    ``connection`` is in autocommit mode, so a refusal leaves it usable.
    """
    try:
        found = connection.execute(_IDENTITY).fetchone()
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedFunction):
        found = connection.execute(_IDENTITY_BY_START).fetchone()
    server, database = found or ("", 0)
    return f"{server}, database {database}"


def _owner_lock(owner: Owner) -> int:
    """The advisory lock id of ``owner``: 64 bits of a hash of its identity.

    The whole identity, machine id and PID namespace included: two processes with the same
    host name, boot id and process id in two containers are two owners with two locks. An
    owner without either (a row written by a safeact of schema 2, still running while its
    ledger was migrated) keeps the lock id that safeact took.
    """
    parts = [owner.host, owner.boot_id, str(owner.pid), str(owner.started)]
    if owner.machine_id or owner.pid_namespace:
        parts += [owner.machine_id, owner.pid_namespace]
    identity = "\0".join(parts).encode()
    return int.from_bytes(hashlib.sha256(identity).digest()[:8], "big", signed=True)


def _halves(lock: int) -> tuple[int, int]:
    """The two 32-bit halves ``pg_locks`` shows a bigint advisory lock as."""
    unsigned = lock & 0xFFFF_FFFF_FFFF_FFFF
    return unsigned >> 32, unsigned & 0xFFFF_FFFF


def _lock_wait(dsn: str, exc: psycopg.errors.LockNotAvailable) -> str:
    """What a statement that gave up waiting for a lock on the ledger waited for; what to do."""
    held = _lock_holders(dsn) or [exc.diag.context or "its holder has let it go since"]
    return (
        f"gave up after {LOCK_TIMEOUT:g} s waiting for a lock on the ledger: "
        f"{'; '.join(held)}. {_LOCK_ADVICE}"
    )


def _lock_holders(dsn: str) -> list[str]:
    """Who holds, or queues ahead for, a lock on the ledger's tables that safeact waits behind.

    Read on a session of its own (the one that waited may be broken); empty if it cannot be.
    """
    try:
        with psycopg.connect(dsn, autocommit=True) as connection:
            _bound_waits(connection)
            rows = connection.execute(_TABLE_LOCKS, (_LEDGER_TABLES,)).fetchall()
    except psycopg.Error:
        return []
    return [_holder(row) for row in rows]


def _holder(row: tuple[Any, ...]) -> str:
    """A row of ``_TABLE_LOCKS`` in words: the table, the session, the lock."""
    table, mode, granted, pid, application, state, query = row
    about = [f"application {application!r}"] if application else []
    about += [state] if state else []
    about += [repr(_first_words(query))] if query else []
    who = "a prepared transaction" if pid is None else f"session {pid}"
    shown = f" ({', '.join(about)})" if about else ""
    return f"table {table}: {who}{shown} {'holds' if granted else 'waits for'} {mode}"


_MAY_HOLD_A_VALUE = re.compile(r"['$]|password", re.IGNORECASE)


def _first_words(query: str) -> str:
    """The start of ``query``, enough to tell what it is (``LOCK TABLE calls IN ACCESS``).

    At most five words, up to the first that may hold a value (a quote, a placeholder, the
    word password): ``pg_stat_activity`` shows statements with their literals, secrets too.
    """
    plain = itertools.takewhile(lambda word: not _MAY_HOLD_A_VALUE.search(word), query.split())
    return " ".join(itertools.islice(plain, 5))


def _liveness_wait(dsn: str, lock: int) -> str:
    """Why this process's liveness lock was not granted in time, and what to do."""
    try:
        with psycopg.connect(dsn, autocommit=True) as connection:
            holders = connection.execute(_HOLDERS, _halves(lock)).fetchall()
    except psycopg.Error:
        holders = []
    held = " and ".join(f"session {pid}" for (pid,) in holders) or "a session that has ended since"
    return (
        f"gave up after {LOCK_TIMEOUT:g} s waiting for this process's liveness lock (advisory "
        f"lock {lock}), held by {held}: a process that names itself as this one (the same "
        "host, boot, process id and start), or a session of this process that the server has "
        "not yet seen end. End it with pg_terminate_backend(pid), or try again"
    )


def _without_password(dsn: str) -> str:
    """``dsn`` as messages and reprs show it: every secret value ``***``.

    Raises:
        ValueError: as ``_location``.

    """
    return _location(dsn).shown


def _location(dsn: str) -> PostgresLocation:
    """The PostgreSQL database ``dsn`` names.

    Raises:
        ValueError: ``dsn`` names none: a file path, a URL of another scheme, or a
            connection string libpq would refuse or misread (``parse_location``).

    """
    location = parse_location(dsn)
    if location is None:  # a file path, not shown: "./host=x password=y" is one
        raise ValueError(
            "a PostgreSQL ledger is named by a postgresql:// URL or libpq keyword pairs "
            "(host=… dbname=…), not a file path: open a SQLite file with get_store"
        )
    return location
