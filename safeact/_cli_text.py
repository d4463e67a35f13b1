"""How the ``safeact`` command shows things to people: pure functions from values to lines.

Every value that comes from the ledger (a key, a tool's name, a note, an error message) is
shown ``escaped``: control and format characters as escapes, and a backslash doubled where
it could be read as one, so no key can rewrite the terminal or break a table, and two keys
never look the same. Every line is ``printable`` besides, whatever it holds. A call's kept
arguments are shown as JSON (``arguments``), whose escapes make any text in them plain.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from safeact._history import Why
from safeact._protocol import UNSETTLED, Approval, ApprovalState, Record, SagaRecord, State
from safeact.exceptions import CorruptRecordError

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from safeact._history import Event
    from safeact._json import JSON

__all__ = [
    "SHORT_HASH",
    "age",
    "approval_fields",
    "approval_lines",
    "approvals_table",
    "arguments",
    "corrupt_count",
    "corrupt_lines",
    "corrupt_section",
    "count_row",
    "decision_line",
    "doubt_table",
    "escaped",
    "event_line",
    "failure",
    "field_lines",
    "history_lines",
    "late_section",
    "ls_row",
    "note",
    "printable",
    "saga_row",
    "show_lines",
    "size",
    "table",
    "when",
]


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


def printable(text: str) -> str:
    r"""``text`` safe to show on a terminal: control and format characters as escapes.

    A key is any string: raw, an escape sequence could move the cursor, rewrite earlier
    lines or reverse the text that follows (U+202E), and a newline or a tab would break
    the table it sits in. Each such character is shown as ``\xNN``, ``\uNNNN`` or
    ``\UNNNNNNNN`` instead; ``--json`` gives the exact text. Printable text is returned
    as it is, so a line made of ``escaped`` values is not escaped twice.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def escaped(value: str) -> str:
    r"""A value (a key, a tool's name, a note) as shown to people: printable and unambiguous.

    As ``printable``, and a backslash is doubled where what follows it could be read as
    an escape (another backslash, an escaped character, or ``x``, ``u`` or ``U`` and hex
    digits): a key holding ESC shows as ``\x1b``, one holding the four characters
    ``\x1b`` as ``\\x1b``. Any other text, a lone backslash in it too, is shown as is.
    """
    if value.isprintable() and "\\" not in value:
        return value
    return "".join(
        _escape(char) if not char.isprintable() else _backslash(value, i) if char == "\\" else char
        for i, char in enumerate(value)
    )


_LOOKS_ESCAPED = re.compile(r"\\|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}")
"""What, right after a backslash, would read as an escape as ``escaped`` shows them."""


def _backslash(value: str, at: int) -> str:
    """The backslash at ``value[at]``, doubled if what follows it would read as an escape."""
    after = at + 1
    if after < len(value) and not value[after].isprintable():
        return "\\\\"  # the next character is shown as an escape, starting with a backslash
    return "\\\\" if _LOOKS_ESCAPED.match(value, after) else "\\"


