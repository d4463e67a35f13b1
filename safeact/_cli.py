"""The ``safeact`` command: look into a ledger, decide what is in doubt, keep it tidy.

Only the console script (and ``python -m safeact``) imports this module. Every command but
``migrate`` refuses a missing ledger instead of creating one. User mistakes end with one line
on stderr and exit code 2; ``doubt`` and ``reconcile`` exit with 1 while anything is in doubt.

A row changed outside safeact (``CorruptRecordError``) never ends a listing: ``ls``, ``show``,
``stats``, ``sagas`` and ``doubt`` show it in its place as corrupt, and a line on stderr
counts such rows. Listings still exit 0; ``show`` of a corrupt key exits 1, and ``doubt``
counts a corrupt key as needing attention (exit 1). ``--json`` prints a corrupt key as
``{"key": KEY, "corrupt": WHAT_IS_WRONG, "column": COLUMN}``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NoReturn, cast

import attrs

from safeact._codec import encode_untyped
from safeact._history import Event
from safeact._open import get_store, names_postgres
from safeact._protocol import (
    NO_RESULT,
    UNSETTLED,
    DoubtReason,
    Record,
    SagaRecord,
    SagaState,
    State,
    abandonment,
    utc_now,
)
from safeact._reconcile import Probe
from safeact._schema import migrate
from safeact._sqlite import SqliteStore
from safeact._store import Store
from safeact._tool import _Guard
from safeact.exceptions import CorruptRecordError, SafeError

if TYPE_CHECKING:
    from safeact._protocol import JSON

__all__ = ["main"]

_AGE = re.compile(r"(\d+)([smhdw])")
_WHEN = "an age (30m, 2h, 7d; units s, m, h, d, w) or an ISO date or time (UTC unless given)"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


_CORRUPT_JSON = '{"key": KEY, "corrupt": WHAT_IS_WRONG, "column": COLUMN}'
_EXIT_STATUS = f"""exit status:
  0  done
  1  something needs a decision: a key in doubt (doubt, reconcile) or a corrupt row
     (doubt; show of a corrupt key)
  2  a usage error, or a ledger that cannot be used

A row changed outside safeact is listed as corrupt, with what is wrong, instead of
ending the listing; a line on stderr counts such rows, and a listing still exits 0.
With --json, a corrupt key is {_CORRUPT_JSON}."""


class _UsageError(Exception):
    """A mistake on the command line or a ledger that cannot be used: one line, exit 2."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line: ``safeact: error: ...``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"safeact: error: {message} (see `{self.prog} --help`)\n")


# Formatting: pure functions from values to text.


def when(moment: datetime | None) -> str:
    """A time for people: UTC, ISO 8601, whole seconds (``-`` for none)."""
    if moment is None:
        return "-"
    return moment.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="seconds") + "Z"


