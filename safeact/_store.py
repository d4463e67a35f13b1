"""The ledger's logic, once for every database: keys, history, sagas, liveness, retention.

``Store`` holds everything that decides what is written; a backend (``SqliteStore``,
``PostgresStore``) supplies connections, transactions and its schema. Every statement here
is written once, in the SQL both databases speak, with ``?`` placeholders; a write first
locks the row it decides on (``FOR UPDATE`` where the database needs it), so the decision
and the change are made on the same version of the row.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import threading
import weakref
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

import attrs

from safeact._codec import encode_untyped
from safeact._history import DECIDED, Event, Why, saga_why, why_finished, why_in_doubt
from safeact._outcome import in_doubt_from
from safeact._owner import Owner, is_gone, this_process
from safeact._protocol import (
    UNSETTLED,
    DoubtReason,
    Record,
    Refusal,
    SagaRecord,
    SagaState,
    State,
    abandonment,
    amend_refusal,
    check_resolvable,
    checkpoint,
    may_mark,
    release_refusal,
)
from safeact._reconcile import Probe, reconcile_key
from safeact._rows import (
    Reading,
    each,
    event_values,
    member,
    read_event,
    read_late,
    read_record,
    read_saga,
    readable,
    text_of,
    time_text,
)
from safeact._schema import SCHEMA_VERSION, UNSETTLED_SQL
from safeact.exceptions import CorruptRecordError, NotProvenError, SafeError, StoreError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping
    from types import TracebackType

    from safeact._protocol import JSON

__all__ = [
    "NO_RESULT",
    "Cursor",
    "Executor",
    "Purged",
    "Store",
    "utc_now",
]

logger = logging.getLogger("safeact")


class Cursor(Protocol):
    """What a backend's ``execute`` returns (sqlite3's and psycopg's cursors both are)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Executor(Protocol):
    """What a backend's transaction gives the logic: a way to run one statement."""

    def execute(self, sql: str, parameters: tuple[object, ...] = ..., /) -> Cursor: ...


_COLUMNS = (
    "key, tool, state, args_hash, attempt_id, attempted_at, owner_host, owner_boot, owner_pid, "
    "owner_started, owner_machine, owner_pidns, lease_until, finished_at, result, error_type, "
    "error_message, doubt_reason"
)
LEASE = 30.0
"""Default seconds an owner's claim stays alive without a heartbeat."""


NO_RESULT: Any = object()
"""``resolve``'s default result: none given (``None`` is a result)."""

_OWNER_WRITES = frozenset({State.ATTEMPTING, State.IN_DOUBT, State.RELEASED})
"""Where an owner's completion replaces its attempt's row: nothing is replayed from them."""

_LOG = (
    "INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, "
    "by_host, by_pid, why, note)"
)
_PLACES = ", ".join("?" * 11)


@attrs.frozen
class Purged:
    """What a purge removed (or, in a dry run, would remove): keys and saga ids."""

    keys: tuple[str, ...]
    sagas: tuple[str, ...]


def utc_now() -> datetime:
    """Return the current time, timezone-aware UTC."""
    return datetime.now(UTC)


def _check_tool(key: str, record: Record, tool: str | None) -> None:
    """Refuse a tool's decision about another tool's key (its result would not fit).

    Raises:
        SafeError: ``tool`` is given and is not ``record``'s tool.

    """
    if tool is not None and record.tool != tool:
        raise SafeError(
            f"key {key!r} belongs to tool {record.tool}, not {tool}: decide it with that "
            "tool, or with Store.resolve / safeact resolve"
        )