def _escape(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Align ``rows`` under ``header`` in columns two spaces apart, every cell ``printable``."""
    return aligned(header, rows, None)[0]


def aligned(
    header: Sequence[str], rows: Iterable[Sequence[str]], widths: list[int] | None
) -> tuple[list[str], list[int]]:
    """``rows`` as ``table`` aligns them, in columns ``widths`` wide; and the widths used.

    With ``widths`` None, the header comes first and the columns are as wide as it and
    ``rows`` need: a listing printed a batch at a time passes the first batch's widths on,
    and a wider cell in a later batch pushes the rest of its line to the right.
    """
    lines = [[printable(cell) for cell in row] for row in rows]
    if widths is None:
        lines.insert(0, list(header))
        widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    ], widths


def note(record: Record) -> str:
    """What a person should know about a key beyond its state (as ``get`` reads it)."""
    if record.doubt_reason is not None:
        return f"in doubt: {record.doubt_reason.value}"
    if record.state is State.FAILED:
        return failure(record)
    if record.state is State.ATTEMPTING:
        return f"running: process {record.owner.pid} on {escaped(record.owner.host)}"
    return ""


def failure(record: Record) -> str:
    """The error a key's action raised, or why it is in doubt: ``TYPE: MESSAGE``."""
    return f"{escaped(str(record.error_type))}: {escaped(str(record.error_message))}"


def ls_row(found: Record | CorruptRecordError) -> list[str]:
    """One key as ``ls`` cells: key, tool, state, attempted, finished, note (why in doubt)."""
    if isinstance(found, CorruptRecordError):
        return [escaped(found.subject), "?", "corrupt", "?", "?", found.problem]
    return [
        escaped(found.key),
        escaped(found.tool),
        found.state.value,
        when(found.attempted_at),
        when(found.finished_at),
        note(found),
    ]


def saga_row(found: SagaRecord | CorruptRecordError) -> list[str]:
    """One saga as ``sagas`` cells: id, state, steps, started, updated, aborted step, reason."""
    if isinstance(found, CorruptRecordError):
        return [escaped(found.subject), "corrupt", "?", "?", "?", "", found.problem]
    return [
        escaped(found.saga_id),
        found.state.value,
        str(len(found.steps)),
        when(found.started_at),
        when(found.updated_at),
        escaped(found.aborted_step or ""),
        escaped(found.abort_reason or ""),
    ]


def event_line(event: Event | CorruptRecordError) -> list[str]:
    """One history event as table cells: time, from → to, why, by whom, note."""
    if isinstance(event, CorruptRecordError):
        return ["?", "(corrupt event)", "?", "?", event.problem]
    from_state = "(new)" if event.from_state is None else event.from_state.value
    to_state = "(purged)" if event.to_state is None else event.to_state.value
    change = f"{from_state} → {to_state}"
    if event.from_state is None and event.to_state is None:
        change = _APPROVAL_CHANGES.get(event.why, change)
    host = escaped(event.host)
    by = (
        f"by operator on {host} (pid {event.pid})"
        if event.by == "operator"
        else f"by process {event.pid} on {host}"
    )
    note = escaped(event.note or "")
    return [when(event.at), change, event.why.value, by, note]


_APPROVAL_CHANGES = {
    Why.APPROVAL_REQUESTED: "approval → pending",
    Why.APPROVED: "approval → approved",
    Why.DENIED: "approval → denied",
    Why.PURGED: "approval denied → (purged)",
}
"""What the events of a key's approval changed: they move no key state, so have none."""


def show_lines(
    record: Record,
    recorded: State,
    late: Sequence[Record | CorruptRecordError],
    events: Sequence[Event | CorruptRecordError],
    approval: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """Everything about one key: the record, its receipt, outcome, late completions, history.

    ``record`` is the key as ``get`` reads it; ``recorded`` the state its row holds, shown
    too when a crash left it ATTEMPTING and nobody has marked it in doubt yet. Its kept
    arguments are shown when the tool keeps them; ``approval`` is ``approval_fields`` of
    the key's approval, for a tool that needs one.
    """
    owner = record.owner
    state = record.state.value
    if recorded is not record.state:
        state += f" (recorded {recorded.value}: the next call, or safeact reconcile, marks it)"
    boot = escaped(owner.boot_id) or "?"
    fields = [
        ("key", escaped(record.key)),
        ("state", state),
        ("tool", escaped(record.tool)),
        ("attempted at", when(record.attempted_at)),
        ("finished at", when(record.finished_at)),
        ("args hash", escaped(record.args_hash)),
        ("attempt id", escaped(record.attempt_id)),
        ("owner", f"process {owner.pid} on {escaped(owner.host)} (boot {boot})"),
    ]
    if record.state in UNSETTLED:
        fields.append(("lease until", when(record.lease_until)))
    if record.doubt_reason is not None:
        fields.append(("doubt reason", record.doubt_reason.value))
    if record.state is State.SUCCEEDED:
        fields.append(("result", json.dumps(record.result)))
    if record.error_type is not None:
        fields.append(("error", failure(record)))
    if record.arguments is not None:
        fields.append(("arguments", arguments(record.arguments)))
    fields += approval
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
        else f"error {failure(done)}"
    )
    attempt = escaped(done.attempt_id)
    return f"attempt {attempt}: {done.state.value} at {when(done.finished_at)}, {outcome}"


def corrupt_lines(
    error: CorruptRecordError, events: Sequence[Event | CorruptRecordError]
) -> list[str]:
    """A key whose row cannot be read: what is wrong and what to do, then its history."""
    fields = [
        ("key", escaped(error.subject)),
        ("corrupt", error.problem),
        ("what to do", error.fix),
    ]
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
        "(changed outside safeact; safeact check LEDGER names every corrupt row)"
    )
    return [line]


def count_row(name: str, counts: Mapping[State, int]) -> list[str]:
    """A row of the stats table: how many keys ``name`` has in each state, and in all."""
    return [escaped(name), *(str(counts.get(s, 0)) for s in State), str(sum(counts.values()))]


def size(ledger: Path) -> tuple[int, str]:
    """Bytes on disk of the ledger with its -wal and -shm files, and which files they are."""
    parts = [ledger, ledger.with_name(f"{ledger.name}-wal"), ledger.with_name(f"{ledger.name}-shm")]
    present = {part: part.stat().st_size for part in parts if part.exists()}
    detail = ", ".join(f"{part.name} {n:,}" for part, n in present.items())
    return sum(present.values()), detail


def doubt_table(doubts: Sequence[Record], now: datetime) -> list[str]:
    """A table of keys in doubt (as ``get`` reads them), with why and for how long.

    When a tool keeps its calls' arguments, a last column shows them (``-`` for a key
    whose tool does not); without any, the table has no such column.
    """
    kept = any(r.arguments is not None for r in doubts)
    return table(
        ["KEY", "TOOL", "STATE", "ATTEMPTED", "AGE", "REASON", *(["ARGUMENTS"] * kept)],
        [
            [
                escaped(r.key),
                escaped(r.tool),
                r.state.value,
                when(r.attempted_at),
                age(now - r.attempted_at),
                "-" if r.doubt_reason is None else r.doubt_reason.value,
                *([arguments(r.arguments)] * kept),
            ]
            for r in doubts
        ],
    )