def age(elapsed: timedelta) -> str:
    """A duration for people, in its two largest units: ``45s``, ``3m20s``, ``2d4h``."""
    seconds = max(0, int(elapsed.total_seconds()))
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts[:2])


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Align ``rows`` under ``header`` in columns two spaces apart."""
    lines = [list(header), *(list(row) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ]


def note(record: Record, reason: DoubtReason | None) -> str:
    """What a person should know about a key beyond its state, given why it needs a decision."""
    if reason is not None:
        return f"in doubt: {reason.value}"
    if record.state is State.FAILED:
        return f"{record.error_type}: {record.error_message}"
    if record.state is State.ATTEMPTING:
        return f"running: process {record.owner.pid} on {record.owner.host}"
    return ""


def record_json(record: Record) -> dict[str, object]:
    """Every field of ``record`` as JSON values: ISO 8601 times, enum values, owner as object."""

    def plain(_: object, __: object, value: object) -> object:
        if isinstance(value, datetime):
            return value.isoformat()
        if isinstance(value, State | DoubtReason):
            return value.value
        return value

    return attrs.asdict(record, value_serializer=plain)


def corrupt_json(error: CorruptRecordError) -> dict[str, object]:
    """A corrupt key as ``--json`` prints it: the key, what is wrong, and the column."""
    return {"key": error.subject, "corrupt": error.problem, "column": error.column}


def ls_row(found: Record | CorruptRecordError, reason: DoubtReason | None) -> list[str]:
    """One key as ``ls`` cells: key, tool, state, attempted, finished, note (why in doubt)."""
    if isinstance(found, CorruptRecordError):
        return [found.subject, "?", "corrupt", "?", "?", found.problem]
    return [
        found.key,
        found.tool,
        found.state.value,
        when(found.attempted_at),
        when(found.finished_at),
        note(found, reason),
    ]


def saga_row(found: SagaRecord | CorruptRecordError) -> list[str]:
    """One saga as ``sagas`` cells: id, state, steps, started, updated, aborted step, reason."""
    if isinstance(found, CorruptRecordError):
        return [found.subject, "corrupt", "?", "?", "?", "", found.problem]
    return [
        found.saga_id,
        found.state.value,
        str(len(found.steps)),
        when(found.started_at),
        when(found.updated_at),
        found.aborted_step or "",
        found.abort_reason or "",
    ]


def event_line(event: Event | CorruptRecordError) -> list[str]:
    """One history event as table cells: time, from → to, why, by whom, note."""
    if isinstance(event, CorruptRecordError):
        return ["?", "(corrupt event)", "?", "?", event.problem]
    from_state = "(new)" if event.from_state is None else event.from_state.value
    to_state = "(purged)" if event.to_state is None else event.to_state.value
    by = (
        f"by operator on {event.host} (pid {event.pid})"
        if event.by == "operator"
        else f"by process {event.pid} on {event.host}"
    )
    return [when(event.at), f"{from_state} → {to_state}", event.why.value, by, event.note or ""]


def show_lines(
    record: Record,
    late: Sequence[Record | CorruptRecordError],
    events: Sequence[Event | CorruptRecordError],
) -> list[str]:
    """Everything about one key: the record, its receipt, outcome, late completions, history."""
    owner = record.owner
    fields = [
        ("key", record.key),
        ("state", record.state.value),
        ("tool", record.tool),
        ("attempted at", when(record.attempted_at)),
        ("finished at", when(record.finished_at)),
        ("args hash", record.args_hash),
        ("attempt id", record.attempt_id),
        ("owner", f"process {owner.pid} on {owner.host} (boot {owner.boot_id or '?'})"),
    ]
    if record.state in UNSETTLED:
        fields.append(("lease until", when(record.lease_until)))
    if record.doubt_reason is not None:
        fields.append(("doubt reason", record.doubt_reason.value))
    if record.state is State.SUCCEEDED:
        fields.append(("result", json.dumps(record.result)))
    if record.error_type is not None:
        fields.append(("error", f"{record.error_type}: {record.error_message}"))
    lines = field_lines(fields)
    if late:
        lines += [
            "",
            (
                "late completions (an attempt finished after the key had moved on: closed by "
                "an operator or a probe, or released and run again; the key's row is unchanged):"
            ),
        ]
        lines += [f"  {late_line(done)}" for done in late]
    return [*lines, "", "history:", *history_lines(events)]


def field_lines(fields: Sequence[tuple[str, str]]) -> list[str]:
    """Named values, one per line, the values aligned two spaces after the longest name."""
    width = max(len(name) for name, _ in fields) + 2
    return [f"{name.ljust(width)}{value}" for name, value in fields]


def late_line(done: Record | CorruptRecordError) -> str:
    """A late completion: its attempt, outcome and when; or, corrupt, what is wrong."""
    if isinstance(done, CorruptRecordError):
        return f"(corrupt) {done.problem}"
    outcome = (
        f"result {json.dumps(done.result)}"
        if done.state is State.SUCCEEDED
        else f"error {done.error_type}: {done.error_message}"
    )
    return f"attempt {done.attempt_id}: {done.state.value} at {when(done.finished_at)}, {outcome}"


def corrupt_lines(
    error: CorruptRecordError, events: Sequence[Event | CorruptRecordError]
) -> list[str]:
    """A key whose row cannot be read: what is wrong and what to do, then its history."""
    fields = [("key", error.subject), ("corrupt", error.problem), ("what to do", error.fix)]
    return [*field_lines(fields), "", "history:", *history_lines(events)]


def history_lines(events: Sequence[Event | CorruptRecordError]) -> list[str]:
    """A key's or a saga's history, one indented line per event."""
    if not events:
        return ["  (none: settled before the ledger kept histories)"]
    return [
        "  " + line
        for line in table(["TIME", "CHANGE", "WHY", "BY", "NOTE"], map(event_line, events))[1:]
    ]


def corrupt_count(keys: int, sagas: int) -> list[str]:
    """``stats``'s line on corrupt rows, which its counts leave out (nothing if none)."""
    if not keys and not sagas:
        return []
    line = (
        f"corrupt: {keys} key(s) and {sagas} saga(s), not counted above "
        "(changed outside safeact; see safeact ls and safeact sagas)"
    )
    return [line]


