"""The SQLite ledger: schema and version, durability, and every read and write of a key's row."""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
import weakref
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Self, TypeAlias

import attrs

from safeact._codec import encode_untyped
from safeact._owner import Owner, is_gone, this_process
from safeact._protocol import (
    UNSETTLED,
    DoubtReason,
    Record,
    SagaRecord,
    SagaState,
    State,
    check_resolvable,
)
from safeact.exceptions import SafeError, StoreError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType

    from safeact._protocol import JSON

__all__ = ["Store", "get_store", "utc_now"]

logger = logging.getLogger("safeact")

APPLICATION_ID = 0x53414654  # "SAFT": marks a file as a safeact ledger
SCHEMA_VERSION = 1
BUSY_TIMEOUT = 30.0
"""Seconds a connection waits for another one's lock before giving up."""

# Sorted, so the partial index and the queries spell the same condition in every process.
_UNSETTLED_SQL = ", ".join(sorted(f"'{s.value}'" for s in UNSETTLED))

_SCHEMA = (
    f"""CREATE TABLE calls (
        key            TEXT PRIMARY KEY NOT NULL,
        tool           TEXT NOT NULL,
        args_hash      TEXT NOT NULL,
        state          TEXT NOT NULL CHECK (state IN ({", ".join(f"'{s.value}'" for s in State)})),
        attempt_id     TEXT NOT NULL,
        attempted_at   TEXT NOT NULL,
        finished_at    TEXT,
        result         TEXT,
        error_type     TEXT,
        error_message  TEXT,
        owner_host     TEXT NOT NULL,
        owner_boot     TEXT NOT NULL,
        owner_pid      INTEGER NOT NULL,
        owner_started  INTEGER NOT NULL,
        lease_until    TEXT NOT NULL,
        doubt_reason   TEXT,
        schema_version INTEGER NOT NULL
    ) WITHOUT ROWID""",
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
    ) WITHOUT ROWID""",
    (f"CREATE INDEX calls_unsettled ON calls (attempted_at) WHERE state IN ({_UNSETTLED_SQL})"),
    f"""CREATE TABLE sagas (
        saga_id        TEXT PRIMARY KEY NOT NULL,
        state          TEXT NOT NULL
                       CHECK (state IN ({", ".join(f"'{s.value}'" for s in SagaState)})),
        started_at     TEXT NOT NULL,
        updated_at     TEXT NOT NULL,
        aborted_step   TEXT,
        abort_reason   TEXT,
        schema_version INTEGER NOT NULL
    ) WITHOUT ROWID""",
    """CREATE TABLE saga_steps (
        saga_id    TEXT NOT NULL REFERENCES sagas (saga_id),
        step_index INTEGER NOT NULL,
        name       TEXT NOT NULL,
        key        TEXT NOT NULL,
        compensation TEXT,
        PRIMARY KEY (saga_id, step_index)
    ) WITHOUT ROWID""",
    "CREATE INDEX sagas_by_state ON sagas (state, started_at)",
    f"PRAGMA application_id = {APPLICATION_ID}",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)

_COLUMNS = (
    "key, tool, state, args_hash, attempt_id, attempted_at, owner_host, owner_boot, owner_pid, "
    "owner_started, lease_until, finished_at, result, error_type, error_message, doubt_reason"
)
LEASE = 30.0
"""Default seconds an owner's claim stays alive without a heartbeat."""


_NO_RESULT: object = object()


def utc_now() -> datetime:
    """Return the current time, timezone-aware UTC."""
    return datetime.now(UTC)


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.astimezone(UTC).isoformat(timespec="microseconds")


def get_store(
    path: str | os.PathLike[str],
    *,
    fsync_attempts: bool = True,
    lease: float = LEASE,
    heartbeat: float | None = None,
    host: str | None = None,
) -> Store:
    """Open the ledger at ``path``, creating it (readable by its owner only) if it is missing.

    See ``Store`` for the settings.

    Raises:
        StoreError: the file cannot be created or opened, is not a SQLite database, is
            corrupt, is some other program's database, or was written by a newer safeact.
            The file is left as it was.

    """
    return Store(path, fsync_attempts=fsync_attempts, lease=lease, heartbeat=heartbeat, host=host)