class Store:
    """A ledger of keys, shared safely by threads, processes and (on PostgreSQL) hosts.

    The database, never a lock in this process, decides which caller wins a key. Use as a
    context manager, or call ``close``. Open one with ``get_store``.

    ``lease`` is how many seconds an attempt's claim stays alive without news from its
    owner; a heartbeat renews it every ``heartbeat`` seconds (a third of the lease by
    default) while the action runs. ``host`` names this machine in owner records (the
    hostname by default); processes on one machine must agree on it, machines must not.

    Raises:
        ValueError: the lease is not positive, or the heartbeat not shorter than the lease.

    """

    _FOR_UPDATE: ClassVar[str] = ""
    """What a SELECT needs to lock the rows it reads until the transaction ends."""

    def __init__(
        self, *, lease: float = LEASE, heartbeat: float | None = None, host: str | None = None
    ) -> None:
        """Check the settings; the backend opens its database."""
        heartbeat = lease / 3 if heartbeat is None else heartbeat
        if not 0 < heartbeat < lease:
            raise ValueError(
                f"need 0 < heartbeat < lease, got heartbeat={heartbeat} and lease={lease}: "
                "the heartbeat must renew the lease before it runs out"
            )
        self.lease = lease
        self.heartbeat = heartbeat
        self._host = host
        self._pid = os.getpid()
        self._held: dict[tuple[str, str], None] = {}
        self._beat: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._closed = False

    @property
    def location(self) -> str:
        """Where the ledger is: a file path, or a PostgreSQL URL without its password."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"

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

    def _owner_gone(self, owner: Owner) -> bool:
        """Whether ``owner`` provably no longer runs, as seen from this process: proof.

        Only an owner on this host can be proven gone here (see ``Owner``); for an owner on
        another host this is False, and proof comes from a process on that host, which
        records it in the key's row when it looks at the key.
        """
        return is_gone(owner, self.owner)

    def _owner_lost(self, owner: Owner) -> bool:  # noqa: ARG002 - a backend may know more
        """Whether there is a sign that ``owner`` stopped: suspicion, never proof.

        A PostgreSQL ledger finds an owner's liveness session ended; SQLite has no such sign.
        """
        return False

    def close(self) -> None:
        """Close the store; later use raises ``StoreError``."""
        self._stop_heartbeat(wait=self.heartbeat + 1.0)
        with self._lock:
            self._closed = True
        self._close_connections()

    def get(self, key: str) -> Record | None:
        """Return the record of ``key``, or ``None`` if it was never claimed.

        Raises:
            CorruptRecordError: the key's row holds what safeact never writes (it was changed
                outside safeact); nothing may run under the key until it is mended.

        """
        rows = self._read(f"SELECT {_COLUMNS} FROM calls WHERE key = ?", (key,))  # noqa: S608 - constant columns
        return read_record(self.location, rows[0]) if rows else None

    def list_in_doubt(self) -> list[Record]:
        """Return every key that needs a decision, oldest first.

        That is every IN_DOUBT key, and every ATTEMPTING key whose owner is provably gone,
        whose lease ran out or whose liveness session was lost. Keys whose owner is alive and
        running are not listed.
        """
        now = utc_now()
        return [
            record
            for record in self.records(unsettled=True)
            if self._abandonment(record, now) is not None
        ]

    def _abandonment(self, record: Record, now: datetime) -> DoubtReason | None:
        return abandonment(
            record, now=now, owner_gone=self._owner_gone, owner_lost=self._owner_lost
        )

    def records(
        self,
        *,
        state: State | None = None,
        tool: str | None = None,
        since: datetime | None = None,
        unsettled: bool = False,
    ) -> list[Record]:
        """Return the keys, oldest attempt first.

        Only those in ``state``, of ``tool``, attempted at or after ``since``, or (with
        ``unsettled``) ATTEMPTING or IN_DOUBT, when given.

        Raises:
            CorruptRecordError: a key's row cannot be read (``scan_records`` reads the rest).

        """
        return readable(self.scan_records(state=state, tool=tool, since=since, unsettled=unsettled))

    def scan_records(
        self,
        *,
        state: State | None = None,
        tool: str | None = None,
        since: datetime | None = None,
        unsettled: bool = False,
    ) -> list[Record | CorruptRecordError]:
        """Return the keys as ``records`` does, with each corrupt row's error in its place.

        For listings that must show every key: a row changed outside safeact is reported,
        and does not hide the others.
        """
        where = [
            "coalesce(?, state) = state",
            "coalesce(?, tool) = tool",
            "attempted_at >= coalesce(?, attempted_at)",
        ]
        if unsettled:
            where.append(f"state IN ({UNSETTLED_SQL})")
        params = (None if state is None else state.value, tool, time_text(since))
        rows = self._read(
            f"SELECT {_COLUMNS} FROM calls WHERE {' AND '.join(where)} "  # noqa: S608 - constants
            "ORDER BY attempted_at, key",
            params,
        )
        return each(rows, functools.partial(read_record, self.location))

    def counts(self) -> dict[tuple[str, State], int]:
        """Return how many keys each tool has in each state.

        Raises:
            CorruptRecordError: a key's tool or state is not one safeact writes (one such key
                is named).

        """
        rows = self._read(
            "SELECT tool, state, count(*), min(key) FROM calls GROUP BY tool, state", ()
        )
        counted: dict[tuple[str, State], int] = {}
        for tool, state, count, key in rows:
            with Reading(self.location, "calls", key):
                counted[text_of("tool", tool), member("state", state, State)] = int(count)
        return counted

    def history(self, key: str) -> list[Event]:
        """Return every change of ``key``'s state, oldest first (empty for an unknown key).

        The history outlives a purge of the key and is never rewritten: the ledger refuses
        updates and deletes of it.

        Raises:
            CorruptRecordError: an event cannot be read (``scan_history`` reads the rest).

        """
        return readable(self.scan_history(key))

    def scan_history(self, key: str) -> list[Event | CorruptRecordError]:
        """Return ``key``'s history as ``history`` does, with each corrupt event's error."""
        return self._history("key", key)

    def saga_history(self, saga_id: str) -> list[Event]:
        """Return every change of the saga's state, oldest first.

        Raises:
            CorruptRecordError: an event cannot be read.

        """
        return readable(self._history("saga", saga_id))

    def resolve(  # noqa: PLR0913 - one keyword per part of the decision
        self,
        key: str,
        *,
        happened: bool,
        result: object = NO_RESULT,
        attempt_id: str | None = None,
        note: str | None = None,
        force: bool = False,
    ) -> Record:
        """Close an in-doubt key after checking what really happened; return its record.

        In doubt means IN_DOUBT, or ATTEMPTING under an owner that is gone, whose lease ran
        out or whose session was lost. ``happened=True`` records it as SUCCEEDED with
        ``result``, given as the tool would have returned it (``None`` for a tool that
        returns ``None``); later calls replay it, rebuilt as the tool's return type.

        ``happened=False`` releases it: the next call runs the action. That needs proof that
        the attempt's owner is finished (it recorded its interruption, or its process is
        provably gone, seen from its host); a lease that ran out or a lost session is only
        suspicion, and ``force=True`` is then your assertion that the owner can no longer
        act, kept in the key's history. ``note`` goes into the history with the decision.

        Pass ``attempt_id`` (from the ``Record`` you checked) so the decision applies only to
        that attempt: if the key was meanwhile released and claimed by a new caller, a
        repeated or stale resolve then fails instead of touching the new attempt.

        Raises:
            NotProvenError: ``happened=False`` without ``force`` and the owner is not proven
                finished (nothing was changed).
            SafeError: the key is unknown, not in doubt, running under a live owner, not at
                ``attempt_id`` any more, or (``happened=False``) known to have run because
                its owner recorded that its outcome could not be stored (nothing changed).
            ValueError: ``result`` is missing with ``happened=True``, given with
                ``happened=False``, or cannot be stored.

        """
        return self._decide(
            key,
            happened=happened,
            result=result,
            encode=encode_untyped,
            tool=None,
            attempt_id=attempt_id,
            note=note,
            force=force,
        )

    def _decide(  # noqa: PLR0913 - resolve's parameters, and how to check the result
        self,
        key: str,
        *,
        happened: bool,
        result: object,
        encode: Callable[[object], JSON],
        tool: str | None,
        attempt_id: str | None,
        note: str | None,
        force: bool,
    ) -> Record:
        """Do ``resolve``, storing the result through ``encode`` (a tool's checks its type).

        ``tool``, if given, must be the key's tool.
        """
        if happened and force:
            raise ValueError("force=True goes with happened=False: happened=True needs no proof")
        if happened and result is NO_RESULT:
            raise ValueError(
                "happened=True needs result=, the value the tool would have returned "
                "(result=None for a tool that returns None)"
            )
        if not happened and result is not NO_RESULT:
            raise ValueError("a result makes sense only with happened=True")
        stored = json.dumps(encode(result)) if happened else None
        record = check_resolvable(key, self.get(key))
        _check_tool(key, record, tool)
        if attempt_id is not None and record.attempt_id != attempt_id:
            raise SafeError(
                f"cannot resolve key {key!r}: attempt {attempt_id} is over, the key is now at "
                f"attempt {record.attempt_id}; check that attempt, then resolve it"
            )
        to = State.SUCCEEDED if happened else State.RELEASED
        done = self._settle(
            record, to, stored, why=Why.RESOLVED, note=note, operator=True, force=force
        )
        if isinstance(done, Refusal):
            if done.forceable:
                raise NotProvenError(key, done.reason)
            raise SafeError(f"cannot resolve key {key!r}: {done.reason}")
        if done is None:
            raise SafeError(
                f"cannot resolve key {key!r}: it changed while being resolved; look at it again"
            )
        return self._now(key)

    def amend(self, key: str, *, result: object, note: str | None = None) -> Record:
        """Correct the result an operator or a probe recorded for ``key``; return its record.

        For a key closed as happened with a wrong value (one that does not fit the tool's
        return type, say, so that its replay raises ``StoreError``). Later calls replay
        ``result``; the history keeps the value it replaces, with ``note``. A result the
        action itself returned is never amended: it is what happened.

        Raises:
            SafeError: the key is unknown, not SUCCEEDED, or holds its action's own result.
            ValueError: ``result`` cannot be stored.

        """
        return self._amend(key, result=result, encode=encode_untyped, tool=None, note=note)

    def _amend(
        self,
        key: str,
        *,
        result: object,
        encode: Callable[[object], JSON],
        tool: str | None,
        note: str | None,
    ) -> Record:
        """Do ``amend``, with ``encode`` and ``tool`` as in ``_decide``."""
        stored = json.dumps(encode(result))
        with self._errors(), self._transaction(sync=True) as db:
            current = self._locked_record(db, key)
            decided = current is not None and self._closed_by(db, current) in DECIDED
            refusal = amend_refusal(key, current, decided=decided)
            if refusal is not None:
                raise SafeError(refusal)
            assert current is not None
            _check_tool(key, current, tool)
            was = f"was {json.dumps(current.result)}"
            event = self._new_event(
                key,
                State.SUCCEEDED,
                Why.AMENDED,
                note=was if note is None else f"{was}; {note}",
                operator=True,
                from_state=State.SUCCEEDED,
                attempt_id=current.attempt_id,
            )
            db.execute(
                "UPDATE calls SET result = ? WHERE key = ? AND attempt_id = ?",
                (stored, key, current.attempt_id),
            )
            db.execute(f"{_LOG} VALUES ({_PLACES})", event_values("key", event))
        return self._now(key)

    def _decided(self, record: Record) -> bool:
        """Whether ``record``'s result was recorded by an operator or a probe, not its action."""
        with self._errors(), self._transaction(sync=False) as db:
            return self._closed_by(db, record) in DECIDED

    def _closed_by(self, db: Executor, record: Record) -> Why | None:
        """The reason of the latest event that made ``record``'s attempt SUCCEEDED."""
        row = db.execute(
            "SELECT why FROM history WHERE kind = 'key' AND subject = ? AND attempt_id = ? "
            "AND to_state = ? ORDER BY seq DESC LIMIT 1",
            (record.key, record.attempt_id, State.SUCCEEDED.value),
        ).fetchone()
        return None if row is None else Why(row[0])

    def _now(self, key: str) -> Record:
        """``key``'s record just after a decision wrote it."""
        record = self.get(key)
        if record is None:  # pragma: no cover - keys are only removed by purge, never unsettled
            raise SafeError(f"key {key!r} vanished")
        return record

    def _settle(  # noqa: PLR0913 - one parameter per column of the decision
        self,
        record: Record,
        to: State,
        result: str | None,
        *,
        why: Why,
        note: str | None,
        operator: bool = False,
        force: bool = False,
    ) -> Event | Refusal | None:
        """Close ``record``'s attempt as SUCCEEDED (with ``result``, JSON text) or RELEASED.

        Applies only while the key is still at that attempt and in doubt; returns the event
        appended to its history, or ``None`` if the key had moved on (nothing changed). The
        change and its event are one synced transaction. A release is decided on the row as
        locked here and on whether its owner is gone now (``release_refusal``): without
        proof it is refused (``Refusal``, nothing changed) unless ``force``, which the
        history records as the operator's assertion.
        """
        with self._errors(), self._transaction(sync=True) as db:
            current = self._locked_record(db, record.key)
            if (
                current is None
                or current.attempt_id != record.attempt_id
                or current.state not in UNSETTLED
            ):
                return None
            reason = self._abandonment(current, utc_now())
            if reason is None:
                owner = current.owner
                return Refusal(
                    f"its action is running right now (process {owner.pid} on {owner.host}, "
                    f"lease until {time_text(current.lease_until)}); wait for its outcome",
                    forceable=False,
                )
            if to is State.RELEASED:
                refusal = release_refusal(current, reason)
                if refusal is not None and not (force and refusal.forceable):
                    return refusal
                if refusal is not None:
                    why = Why.FORCED_RELEASE
                    said = f"forced: the operator asserts it is over, though {refusal.reason}"
                    note = said if note is None else f"{said}; {note}"
            event = self._new_event(
                record.key,
                to,
                why,
                note=note,
                operator=operator,
                from_state=current.state,
                attempt_id=record.attempt_id,
            )
            db.execute(
                "UPDATE calls SET state = ?, result = ?, finished_at = ?, doubt_reason = NULL, "
                "error_type = NULL, error_message = NULL WHERE key = ? AND attempt_id = ?",
                (to.value, result, time_text(event.at), record.key, record.attempt_id),
            )
            db.execute(f"{_LOG} VALUES ({_PLACES})", event_values("key", event))
            checkpoint("settling")
        return event

    def _note(self, record: Record, why: Why, note: str) -> Event | None:
        """Append an event that changes nothing (a probe's answer) to an in-doubt key's history.

        Returns the event, or ``None`` if the key had moved on from ``record``'s attempt.
        """
        event = self._new_event(
            record.key,
            State.IN_DOUBT,
            why,
            note=note,
            from_state=State.IN_DOUBT,
            attempt_id=record.attempt_id,
        )
        with self._errors(), self._transaction(sync=False) as db:
            now = self._locked_row(db, record.key)
            if now is None or now[1] != record.attempt_id or State(now[0]) not in UNSETTLED:
                return None
            event = attrs.evolve(event, from_state=State(now[0]), to_state=State(now[0]))
            db.execute(f"{_LOG} VALUES ({_PLACES})", event_values("key", event))
        return event

    def reconcile(self, probes: Mapping[str, Probe[object]]) -> list[Event]:
        """Ask each in-doubt key's probe (``probes`` maps tool names to probes) what happened.

        First every abandoned key is marked IN_DOUBT, and every key whose owner on this host
        is provably gone gets that proof recorded, for processes on other hosts (run this on
        each host, e.g. from cron, so crashes close without a human). Then, for keys whose
        tool has a probe: happened closes the key as SUCCEEDED with the probe's result; not
        happened releases it if its owner is proven finished, and otherwise leaves it in
        doubt with the verdict in its history; unknown, or a probe that raises, leaves it
        in doubt. Returns the events appended to the keys' histories.
        """
        events = []
        for found in self.list_in_doubt():
            reason = self._abandonment(found, utc_now())
            if reason is None:
                continue
            if may_mark(found, reason) and not self._mark_in_doubt(
                found.key, found.attempt_id, reason
            ):
                continue  # its owner finished meanwhile
            probe = probes.get(found.tool)
            if probe is None:
                continue
            record = attrs.evolve(found, state=State.IN_DOUBT, doubt_reason=reason)
            event = reconcile_key(
                self, record, in_doubt_from(record, reason), probe, encode_untyped
            )
            if event is not None:
                events.append(event)
        return events

    def purge(
        self,
        older_than: datetime,
        *,
        states: Iterable[State] = (State.SUCCEEDED, State.FAILED),
        dry_run: bool = False,
    ) -> Purged:
        """Remove keys in ``states`` that finished before ``older_than``, and finished sagas.

        A purged key is forgotten: its next call runs the action again, so purge only keys
        nobody will retry. Keys in a saga go only with their saga, which goes once it
        COMPLETED or was COMPENSATED before ``older_than``. Histories are kept, with a
        ``purged`` event. ``dry_run`` reports what would go and removes nothing.

        Raises:
            ValueError: ``states`` includes ATTEMPTING or IN_DOUBT, which are never purged.

        """
        wanted = frozenset(states)
        if wanted & UNSETTLED:
            raise ValueError(
                "ATTEMPTING and IN_DOUBT keys are never purged: resolve them first "
                f"(asked for {', '.join(sorted(s.value for s in wanted & UNSETTLED))})"
            )
        cutoff = time_text(older_than)
        finals = (SagaState.COMPLETED.value, SagaState.COMPENSATED.value)
        with self._errors(), self._transaction(sync=False) as db:
            sagas = [
                (saga_id, SagaState(state))
                for saga_id, state in db.execute(
                    "SELECT saga_id, state FROM sagas WHERE state IN (?, ?) AND updated_at < ? "
                    "ORDER BY saga_id",
                    (*finals, cutoff),
                ).fetchall()
            ]
            marks = ", ".join("?" * len(wanted)) or "NULL"
            keys = [
                (key, attempt_id, State(state))
                for key, attempt_id, state in db.execute(
                    "WITH kept AS (SELECT saga_id FROM sagas WHERE NOT "  # noqa: S608 - placeholders
                    "(state IN (?, ?) AND updated_at < ?)), "
                    "in_kept AS (SELECT key FROM saga_steps WHERE saga_id IN "
                    "(SELECT saga_id FROM kept) UNION SELECT key || ':compensate' "
                    "FROM saga_steps WHERE saga_id IN (SELECT saga_id FROM kept)) "
                    "SELECT key, attempt_id, state FROM calls WHERE state IN "
                    f"({marks}) AND finished_at < ? "
                    "AND key NOT IN (SELECT key FROM in_kept) ORDER BY key",
                    (*finals, cutoff, *(s.value for s in wanted), cutoff),
                ).fetchall()
            ]
            if not dry_run:
                self._remove(db, keys, sagas)
        return Purged(keys=tuple(key for key, _, _ in keys), sagas=tuple(s for s, _ in sagas))

    def _remove(
        self,
        db: Executor,
        keys: list[tuple[str, str, State]],
        sagas: list[tuple[str, SagaState]],
    ) -> None:
        for key, attempt_id, state in keys:
            event = self._new_event(
                key, None, Why.PURGED, operator=True, from_state=state, attempt_id=attempt_id
            )
            db.execute(f"{_LOG} VALUES ({_PLACES})", event_values("key", event))
            db.execute(
                "DELETE FROM calls WHERE key = ? AND attempt_id = ? AND state = ?",
                (key, attempt_id, state.value),
            )
            db.execute("DELETE FROM late_completions WHERE key = ?", (key,))
        for saga_id, saga_state in sagas:
            event = self._new_event(saga_id, None, Why.PURGED, operator=True, from_state=saga_state)
            db.execute(f"{_LOG} VALUES ({_PLACES})", event_values("saga", event))
            db.execute("DELETE FROM saga_steps WHERE saga_id = ?", (saga_id,))
            db.execute("DELETE FROM sagas WHERE saga_id = ?", (saga_id,))

    def _claim(
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
            time_text(now),
            owner.host,
            owner.boot_id,
            owner.pid,
            owner.started,
            owner.machine_id,
            owner.pid_namespace,
            time_text(lease_until),
        )
        event = Event(
            subject=key,
            at=now,
            why=Why.CLAIMED,
            by="process",
            host=owner.host,
            pid=owner.pid,
            from_state=None if previous is None else previous.state,
            to_state=State.ATTEMPTING,
            attempt_id=attempt_id,
        )
        with self._errors(), self._transaction(sync=True) as db:
            if previous is None:
                if not db.execute(
                    "INSERT INTO calls (key, tool, args_hash, state, attempt_id, "
                    "attempted_at, owner_host, owner_boot, owner_pid, owner_started, "
                    "owner_machine, owner_pidns, lease_until, schema_version) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (key) DO NOTHING",
                    (key, tool, args_hash, *attempt, SCHEMA_VERSION),
                ).rowcount:
                    return None
            elif not db.execute(
                "UPDATE calls SET state = ?, attempt_id = ?, attempted_at = ?, owner_host = ?, "
                "owner_boot = ?, owner_pid = ?, owner_started = ?, owner_machine = ?, "
                "owner_pidns = ?, lease_until = ?, "
                "finished_at = NULL, result = NULL, error_type = NULL, error_message = NULL, "
                "doubt_reason = NULL WHERE key = ? AND state = ? AND attempt_id = ?",
                (*attempt, key, State.RELEASED.value, previous.attempt_id),
            ).rowcount:
                return None
            db.execute(f"{_LOG} VALUES ({_PLACES})", event_values("key", event))
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
    def _hold(self, record: Record) -> Iterator[None]:
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
            # A child forked inside the action unwinds through here: it leaves the parent's
            # attempts (and the copy of a lock a parent thread may have held) alone.
            if self._pid == os.getpid():
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
            self._reset_connection()  # the thread ends: close its connection now

    def _beat_until(self, stop: threading.Event) -> None:
        while not stop.wait(self.heartbeat):
            with self._lock:
                held = list(self._held)
                if not held:
                    self._beat = None
                    return
            try:
                self._check_liveness()
            except Exception:
                logger.exception("could not check this process's liveness session")
            until = time_text(utc_now() + timedelta(seconds=self.lease))
            for key, attempt_id in held:
                try:
                    self._renew(key, attempt_id, until)
                except StoreError:
                    logger.exception("could not renew the lease of key %r", key)

    def _renew(self, key: str, attempt_id: str, lease_until: str | None) -> None:
        """Move the lease of an ATTEMPTING attempt to ``lease_until``."""
        with self._errors(), self._transaction(sync=False) as db:
            db.execute(
                "UPDATE calls SET lease_until = ? WHERE key = ? AND attempt_id = ? AND state = ?",
                (lease_until, key, attempt_id, State.ATTEMPTING.value),
            )

    def _finish(  # noqa: PLR0913 - one parameter per column of an outcome
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
        """Record how this attempt ended; return whether the key's row has it.

        The owner's word replaces its attempt's row while nothing is replayed from it
        (ATTEMPTING, IN_DOUBT, or RELEASED and not claimed again). Otherwise it is kept in
        ``late_completions``, for an operator to see, and False is returned: the key was
        closed as happened meanwhile (its replay never changes), or released and claimed
        again (the action also ran under the newer attempt).
        """
        stored = None if result is None else json.dumps(result)
        event = self._new_event(key, state, why_finished(state, doubt_reason))
        finished = time_text(event.at)
        outcome = (state.value, stored, error_type, error_message, finished)
        reason = None if doubt_reason is None else doubt_reason.value
        with self._errors(), self._transaction(sync=False) as db:
            now = self._locked_row(db, key)
            if now is not None and now[1] == attempt_id and State(now[0]) in _OWNER_WRITES:
                db.execute(
                    "UPDATE calls SET state = ?, result = ?, error_type = ?, error_message = ?, "
                    "finished_at = ?, doubt_reason = ? WHERE key = ? AND attempt_id = ?",
                    (*outcome, reason, key, attempt_id),
                )
                mine = attrs.evolve(event, from_state=State(now[0]), attempt_id=attempt_id)
                db.execute(f"{_LOG} VALUES ({_PLACES})", event_values("key", mine))
                return True
            db.execute(
                "INSERT INTO late_completions (key, attempt_id, state, result, "
                "error_type, error_message, finished_at, schema_version) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key, attempt_id) DO UPDATE SET "
                "state = excluded.state, result = excluded.result, "
                "error_type = excluded.error_type, error_message = excluded.error_message, "
                "finished_at = excluded.finished_at",
                (key, attempt_id, *outcome, SCHEMA_VERSION),
            )
            late = attrs.evolve(
                event,
                why=Why.LATE_COMPLETION,
                from_state=State.ATTEMPTING,
                attempt_id=attempt_id,
            )
            db.execute(f"{_LOG} VALUES ({_PLACES})", event_values("key", late))
        return False

    def late_completions(self, key: str | None = None) -> list[Record]:
        """Return completions that arrived after their key had moved on to a new attempt.

        Each is the late attempt's outcome (state, result or error, when), keyed by its
        ``attempt_id``; the key's own row is the newer attempt's. Such a completion means
        the action ran under a released key while its first attempt was still running.

        Raises:
            CorruptRecordError: a late completion, or its key's row, cannot be read
                (``scan_late_completions`` reads the rest).

        """
        return readable(self.scan_late_completions(key))

    def scan_late_completions(self, key: str | None = None) -> list[Record | CorruptRecordError]:
        """Return ``late_completions`` with each corrupt row's error in its place.

        A late completion is read onto its key's current record: a corrupt key's row gives
        its error here too.
        """
        rows = self._read(
            "SELECT l.key, l.attempt_id, l.state, l.result, l.error_type, "
            "l.error_message, l.finished_at FROM late_completions l "
            "WHERE coalesce(?, l.key) = l.key ORDER BY l.finished_at, l.key",
            (key,),
        )
        late: list[Record | CorruptRecordError] = []
        for row in rows:
            try:
                current = self.get(row[0])
                if current is not None:
                    late.append(read_late(self.location, current, row))
            except CorruptRecordError as error:
                late.append(error)
        return late

    def _mark_in_doubt(
        self, key: str, attempt_id: str, reason: DoubtReason, *, detail: str | None = None
    ) -> bool:
        """Mark this attempt IN_DOUBT for ``reason``; return whether the row has that now.

        An ATTEMPTING row is marked; an IN_DOUBT one only to record more than it holds
        (``may_mark``: proof over suspicion, the owner's own word over a caller's). ``CRASHED``
        is proof, so it is written only if the owner is provably gone now, checked under the
        row lock. ``detail`` is kept as the row's error message (what went wrong).
        A row that moved on meanwhile (finished by its owner, resolved, claimed again) is left
        alone, and False returned.
        """
        event = self._new_event(key, State.IN_DOUBT, why_in_doubt(reason))
        with self._errors(), self._transaction(sync=False) as db:
            current = self._locked_record(db, key)
            if current is None or current.attempt_id != attempt_id:
                return False
            if current.state is State.IN_DOUBT and current.doubt_reason is reason:
                return True
            if not may_mark(current, reason):
                return False
            if reason is DoubtReason.CRASHED and not self._owner_gone(current.owner):
                return False
            event = attrs.evolve(event, from_state=current.state, attempt_id=attempt_id)
            db.execute(f"{_LOG} VALUES ({_PLACES})", event_values("key", event))
            db.execute(
                "UPDATE calls SET state = ?, doubt_reason = ?, "
                "error_type = coalesce(?, error_type), error_message = coalesce(?, error_message) "
                "WHERE key = ? AND attempt_id = ?",
                (
                    State.IN_DOUBT.value,
                    reason.value,
                    None if detail is None else "safeact.OutcomeNotStored",
                    detail,
                    key,
                    attempt_id,
                ),
            )
        return True

    def get_saga(self, saga_id: str) -> SagaRecord | None:
        """Return the progress of saga ``saga_id``, or ``None`` if it never started.

        Raises:
            CorruptRecordError: the saga's row, or one of its steps, cannot be read.

        """
        rows = self._read(
            "SELECT saga_id, state, started_at, updated_at, aborted_step, abort_reason "
            "FROM sagas WHERE saga_id = ?",
            (saga_id,),
        )
        steps = self._read(
            "SELECT key, compensation FROM saga_steps WHERE saga_id = ? ORDER BY step_index",
            (saga_id,),
        )
        return read_saga(self.location, rows[0], steps) if rows else None

    def list_sagas(self, state: SagaState | None = None) -> list[SagaRecord]:
        """Return every saga, or those in ``state``; stuck rollbacks (COMPENSATING) first.

        Raises:
            CorruptRecordError: a saga cannot be read (``scan_sagas`` reads the rest).

        """
        return readable(self.scan_sagas(state))

    def scan_sagas(self, state: SagaState | None = None) -> list[SagaRecord | CorruptRecordError]:
        """Return the sagas as ``list_sagas`` does, with each corrupt saga's error in its place."""
        rows = self._read(
            "SELECT saga_id FROM sagas WHERE coalesce(?, state) = state "
            "ORDER BY state != ?, started_at, saga_id",
            (None if state is None else state.value, SagaState.COMPENSATING.value),
        )
        sagas: list[SagaRecord | CorruptRecordError] = []
        for (saga_id,) in rows:
            try:
                saga = self.get_saga(saga_id)
            except CorruptRecordError as error:
                sagas.append(error)
                continue
            if saga is not None:  # else it was purged meanwhile
                sagas.append(saga)
        return sagas

    def _begin_saga(self, saga_id: str) -> SagaRecord:
        """Record saga ``saga_id`` as RUNNING unless it exists; return its progress."""
        event = self._new_event(saga_id, SagaState.RUNNING, Why.STARTED)
        now = time_text(event.at)
        with self._errors(), self._transaction(sync=False) as db:
            if db.execute(
                "INSERT INTO sagas (saga_id, state, started_at, updated_at, schema_version) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (saga_id) DO NOTHING",
                (saga_id, SagaState.RUNNING.value, now, now, SCHEMA_VERSION),
            ).rowcount:
                db.execute(f"{_LOG} VALUES ({_PLACES})", event_values("saga", event))
        saga = self.get_saga(saga_id)
        if saga is None:
            raise StoreError(f"{self.location}: saga {saga_id!r} vanished while starting")
        return saga

    def _record_saga_step(
        self, saga_id: str, index: int, name: str, key: str, compensation: str | None
    ) -> str:
        """Record that step ``index`` of the saga is ``key``, unless it was recorded already.

        ``compensation`` names the tool that undoes it (None: nothing does).

        Returns the key recorded for that index, which differs from ``key`` if an earlier run
        of the saga took other steps.
        """
        with self._errors(), self._transaction(sync=False) as db:
            db.execute(
                "INSERT INTO saga_steps (saga_id, step_index, name, key, compensation) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (saga_id, step_index) DO NOTHING",
                (saga_id, index, name, key, compensation),
            )
            (recorded,) = db.execute(
                "SELECT key FROM saga_steps WHERE saga_id = ? AND step_index = ?",
                (saga_id, index),
            ).fetchone()
        return str(recorded)

    def _move_saga(
        self,
        saga_id: str,
        state: SagaState,
        *,
        aborted_step: str | None = None,
        abort_reason: str | None = None,
    ) -> None:
        """Set the saga's state; the abort's step and reason are kept once recorded."""
        event = self._new_event(saga_id, state, saga_why(state))
        with self._errors(), self._transaction(sync=False) as db:
            (now,) = db.execute(
                f"SELECT state FROM sagas WHERE saga_id = ?{self._FOR_UPDATE}",  # noqa: S608 - constants
                (saga_id,),
            ).fetchone()
            if now != state.value:
                event = attrs.evolve(event, from_state=SagaState(now))
                db.execute(f"{_LOG} VALUES ({_PLACES})", event_values("saga", event))
            db.execute(
                "UPDATE sagas SET state = ?, updated_at = ?, "
                "aborted_step = coalesce(aborted_step, ?), "
                "abort_reason = coalesce(abort_reason, ?) WHERE saga_id = ?",
                (state.value, time_text(event.at), aborted_step, abort_reason, saga_id),
            )

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

    def _history(self, kind: str, subject: str) -> list[Event | CorruptRecordError]:
        """The events of a key's (``kind`` "key") or a saga's history, corrupt ones as errors."""
        rows = self._read(
            "SELECT at, why, by_kind, by_host, by_pid, from_state, to_state, "
            "attempt_id, note FROM history WHERE kind = ? AND subject = ? ORDER BY seq",
            (kind, subject),
        )
        return each(rows, functools.partial(read_event, self.location, kind, subject))

    def _locked_record(self, db: Executor, key: str) -> Record | None:
        """Lock ``key``'s row for this transaction; return it."""
        row = db.execute(
            f"SELECT {_COLUMNS} FROM calls WHERE key = ?{self._FOR_UPDATE}",  # noqa: S608 - constants
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
            self._forget_connections()

    # What a backend supplies.

    def _transaction(self, *, sync: bool) -> contextlib.AbstractContextManager[Executor]:
        """One write transaction, committed at the end of the block, rolled back if it raises.

        ``sync``: the commit must be on disk before it returns (the ATTEMPTING claim, a
        resolve); otherwise it must survive a crash of this process.
        """
        raise NotImplementedError

    def _read(self, sql: str, parameters: tuple[object, ...]) -> list[Any]:
        """Run one query outside any write transaction; return its rows."""
        raise NotImplementedError

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        """Turn the driver's errors into ``StoreError`` naming the ledger."""
        raise NotImplementedError

    def _check_liveness(self) -> None:
        """Heartbeat: make sure other hosts can still see this process alive, or say why not."""

    def _reset_connection(self) -> None:
        """Drop this thread's connection, so the next statement runs on a fresh one."""

    def _close_connections(self) -> None:
        """Close what can be closed now (``close`` has marked the store closed)."""

    def _forget_connections(self) -> None:
        """In a forked child: drop the parent's connections without using them."""


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