def count_row(name: str, counts: Mapping[State, int]) -> list[str]:
    """A row of the stats table: how many keys ``name`` has in each state, and in all."""
    return [name, *(str(counts.get(s, 0)) for s in State), str(sum(counts.values()))]


def size(ledger: Path) -> tuple[int, str]:
    """Bytes on disk of the ledger with its -wal and -shm files, and which files they are."""
    parts = [ledger, ledger.with_name(f"{ledger.name}-wal"), ledger.with_name(f"{ledger.name}-shm")]
    present = {part: part.stat().st_size for part in parts if part.exists()}
    detail = ", ".join(f"{part.name} {n:,}" for part, n in present.items())
    return sum(present.values()), detail


# Parsing values.


def moment(text: str) -> datetime:
    """A point in time: an age before now (``30d``, units s, m, h, d, w) or an ISO date/time.

    A time without a zone is UTC.
    """
    text = text.strip()
    if match := _AGE.fullmatch(text):
        try:
            return utc_now() - timedelta(seconds=int(match[1]) * _UNITS[match[2]])
        except OverflowError:
            raise argparse.ArgumentTypeError(
                f"{text!r} reaches back before the year 1: give a shorter age or a date"
            ) from None
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an age like 2h or 30d (units s, m, h, d, w) "
            "nor an ISO date or time like 2026-01-31 or 2026-01-31T12:00"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def states(text: str) -> list[State]:
    """A comma-separated list of key states."""
    try:
        return [State(part.strip().lower()) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: states are {', '.join(s.value for s in State)}"
        ) from None


