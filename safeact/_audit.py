"""The audit trail: every change of a key or a saga, appended, never rewritten; late outcomes.

Each write of the other jobs appends its event with ``record_event`` in the transaction that
makes the change, so the history and the rows cannot disagree. The ledger refuses updates
and deletes of ``history`` (a trigger), and a purge keeps it.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Literal

from safeact._ledger import Ledger
from safeact._protocol import State
from safeact._rows import each, event_values, read_event, read_late, readable
from safeact.exceptions import CorruptRecordError

if TYPE_CHECKING:
    from safeact._history import Event
    from safeact._ledger import Executor
    from safeact._protocol import Record

__all__ = [
    "APPEND_IF_CHANGED",
    "FINISH_ATTEMPTING",
    "FINISH_ATTEMPTING_WITH_EVENT",
    "Audit",
    "finish_values",
    "record_claim",
    "record_event",
]

_APPEND = (
    "INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, "
    "by_host, by_pid, why, note) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


_APPEND_IF_AT = (
    "INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, "
    "by_host, by_pid, why, note) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? "
    "WHERE EXISTS (SELECT 1 FROM calls WHERE key = ? AND attempt_id = ?)"
)


FINISH_ATTEMPTING = (
    "UPDATE calls SET state = ?, result = ?, error_type = ?, error_message = ?, "
    "finished_at = ?, doubt_reason = ? WHERE key = ? AND attempt_id = ? AND state = ?"
)
"""An owner's outcome on its row, while the row is ATTEMPTING at the owner's attempt."""

APPEND_IF_CHANGED = (
    "INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, "
    "by_host, by_pid, why, note) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE changes() = 1"
)
"""SQLite: the event, if the statement just before it changed its row (``changes()``)."""

FINISH_ATTEMPTING_WITH_EVENT = (
    f"WITH finished AS ({FINISH_ATTEMPTING} RETURNING 1) "  # noqa: S608 - constants
    "INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, by_kind, "
    "by_host, by_pid, why, note) SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM finished"
)
"""PostgreSQL: the outcome and its event in one statement, the event only if the row was."""


def finish_values(outcome: tuple[object, ...], event: Event) -> tuple[object, ...]:
    """The parameters of ``FINISH_ATTEMPTING`` for ``outcome`` at ``event``'s attempt."""
    return (*outcome, event.subject, event.attempt_id, State.ATTEMPTING.value)


def record_event(db: Executor, kind: Literal["key", "saga"], event: Event) -> None:
    """Append ``event`` to the history of a key (``kind`` "key") or a saga ("saga")."""
    db.execute(_APPEND, event_values(kind, event))


def record_claim(db: Executor, event: Event) -> None:
    """Append a claim's ``event`` to its key's history if the key's row is at its attempt.

    The claim's own statement decided that, earlier in the transaction; asking the row
    rather than that statement's row count lets both be sent before either is answered
    (one round trip on PostgreSQL). An attempt id is new with each claim, so only this
    claim can have put it there.
    """
    db.execute(_APPEND_IF_AT, (*event_values("key", event), event.subject, event.attempt_id))


class Audit(Ledger):
    """Reading the history of keys and sagas, and the completions that came too late."""

    def history(self, key: str) -> list[Event]:
        """Return every change of ``key``'s state, oldest first (empty for an unknown key).

        The history outlives a purge of the key and is never rewritten: the ledger refuses
        updates and deletes of it, except an operator's ``archive_history``, which moves
        the events before a cut-off to a file.

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
                current = self._stored(row[0])
                if current is not None:
                    late.append(read_late(self.location, current, row))
            except CorruptRecordError as error:
                late.append(error)
        return late

    def _history(self, kind: str, subject: str) -> list[Event | CorruptRecordError]:
        """The events of a key's (``kind`` "key") or a saga's history, corrupt ones as errors."""
        rows = self._read(
            "SELECT at, why, by_kind, by_host, by_pid, from_state, to_state, "
            "attempt_id, note FROM history WHERE kind = ? AND subject = ? ORDER BY seq",
            (kind, subject),
        )
        return each(rows, functools.partial(read_event, self.location, kind, subject))
