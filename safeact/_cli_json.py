"""What ``safeact COMMAND --json`` prints: one stable shape per command, built from values.

Times are ISO 8601 with their zone, states and reasons their string values, an owner an
object. The listings (``ls``, ``doubt``, ``sagas``, ``approvals``) print one JSON object per
line, so ``jq`` can stream them; every other command prints one object. ``SCHEMAS`` documents
each shape; ``safeact COMMAND --help`` prints its own. A record or an approval is every field
of ``Record`` or ``Approval``, so a field added to either appears in every shape that holds
one, and is named in ``_RECORD`` or ``_APPROVAL`` in the same change (a test holds each
shape to its names).
"""

from __future__ import annotations

import enum
import json
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TextIO

import attrs

from safeact._history import Event
from safeact._protocol import Approval, Record
from safeact.exceptions import CorruptRecordError

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from safeact._archive import Archived
    from safeact._protocol import SagaRecord

__all__ = [
    "SCHEMAS",
    "approval_json",
    "archived_json",
    "corrupt_json",
    "doubt_json",
    "event_json",
    "record_json",
    "saga_json",
    "show_json",
    "write_lists",
]

_RECORD = (
    "{key, tool, state, doubt_reason, args_hash, attempt_id, attempted_at, finished_at, "
    "lease_until, owner: {host, boot_id, pid, started, machine_id, pid_namespace, group}, "
    "result, error_type, error_message, arguments: {PARAMETER: VALUE}|null}"
)
_APPROVAL = (
    "{key, tool, args_hash, state: pending|approved|denied|consumed, requested_at, "
    "decided_at, decided_by, note, attempt_id, arguments: {PARAMETER: VALUE}|null}"
)
_DECISION = (
    "one object: {key, from_state: APPROVAL_STATE|null, to_state, "
    f"approval: APPROVAL {_APPROVAL}}}"
)
_CORRUPT = "{key, corrupt: WHAT_IS_WRONG, column}"
_EVENT = "{subject, at, why, by, host, pid, from_state, to_state, attempt_id, note}"
_SAGA = (
    "{saga_id, state, started_at, updated_at, steps: [KEY], compensations: [TOOL|null], "
    "aborted_step, abort_reason}"
)

SCHEMAS = {
    "ls": f"one line per key: RECORD {_RECORD}; a corrupt row: {_CORRUPT}",
    "show": (
        "one object: {key, record: RECORD|null, recorded_state, corrupt: "
        f"{_CORRUPT}|null, late_completions: [RECORD|CORRUPT], history: [EVENT {_EVENT}], "
        f"approval: APPROVAL {_APPROVAL}|CORRUPT|null}}"
    ),
    "doubt": "one line per key in doubt: RECORD with age_seconds; a corrupt row: CORRUPT",
    "resolve": (
        "one object: {key, from_state, to_state, record: RECORD}; with --keys-from, one line "
        "per item: {item, line, key, attempt_id, tool, status: checked|resolved|refused, "
        "refused_at: check|apply|null, reason, from_state, to_state, warning, "
        "record: RECORD|null}"
    ),
    "amend": "one object: {key, result, record: RECORD}",
    "approvals": (
        f"one line per approval request (pending; with --all, every one): APPROVAL {_APPROVAL}; "
        f"a corrupt row: {_CORRUPT}"
    ),
    "approve": _DECISION,
    "deny": _DECISION,
    "sagas": f"one line per saga: {_SAGA}; a corrupt row: {_CORRUPT}",
    "purge": (
        "one object: {dry_run, older_than, states: [STATE], sagas: [SAGA_ID], keys: [KEY]}, "
        "each list in the order removed"
    ),
    "stats": (
        "one object: {tools: {TOOL: {STATE: N, total: N}}, all: {STATE: N, total: N}, "
        "sagas: {SAGA_STATE: N}, oldest_in_doubt: {key, attempted_at, age_seconds}|null, "
        "corrupt: {keys: N, sagas: N}, size_bytes: N|null}"
    ),
    "reconcile": "one object: {events: [EVENT], in_doubt: [RECORD with age_seconds]}",
    "migrate": "one object: {ledger, from_schema, to_schema, backup: PATH|null}",
    "archive": (
        "one object: {before, file, events, corrupt, kept_keys: [KEY], kept_sagas: [SAGA_ID]}"
    ),
    "check": (
        "one line per row that cannot be read: {table, key, corrupt, column} (key: the key, "
        "saga id or history subject); then one object: {checked: {TABLE: N}, corrupt: N}"
    ),
    "export": (
        "one line per event, as archive writes them (it prints no other JSON): {kind, subject, "
        "seq, at, from, to, why, by, host, pid, attempt_id, note, corrupt}"
    ),
}
"""Each command's ``--json`` shape, as its ``--help`` prints it."""