def json_value(text: str) -> object:
    """A JSON document."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON ({exc})") from None


def load_probes(spec: str) -> Mapping[str, Probe[object]]:
    """Import the mapping of tool names to probes named ``MODULE:NAME`` or ``FILE.py:NAME``."""
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise _UsageError(f"--probes {spec!r}: expected MODULE:NAME or path/to/file.py:NAME")
    try:
        module = _import(where)
    except _UsageError as exc:
        raise _UsageError(f"--probes {spec!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - anything the user's module raises is their error
        raise _UsageError(
            f"--probes {spec!r}: cannot import {where}: {type(exc).__name__}: {exc}"
        ) from None
    if not hasattr(module, name):
        raise _UsageError(f"--probes {spec!r}: {where} has no {name}")
    probes = getattr(module, name)
    if not isinstance(probes, Mapping) or not all(
        isinstance(tool, str) and callable(probe) for tool, probe in probes.items()
    ):
        raise _UsageError(
            f"--probes {spec!r}: {name} must be a mapping of tool names to probes, "
            f"got {type(probes).__name__}"
        )
    return cast("Mapping[str, Probe[object]]", probes)


def _import(where: str) -> ModuleType:
    """Import a module by name (the working directory first, as ``python -m`` does) or file."""
    if not where.endswith(".py") and "/" not in where:
        sys.path.insert(0, str(Path.cwd()))
        return importlib.import_module(where)
    found = importlib.util.spec_from_file_location("safeact_probes", where)
    if found is None or found.loader is None or not Path(where).is_file():
        raise _UsageError(f"no Python file at {where}")
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


# Commands: each takes the parsed options and prints; it returns the exit code.


def open_store(location: str) -> Store:
    """Open an existing ledger (a file, or a PostgreSQL URL); never create one."""
    if names_postgres(location):
        return get_store(location)
    ledger = Path(location)
    if not ledger.exists():
        raise _UsageError(
            f"{ledger}: no such file (safeact creates a ledger only when a tool uses it)"
        )
    if not ledger.is_file() or ledger.stat().st_size == 0:
        raise _UsageError(f"{ledger}: not a safeact ledger")
    return get_store(ledger)


def cmd_ls(options: argparse.Namespace, store: Store) -> int:
    state = None if options.state is None else State(options.state)
    found = store.scan_records(state=state, tool=options.tool, since=options.since)
    if options.json:
        _print(
            json.dumps(record_json(r) if isinstance(r, Record) else corrupt_json(r)) for r in found
        )
    else:
        now = utc_now()
        rows = [
            ls_row(
                r,
                None
                if isinstance(r, CorruptRecordError)
                else abandonment(r, now=now, owner_gone=store._owner_gone),
            )
            for r in found
        ]
        _print(table(["KEY", "TOOL", "STATE", "ATTEMPTED", "FINISHED", "NOTE"], rows))
    report_corrupt(store, found)
    return 0


def cmd_show(options: argparse.Namespace, store: Store) -> int:
    try:
        record = store.get(options.key)
    except CorruptRecordError as error:
        events = store.scan_history(options.key)
        _print(corrupt_lines(error, events))
        report_corrupt(store, [error, *events])
        return 1
    events = store.scan_history(options.key)
    if record is None:
        if not events:
            raise _UsageError(f"{store.location}: no key {options.key!r}")
        _print([f"key {options.key!r} is not in the ledger any more", "", "history:"])
        _print(history_lines(events))
        report_corrupt(store, events)
        return 0
    late = store.scan_late_completions(options.key)
    _print(show_lines(record, late, events))
    report_corrupt(store, [*late, *events])
    return 0


def in_doubt(store: Store) -> list[tuple[Record, DoubtReason, timedelta]]:
    """The keys that need a decision, oldest first, with why and for how long."""
    return doubts_among(store, store.list_in_doubt())


def doubts_among(
    store: Store, records: Iterable[Record]
) -> list[tuple[Record, DoubtReason, timedelta]]:
    """Those of ``records`` that need a decision, in their order, with why and for how long."""
    now = utc_now()
    return [
        (r, reason, now - r.attempted_at)
        for r in records
        if (
            reason := abandonment(
                r, now=now, owner_gone=store._owner_gone, owner_lost=store._owner_lost
            )
        )
        is not None
    ]


def doubt_table(doubts: Sequence[tuple[Record, DoubtReason, timedelta]]) -> list[str]:
    """A table of keys that need a decision, with why and for how long."""
    return table(
        ["KEY", "TOOL", "STATE", "ATTEMPTED", "AGE", "REASON"],
        [
            [r.key, r.tool, r.state.value, when(r.attempted_at), age(elapsed), reason.value]
            for r, reason, elapsed in doubts
        ],
    )


def cmd_doubt(options: argparse.Namespace, store: Store) -> int:
    # Every key is read, not only the unsettled ones: a corrupt row in any state needs
    # attention (its next call raises), and an unreadable state may hide an unsettled key.
    found = store.scan_records()
    corrupt = [r for r in found if isinstance(r, CorruptRecordError)]
    doubts = doubts_among(store, [r for r in found if isinstance(r, Record)])
    if options.json:
        _print(
            json.dumps(
                {**record_json(r), "reason": reason.value, "age_seconds": elapsed.total_seconds()}
            )
            for r, reason, elapsed in doubts
        )
        _print(json.dumps(corrupt_json(error)) for error in corrupt)
    elif doubts:
        _print(doubt_table(doubts))
        _print(
            [
                "",
                f"{len(doubts)} in doubt; after checking each one, close it with",
                (
                    f"  safeact resolve {store.location} KEY "
                    "--happened --result JSON | --not-happened"
                ),
            ]
        )
    else:
        _print(["nothing in doubt"])
    # A late completion of a corrupt key comes back as that key's error: listed already.
    late = [
        done
        for done in store.scan_late_completions()
        if not (isinstance(done, CorruptRecordError) and done.table == "calls")
    ]
    if not options.json:
        _print(corrupt_section(store, corrupt))
        _print(late_section(store, late))
    return 1 if report_corrupt(store, [*corrupt, *late]) or doubts else 0


def corrupt_section(store: Store, corrupt: Sequence[CorruptRecordError]) -> list[str]:
    """``doubt``'s list of corrupt keys, with what is wrong with each (nothing if none)."""
    if not corrupt:
        return []
    return [
        "",
        (
            f"{len(corrupt)} corrupt key(s), changed outside safeact: nothing runs under them "
            f"until they are mended; see safeact show {store.location} KEY"
        ),
        *(f"  {error.subject}  {error.problem}" for error in corrupt),
    ]


