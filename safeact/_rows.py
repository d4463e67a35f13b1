"""Reading rows: what a stored value means is decided here, once, for every read.

A value safeact never writes (the row was changed outside it) raises ``CorruptRecordError``
naming the row, the column and the fix: never a raw ``ValueError`` from deep inside a
decision, and never a half-checked record (a time without its offset would make every later
comparison of times raise, far from the row that caused it).
"""

from __future__ import annotations

import enum
import functools
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, TypeVar, cast

import attrs

from safeact._history import Event, Why
from safeact._owner import Owner
from safeact._protocol import (
    Approval,
    ApprovalState,
    DoubtReason,
    Record,
    SagaRecord,
    SagaState,
    State,
)
from safeact.exceptions import CorruptRecordError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from types import TracebackType

    from safeact._protocol import JSON

__all__ = [
    "APPROVAL_COLUMNS",
    "Reading",
    "counted_group",
    "each",
    "event_values",
    "member",
    "read_approval",
    "read_event",
    "read_late",
    "read_record",
    "read_saga",
    "readable",
    "text_of",
    "time_text",
]


def time_text(value: datetime | None) -> str | None:
    """A time as the ledger stores it: ISO 8601 in UTC, to the microsecond, with its offset."""
    return None if value is None else value.astimezone(UTC).isoformat(timespec="microseconds")


_ROWS = {
    "calls": (
        "key",
        (
            "safeact runs nothing under this key until the row is mended: check what its "
            "action did, then restore the row from a backup or correct it by hand (deleting "
            "it lets the next call run the action again)"
        ),
    ),
    "late_completions": (
        "late completion of key",
        "Restore the row from a backup, or correct or delete it by hand",
    ),
    "history": (
        "an event in the history of",
        "The history is append-only: restore the ledger from a backup to mend it",
    ),
    "sagas": ("saga", "Restore the row from a backup or correct it by hand"),
    "saga_steps": ("a step of saga", "Restore the row from a backup or correct it by hand"),
    "approvals": (
        "approval of key",
        (
            "safeact runs nothing under this key until the row is mended: restore it from a "
            "backup, or delete it by hand so that the next call asks for approval again"
        ),
    ),
}
"""For each table: how its rows are named for people, and what to do about a corrupt one."""

_SHOWN = 40
"""Characters of a corrupt value shown in its error: enough to recognise, never a page."""

_LISTED = 8
"""Enums of at most this many values are listed in full when a stored value is none of them."""

_JSON_DECODER = json.JSONDecoder()
"""What ``json.loads`` decodes with."""

_T = TypeVar("_T")
_E = TypeVar("_E", bound=enum.Enum)


class _Unreadable(Exception):  # noqa: N818 - internal; the row's reader raises the real error
    """A column holds a value safeact never writes there; ``Reading`` names the row."""

    def __init__(self, column: str, what: str) -> None:
        self.column = column
        super().__init__(f"{column} {what}")


@attrs.frozen
class Reading:
    """The reading of one row of ``table``: an ``_Unreadable`` column becomes the row's error."""

    ledger: str
    table: str
    subject: object

    def __enter__(self) -> None:
        """Nothing to set up: the work is in turning the error."""

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Raise ``CorruptRecordError`` for an unreadable column; let anything else through."""
        if isinstance(exc, _Unreadable):
            raise _corrupt(self.ledger, self.table, self.subject, exc) from None


def _corrupt(ledger: str, table: str, subject: object, exc: _Unreadable) -> CorruptRecordError:
    """The error of a row of ``table`` (named by ``subject``) with an unreadable column."""
    name, fix = _ROWS[table]
    shown = subject if isinstance(subject, str) else _shown(subject)
    return CorruptRecordError(
        f"{ledger}: {name} {shown!r}",
        table=table,
        subject=shown,
        column=exc.column,
        problem=str(exc),
        fix=fix,
    )


def _shown(value: object) -> str:
    """A stored value as an error shows it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[: _SHOWN - 3]}..."


def counted_group(
    ledger: str, tool: object, state: object, key_of: Callable[[], object]
) -> tuple[str, State]:
    """The tool and state of a count of settled keys (``key_counts``), read as a row's are.

    Raises:
        CorruptRecordError: the tool is not text or the state not one safeact writes; the
            error names a key of the group, which ``key_of`` finds (a read of its own, made
            only then).

    """
    try:
        return text_of("tool", tool), member("state", state, State)
    except _Unreadable as exc:
        raise _corrupt(ledger, "calls", key_of(), exc) from None


def text_of(column: str, value: object) -> str:
    if isinstance(value, str):
        return value
    raise _Unreadable(column, f"is {_shown(value)}, not text")


def _optional_text(column: str, value: object) -> str | None:
    return None if value is None else text_of(column, value)


def _integer(column: str, value: object) -> int:
    if isinstance(value, int):
        return value
    raise _Unreadable(column, f"is {_shown(value)}, not an integer")