def _plain(_: object, __: object, value: object) -> object:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    return value


def record_json(record: Record) -> dict[str, object]:
    """Every field of ``record`` (as ``get`` reads it) as JSON values."""
    return attrs.asdict(record, value_serializer=_plain)


def approval_json(approval: Approval) -> dict[str, object]:
    """Every field of ``approval`` as JSON values (the args hash whole)."""
    return attrs.asdict(approval, value_serializer=_plain)


def doubt_json(record: Record, now: datetime) -> dict[str, object]:
    """A key in doubt as ``doubt`` and ``reconcile`` print it: its record and its age."""
    elapsed: timedelta = now - record.attempted_at
    return {**record_json(record), "age_seconds": elapsed.total_seconds()}


def corrupt_json(error: CorruptRecordError) -> dict[str, object]:
    """A row that cannot be read: its key (or saga id), what is wrong, and the column."""
    return {"key": error.subject, "corrupt": error.problem, "column": error.column}


def event_json(event: Event) -> dict[str, object]:
    """One event of a history, every field as a JSON value."""
    return attrs.asdict(event, value_serializer=_plain)


def saga_json(saga: SagaRecord) -> dict[str, object]:
    """One saga's record, every field as a JSON value (steps and compensations as lists)."""
    return attrs.asdict(saga, value_serializer=_plain)


def archived_json(archived: Archived) -> dict[str, object]:
    """What an archive took and left: events, corrupt ones, the subjects that kept theirs."""
    return {
        "events": archived.events,
        "corrupt": archived.corrupt,
        "kept_keys": list(archived.kept_keys),
        "kept_sagas": list(archived.kept_sagas),
    }


def show_json(  # noqa: PLR0913 - one parameter per member
    key: str,
    record: Record | CorruptRecordError | None,
    recorded: Record | None,
    late: Sequence[Record | CorruptRecordError],
    events: Sequence[Event | CorruptRecordError],
    *,
    approval: Approval | CorruptRecordError | None,
) -> dict[str, object]:
    """``show --json``: the key as read, the state its row holds, late completions, history.

    And its approval request (null for a tool that asks for none), last: a member added to
    a shape goes after the others.
    """
    return {
        "key": key,
        "record": record_json(record) if isinstance(record, Record) else None,
        "recorded_state": None if recorded is None else recorded.state.value,
        "corrupt": corrupt_json(record) if isinstance(record, CorruptRecordError) else None,
        "late_completions": [
            record_json(d) if isinstance(d, Record) else corrupt_json(d) for d in late
        ],
        "history": [event_json(e) if isinstance(e, Event) else corrupt_json(e) for e in events],
        "approval": (
            None
            if approval is None
            else approval_json(approval)
            if isinstance(approval, Approval)
            else corrupt_json(approval)
        ),
    }


def write_lists(
    out: TextIO,
    head: dict[str, object],
    names: tuple[str, ...],
    items: Iterable[tuple[str, object]],
) -> None:
    """Write one JSON object, ``head`` then a list per name of ``names``, as items come.

    ``items`` are (name, item) pairs, each list's after the one before's. What is written
    is ``json.dumps`` of the whole object, one line, without holding the lists.
    """
    out.write(json.dumps(head)[:-1])
    opened, first = -1, True

    def open_next() -> None:
        nonlocal opened, first
        opened += 1
        before = "], " if opened else (", " if head else "")
        out.write(f"{before}{json.dumps(names[opened])}: [")
        first = True

    for name, item in items:
        while opened < 0 or names[opened] != name:
            open_next()
        out.write(("" if first else ", ") + json.dumps(item))
        first = False
    while opened < len(names) - 1:
        open_next()
    out.write("]}\n")
