"""What every job of the store builds on: settings, the owner, a backend's hooks, row locks.

``Ledger`` is the base of ``Store``'s jobs (``_transitions``, ``_saga_rows``, ``_audit``,
``_listing``, ``_retention``, ``_liveness``); each is a class of its own module, and ``Store``
joins them. A backend (``SqliteStore``, ``PostgresStore``) supplies the hooks at the end:
connections, transactions and their durability, and how its driver's errors read. Every
statement is written once, in the SQL both databases speak, with ``?`` placeholders; a write
first locks the row it decides on (``FOR UPDATE`` where the database needs it), so the
decision and the change are made on the same version of the row.
"""

from __future__ import annotations

import contextlib
import os
import threading
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from safeact._history import Event, Why
from safeact._owner import Owner, is_gone, this_process
from safeact._protocol import (
    DoubtReason,
    Record,
    SagaState,
    State,
    abandonment,
    as_seen,
    utc_now,
)
from safeact._replay_only import in_force as replay_only_in_force
from safeact._rows import read_record
from safeact._settings import optional_text, seconds
from safeact.exceptions import SafeError, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

__all__ = ["COLUMNS", "LEASE", "Cursor", "Executor", "Ledger"]


class Cursor(Protocol):
    """What a backend's ``execute`` returns (sqlite3's and psycopg's cursors both are)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Executor(Protocol):
    """What a backend's transaction gives the logic: a way to run one statement."""

    def execute(self, sql: str, parameters: tuple[object, ...] = ..., /) -> Cursor: ...


COLUMNS = (
    "key, tool, state, args_hash, attempt_id, attempted_at, owner_host, owner_boot, owner_pid, "
    "owner_started, owner_machine, owner_pidns, lease_until, finished_at, result, error_type, "
    "error_message, doubt_reason, owner_group, arguments"
)
"""The columns of ``calls`` that ``read_record`` reads, in its order."""

_T = TypeVar("_T")

KEY_AT, ATTEMPTED_AT = 0, 5
"""Where ``COLUMNS`` has the key and the attempt's time: listings are ordered by both."""

READ_BATCH = 1000
"""Rows per batch of a listing printed as it is read (``Ledger._read_stream``)."""

LEASE = 30.0
"""Default seconds an owner's claim stays alive without a heartbeat."""