class Store:
    """A ledger of keys in one SQLite file, shared safely by threads and processes.

    Each thread gets its own connection; the database, not a lock in this process, decides
    which caller wins a key. Use as a context manager, or call ``close``.

    ``fsync_attempts=False`` stops syncing the ATTEMPTING record to disk before the action
    runs: it then survives a process crash but not an OS crash or power loss, after which
    the action can run a second time.

    ``lease`` is how many seconds an attempt's claim stays alive without news from its
    owner; a heartbeat renews it every ``heartbeat`` seconds (a third of the lease by
    default) while the action runs. ``host`` names this machine in owner records (the
    hostname by default); processes on one machine must agree on it.

    Raises:
        ValueError: the lease is not positive, or the heartbeat not shorter than the lease.

    """

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
        heartbeat = lease / 3 if heartbeat is None else heartbeat
        if not 0 < heartbeat < lease:
            raise ValueError(
                f"need 0 < heartbeat < lease, got heartbeat={heartbeat} and lease={lease}: "
                "the heartbeat must renew the lease before it runs out"
            )
        self._path = Path(path)
        self._fsync_attempts = fsync_attempts
        self.lease = lease
        self.heartbeat = heartbeat
        self._host = host
        self._pid = os.getpid()
        self._held: dict[tuple[str, str], None] = {}
        self._beat: threading.Thread | None = None
        self._stop = threading.Event()
        self._local = threading.local()
        self._connections: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._closed = False
        self._create_file()
        self._probe()
        self._connection()

    @property
    def path(self) -> Path:
        """The ledger file."""
        return self._path

    def __repr__(self) -> str:
        return f"Store({str(self._path)!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def owner(self) -> Owner:
        """The calling process, as named in the records of the attempts it claims."""
        return this_process(self._host)

    def owner_gone(self, owner: Owner) -> bool:
        """Whether ``owner`` provably no longer runs, as seen from this process."""
        return is_gone(owner, self.owner)

    def close(self) -> None:
        """Close the store; later use raises ``StoreError``.

        Connections of this thread and of threads that have ended are closed now; a
        connection of another running thread is closed when that thread ends, since closing
        it under a statement it is running would crash the process.
        """
        self._stop_heartbeat(wait=self.heartbeat + 1.0)
        with self._lock:
            self._closed = True
            connections = list(self._connections)
            self._connections.clear()
        for connection in connections:
            if connection.thread is threading.current_thread() or not connection.thread.is_alive():
                connection.close()

    def get(self, key: str) -> Record | None:
        """Return the record of ``key``, or ``None`` if it was never claimed."""
        with self._errors():
            row = (
                self._connection()
                .execute(f"SELECT {_COLUMNS} FROM calls WHERE key = ?", (key,))  # noqa: S608 - constant columns
                .fetchone()
            )
        return None if row is None else _record(row)

    def list_in_doubt(self) -> list[Record]:
        """Return every key that needs a decision, oldest first.

        That is every IN_DOUBT key, and every ATTEMPTING key whose owner is provably gone or
        whose lease ran out. Keys whose owner is alive and running are not listed.
        """
        with self._errors():
            rows = (
                self._connection()
                .execute(
                    f"SELECT {_COLUMNS} FROM calls WHERE state IN ({_UNSETTLED_SQL}) "  # noqa: S608 - constants
                    "ORDER BY attempted_at, key"
                )
                .fetchall()
            )
        now = utc_now()
        records = [_record(row) for row in rows]
        return [
            record
            for record in records
            if record.state is State.IN_DOUBT
            or record.lease_until <= now
            or self.owner_gone(record.owner)
        ]

    def resolve(
        self,
        key: str,
        *,
        happened: bool,
        result: object = _NO_RESULT,
        attempt_id: str | None = None,
    ) -> Record:
        """Close an in-doubt (IN_DOUBT or ATTEMPTING) key after checking what really happened.

        ``happened=True`` records it as SUCCEEDED with ``result``, given as the tool would
        have returned it (``None`` for a tool that returns ``None``); later calls replay it,
        rebuilt as the tool's return type. ``happened=False`` releases it: the next call
        runs the action.

        Pass ``attempt_id`` (from the ``Record`` you checked) so the decision applies only to
        that attempt: if the key was meanwhile released and claimed by a new caller, a
        repeated or stale resolve then fails instead of releasing the new, running attempt.

        Raises:
            SafeError: the key is unknown, not in doubt, or not at ``attempt_id`` any more.
            ValueError: ``result`` is missing with ``happened=True``, given with
                ``happened=False``, or cannot be stored.

        """
        if happened and result is _NO_RESULT:
            raise ValueError(
                "happened=True needs result=, the value the tool would have returned "
                "(result=None for a tool that returns None)"
            )
        if not happened and result is not _NO_RESULT:
            raise ValueError("a result makes sense only with happened=True")
        finished = _time(utc_now())
        if happened:
            change = "state = ?, result = ?, finished_at = ?, doubt_reason = NULL"
            params: tuple[object, ...] = (
                State.SUCCEEDED.value,
                json.dumps(encode_untyped(result)),
                finished,
            )
        else:
            change = "state = ?, finished_at = ?, doubt_reason = NULL"
            params = (State.RELEASED.value, finished)
        with self._errors():
            changed = self._write(
                f"UPDATE calls SET {change} WHERE key = ? AND state IN ({_UNSETTLED_SQL}) "  # noqa: S608 - constants
                "AND attempt_id = coalesce(?, attempt_id)",
                (*params, key, attempt_id),
                sync=True,
            )
        record = self.get(key)
        if changed and record is not None:
            return record
        unsettled = check_resolvable(key, record)
        raise SafeError(
            f"cannot resolve key {key!r}: attempt {attempt_id} is over, the key is now at "
            f"attempt {unsettled.attempt_id}; check that attempt, then resolve it"
        )

    def claim(
        self, key: str, tool: str, args_hash: str, *, attempt_id: str, previous: Record | None
    ) -> Record | None:
        """Durably record ``key`` as ATTEMPTING for this attempt, if nobody else did first.

        ``previous`` is the record the decision was made on: ``None`` (insert a row; the
        primary key picks one winner) or a RELEASED row (taken over only if still RELEASED).
        Returns the claimed record, or ``None`` if another caller got there first.
        """
        now = utc_now()
        owner = self.owner
        lease_until = now + timedelta(seconds=self.lease)
        attempt = (
            State.ATTEMPTING.value,
            attempt_id,
            _time(now),
            owner.host,
            owner.boot_id,
            owner.pid,
            owner.started,
            _time(lease_until),
        )
        with self._errors():
            if previous is None:
                try:
                    self._write(
                        "INSERT INTO calls (key, tool, args_hash, state, attempt_id, "
                        "attempted_at, owner_host, owner_boot, owner_pid, owner_started, "
                        "lease_until, schema_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (key, tool, args_hash, *attempt, SCHEMA_VERSION),
                        sync=True,
                    )
                except sqlite3.IntegrityError:
                    return None
            elif not self._write(
                "UPDATE calls SET state = ?, attempt_id = ?, attempted_at = ?, owner_host = ?, "
                "owner_boot = ?, owner_pid = ?, owner_started = ?, lease_until = ?, "
                "finished_at = NULL, result = NULL, error_type = NULL, error_message = NULL, "
                "doubt_reason = NULL WHERE key = ? AND state = ? AND attempt_id = ?",
                (*attempt, key, State.RELEASED.value, previous.attempt_id),
                sync=True,
            ):
                return None
        return Record(
            key=key,
            tool=tool,
            state=State.ATTEMPTING,
            args_hash=args_hash,
            attempt_id=attempt_id,
            attempted_at=now,
            owner=owner,
            lease_until=lease_until,
        )

    @contextlib.contextmanager
    def hold(self, record: Record) -> Iterator[None]:
        """Keep renewing the lease of this process's attempt ``record`` while the block runs."""
        self._after_fork()
        with self._lock:
            self._held[record.key, record.attempt_id] = None
            if self._beat is None:
                self._stop = threading.Event()
                self._beat = threading.Thread(
                    target=self._renew_leases,
                    args=(self._stop,),
                    name="safeact-heartbeat",
                    daemon=True,
                )
                self._beat.start()
                _BEATING.add(self)
        try:
            yield
        finally:
            with self._lock:
                self._held.pop((record.key, record.attempt_id), None)

    def _stop_heartbeat(self, wait: float = 0.0) -> None:
        """Stop the heartbeat thread; wait up to ``wait`` seconds for it to end."""
        with self._lock:
            beat, self._beat = self._beat, None
            self._stop.set()
        if beat is not None and beat is not threading.current_thread():
            beat.join(wait)

    def _renew_leases(self, stop: threading.Event) -> None:
        """Heartbeat thread: renew the leases of the attempts held, until told to stop."""
        try:
            self._beat_until(stop)
        finally:
            # Close this thread's connection here and now, not whenever (and in whatever
            # state) the interpreter gets round to the thread's storage.
            held: _Connection | None = getattr(self._local, "held", None)
            if held is not None:
                del self._local.held
                held.close()

    def _beat_until(self, stop: threading.Event) -> None:
        while not stop.wait(self.heartbeat):
            with self._lock:
                held = list(self._held)
                if not held:
                    self._beat = None
                    return
            until = _time(utc_now() + timedelta(seconds=self.lease))
            for key, attempt_id in held:
                try:
                    self.renew(key, attempt_id, until)
                except StoreError:
                    logger.exception("could not renew the lease of key %r", key)

    def renew(self, key: str, attempt_id: str, lease_until: str | None) -> None:
        """Move the lease of an ATTEMPTING attempt to ``lease_until``."""
        with self._errors():
            self._write(
                "UPDATE calls SET lease_until = ? WHERE key = ? AND attempt_id = ? AND state = ?",
                (lease_until, key, attempt_id, State.ATTEMPTING.value),
                sync=False,
            )

    def finish(  # noqa: PLR0913 - one parameter per column of an outcome
        self,
        key: str,
        attempt_id: str,
        *,
        state: State,
        result: JSON = None,
        error_type: str | None = None,
        error_message: str | None = None,
        doubt_reason: DoubtReason | None = None,
    ) -> bool:
        """Record how this attempt ended; the owner's word replaces whatever its row says.

        If the row belongs to a newer attempt (the key was released and claimed again
        meanwhile), the completion is kept in ``late_completions`` instead, for an operator
        to see the duplicate, and False is returned.
        """
        stored = None if result is None else json.dumps(result)
        finished = _time(utc_now())
        outcome = (state.value, stored, error_type, error_message, finished)
        reason = None if doubt_reason is None else doubt_reason.value
        with self._errors():
            if self._write(
                "UPDATE calls SET state = ?, result = ?, error_type = ?, error_message = ?, "
                "finished_at = ?, doubt_reason = ? WHERE key = ? AND attempt_id = ?",
                (*outcome, reason, key, attempt_id),
                sync=False,
            ):
                return True
            self._write(
                "INSERT OR REPLACE INTO late_completions (key, attempt_id, state, result, "
                "error_type, error_message, finished_at, schema_version) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (key, attempt_id, *outcome, SCHEMA_VERSION),
                sync=False,
            )
        return False

    def late_completions(self, key: str | None = None) -> list[Record]:
        """Return completions that arrived after their key had moved on to a new attempt.

        Each is the late attempt's outcome (state, result or error, when), keyed by its
        ``attempt_id``; the key's own row is the newer attempt's. Such a completion means
        the action ran under a released key while its first attempt was still running.
        """
        with self._errors():
            rows = (
                self._connection()
                .execute(
                    "SELECT l.key, l.attempt_id, l.state, l.result, l.error_type, "
                    "l.error_message, l.finished_at FROM late_completions l "
                    "WHERE coalesce(?, l.key) = l.key ORDER BY l.finished_at, l.key",
                    (key,),
                )
                .fetchall()
            )
        late = []
        for late_key, attempt_id, state, result, error_type, error_message, finished in rows:
            current = self.get(late_key)
            if current is None:
                continue
            late.append(
                attrs.evolve(
                    current,
                    attempt_id=attempt_id,
                    state=State(state),
                    result=None if result is None else json.loads(result),
                    error_type=error_type,
                    error_message=error_message,
                    finished_at=datetime.fromisoformat(finished),
                    doubt_reason=None,
                )
            )
        return late

    def mark_in_doubt(self, key: str, attempt_id: str, reason: DoubtReason) -> None:
        """Turn this attempt's ATTEMPTING row into IN_DOUBT; a finished row is left alone."""
        with self._errors():
            self._write(
                "UPDATE calls SET state = ?, doubt_reason = ? "
                "WHERE key = ? AND attempt_id = ? AND state = ?",
                (State.IN_DOUBT.value, reason.value, key, attempt_id, State.ATTEMPTING.value),
                sync=False,
            )

    def get_saga(self, saga_id: str) -> SagaRecord | None:
        """Return the progress of saga ``saga_id``, or ``None`` if it never started."""
        with self._errors():
            connection = self._connection()
            row = connection.execute(
                "SELECT saga_id, state, started_at, updated_at, aborted_step, abort_reason "
                "FROM sagas WHERE saga_id = ?",
                (saga_id,),
            ).fetchone()
            steps = connection.execute(
                "SELECT key, compensation FROM saga_steps WHERE saga_id = ? ORDER BY step_index",
                (saga_id,),
            ).fetchall()
        return None if row is None else _saga_record(row, steps)

    def list_sagas(self, state: SagaState | None = None) -> list[SagaRecord]:
        """Return every saga, or those in ``state``; stuck rollbacks (COMPENSATING) first."""
        with self._errors():
            rows = (
                self._connection()
                .execute(
                    "SELECT saga_id FROM sagas WHERE coalesce(?, state) = state "
                    "ORDER BY state != ?, started_at, saga_id",
                    (None if state is None else state.value, SagaState.COMPENSATING.value),
                )
                .fetchall()
            )
        return [saga for (saga_id,) in rows if (saga := self.get_saga(saga_id)) is not None]

    def begin_saga(self, saga_id: str) -> SagaRecord:
        """Record saga ``saga_id`` as RUNNING unless it exists; return its progress."""
        now = _time(utc_now())
        with self._errors():
            self._write(
                "INSERT OR IGNORE INTO sagas (saga_id, state, started_at, updated_at, "
                "schema_version) VALUES (?, ?, ?, ?, ?)",
                (saga_id, SagaState.RUNNING.value, now, now, SCHEMA_VERSION),
                sync=False,
            )
        saga = self.get_saga(saga_id)
        if saga is None:
            raise StoreError(f"{self._path}: saga {saga_id!r} vanished while starting")
        return saga

    def record_saga_step(
        self, saga_id: str, index: int, name: str, key: str, compensation: str | None
    ) -> str:
        """Record that step ``index`` of the saga is ``key``, unless it was recorded already.

        ``compensation`` names the tool that undoes it (None: nothing does).

        Returns the key recorded for that index, which differs from ``key`` if an earlier run
        of the saga took other steps.
        """
        with self._errors():
            self._write(
                "INSERT OR IGNORE INTO saga_steps (saga_id, step_index, name, key, compensation) "
                "VALUES (?, ?, ?, ?, ?)",
                (saga_id, index, name, key, compensation),
                sync=False,
            )
            (recorded,) = (
                self._connection()
                .execute(
                    "SELECT key FROM saga_steps WHERE saga_id = ? AND step_index = ?",
                    (saga_id, index),
                )
                .fetchone()
            )
        return str(recorded)

    def move_saga(
        self,
        saga_id: str,
        state: SagaState,
        *,
        aborted_step: str | None = None,
        abort_reason: str | None = None,
    ) -> None:
        """Set the saga's state; the abort's step and reason are kept once recorded."""
        with self._errors():
            self._write(
                "UPDATE sagas SET state = ?, updated_at = ?, "
                "aborted_step = coalesce(aborted_step, ?), "
                "abort_reason = coalesce(abort_reason, ?) WHERE saga_id = ?",
                (state.value, _time(utc_now()), aborted_step, abort_reason, saga_id),
                sync=False,
            )

    def _write(self, sql: str, params: tuple[object, ...], *, sync: bool) -> bool:
        """Run one statement as its own transaction; return whether it changed a row.

        ``sync`` commits with ``synchronous=FULL`` (the WAL is fsynced before the commit
        returns), otherwise ``NORMAL`` (durable across a process crash; synced at the next
        FULL commit or checkpoint).
        """
        connection = self._connection()
        full = sync and self._fsync_attempts
        if full:
            connection.execute("PRAGMA synchronous = FULL")
        try:
            return connection.execute(sql, params).rowcount > 0
        finally:
            if full:
                connection.execute("PRAGMA synchronous = NORMAL")

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"{self._path}: {exc}") from exc

    def _create_file(self) -> None:
        """Create the ledger file with owner-only permissions, if it does not exist."""
        try:
            fd = os.open(self._path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return
        except (OSError, ValueError) as exc:
            raise StoreError(f"{self._path}: cannot create the ledger: {exc}") from exc
        os.close(fd)

    def _after_fork(self) -> None:
        """In a forked child, forget the parent's attempts, heartbeat and locks.

        The child copied them; renewing the parent's leases from here would keep a frozen
        or dead parent looking alive, and a lock held by a parent thread at the fork would
        never be released here.
        """
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._lock = threading.Lock()
            self._held = {}
            self._beat = None
            self._stop = threading.Event()
            self._connections = weakref.WeakSet()

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
        with self._errors():
            connection = sqlite3.connect(
                self._path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT
            )
        try:
            with self._errors():
                _prepare(connection, self._path)
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

    def _probe(self) -> None:
        """Check the file on a read-only connection before any writable one touches it.

        Closing a writable connection checkpoints the WAL into the file, which would change
        a foreign database even though we refuse it.
        """
        uri = f"{self._path.resolve().as_uri()}?mode=ro"
        with self._errors():
            probe = sqlite3.connect(uri, uri=True, isolation_level=None)
            try:
                _is_current(probe, self._path)
            finally:
                probe.close()


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

    def close(self) -> None:
        self._finalizer()


_BEATING: weakref.WeakSet[Store] = weakref.WeakSet()
"""Stores that have started a heartbeat, so that exit can stop them first."""


@atexit.register
def _stop_heartbeats() -> None:
    """Stop every heartbeat before the interpreter tears itself down.

    Runs after the non-daemon threads have ended; a daemon thread's action still running then
    loses its heartbeat, as it would lose its process a moment later.
    """
    for store in list(_BEATING):
        store._stop_heartbeat(wait=1.0)  # noqa: SLF001 - the module's own class


def _prepare(connection: sqlite3.Connection, path: Path) -> None:
    """Check the file is a safeact ledger this version can use, creating the schema if empty.

    Nothing is written to a file that fails the check.
    """
    connection.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
    if not _is_current(connection, path):
        # Two processes may open a new file at once: the write lock makes one create it.
        connection.execute("BEGIN IMMEDIATE")
        try:
            if not _is_current(connection, path):
                for statement in _SCHEMA:
                    connection.execute(statement)
            connection.execute("COMMIT")
        finally:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
    _use_wal(connection, path)
    connection.execute("PRAGMA synchronous = NORMAL")


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


def _is_current(connection: sqlite3.Connection, path: Path) -> bool:
    """Return True for a ledger of this schema, False for an empty database.

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
        return True
    if application_id != 0 or version != 0 or tables:
        raise StoreError(
            f"{path}: this is a SQLite database but not a safeact ledger; "
            "point safeact at a new file. The file was not changed"
        )
    return False


_SagaRow: TypeAlias = tuple[str, str, str, str, str | None, str | None]


def _saga_record(row: _SagaRow, steps: list[tuple[str, str | None]]) -> SagaRecord:
    saga_id, state, started_at, updated_at, aborted_step, abort_reason = row
    return SagaRecord(
        saga_id=saga_id,
        state=SagaState(state),
        started_at=datetime.fromisoformat(started_at),
        updated_at=datetime.fromisoformat(updated_at),
        steps=tuple(key for key, _ in steps),
        compensations=tuple(compensation for _, compensation in steps),
        aborted_step=aborted_step,
        abort_reason=abort_reason,
    )


_Row: TypeAlias = tuple[
    str,
    str,
    str,
    str,
    str,
    str,
    str,
    str,
    int,
    int,
    str,
    str | None,
    str | None,
    str | None,
    str | None,
    str | None,
]


def _record(row: _Row) -> Record:
    (
        key,
        tool,
        state,
        args_hash,
        attempt_id,
        attempted_at,
        owner_host,
        owner_boot,
        owner_pid,
        owner_started,
        lease_until,
        finished_at,
        result,
        error_type,
        error_message,
        doubt_reason,
    ) = row
    return Record(
        key=key,
        tool=tool,
        state=State(state),
        args_hash=args_hash,
        attempt_id=attempt_id,
        attempted_at=datetime.fromisoformat(attempted_at),
        owner=Owner(owner_host, owner_boot, owner_pid, owner_started),
        lease_until=datetime.fromisoformat(lease_until),
        finished_at=None if finished_at is None else datetime.fromisoformat(finished_at),
        result=None if result is None else json.loads(result),
        error_type=error_type,
        error_message=error_message,
        doubt_reason=None if doubt_reason is None else DoubtReason(doubt_reason),
    )