def late_section(store: Store, late: Sequence[Record | CorruptRecordError]) -> list[str]:
    """``doubt``'s list of late completions (nothing if none)."""
    if not late:
        return []
    return [
        "",
        (
            f"{len(late)} late completion(s): an owner finished after its key had "
            f"moved on; see safeact show {store.location} KEY"
        ),
        *(
            f"  {done.subject}  (corrupt) {done.problem}"
            if isinstance(done, CorruptRecordError)
            else f"  {done.key}  attempt {done.attempt_id}  {done.state.value}"
            for done in late
        ),
    ]


def cmd_resolve(options: argparse.Namespace, store: Store) -> int:
    if options.result is not NO_RESULT and not options.happened:
        raise _UsageError("--result goes with --happened: a key that did not happen has no result")
    if options.result is NO_RESULT and options.happened:
        raise _UsageError(
            "--happened needs --result JSON: what the tool would have returned "
            "(--result null for a tool that returns None)"
        )
    if options.force and options.happened:
        raise _UsageError("--force goes with --not-happened: --happened needs no proof")
    before = store.get(options.key)
    encode, tool = _result_check(store, options.key) if options.happened else (None, None)
    try:
        after = store._decide(  # noqa: SLF001 - the command line is the operator's seat
            options.key,
            happened=options.happened,
            result=options.result,
            encode=encode_untyped if encode is None else encode,
            tool=tool,
            attempt_id=options.attempt,
            note=options.note,
            force=options.force,
        )
    except (ValueError, TypeError) as exc:
        raise _UsageError(str(exc)) from None
    was = "?" if before is None else before.state.value
    _print([f"{after.key}: {was} → {after.state.value}"])
    return 0


def cmd_amend(options: argparse.Namespace, store: Store) -> int:
    encode, tool = _result_check(store, options.key)
    try:
        after = store._amend(  # noqa: SLF001 - the command line is the operator's seat
            options.key,
            result=options.result,
            encode=encode_untyped if encode is None else encode,
            tool=tool,
            note=options.note,
        )
    except (ValueError, TypeError) as exc:
        raise _UsageError(str(exc)) from None
    _print([f"{after.key}: result amended to {json.dumps(after.result)}"])
    return 0


def _result_check(store: Store, key: str) -> tuple[Callable[[object], JSON] | None, str | None]:
    """How to store an operator's result for ``key``: checked by its tool if it can be found.

    Returns the tool's checking encoder and name, or ``(None, None)`` after saying on stderr
    why the result goes in unchecked (a misfit then shows when the key is replayed, with
    the advice to amend it).
    """
    record = store.get(key)
    if record is None:
        return None, None  # the decision itself says the key is unknown
    found = find_tool(record.tool)
    if isinstance(found, str):
        sys.stderr.write(
            f"safeact: warning: the result is not checked against {record.tool}'s return "
            f"type ({found}); if it does not fit, replaying {key!r} says so: then correct "
            f"it with safeact amend\n"
        )
        return None, None
    return found._checked_json, found.name  # noqa: SLF001 - the command line is the operator's seat


def find_tool(name: str) -> _Guard[object] | str:
    """Import the tool called ``name`` (``module.qualname``, the working directory first).

    Returns the tool, or why it could not be found: a tool given another ``name=``, or
    whose module does not import here, cannot be.
    """
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            found: object = _import(module_name)
        except ModuleNotFoundError:
            continue
        except Exception as exc:  # noqa: BLE001 - anything the user's module raises is theirs
            return f"importing {module_name} raised {type(exc).__name__}: {exc}"
        for attribute in parts[cut:]:
            found = getattr(found, attribute, None)
        if isinstance(found, _Guard) and found.name == name:
            return cast("_Guard[object]", found)
        return f"{module_name} has no tool {'.'.join(parts[cut:])}"
    return f"no importable module holds {name}"