class Ledger:
    """The settings and per-process state a store's jobs share, and the backend's hooks.

    Raises:
        ValueError: the lease is not positive, or the heartbeat not shorter than the lease.

    """

    _FOR_UPDATE: ClassVar[str] = ""
    """What a SELECT needs to lock the rows it reads until the transaction ends."""

    _ONE_WRITER: ClassVar[bool] = False
    """Whether the process's writes queue for one lock (SQLite's): an async caller's work
    then runs in the store's own ledger thread, in batches (``safeact._ledger_work``)."""

    def __init__(
        self, *, lease: float = LEASE, heartbeat: float | None = None, host: str | None = None
    ) -> None:
        """Check the settings; the backend opens its database."""
        lease = seconds("lease", lease)
        heartbeat = lease / 3 if heartbeat is None else seconds("heartbeat", heartbeat)
        optional_text("host", host)
        if not 0 < heartbeat < lease:
            raise ValueError(
                f"need 0 < heartbeat < lease, got heartbeat={heartbeat} and lease={lease}: "
                "the heartbeat must renew the lease before it runs out"
            )
        self.lease = lease
        self.heartbeat = heartbeat
        self._host = host
        self._pid = os.getpid()
        # The attempts this process holds, and the heartbeat renewing their leases (_liveness).
        self._held: dict[tuple[str, str], None] = {}
        self._beat: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._closed = False
        # The description of each tool's results this store has written (``_claim``).
        self._shapes: dict[str, str] = {}
        # Opened while replay-only is in force: read-only for its life (``_check_writable``).
        self._read_only = replay_only_in_force()

    @property
    def location(self) -> str:
        """Where the ledger is: a file path, or a PostgreSQL URL without its password."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"

    @property
    def owner(self) -> Owner:
        """The calling process, as named in the records of the attempts it claims."""
        return this_process(self._host)

    def get(self, key: str) -> Record | None:
        """Return the record of ``key``, or ``None`` if it was never claimed.

        An attempt whose owner is gone, out of lease or out of session reads as IN_DOUBT,
        with its reason, even before a caller has marked it so (``as_seen``): the same
        answer as every listing and count.

        Raises:
            CorruptRecordError: the key's row holds what safeact never writes (it was changed
                outside safeact); nothing may run under the key until it is mended.

        """
        record = self._stored(key)
        return None if record is None else self._seen(record, utc_now())

    def _stored(self, key: str) -> Record | None:
        """The row of ``key`` as written, for the protocol's decisions (``get`` is the view)."""
        rows = self._read(f"SELECT {COLUMNS} FROM calls WHERE key = ?", (key,))  # noqa: S608 - constant columns
        return read_record(self.location, rows[0]) if rows else None

    def _owner_gone(self, record: Record) -> bool:
        """Whether the owner of ``record``'s attempt provably no longer runs, seen from here.

        Only an owner of this machine can be proven gone here (see ``is_gone``); for an
        owner elsewhere this is False, and proof comes from a process of its machine, which
        records it in the key's row when it looks at the key.
        """
        return is_gone(record.owner, self.owner, alive_until=record.lease_until)

    def _owner_lost(self, owner: Owner) -> bool:  # noqa: ARG002 - a backend may know more
        """Whether there is a sign that ``owner`` stopped: suspicion, never proof.

        A PostgreSQL ledger finds an owner's liveness session ended; SQLite has no such sign.
        """
        return False

    def _abandonment(self, record: Record, now: datetime) -> DoubtReason | None:
        """Why ``record``'s attempt is in doubt now, as this process sees its owner, if it is."""
        return abandonment(
            record, now=now, owner_gone=self._owner_gone, owner_lost=self._owner_lost
        )

    def _seen(self, record: Record, now: datetime) -> Record:
        """``record`` as readers report it now (``as_seen``)."""
        return as_seen(record, self._abandonment(record, now))

    def _reader(self, now: datetime) -> Callable[[tuple[object, ...]], Record]:
        """A reader of rows of ``calls`` as readers report them ``now`` (listings, the inbox).

        Each owner's fate is judged once per reader: the keys one crashed process left are
        many rows but one question (on PostgreSQL, one query of its liveness session).
        """
        gone: dict[tuple[Owner, datetime | None], bool] = {}
        lost: dict[Owner, bool] = {}

        def owner_gone(record: Record) -> bool:
            # The lease counts in the proof only for an owner of another boot (``is_gone``).
            this_boot = record.owner.boot_id == self.owner.boot_id
            asked = (record.owner, None if this_boot else record.lease_until)
            if asked not in gone:
                gone[asked] = self._owner_gone(record)
            return gone[asked]

        def owner_lost(owner: Owner) -> bool:
            if owner not in lost:
                lost[owner] = self._owner_lost(owner)
            return lost[owner]

        def read(row: tuple[object, ...]) -> Record:
            record = read_record(self.location, row)
            return as_seen(
                record, abandonment(record, now=now, owner_gone=owner_gone, owner_lost=owner_lost)
            )

        return read

    def _now(self, key: str) -> Record:
        """``key``'s record just after a decision wrote it."""
        record = self._stored(key)
        if record is None:  # pragma: no cover - keys are only removed by purge, never unsettled
            raise SafeError(f"key {key!r} vanished")
        return record

    def _new_event(  # noqa: PLR0913 - one parameter per field of an event
        self,
        subject: str,
        to_state: State | SagaState | None,
        why: Why,
        *,
        note: str | None = None,
        operator: bool = False,
        from_state: State | SagaState | None = None,
        attempt_id: str | None = None,
    ) -> Event:
        """An event of this process (or, with ``operator``, of an operator here), now."""
        owner = self.owner
        return Event(
            subject=subject,
            at=utc_now(),
            why=why,
            by="operator" if operator else "process",
            host=owner.host,
            pid=owner.pid,
            from_state=from_state,
            to_state=to_state,
            attempt_id=attempt_id,
            note=note,
        )

    def _locked_record(self, db: Executor, key: str) -> Record | None:
        """Lock ``key``'s row for this transaction; return it."""
        row = db.execute(
            f"SELECT {COLUMNS} FROM calls WHERE key = ?{self._FOR_UPDATE}",  # noqa: S608 - constants
            (key,),
        ).fetchone()
        return None if row is None else read_record(self.location, row)

    def _locked_row(self, db: Executor, key: str) -> tuple[str, str] | None:
        """Lock ``key``'s row for this transaction; return its (state, attempt_id)."""
        row = db.execute(
            f"SELECT state, attempt_id FROM calls WHERE key = ?{self._FOR_UPDATE}",  # noqa: S608 - constants
            (key,),
        ).fetchone()
        return None if row is None else (str(row[0]), str(row[1]))

    def _after_fork(self) -> None:
        """In a forked child, forget the parent's attempts, heartbeat, locks and connections.

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
            self._forget_connections()

    def _check_writable(self) -> None:
        """Refuse a write to a store opened read-only; each backend's ``_transaction`` asks.

        Raises:
            StoreError: the store was opened while replay-only was in force.

        """
        if self._read_only:
            raise StoreError(
                f"{self.location}: this store was opened read-only, under replay-only "
                "(safeact.replay_only(), or SAFEACT_REPLAY_ONLY in the environment), and "
                "writes nothing; nothing was written. Open the ledger again outside "
                "replay-only to write to it"
            )

    # What a backend supplies.

    def _finish_attempting(self, db: Executor, outcome: tuple[object, ...], event: Event) -> Cursor:
        """Write an owner's outcome on its ATTEMPTING row, and ``event`` with it, or neither.

        ``outcome`` is the row's new state, result, error type, error message, finished at
        and doubt reason; ``event`` goes from ATTEMPTING at the attempt ``event.attempt_id``
        of the key ``event.subject``. Both are written only while that row is ATTEMPTING at
        that attempt. The cursor's row count is 1 if they were, 0 if nothing was; it may be
        read after the commit, so that nothing waits on the server before it.
        """
        raise NotImplementedError

    def _transaction(self, *, sync: bool) -> contextlib.AbstractContextManager[Executor]:
        """One write transaction, committed at the end of the block, rolled back if it raises.

        ``sync``: the commit must be on disk before it returns (the ATTEMPTING claim, a
        resolve); otherwise it must survive a crash of this process.
        """
        raise NotImplementedError

    def _read(self, sql: str, parameters: tuple[object, ...]) -> list[Any]:
        """Run one query outside any write transaction; return its rows."""
        raise NotImplementedError

    def _read_stream(
        self,
        sql: str,
        parameters: tuple[object, ...],
        batch: int,
        read: Callable[[list[Any]], _T],
    ) -> Generator[_T, None, None]:
        """The rows of one query, ``batch`` at a time, each batch as ``read`` reads it.

        One statement, so one snapshot and one sort however many rows: memory holds one
        batch (the database sorts on disk what does not fit). The statement stays open
        until the last batch is taken or the generator is closed (close it before the
        store, with ``contextlib.closing``): on SQLite a read snapshot (writers go on; the
        WAL is checkpointed past it afterwards), on PostgreSQL a cursor in a transaction.
        """
        raise NotImplementedError

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        """Turn the driver's errors into ``StoreError`` naming the ledger."""
        raise NotImplementedError

    def _not_on_disk(self, failure: OSError) -> StoreError:
        """The error of a commit whose fsync failed (``failure``, from the group commit)."""
        return StoreError(f"{self.location}: a commit may not be on disk: {failure}")

    def _check_liveness(self) -> None:
        """Heartbeat: make sure other hosts can still see this process alive, or say why not."""

    def _reset_connection(self) -> None:
        """Drop this thread's connection, so the next statement runs on a fresh one."""

    def _close_connections(self) -> None:
        """Close what can be closed now (``close`` has marked the store closed)."""

    def _forget_connections(self) -> None:
        """In a forked child: drop the parent's connections without using them."""