def _pid(column: str, value: object) -> int:
    """A process id: a positive integer (``is_gone`` would signal a process group otherwise)."""
    if isinstance(value, int) and value > 0:
        return value
    raise _Unreadable(column, f"is {_shown(value)}, not a process id (a positive integer)")


def _moment(column: str, value: object) -> datetime:
    """A time as ``time_text`` writes it: ISO 8601 with its UTC offset."""
    text = text_of(column, value)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise _Unreadable(column, f"is {_shown(text)}, not an ISO 8601 time") from None
    if moment.tzinfo is None:
        raise _Unreadable(column, f"is {_shown(text)}, a time without its UTC offset")
    return moment


def _optional_moment(column: str, value: object) -> datetime | None:
    return None if value is None else _moment(column, value)


def member(column: str, value: object, kind: type[_E]) -> _E:
    """The member of ``kind`` whose value is stored (a newer safeact's would not be known)."""
    if type(value) is str:  # as safeact stores it: found without the enum's own lookup
        found = _by_value(kind).get(value)
        if isinstance(found, kind):
            return found
    try:
        return kind(value)
    except ValueError:
        members = [str(member.value) for member in kind]
        known = (
            ", ".join(members)
            if len(members) <= _LISTED
            else f"the {len(members)} values this safeact knows"
        )
        raise _Unreadable(column, f"is {_shown(value)}, not one of {known}") from None


@functools.cache
def _by_value(kind: type[enum.Enum]) -> dict[object, enum.Enum]:
    """The members of ``kind`` by value, as ``kind(value)`` finds them."""
    return {found.value: found for found in kind}