def cmd_sagas(options: argparse.Namespace, store: Store) -> int:
    state = None if options.state is None else SagaState(options.state)
    found = store.scan_sagas(state)
    header = ["SAGA", "STATE", "STEPS", "STARTED", "UPDATED", "ABORTED STEP", "REASON"]
    _print(table(header, map(saga_row, found)))
    report_corrupt(store, found)
    return 0


def cmd_purge(options: argparse.Namespace, store: Store) -> int:
    try:
        purged = store.purge(options.older_than, states=options.state, dry_run=options.dry_run)
    except ValueError as exc:
        raise _UsageError(str(exc)) from None
    verb = "would remove" if options.dry_run else "removed"
    keys, sagas = len(purged.keys), len(purged.sagas)
    _print(
        [
            f"{verb} {keys} key{'s' * (keys != 1)} and {sagas} saga{'s' * (sagas != 1)} "
            f"finished before {when(options.older_than)}"
            + (" (dry run: nothing was removed)" if options.dry_run else "")
        ]
    )
    _print([f"  key   {key}" for key in purged.keys] + [f"  saga  {saga}" for saga in purged.sagas])
    return 0


def cmd_stats(_: argparse.Namespace, store: Store) -> int:
    # Every row is read (not counted in SQL) so that corrupt rows are found, and counted apart.
    found = store.scan_records()
    records = [r for r in found if isinstance(r, Record)]
    per_tool: dict[str, Counter[State]] = {}
    for record in records:
        per_tool.setdefault(record.tool, Counter())[record.state] += 1
    everything = sum(per_tool.values(), Counter[State]())
    rows = [count_row(tool, n) for tool, n in sorted(per_tool.items())]
    rows.append(count_row("(all tools)", everything))
    _print(table(["TOOL", *(s.value.upper() for s in State), "TOTAL"], rows))
    sagas_found = store.scan_sagas()
    sagas = Counter(s.state.value for s in sagas_found if isinstance(s, SagaRecord))
    doubt = [r for r, _, _ in doubts_among(store, records)]
    on_disk = (
        "size on disk: {:,} bytes ({})".format(*size(store.path))
        if isinstance(store, SqliteStore)
        else f"size: on the server ({store.location})"
    )
    _print(
        [
            "",
            "sagas: " + (", ".join(f"{n} {state}" for state, n in sorted(sagas.items())) or "none"),
            "oldest in doubt: "
            + (
                f"{doubt[0].key}, attempted {age(utc_now() - doubt[0].attempted_at)} ago"
                if doubt
                else "none"
            ),
            *corrupt_count(len(found) - len(records), len(sagas_found) - sum(sagas.values())),
            on_disk,
        ]
    )
    report_corrupt(store, [*found, *sagas_found])
    return 0


def cmd_reconcile(options: argparse.Namespace, store: Store) -> int:
    probes = {} if options.probes is None else load_probes(options.probes)
    events = store.reconcile(probes)
    rows = [[e.subject, *event_line(e)[1:3], e.note or ""] for e in events]
    if rows:
        _print(table(["KEY", "CHANGE", "WHY", "NOTE"], rows))
    elif probes:
        _print(["no probe answered: no in-doubt key has a probe for its tool"])
    else:
        _print(["no probes given: abandoned keys marked, proof of this host's dead owners kept"])
    left = in_doubt(store)
    if not left:
        _print(["", "nothing left in doubt"])
        return 0
    unprobed = sum(1 for r, _, _ in left if r.tool not in probes)
    _print(["", f"still in doubt: {len(left)} ({unprobed} with no probe for their tool)"])
    _print(doubt_table(left))
    return 1


