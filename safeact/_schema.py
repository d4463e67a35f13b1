"""The SQLite ledger file: its schema version, its creation, and the explicit migration.

A new ledger is created from the declared tables (``safeact._tables``). An older one is
upgraded only by ``migrate``, through the historical steps below, one per version;
``tests/test_schema.py`` checks that they end at exactly the schema of a new ledger.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from safeact._sqlite_file import check_one_name, explained, real_name
from safeact._tables import SCHEMA_VERSION, sqlite_ddl
from safeact.exceptions import StoreError

__all__ = [
    "APPLICATION_ID",
    "BUSY_TIMEOUT",
    "check_usable",
    "create_new",
    "migrate",
    "prepare",
]

APPLICATION_ID = 0x53414654  # "SAFT": marks a file as a safeact ledger
BUSY_TIMEOUT = 30.0
"""Seconds a connection waits for another one's lock before giving up."""

# History: the steps that took a ledger of version N to N + 1, as they were written then.
# They never change; a new ledger does not run them.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    # 1 -> 2: the audit trail. Keys and sagas settled before it have no history.
    1: (
        """CREATE TABLE history (
            seq        INTEGER PRIMARY KEY,
            kind       TEXT NOT NULL CHECK (kind IN ('key', 'saga')),
            subject    TEXT NOT NULL,
            attempt_id TEXT,
            from_state TEXT,
            to_state   TEXT,
            at         TEXT NOT NULL,
            by_kind    TEXT NOT NULL CHECK (by_kind IN ('process', 'operator')),
            by_host    TEXT NOT NULL,
            by_pid     INTEGER NOT NULL,
            why        TEXT NOT NULL,
            note       TEXT
        )""",
        "CREATE INDEX history_by_subject ON history (kind, subject, seq)",
        # Nothing rewrites history: refuse it in the file itself (an operator's archive lifts
        # the delete guard inside its own transaction only; see ``_archive``).
        """CREATE TRIGGER history_is_append_only_update BEFORE UPDATE ON history
        BEGIN SELECT RAISE(ABORT, 'the safeact history is append-only'); END""",
        """CREATE TRIGGER history_is_append_only_delete BEFORE DELETE ON history
        BEGIN SELECT RAISE(ABORT, 'the safeact history is append-only'); END""",
    ),
    # 2 -> 3: an owner's machine id and PID namespace, so that only a process of its own
    # machine and namespace judges it gone. Attempts from before are judged as they were.
    2: (
        "ALTER TABLE calls ADD COLUMN owner_machine TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE calls ADD COLUMN owner_pidns TEXT NOT NULL DEFAULT ''",
    ),
    # 3 -> 4: an owner's process group, so that the children its action started keep it
    # alive, and safeact's own identity of its machine in owner_machine (a value, no DDL).
    # Attempts from before have neither, and are never judged gone by their process.
    3: ("ALTER TABLE calls ADD COLUMN owner_group INTEGER NOT NULL DEFAULT 0",),
    # 4 -> 5: each tool's description of its results, written at its next claim, so that
    # an operator's result is checked without importing the tool. Keys recorded before
    # have none until their tool claims again: their results are stored unchecked.
    4: (
        """CREATE TABLE tools (
            name           TEXT NOT NULL,
            result_shape   TEXT NOT NULL,
            written_at     TEXT NOT NULL,
            schema_version INTEGER NOT NULL,
            PRIMARY KEY (name)
        ) WITHOUT ROWID""",
    ),
    # 5 -> 6: approvals, and a call's arguments kept for display. Keys recorded before have
    # neither: their tools needed no approval, and kept no arguments.
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
        ) WITHOUT ROWID""",
        "CREATE INDEX approvals_pending ON approvals (requested_at) WHERE state = 'pending'",
    ),
    # 6 -> 7: the settled keys counted by tool and state, kept by triggers, so that ``stats``
    # reads the counts, not every key. The keys of before are counted in the migration's
    # write transaction (a million keys: 4.3 s for the whole migration, its copy included),
    # so no write falls between the count and its triggers.
    6: (
        """CREATE TABLE key_counts (
            tool  TEXT NOT NULL,
            state TEXT NOT NULL,
            shard INTEGER NOT NULL,
            n     INTEGER NOT NULL,
            PRIMARY KEY (tool, state, shard)
        ) WITHOUT ROWID""",
        """CREATE TRIGGER calls_counted_insert AFTER INSERT ON calls
        WHEN NEW.state NOT IN ('attempting', 'in_doubt')
        BEGIN INSERT INTO key_counts (tool, state, shard, n) VALUES (NEW.tool, NEW.state, 0, 1)
            ON CONFLICT (tool, state, shard) DO UPDATE SET n = key_counts.n + excluded.n; END""",
        """CREATE TRIGGER calls_counted_delete AFTER DELETE ON calls
        WHEN OLD.state NOT IN ('attempting', 'in_doubt')
        BEGIN INSERT INTO key_counts (tool, state, shard, n) VALUES (OLD.tool, OLD.state, 0, -1)
            ON CONFLICT (tool, state, shard) DO UPDATE SET n = key_counts.n + excluded.n; END""",
        """CREATE TRIGGER calls_counted_update AFTER UPDATE OF tool, state ON calls
        WHEN OLD.tool IS NOT NEW.tool OR OLD.state IS NOT NEW.state
        BEGIN INSERT INTO key_counts (tool, state, shard, n)
            SELECT OLD.tool, OLD.state, 0, -1 WHERE OLD.state NOT IN ('attempting', 'in_doubt')
            ON CONFLICT (tool, state, shard) DO UPDATE SET n = key_counts.n + excluded.n;
        INSERT INTO key_counts (tool, state, shard, n)
            SELECT NEW.tool, NEW.state, 0, 1 WHERE NEW.state NOT IN ('attempting', 'in_doubt')
            ON CONFLICT (tool, state, shard) DO UPDATE SET n = key_counts.n + excluded.n; END""",
        """INSERT INTO key_counts (tool, state, shard, n)
        SELECT tool, state, 0, count(*) FROM calls
        WHERE state NOT IN ('attempting', 'in_doubt') GROUP BY tool, state""",
    ),
}


def prepare(connection: sqlite3.Connection, path: Path) -> None:
    """Check the file is a current safeact ledger, creating the schema if it is empty.

    Nothing is written to a file that fails the check.

    Raises:
        StoreError: another program's database, or a ledger of another schema version
            (an older one is upgraded only by ``migrate``).

    """
    connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
    if _version(connection, path) != SCHEMA_VERSION:
        # Two processes may open a new file at once: the write lock makes one create it.
        with _locked(connection):
            version = _version(connection, path)
            if version == 0:
                _create(connection)
            elif version < SCHEMA_VERSION:
                raise _older(path, version)
    _use_wal(connection, path)
    connection.execute("PRAGMA synchronous = NORMAL")


def create_new(connection: sqlite3.Connection) -> None:
    """Make the empty database ``connection`` is on a current ledger, in one transaction.

    For a database that is new by construction and is no file (an in-memory ledger,
    ``safeact._memory``): ``prepare`` is for a file, which may be a ledger already, may be
    another program's, and must be switched to WAL, which a database in memory cannot be.

    Raises:
        sqlite3.Error: the database is not empty (a table of the ledger's exists); it is
            left as it was.

    """
    with _locked(connection):
        _create(connection)


def migrate(path: Path) -> tuple[int, int]:
    """Upgrade the ledger at ``path`` to this safeact's schema; return (old, new) versions.

    The old file is first copied to ``<path>.v<old>.bak`` (or ``.bak.N`` if that exists).
    Safe to run from many processes at once: the first takes the write lock and upgrades,
    the others then find the ledger current and change nothing. A migration that fails is
    rolled back, which leaves the ledger as it was, and its copy is removed.

    Raises:
        StoreError: no file at ``path``, not a safeact ledger, or a newer schema; the file
            has a second name (a hard link: see ``_sqlite_file``); or the copy or the
            upgrade failed, and the message says what to do.

    """
    if not path.is_file():
        raise StoreError(f"{path}: no ledger at this path")
    check_one_name(real_name(path))  # upgraded under a second name, no store would see it
    try:
        connection = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT)
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: {exc}") from exc
    try:  # closing the connection rolls back whatever it left uncommitted
        try:
            connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
            connection.execute("BEGIN IMMEDIATE")
            old = _version(connection, path)
        except sqlite3.Error as exc:
            raise StoreError(
                f"{path}: {exc}; nothing was changed. To do: {_advice(exc, path, None)}"
            ) from exc
        if old == 0:
            raise StoreError(f"{path}: an empty file is not a ledger; nothing to migrate")
        if old < SCHEMA_VERSION:
            _upgrade_keeping_a_copy(connection, path, old)
        return old, SCHEMA_VERSION
    finally:
        connection.close()


def _upgrade_keeping_a_copy(connection: sqlite3.Connection, path: Path, old: int) -> None:
    """In the caller's write transaction: copy the ledger, upgrade it from ``old``, commit.

    Raises:
        StoreError: the copy or the upgrade failed. The transaction was rolled back, so the
            ledger is as it was, and the copy was removed; or, if the rollback failed too,
            the copy is kept and the message names it.

    """
    backup = _backup_path(path, old)
    try:
        _copy(path, backup)
    except sqlite3.Error as exc:
        _remove(backup)
        raise StoreError(
            f"{path}: copying the ledger to {backup} before migrating it failed ({exc}); "
            f"nothing was changed and no copy was kept. To do: {_advice(exc, path, old)}"
        ) from exc
    try:
        _upgrade(connection, old)
        connection.execute("COMMIT")
    except sqlite3.Error as exc:
        failed = f"{path}: migrating from schema {old} to {SCHEMA_VERSION} failed ({exc})"
        try:
            if connection.in_transaction:  # SQLite rolls some failures back itself
                connection.execute("ROLLBACK")
        except sqlite3.Error as again:
            raise StoreError(
                f"{failed}, and so did rolling it back ({again}); the ledger as it was is "
                f"kept at {backup}: if safeact cannot open the ledger, put that copy in its place"
            ) from exc
        _remove(backup)
        raise StoreError(
            f"{failed}; it was rolled back: the ledger is unchanged, at schema {old}, and no "
            f"copy was kept. To do: {_advice(exc, path, old)}"
        ) from exc


# What to do about a migration that failed, by SQLite's primary error code.
_ADVICE = {
    sqlite3.SQLITE_FULL: "free disk space, then {again}",
    sqlite3.SQLITE_READONLY: "make the ledger and its directory writable, then {again}",
    sqlite3.SQLITE_CANTOPEN: "make the ledger and its directory writable, then {again}",
    sqlite3.SQLITE_PERM: "make the ledger and its directory writable, then {again}",
    sqlite3.SQLITE_BUSY: "another process kept the ledger locked; {again} when it is idle",
    sqlite3.SQLITE_LOCKED: "another process kept the ledger locked; {again} when it is idle",
    sqlite3.SQLITE_IOERR: "writing to the disk failed: check its free space and health, then "
    "{again}",
    sqlite3.SQLITE_NOTADB: "check the path; if it is the ledger, it is damaged: restore it "
    "from a backup",
    sqlite3.SQLITE_CORRUPT: "check the path; if it is the ledger, it is damaged: restore it "
    "from a backup",
}


def _advice(exc: sqlite3.Error, path: Path, old: int | None) -> str:
    """What to do about a migration of a ledger at ``old`` that failed with ``exc``.

    ``old`` is None when the ledger's version was not read yet. A statement of the migration
    that fails on a readable ledger at a known version finds its tables not as expected.
    """
    # The primary code, without its extended part; none for an error of Python's own.
    code = getattr(exc, "sqlite_errorcode", -1) & 0xFF
    if code in _ADVICE:
        return _ADVICE[code].format(again=f"run `safeact migrate {path}` again")
    if code in (sqlite3.SQLITE_ERROR, sqlite3.SQLITE_CONSTRAINT) and old is not None:
        return (
            f"its tables are not as a safeact of schema {old} left them (changed outside "
            "safeact?): restore the ledger from a backup, or report it to safeact with this "
            "message"
        )
    versions = SCHEMA_VERSION if old is None else f"{old} to {SCHEMA_VERSION}"
    return f"report it to safeact with this message (schema {versions})"


def _remove(copy: Path) -> None:
    """Remove a copy of the ledger, and the journal a failed copy may leave beside it."""
    copy.unlink(missing_ok=True)
    copy.with_name(f"{copy.name}-journal").unlink(missing_ok=True)


def check_usable(path: Path) -> None:
    """Check, without writing anything, that this safeact can use the file at ``path``.

    An empty file passes (it becomes a ledger); a writable connection is not opened before
    this passes, since closing one checkpoints the WAL into the file, which would change a
    database we refuse.

    Raises:
        StoreError: another program's database, or a ledger of another schema version.

    """
    with _errors(path):
        probe = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            version = _version(probe, path)
        finally:
            probe.close()
    if 0 < version < SCHEMA_VERSION:
        raise _older(path, version)


def _older(path: Path, version: int) -> StoreError:
    return StoreError(
        f"{path}: the ledger has schema version {version}, older than this safeact's "
        f"({SCHEMA_VERSION}); upgrade it with `safeact migrate {path}` (it keeps a copy "
        "of the old file). The file was not changed"
    )


def _create(connection: sqlite3.Connection) -> None:
    """Within the caller's transaction, make the empty database a current ledger."""
    for statement in sqlite_ddl():
        connection.execute(statement)
    connection.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _upgrade(connection: sqlite3.Connection, version: int) -> None:
    """Within the caller's transaction, take a ledger from ``version`` to the current one."""
    for step in range(version, SCHEMA_VERSION):
        for statement in _MIGRATIONS[step]:
            connection.execute(statement)
    connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


@contextlib.contextmanager
def _locked(connection: sqlite3.Connection) -> Iterator[None]:
    """Run the block in one ``BEGIN IMMEDIATE`` transaction, rolled back if it raises.

    An interrupt that lands as ``BEGIN`` returns is inside the ``try``: rolled back too.
    """
    try:
        connection.execute("BEGIN IMMEDIATE")
        yield
        connection.execute("COMMIT")
    finally:
        if connection.in_transaction:
            connection.execute("ROLLBACK")


@contextlib.contextmanager
def _errors(path: Path) -> Iterator[None]:
    try:
        yield
    except sqlite3.Error as exc:
        raise StoreError(f"{path}: {explained(exc, real_name(path))}") from exc


def _copy(path: Path, backup: Path) -> None:
    """Copy the ledger to ``backup`` through a second connection.

    The caller holds the write lock, which readers may share; a connection cannot back up
    from inside its own write transaction (SQLite's backup then waits forever).
    """
    source = sqlite3.connect(path)
    target = sqlite3.connect(backup)
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()


def _backup_path(path: Path, version: int) -> Path:
    backup = path.with_name(f"{path.name}.v{version}.bak")
    n = 1
    while backup.exists():
        backup = path.with_name(f"{path.name}.v{version}.bak.{n}")
        n += 1
    return backup


def _use_wal(connection: sqlite3.Connection, path: Path) -> None:
    """Switch a new ledger to WAL mode; the first opener does it, the others wait for it.

    SQLite answers a journal-mode switch that races another connection's read with BUSY,
    at once when both would need the exclusive lock, so this loop does the waiting, within
    the busy timeout, with SQLite's own busy handler off.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT
    connection.execute("PRAGMA busy_timeout = 0")
    try:
        while connection.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            try:
                mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
                continue
            if mode != "wal":
                raise StoreError(f"{path}: cannot switch the ledger to WAL mode ({mode!r})")
    finally:
        connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")


def _version(connection: sqlite3.Connection, path: Path) -> int:
    """Return the ledger's schema version, 0 for an empty database.

    Raises:
        StoreError: the file is another program's database or from a newer safeact.

    """
    # One statement, so one snapshot: another process may be creating the ledger right now.
    application_id, version, tables = connection.execute(
        "SELECT (SELECT application_id FROM pragma_application_id), "
        "(SELECT user_version FROM pragma_user_version), (SELECT count(*) FROM sqlite_master)"
    ).fetchone()
    if application_id == APPLICATION_ID:
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{path}: the ledger has schema version {version}, newer than this safeact "
                f"understands ({SCHEMA_VERSION}); upgrade safeact. The file was not changed"
            )
        return int(version)
    if application_id != 0 or version != 0 or tables:
        raise StoreError(
            f"{path}: this is a SQLite database but not a safeact ledger; "
            "point safeact at a new file. The file was not changed"
        )
    return 0