def _json(column: str, value: object) -> JSON:
    text = text_of(column, value)
    try:
        return _whole_json(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep to decode
        raise _Unreadable(column, f"is not valid JSON ({exc})") from None


def _whole_json(text: str) -> JSON:
    """``json.loads(text)``, with less work for a text as safeact writes it.

    Raises:
        ValueError, RecursionError: as ``json.loads``.

    """
    # safeact writes one value with nothing around it, which raw_decode reads whole. Any
    # other text (spaces or a BOM before, anything after, not JSON) is left to json.loads,
    # to accept or refuse in its own words.
    try:
        decoded, end = _JSON_DECODER.raw_decode(text)
    except ValueError:
        return cast("JSON", json.loads(text))
    if end < len(text):
        return cast("JSON", json.loads(text))
    return cast("JSON", decoded)


def _actor(column: str, value: object) -> Literal["process", "operator"]:
    if value == "process":
        return "process"
    if value == "operator":
        return "operator"
    raise _Unreadable(column, f"is {_shown(value)}, not 'process' or 'operator'")


def each(
    rows: Iterable[tuple[object, ...]], read: Callable[[tuple[object, ...]], _T]
) -> list[_T | CorruptRecordError]:
    """Read every row with ``read``; a corrupt row becomes its error, in its place."""
    found: list[_T | CorruptRecordError] = []
    for row in rows:
        try:
            found.append(read(row))
        except CorruptRecordError as error:
            found.append(error)
    return found


def readable(found: Iterable[_T | CorruptRecordError]) -> list[_T]:
    """The records read, in order.

    Raises:
        CorruptRecordError: the first corrupt row's error.

    """
    records: list[_T] = []
    for item in found:
        if isinstance(item, CorruptRecordError):
            raise item
        records.append(item)
    return records


def read_record(ledger: str, row: tuple[object, ...]) -> Record:
    """Read one row of ``calls`` (the columns of ``_COLUMNS``, in order) as a ``Record``.

    Raises:
        CorruptRecordError: a column holds what safeact never writes there.

    """
    key, tool, state, args_hash, attempt_id, attempted_at = row[:6]
    lease_until, finished_at, result, error_type, error_message, doubt_reason = row[12:18]
    try:  # what Reading does, without making one: every read of a key comes here
        return Record(
            key=text_of("key", key),
            tool=text_of("tool", tool),
            state=member("state", state, State),
            args_hash=text_of("args_hash", args_hash),
            attempt_id=text_of("attempt_id", attempt_id),
            attempted_at=_moment("attempted_at", attempted_at),
            owner=_owner((*row[6:12], row[18])),
            lease_until=_moment("lease_until", lease_until),
            finished_at=_optional_moment("finished_at", finished_at),
            result=None if result is None else _json("result", result),
            error_type=_optional_text("error_type", error_type),
            error_message=_optional_text("error_message", error_message),
            doubt_reason=(
                None if doubt_reason is None else member("doubt_reason", doubt_reason, DoubtReason)
            ),
            arguments=None if row[19] is None else _json("arguments", row[19]),
        )
    except _Unreadable as exc:
        raise _corrupt(ledger, "calls", key, exc) from None


def _owner(columns: tuple[object, ...]) -> Owner:
    """Read the owner's columns of a ``calls`` row (host to PID namespace, then group)."""
    host, boot, pid, started, machine, pidns, group = columns
    # started may be any integer: 0 is "unknown", and tests bury owners with a negative one.
    return Owner(
        text_of("owner_host", host),
        text_of("owner_boot", boot),
        _pid("owner_pid", pid),
        _integer("owner_started", started),
        text_of("owner_machine", machine),
        text_of("owner_pidns", pidns),
        _integer("owner_group", group),
    )


APPROVAL_COLUMNS = (
    "key, tool, args_hash, state, requested_at, decided_at, decided_by, note, attempt_id, arguments"
)
"""The columns of ``approvals`` that ``read_approval`` reads, in its order."""


def read_approval(ledger: str, row: tuple[object, ...]) -> Approval:
    """Read one row of ``approvals`` (``APPROVAL_COLUMNS``, in order) as an ``Approval``.

    Raises:
        CorruptRecordError: a column holds what safeact never writes there.

    """
    key, tool, args_hash, state, requested_at, decided_at, decided_by, note, attempt, args = row
    with Reading(ledger, "approvals", key):
        return Approval(
            key=text_of("key", key),
            tool=text_of("tool", tool),
            args_hash=text_of("args_hash", args_hash),
            state=member("state", state, ApprovalState),
            requested_at=_moment("requested_at", requested_at),
            decided_at=_optional_moment("decided_at", decided_at),
            decided_by=_optional_text("decided_by", decided_by),
            note=_optional_text("note", note),
            attempt_id=_optional_text("attempt_id", attempt),
            arguments=None if args is None else _json("arguments", args),
        )


def read_late(ledger: str, current: Record, row: tuple[object, ...]) -> Record:
    """Read one row of ``late_completions`` as the late attempt's record (``current``'s key).

    Raises:
        CorruptRecordError: a column holds what safeact never writes there.

    """
    key, attempt_id, state, result, error_type, error_message, finished_at = row
    with Reading(ledger, "late_completions", key):
        return attrs.evolve(
            current,
            attempt_id=text_of("attempt_id", attempt_id),
            state=member("state", state, State),
            result=None if result is None else _json("result", result),
            error_type=_optional_text("error_type", error_type),
            error_message=_optional_text("error_message", error_message),
            finished_at=_moment("finished_at", finished_at),
            doubt_reason=None,
        )


def read_event(ledger: str, kind: str, subject: str, row: tuple[object, ...]) -> Event:
    """Read one row of ``history`` (a key's, or with ``kind`` "saga" a saga's) as an ``Event``.

    Raises:
        CorruptRecordError: a column holds what safeact never writes there.

    """
    states: type[State | SagaState] = State if kind == "key" else SagaState
    at, why, by, host, pid, from_state, to_state, attempt_id, note = row
    with Reading(ledger, "history", subject):
        return Event(
            subject=subject,
            at=_moment("at", at),
            why=member("why", why, Why),
            by=_actor("by_kind", by),
            host=text_of("by_host", host),
            pid=_pid("by_pid", pid),
            from_state=None if from_state is None else member("from_state", from_state, states),
            to_state=None if to_state is None else member("to_state", to_state, states),
            attempt_id=_optional_text("attempt_id", attempt_id),
            note=_optional_text("note", note),
        )


def read_saga(ledger: str, row: tuple[object, ...], steps: list[tuple[object, ...]]) -> SagaRecord:
    """Read a row of ``sagas`` and its ``saga_steps`` rows as a ``SagaRecord``.

    Raises:
        CorruptRecordError: a column holds what safeact never writes there.

    """
    saga_id, state, started_at, updated_at, aborted_step, abort_reason = row
    with Reading(ledger, "saga_steps", saga_id):
        keys = tuple(text_of("key", key) for key, _ in steps)
        undo = tuple(_optional_text("compensation", compensation) for _, compensation in steps)
    with Reading(ledger, "sagas", saga_id):
        return SagaRecord(
            saga_id=text_of("saga_id", saga_id),
            state=member("state", state, SagaState),
            started_at=_moment("started_at", started_at),
            updated_at=_moment("updated_at", updated_at),
            steps=keys,
            compensations=undo,
            aborted_step=_optional_text("aborted_step", aborted_step),
            abort_reason=_optional_text("abort_reason", abort_reason),
        )


def event_values(kind: str, event: Event) -> tuple[object, ...]:
    return (
        kind,
        event.subject,
        event.attempt_id,
        None if event.from_state is None else event.from_state.value,
        *_event_params(event),
    )


def _event_params(event: Event) -> tuple[object, ...]:
    """The values of an event after its subject, attempt and from-state."""
    return (
        None if event.to_state is None else event.to_state.value,
        time_text(event.at),
        event.by,
        event.host,
        event.pid,
        event.why.value,
        event.note,
    )