def cmd_migrate(options: argparse.Namespace) -> int:
    if names_postgres(options.ledger):
        from safeact._postgres import migrate_postgres  # noqa: PLC0415 - an optional extra

        old, new = migrate_postgres(options.ledger)
        if old == new:
            _print([f"{options.ledger} is already at schema {new}"])
        else:
            done = "created schema" if old == 0 else f"migrated from schema {old} to"
            _print([f"{done} {new} in {options.ledger}"])
        return 0
    ledger = Path(options.ledger)
    backups = f"{ledger.name}.v*.bak*"
    before = set(ledger.parent.glob(backups))
    old, new = migrate(ledger)
    if old == new:
        _print([f"{ledger} is already at schema {new}"])
        return 0
    kept = sorted(set(ledger.parent.glob(backups)) - before)
    copy = f" (old file kept as {kept[0]})" if len(kept) == 1 else ""
    _print([f"migrated {ledger} from schema {old} to {new}{copy}"])
    return 0


# The parser and the entry point.


def _print(lines: Iterable[str]) -> None:
    sys.stdout.write("".join(f"{line}\n" for line in lines))


def report_corrupt(store: Store, found: Iterable[object]) -> int:
    """Say on stderr how many of ``found`` are corrupt rows (if any); return how many."""
    corrupt = sum(isinstance(item, CorruptRecordError) for item in found)
    if corrupt:
        sys.stderr.write(
            f"safeact: warning: {corrupt} corrupt row{'s' * (corrupt != 1)} in "
            f"{store.location}, shown as corrupt: changed outside safeact; restore from a "
            f"backup or mend by hand (safeact show {store.location} KEY says how)\n"
        )
    return corrupt


