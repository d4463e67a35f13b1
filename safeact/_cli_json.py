"""What ``safeact COMMAND --json`` prints: one stable shape per command, built from values.

Times are ISO 8601 with their zone, states and reasons their string values, an owner an
object. The listings (``ls``, ``doubt``, ``sagas``) print one JSON object per line, so
``jq`` can stream them; every other command prints one object. ``SCHEMAS`` documents each
shape; ``safeact COMMAND --help`` prints its own.
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from safeact._archive import Archived
    from safeact._history import Event
    from safeact._protocol import Record, SagaRecord
    from safeact.exceptions import CorruptRecordError

__all__ = [
    "SCHEMAS",
    "archived_json",
    "corrupt_json",
    "doubt_json",
    "event_json",
    "record_json",
    "saga_json",
]

_RECORD = (
    "{key, tool, state, doubt_reason, args_hash, attempt_id, attempted_at, finished_at, "
    "lease_until, owner: {host, boot_id, pid, started, machine_id, pid_namespace, group}, "
    "result, error_type, error_message}"
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
        f"{_CORRUPT}|null, late_completions: [RECORD|CORRUPT], history: [EVENT {_EVENT}]}}"
    ),
    "doubt": "one line per key in doubt: RECORD with age_seconds; a corrupt row: CORRUPT",
    "resolve": (
        "one object: {key, from_state, to_state, record: RECORD}; with --keys-from, one line "
        "per item: {item, line, key, attempt_id, tool, status: checked|resolved|refused, "
        "refused_at: check|apply|null, reason, from_state, to_state, warning, "
        "record: RECORD|null}"
    ),
    "amend": "one object: {key, result, record: RECORD}",
    "sagas": f"one line per saga: {_SAGA}; a corrupt row: {_CORRUPT}",
    "purge": "one object: {dry_run, older_than, states: [STATE], keys: [KEY], sagas: [SAGA_ID]}",
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