def arguments(kept: JSON) -> str:
    r"""A call's kept arguments for people: compact JSON, ASCII (``-`` when none are kept).

    JSON's own escapes show every control or non-ASCII character (``\u001b``) and keep
    the text unambiguous, as ``show`` shows a result.
    """
    return "-" if kept is None else json.dumps(kept)


SHORT_HASH = 12
"""How many characters of an args hash a table shows (``--args-hash`` takes that many)."""


def approvals_table(
    found: Sequence[Approval | CorruptRecordError], *, every: bool, widths: list[int] | None
) -> tuple[list[str], list[int]]:
    """Approval requests as a table, oldest first; ``every``: with their state and decision.

    A corrupt row is a row saying what is wrong with it, in its place. ``widths``: see
    ``aligned`` (None: the first batch, with the header).
    """
    header = ["KEY", "TOOL", "REQUESTED", "ARGS HASH", "ARGUMENTS"]
    if every:
        header[2:2] = ["STATE"]
        header[-1:-1] = ["DECIDED", "BY", "NOTE"]
    return aligned(header, [_approval_row(a, every=every) for a in found], widths)


def _approval_row(found: Approval | CorruptRecordError, *, every: bool) -> list[str]:
    if isinstance(found, CorruptRecordError):
        cells = [escaped(found.subject), "?", "?", "?", f"corrupt: {found.problem}"]
        if every:
            cells[2:2] = ["corrupt"]
            cells[-1:-1] = ["?", "?", ""]
        return cells
    cells = [
        escaped(found.key),
        escaped(found.tool),
        when(found.requested_at),
        escaped(found.args_hash[:SHORT_HASH]),
        arguments(found.arguments),
    ]
    if every:
        cells[2:2] = [found.state.value]
        cells[-1:-1] = [
            when(found.decided_at),
            escaped(found.decided_by or "-"),
            escaped(found.note or ""),
        ]
    return cells


def approval_fields(approval: Approval | CorruptRecordError) -> list[tuple[str, str]]:
    """What ``show`` says of a key's approval: where it stands, and who decided, when, why."""
    if isinstance(approval, CorruptRecordError):
        return [("approval", f"(corrupt) {approval.problem}")]
    requested = f"requested {when(approval.requested_at)}"
    if approval.state is ApprovalState.PENDING:
        return [("approval", f"pending, {requested}")]
    verb = "denied" if approval.state is ApprovalState.DENIED else "approved"
    said = f"{verb} by {escaped(str(approval.decided_by))} at {when(approval.decided_at)}"
    if approval.note is not None:
        said += f": {escaped(approval.note)}"
    if approval.state is ApprovalState.CONSUMED:
        said = f"consumed by attempt {escaped(str(approval.attempt_id))} ({said})"
    return [("approval", f"{said}; {requested}")]


def approval_lines(
    approval: Approval | CorruptRecordError, events: Sequence[Event | CorruptRecordError]
) -> list[str]:
    """``show`` of a key with an approval request and no row of its own: the request, history."""
    if isinstance(approval, CorruptRecordError):
        return corrupt_lines(approval, events)
    fields = [
        ("key", escaped(approval.key)),
        ("state", f"not attempted (approval {approval.state.value})"),
        ("tool", escaped(approval.tool)),
        ("args hash", escaped(approval.args_hash)),
    ]
    if approval.arguments is not None:
        fields.append(("arguments", arguments(approval.arguments)))
    fields += approval_fields(approval)
    return [*field_lines(fields), "", "history:", *history_lines(events)]


def decision_line(before: Approval | None, after: Approval) -> str:
    """What ``approve`` and ``deny`` recorded: the key, the change, who decided and why."""
    was = "?" if before is None else before.state.value
    said = f"{escaped(after.key)}: {was} → {after.state.value} by {escaped(str(after.decided_by))}"
    return said if after.note is None else f"{said}: {escaped(after.note)}"


def corrupt_section(location: str, corrupt: Sequence[CorruptRecordError]) -> list[str]:
    """``doubt``'s list of corrupt keys, with what is wrong with each (nothing if none)."""
    if not corrupt:
        return []
    return [
        "",
        (
            f"{len(corrupt)} corrupt key(s), changed outside safeact: nothing runs under them "
            f"until they are mended; see safeact show {location} KEY"
        ),
        *(f"  {escaped(error.subject)}  {error.problem}" for error in corrupt),
    ]


def late_section(location: str, late: Sequence[Record | CorruptRecordError]) -> list[str]:
    """``doubt``'s list of late completions (nothing if none)."""
    if not late:
        return []
    return [
        "",
        (
            f"{len(late)} late completion(s): an owner finished after its key had "
            f"moved on; see safeact show {location} KEY"
        ),
        *(
            f"  {escaped(done.subject)}  (corrupt) {done.problem}"
            if isinstance(done, CorruptRecordError)
            else f"  {escaped(done.key)}  attempt {escaped(done.attempt_id)}  {done.state.value}"
            for done in late
        ),
    ]