def parser() -> _Parser:
    """The command line: one subcommand per operation, each with an example in its help."""
    top = _Parser(
        prog="safeact",
        description="Inspect and operate a safeact ledger.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "example:\n  safeact doubt agent.db   # what needs a decision? (exit 1 if anything)"
            f"\n\n{_EXIT_STATUS}"
        ),
    )
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str, *examples: str) -> _Parser:
        sub = commands.add_parser(
            name,
            help=summary,
            description=summary,
            epilog="example:\n" + "\n".join(f"  {example}" for example in examples),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        sub.add_argument("ledger", metavar="LEDGER", help="the ledger file, or a postgresql:// URL")
        return sub

    ls = command(
        "ls",
        "List the keys, oldest attempt first; a corrupt row is listed as corrupt.",
        "safeact ls agent.db --state failed --since 2h",
        "safeact ls agent.db --json | jq -r 'select(.tool == \"demo.send_refund\") | .key'",
    )
    ls.add_argument("--state", choices=[s.value for s in State])
    ls.add_argument("--tool", help="only this tool's keys")
    ls.add_argument("--since", type=moment, metavar="WHEN", help=f"attempted since: {_WHEN}")
    ls.add_argument(
        "--json", action="store_true", help=f"one JSON object per key (corrupt: {_CORRUPT_JSON})"
    )

    show = command(
        "show",
        "Show one key: its record, receipt, result or error, and history; exit 1 if its row "
        "is corrupt (what is wrong and what to do are shown).",
        "safeact show agent.db refund-1002",
    )
    show.add_argument("key", metavar="KEY")

    doubt = command(
        "doubt",
        "List the keys that need a decision (in doubt, or corrupt), oldest first; exit 1 if "
        "there are any.",
        "safeact doubt agent.db || notify-ops 'safeact: keys in doubt'",
    )
    doubt.add_argument(
        "--json", action="store_true", help=f"one JSON object per key (corrupt: {_CORRUPT_JSON})"
    )

    resolve = command(
        "resolve",
        "Close an in-doubt key after checking what really happened.",
        'safeact resolve agent.db refund-1002 --happened --result \'{"to": "bob", '
        "\"amount\": 20}' --note 'bank ref 8841'",
        "safeact resolve agent.db refund-1003 --not-happened --note 'no payment at the bank'",
    )
    resolve.epilog = (
        f"{resolve.epilog}\n\n--not-happened needs proof that the key's owner is finished "
        "(it was interrupted, or its process is gone on its host); otherwise add --force, "
        "after checking that process yourself."
    )
    resolve.add_argument("key", metavar="KEY")
    decision = resolve.add_mutually_exclusive_group(required=True)
    decision.add_argument("--happened", action="store_true", help="it ran: record it SUCCEEDED")
    decision.add_argument(
        "--not-happened", dest="happened", action="store_false", help="it did not: release it"
    )
    resolve.add_argument(
        "--result",
        type=json_value,
        default=NO_RESULT,
        metavar="JSON",
        help=(
            "with --happened (required): what the tool would have returned, as JSON; "
            "checked against its return type when the tool's module imports here"
        ),
    )
    resolve.add_argument("--note", help="why: kept in the key's history")
    resolve.add_argument("--attempt", metavar="ID", help="only if the key is still at attempt ID")
    resolve.add_argument(
        "--force",
        action="store_true",
        help=(
            "with --not-happened: release even though the owner is not proven finished "
            "(its lease ran out or its session was lost); the history keeps it as your word"
        ),
    )

    amend = command(
        "amend",
        "Correct the result an operator (or a probe) recorded for a key closed as happened.",
        'safeact amend agent.db refund-1002 --result \'{"to": "bob", "amount": 20}\' '
        "--note 'amount was wrong'",
    )
    amend.epilog = (
        f"{amend.epilog}\n\nThe history keeps the value replaced. A result the action itself "
        "returned is never amended. The result is checked against the tool's return type "
        "when the tool's module imports here."
    )
    amend.add_argument("key", metavar="KEY")
    amend.add_argument(
        "--result", type=json_value, required=True, metavar="JSON", help="the correct result"
    )
    amend.add_argument("--note", help="why: kept in the key's history")

    sagas = command(
        "sagas",
        "List the sagas, stuck rollbacks (compensating) first; a corrupt one as corrupt.",
        "safeact sagas agent.db --state rollback_incomplete",
    )
    sagas.add_argument("--state", choices=[s.value for s in SagaState])

    purge = command(
        "purge",
        "Remove settled keys and finished sagas older than a cut-off; histories stay.",
        "safeact purge agent.db --older-than 30d --state succeeded,failed,released --dry-run",
    )
    purge.add_argument(
        "--older-than", type=moment, required=True, metavar="WHEN", help=f"finished before: {_WHEN}"
    )
    purge.add_argument(
        "--state",
        type=states,
        default=[State.SUCCEEDED, State.FAILED],
        metavar="STATES",
        help="comma-separated (default: succeeded,failed; released is allowed)",
    )
    purge.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")

    command(
        "stats",
        "Count the keys by tool and state (corrupt rows apart); the oldest doubt; the size "
        "on disk.",
        "safeact stats agent.db",
    )

    reconcile = command(
        "reconcile",
        "Mark abandoned keys in doubt, record which owners on this host are provably gone "
        "(so other hosts may release their keys), and ask probes what happened; exit 1 if "
        "any key stays in doubt. Run it on every host, e.g. from cron.",
        "safeact reconcile agent.db --probes ops/probes.py:PROBES",
        "safeact reconcile postgresql://agents@db/agents   # from cron, on each host",
    )
    reconcile.add_argument(
        "--probes",
        metavar="MODULE:NAME",
        help="a dict of tool names to probes, in an importable module or a .py file",
    )

    command(
        "migrate",
        "Upgrade a ledger to this safeact's schema, keeping a copy of the old file.",
        "safeact migrate agent.db",
    )
    return top


_RUN: dict[str, Callable[[argparse.Namespace, Store], int]] = {
    "ls": cmd_ls,
    "show": cmd_show,
    "doubt": cmd_doubt,
    "resolve": cmd_resolve,
    "amend": cmd_amend,
    "sagas": cmd_sagas,
    "purge": cmd_purge,
    "stats": cmd_stats,
    "reconcile": cmd_reconcile,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    options = parser().parse_args(argv)
    try:
        if options.command == "migrate":
            return cmd_migrate(options)
        with open_store(options.ledger) as store:
            return _RUN[options.command](options, store)
    except (_UsageError, SafeError) as exc:
        sys.stderr.write(f"safeact: error: {exc}\n")
        return 2
    except BrokenPipeError:  # `safeact ls big.db | head`: the reader left, which is fine
        # Point stdout at /dev/null, so the interpreter's last flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
