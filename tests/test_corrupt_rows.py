"""Rows changed outside safeact: refused by name, never run, shown as corrupt, no traceback."""

import contextlib
import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safeact import (
    CorruptRecordError,
    SafeTool,
    Saga,
    State,
    Store,
    StoreError,
    get_store,
    safe,
)
from safeact._cli import main
from safeact._rows import _whole_json

CALLS = [
    ("result", "{not json", "result is not valid JSON"),
    ("result", "[" * 100_000 + "]" * 100_000, "result is not valid JSON"),
    ("result", "7 8", "result is not valid JSON (Extra data: line 1 column 3"),
    ("result", "\ufeff7", "result is not valid JSON (Unexpected UTF-8 BOM"),
    ("state", "exploded", "state is 'exploded', not one of attempting, succeeded"),
    ("doubt_reason", "gremlins", "doubt_reason is 'gremlins', not one of"),
    ("attempted_at", "yesterday", "attempted_at is 'yesterday', not an ISO 8601 time"),
    ("lease_until", "2026-01-01T00:00:00", "lease_until is '2026-01-01T00:00:00', a time without"),
    ("finished_at", "soon", "finished_at is 'soon', not an ISO 8601 time"),
    ("owner_pid", 0, "owner_pid is 0, not a process id"),
]
"""Corruptions of a ``calls`` row either database can hold: column, value, what is said."""

WRONG_TYPES = [
    ("owner_host", b"\x00host", "owner_host is b'\\x00host', not text"),
    ("owner_boot", b"boot", "owner_boot is b'boot', not text"),
    ("owner_machine", b"machine", "owner_machine is b'machine', not text"),
    ("owner_pidns", b"ns", "owner_pidns is b'ns', not text"),
    ("tool", b"pay", "tool is b'pay', not text"),
    ("args_hash", b"0", "args_hash is b'0', not text"),
    ("attempt_id", b"a", "attempt_id is b'a', not text"),
    ("error_type", b"E", "error_type is b'E', not text"),
    ("error_message", b"m", "error_message is b'm', not text"),
    ("owner_pid", "abc", "owner_pid is 'abc', not a process id"),
    ("owner_started", "early", "owner_started is 'early', not an integer"),
    ("result", b"5", "result is b'5', not text"),
]
"""Values of a type safeact never writes, which only SQLite keeps: column, value, what is said."""

EVENT: dict[str, object] = {
    "kind": "key",
    "subject": "k",
    "attempt_id": "a",
    "from_state": "succeeded",
    "to_state": "succeeded",
    "at": "2026-01-01T00:00:00.000000+00:00",
    "by_kind": "process",
    "by_host": "h",
    "by_pid": 7,
    "why": "ran",
    "note": None,
}
"""A well-formed history event of key ``k``, for tests to spoil."""

HISTORY = [
    ("at", "noon", "at is 'noon', not an ISO 8601 time"),
    ("why", "boredom", "why is 'boredom', not one of the"),
    ("by_kind", "robot", "by_kind is 'robot', not 'process' or 'operator'"),
    ("by_pid", 0, "by_pid is 0, not a process id"),
    ("to_state", "completed", "to_state is 'completed', not one of attempting"),
    ("from_state", "completed", "from_state is 'completed', not one of attempting"),
]
"""Corruptions of a key's history event: column, value, what is said."""

LATE = (
    "INSERT INTO late_completions (key, attempt_id, state, result, error_type, error_message, "
    "finished_at, schema_version) VALUES ('k', ?, ?, '7', NULL, NULL, ?, 3)"
)


def corrupt(location: str, sql: str, *params: object) -> None:
    """Change the ledger behind safeact's back, as a person or another program might.

    ``sql`` uses ``?`` placeholders. The databases' CHECK constraints are lifted first: they
    stop some corruptions (an unknown state), not every way of writing one.
    """
    if location.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(location, autocommit=True) as connection:
            checks = connection.execute(
                "SELECT conrelid::regclass::text, conname FROM pg_constraint "
                "WHERE contype = 'c' AND connamespace = current_schema()::regnamespace"
            ).fetchall()
            for table, name in checks:
                connection.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
            connection.execute(sql.replace("?", "%s"), params)
        return
    with contextlib.closing(sqlite3.connect(location)) as connection:
        connection.execute("PRAGMA ignore_check_constraints = ON")
        connection.execute(sql, params)
        connection.commit()


def spoil(location: str, key: str, column: str, value: object) -> None:
    """Set one column of ``key``'s row to ``value``."""
    corrupt(location, f"UPDATE calls SET {column} = ? WHERE key = ?", value, key)  # noqa: S608 - the tests' own column names


def add_event(location: str, **spoiled: object) -> None:
    """Append a history event of key ``k``, well-formed but for ``spoiled``."""
    values = {**EVENT, **spoiled}
    places = ", ".join("?" * len(values))
    insert = f"INSERT INTO history ({', '.join(values)}) VALUES ({places})"  # noqa: S608 - the tests' own column names
    corrupt(location, insert, *values.values())


def paying(store: Store, runs: list[str]) -> SafeTool[[int], int]:
    """A tool whose action appends its key to ``runs`` each time it really runs."""

    def pay(key: str, amount: int) -> int:
        runs.append(key)
        return amount

    return safe(store, name="pay")(pay)


def paid(location: str | Path, *keys: str) -> None:
    """Run the tool once for each of ``keys``, each succeeding."""
    with get_store(location) as store:
        pay = paying(store, [])
        for key in keys:
            pay(key, 5)


def cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    """Run the command line in this process: exit code, stdout, stderr."""
    code = main([str(arg) for arg in args])
    out, err = capsys.readouterr()
    return code, out, err


# The library: a corrupt row is refused by name, and never lets the action run.


@pytest.mark.parametrize(("column", "value", "said"), CALLS)
def test_a_corrupt_key_is_refused_by_name_and_its_action_not_run(
    any_ledger: str, column: str, value: object, said: str
) -> None:
    """A call under a corrupt key raises StoreError naming the key and the fault; nothing runs."""
    runs: list[str] = []
    with get_store(any_ledger) as store:
        pay = paying(store, runs)
        pay("k", 5)
        spoil(any_ledger, "k", column, value)
        with pytest.raises(StoreError) as raised:
            pay("k", 5)
    assert runs == ["k"]
    assert f"key 'k' is corrupt: {said}" in str(raised.value)


@pytest.mark.parametrize(("column", "value", "said"), CALLS)
def test_get_of_a_corrupt_key_names_the_key_the_column_and_the_fix(
    any_ledger: str, column: str, value: object, said: str
) -> None:
    """Store.get of a corrupt row raises CorruptRecordError: key, column, what is wrong, the fix."""
    from safeact import CorruptRecordError

    paid(any_ledger, "k")
    spoil(any_ledger, "k", column, value)
    with get_store(any_ledger) as store, pytest.raises(CorruptRecordError) as raised:
        store.get("k")
    error = raised.value
    assert (error.table, error.subject, error.column) == ("calls", "k", column)
    assert error.problem.startswith(said)
    assert "it was changed outside safeact" in str(error)
    assert "restore the row from a backup" in str(error)


@pytest.mark.parametrize(("column", "value", "said"), WRONG_TYPES)
def test_a_value_of_a_type_safeact_never_writes_is_corrupt(
    ledger: Path, column: str, value: object, said: str
) -> None:
    """A value of another type than safeact writes there (SQLite keeps any) is corrupt."""
    paid(ledger, "k")
    spoil(str(ledger), "k", column, value)
    with get_store(ledger) as store, pytest.raises(StoreError) as raised:
        store.get("k")
    assert f"key 'k' is corrupt: {said}" in str(raised.value)


def test_records_refuses_a_corrupt_row(any_ledger: str) -> None:
    """Store.records raises StoreError for a corrupt row among good ones."""
    paid(any_ledger, "a", "k")
    spoil(any_ledger, "k", "result", "{")
    with get_store(any_ledger) as store, pytest.raises(StoreError, match="key 'k' is corrupt"):
        store.records()


def test_scan_records_gives_a_corrupt_row_as_its_error_in_its_place(any_ledger: str) -> None:
    """Store.scan_records reads every other key, and gives the corrupt one's error in its place."""
    paid(any_ledger, "a", "k", "z")
    spoil(any_ledger, "k", "state", "exploded")
    with get_store(any_ledger) as store:
        found = store.scan_records()
        only_succeeded = store.scan_records(state=State.SUCCEEDED)
    shown = [getattr(f, "subject", getattr(f, "key", None)) for f in found]
    assert shown == ["a", "k", "z"]
    assert [type(f).__name__ for f in found] == ["Record", "CorruptRecordError", "Record"]
    assert str(found[1]).startswith(f"{store.location}: key 'k' is corrupt: state is")
    assert [getattr(f, "key", f) for f in only_succeeded] == ["a", "z"]  # not k, in no state


def test_a_key_stored_as_bytes_is_named_by_its_repr(ledger: Path) -> None:
    """A key that is not text (SQLite keeps any) is named by its repr, and the rest are read."""
    paid(ledger, "a", "k")
    spoil(str(ledger), "k", "key", b"k")
    with get_store(ledger) as store:
        first, second = store.scan_records()
    assert getattr(first, "key", None) == "a"
    assert (getattr(second, "subject", None), getattr(second, "column", None)) == ("b'k'", "key")


def test_counts_refuses_an_unknown_state_naming_a_key(any_ledger: str) -> None:
    """Store.counts raises StoreError naming the ledger, a key and the column it cannot read."""
    paid(any_ledger, "a", "k")
    spoil(any_ledger, "k", "state", "exploded")
    with get_store(any_ledger) as store, pytest.raises(CorruptRecordError) as raised:
        store.counts()
    assert str(raised.value).startswith(f"{store.location}: key 'k' is corrupt: state is")
    assert raised.value.column == "state"


def test_counts_refuses_a_tool_that_is_not_text(ledger: Path) -> None:
    """Store.counts names the column of a tool stored as bytes (SQLite keeps any type)."""
    paid(ledger, "a", "k")
    spoil(str(ledger), "k", "tool", b"pay")
    with get_store(ledger) as store, pytest.raises(CorruptRecordError) as raised:
        store.counts()
    assert (raised.value.subject, raised.value.column) == ("k", "tool")


@pytest.mark.parametrize(("column", "value", "said"), HISTORY)
def test_history_refuses_a_corrupt_event(
    any_ledger: str, column: str, value: object, said: str
) -> None:
    """Store.history raises StoreError naming the key, the column and the append-only fix."""
    paid(any_ledger, "k")
    add_event(any_ledger, **{column: value})
    with get_store(any_ledger) as store, pytest.raises(StoreError) as raised:
        store.history("k")
    assert str(raised.value).startswith(f"{store.location}: an event in the history of 'k' is ")
    assert f"history of 'k' is corrupt: {said}" in str(raised.value)
    assert "append-only: restore the ledger from a backup" in str(raised.value)


@pytest.mark.parametrize("column", ["by_host", "attempt_id"])
def test_a_history_event_with_a_column_that_is_not_text_names_it(ledger: Path, column: str) -> None:
    """A history column safeact writes as text, stored as bytes, is named (SQLite keeps any)."""
    paid(ledger, "k")
    add_event(str(ledger), **{column: b"x"})
    with get_store(ledger) as store, pytest.raises(CorruptRecordError) as raised:
        store.history("k")
    assert raised.value.column == column


def test_scan_history_gives_a_corrupt_event_in_its_place(any_ledger: str) -> None:
    """Store.scan_history reads the good events and gives the corrupt one's error after them."""
    paid(any_ledger, "k")
    add_event(any_ledger, why="boredom")
    with get_store(any_ledger) as store:
        found = store.scan_history("k")
    assert [type(f).__name__ for f in found] == ["Event", "Event", "CorruptRecordError"]


def test_saga_history_refuses_a_corrupt_event(any_ledger: str) -> None:
    """Store.saga_history raises StoreError for a saga event in a key's state."""
    paid(any_ledger)
    add_event(any_ledger, kind="saga", subject="order-1", to_state="succeeded")
    with get_store(any_ledger) as store, pytest.raises(StoreError, match="history of 'order-1'"):
        store.saga_history("order-1")


def two_sagas(location: str | Path) -> None:
    """Sagas order-1 and order-2, each of one step that succeeded."""
    with get_store(location) as store:
        pay = paying(store, [])
        for saga_id in ("order-1", "order-2"):
            with Saga(saga_id, store) as saga:
                saga.step(pay, 7)


def test_a_corrupt_saga_is_refused(any_ledger: str) -> None:
    """Store.list_sagas raises StoreError naming a saga whose row is corrupt."""
    two_sagas(any_ledger)
    corrupt(any_ledger, "UPDATE sagas SET updated_at = 'later' WHERE saga_id = 'order-1'")
    with get_store(any_ledger) as store, pytest.raises(StoreError, match="saga 'order-1' is"):
        store.list_sagas()


def test_scan_sagas_gives_a_corrupt_saga_in_its_place(any_ledger: str) -> None:
    """Store.scan_sagas reads the other sagas and gives the corrupt one's error."""
    two_sagas(any_ledger)
    corrupt(any_ledger, "UPDATE sagas SET state = 'sulking' WHERE saga_id = 'order-1'")
    with get_store(any_ledger) as store:
        found = store.scan_sagas()
    assert [type(f).__name__ for f in found] == ["CorruptRecordError", "SagaRecord"]


def test_a_corrupt_saga_step_is_refused(ledger: Path) -> None:
    """Store.get_saga raises StoreError for a step whose key is not text, naming the ledger."""
    two_sagas(ledger)
    corrupt(str(ledger), "UPDATE saga_steps SET key = x'00' WHERE saga_id = 'order-2'")
    with get_store(ledger) as store, pytest.raises(StoreError) as raised:
        store.get_saga("order-2")
    assert str(raised.value).startswith(f"{ledger}: a step of saga 'order-2' is corrupt")


@pytest.mark.parametrize(
    ("table", "column", "value"),
    [
        ("sagas", "state", "'sulking'"),
        ("sagas", "started_at", "'later'"),
        ("sagas", "updated_at", "'later'"),
        ("sagas", "aborted_step", "x'00'"),
        ("sagas", "abort_reason", "x'00'"),
        ("saga_steps", "key", "x'00'"),
        ("saga_steps", "compensation", "x'00'"),
    ],
)
def test_a_corrupt_saga_names_its_ledger_and_column(
    ledger: Path, table: str, column: str, value: str
) -> None:
    """Store.get_saga names the ledger, the saga and the column it cannot read, in each table."""
    two_sagas(ledger)
    corrupt(str(ledger), f"UPDATE {table} SET {column} = {value} WHERE saga_id = 'order-2'")  # noqa: S608 - the tests' own names
    with get_store(ledger) as store, pytest.raises(CorruptRecordError) as raised:
        store.get_saga("order-2")
    assert str(raised.value).startswith(f"{ledger}: ")
    assert (raised.value.subject, raised.value.column) == ("order-2", column)


def test_a_saga_id_that_is_not_text_is_named_by_its_repr(ledger: Path) -> None:
    """Store.scan_sagas gives a saga whose id is bytes as an error naming the column."""
    two_sagas(ledger)
    corrupt(str(ledger), "UPDATE sagas SET saga_id = x'6f' WHERE saga_id = 'order-2'")
    with get_store(ledger) as store:
        found = store.scan_sagas()
    assert [getattr(f, "column", None) for f in found] == [None, "saga_id"]


@pytest.mark.parametrize("length", [40, 41])
def test_a_corrupt_value_is_shown_whole_up_to_40_characters(ledger: Path, length: int) -> None:
    """A corrupt value's repr is quoted whole up to 40 characters, else cut to 37 and '...'."""
    paid(ledger, "k")
    text = "x" * (length - 2)  # its repr adds two quotes
    spoil(str(ledger), "k", "attempted_at", text)
    with get_store(ledger) as store, pytest.raises(CorruptRecordError) as raised:
        store.get("k")
    shown = repr(text) if length <= 40 else repr(text)[:37] + "..."
    assert raised.value.problem == f"attempted_at is {shown}, not an ISO 8601 time"


def test_reconcile_refuses_a_corrupt_unsettled_row_naming_its_ledger(any_ledger: str) -> None:
    """Store.reconcile reads unsettled keys as written: a corrupt one is named, and its ledger."""
    with get_store(any_ledger) as store:
        store._claim("k", "pay", "h", attempt_id="a", previous=None)
    spoil(any_ledger, "k", "attempted_at", "noon")
    with get_store(any_ledger) as store, pytest.raises(CorruptRecordError) as raised:
        store.reconcile({})
    assert str(raised.value).startswith(f"{store.location}: key 'k' is corrupt: attempted_at")


def test_late_completions_refuses_a_corrupt_one(any_ledger: str) -> None:
    """Store.late_completions raises StoreError for a late completion in an unknown state."""
    paid(any_ledger, "k")
    corrupt(any_ledger, LATE, "old", "vanished", "2026-01-01T00:00:00+00:00")
    with get_store(any_ledger) as store, pytest.raises(StoreError, match="late completion of key"):
        store.late_completions()


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("attempt_id", b"old"),
        ("result", "{"),
        ("error_type", b"E"),
        ("error_message", b"m"),
        ("finished_at", "2026-01-02"),
    ],
)
def test_a_corrupt_late_completion_names_its_ledger_and_column(
    ledger: Path, column: str, value: object
) -> None:
    """Store.scan_late_completions gives each corrupt column's error, naming the ledger."""
    paid(ledger, "k")
    corrupt(str(ledger), LATE, "old", "succeeded", "2026-01-01T00:00:00+00:00")
    corrupt(str(ledger), f"UPDATE late_completions SET {column} = ?", value)  # noqa: S608 - the tests' own names
    with get_store(ledger) as store:
        (found,) = store.scan_late_completions("k")
    assert isinstance(found, CorruptRecordError)
    assert str(found).startswith(f"{ledger}: late completion of key 'k' is corrupt")
    assert found.column == column


def test_scan_late_completions_reads_the_good_ones(any_ledger: str) -> None:
    """Store.scan_late_completions gives a good late completion and a corrupt one's error."""
    paid(any_ledger, "k")
    corrupt(any_ledger, LATE, "old-1", "succeeded", "2026-01-01T00:00:00+00:00")
    corrupt(any_ledger, LATE, "old-2", "succeeded", "2026-01-02")
    with get_store(any_ledger) as store:
        good, bad = store.scan_late_completions("k")
    assert (getattr(good, "attempt_id", None), getattr(good, "result", None)) == ("old-1", 7)
    assert getattr(bad, "column", None) == "finished_at"


def test_a_late_completion_of_a_key_no_longer_in_the_ledger_is_left_out(any_ledger: str) -> None:
    """Store.scan_late_completions skips a late completion whose key has no row any more."""
    paid(any_ledger, "a")
    corrupt(any_ledger, LATE, "old", "succeeded", "2026-01-01T00:00:00+00:00")
    with get_store(any_ledger) as store:
        assert store.scan_late_completions() == []


# The command line: a corrupt row is shown as corrupt, and the rest still listed.


def test_ls_lists_the_other_keys_and_marks_the_corrupt_one(
    any_ledger: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ls` lists every key, the corrupt one as corrupt with what is wrong; exit 0, a warning."""
    paid(any_ledger, "a", "k")
    spoil(any_ledger, "k", "result", "{")
    code, out, err = cli(capsys, "ls", any_ledger)
    rows = [line.split(None, 5) for line in out.splitlines()]
    assert code == 0
    assert [row[:3] for row in rows] == [
        ["KEY", "TOOL", "STATE"],
        ["a", "pay", "succeeded"],
        ["k", "?", "corrupt"],
    ]
    assert rows[2][5].startswith("result is not valid JSON")
    assert err.startswith("safeact: warning: 1 corrupt row in ")


def test_ls_json_prints_a_corrupt_key_as_key_and_what_is_wrong(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ls --json` prints a corrupt key as {"key", "corrupt", "column"}, the others as records."""
    paid(ledger, "a", "k")
    spoil(str(ledger), "k", "doubt_reason", "gremlins")
    code, out, _ = cli(capsys, "ls", ledger, "--json")
    good, bad = (json.loads(line) for line in out.splitlines())
    assert (code, good["key"], good["result"]) == (0, "a", 5)
    assert (sorted(bad), bad["key"], bad["column"]) == (
        ["column", "corrupt", "key"],
        "k",
        "doubt_reason",
    )
    assert bad["corrupt"].startswith("doubt_reason is 'gremlins', not one of crashed")


def test_show_of_a_corrupt_key_says_what_is_wrong_and_exits_1(ledger: Path) -> None:
    """`show` of a corrupt key prints what is wrong and what to do, then its history; exit 1."""
    paid(ledger, "k")
    spoil(str(ledger), "k", "attempted_at", "yesterday")
    result = subprocess.run(
        [sys.executable, "-m", "safeact", "show", str(ledger), "k"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    lines = result.stdout.splitlines()
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert lines[:2] == [
        "key         k",
        "corrupt     attempted_at is 'yesterday', not an ISO 8601 time",
    ]
    assert lines[2].startswith("what to do  safeact runs nothing under this key")
    assert len(lines[lines.index("history:") + 1 :]) == 2


def test_show_marks_a_corrupt_event_in_the_history(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show` of a key prints its history with a corrupt event marked in its place; exit 0."""
    paid(ledger, "k")
    add_event(str(ledger), by_kind="robot")
    code, out, err = cli(capsys, "show", ledger, "k")
    history = out.splitlines()[out.splitlines().index("history:") + 1 :]
    assert code == 0
    assert [line.split()[1:3] for line in history] == [
        ["(new)", "→"],
        ["attempting", "→"],
        ["(corrupt", "event)"],
    ]
    assert history[2].endswith("by_kind is 'robot', not 'process' or 'operator'")
    assert "1 corrupt row" in err


def test_show_of_a_purged_key_marks_a_corrupt_event(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show` of a key known only to the history still prints it, a corrupt event marked."""
    paid(ledger, "a")
    add_event(str(ledger), at="noon")
    code, out, err = cli(capsys, "show", ledger, "k")
    assert code == 0
    assert out.splitlines()[0] == "key 'k' is not in the ledger any more"
    assert "(corrupt event)" in out.splitlines()[-1]
    assert "1 corrupt row" in err


def test_show_marks_a_corrupt_late_completion(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show` of a key lists a corrupt late completion as corrupt, after the good one."""
    paid(ledger, "k")
    corrupt(str(ledger), LATE, "old-1", "succeeded", "2026-01-01T00:00:00+00:00")
    corrupt(str(ledger), LATE, "old-2", "vanished", "2026-01-02T00:00:00+00:00")
    code, out, _ = cli(capsys, "show", ledger, "k")
    lines = out.splitlines()
    late = lines[lines.index("") + 2 : lines.index("history:") - 1]
    assert code == 0
    assert late[0] == "  attempt old-1: succeeded at 2026-01-01T00:00:00Z, result 7"
    assert late[1].startswith("  (corrupt) state is 'vanished', not one of attempting, succeeded")


def doubted(location: str | Path, key: str) -> None:
    """Leave ``key`` in doubt, as a crash between its action and its record does."""
    corrupt(
        str(location),
        "UPDATE calls SET state = 'in_doubt', doubt_reason = 'interrupted', finished_at = NULL, "
        "result = NULL WHERE key = ?",
        key,
    )


def test_stats_counts_corrupt_rows_apart(ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`stats` counts apart keys it cannot count, and sagas, and says how many; exit 0.

    Those are a key of unknown state, an unreadable key in doubt, a saga of unknown state.
    """
    two_sagas(ledger)
    paid(ledger, "a", "k", "m")
    spoil(str(ledger), "k", "state", "exploded")
    doubted(ledger, "m")
    spoil(str(ledger), "m", "owner_pid", 0)
    corrupt(str(ledger), "UPDATE sagas SET state = 'sulking' WHERE saga_id = 'order-1'")
    code, out, err = cli(capsys, "stats", ledger)
    lines = out.splitlines()
    assert code == 0
    assert lines[1].split() == ["pay", "0", "3", "0", "0", "0", "3"]
    assert "sagas: 1 completed" in lines
    assert "corrupt: 2 key(s) and 1 saga(s), not counted above" in out
    assert "3 corrupt rows" in err


def test_stats_counts_a_settled_key_by_its_tool_and_state_and_check_finds_the_rest(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`stats` counts a settled key by its tool and state; `check` finds the rest.

    A settled row corrupt in another column is counted (stats counts in SQL), and named by
    `check`, which reads every row.
    """
    paid(ledger, "a", "k")
    spoil(str(ledger), "k", "finished_at", "soon")
    code, out, err = cli(capsys, "stats", ledger, "--json")
    assert code == 0
    assert json.loads(out)["all"]["succeeded"] == 2
    assert json.loads(out)["corrupt"] == {"keys": 0, "sagas": 0}
    assert err == ""
    code, out, _ = cli(capsys, "check", ledger)
    assert code == 1
    assert out.splitlines()[0] == "calls  k  finished_at is 'soon', not an ISO 8601 time"


def test_doubt_counts_a_corrupt_key_as_needing_attention(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`doubt` with nothing in doubt but a corrupt unsettled key lists it, what is wrong; exit 1."""
    paid(ledger, "a", "k")
    doubted(ledger, "k")
    spoil(str(ledger), "k", "owner_pid", 0)
    code, out, _ = cli(capsys, "doubt", ledger)
    lines = out.splitlines()
    assert code == 1
    assert lines[0] == "nothing in doubt"
    assert lines[2].startswith("1 corrupt key(s), changed outside safeact")
    assert lines[3] == "  k  owner_pid is 0, not a process id (a positive integer)"


def test_doubt_json_prints_a_corrupt_key(ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`doubt --json` prints a corrupt key as {"key", "corrupt", "column"}; exit 1."""
    paid(ledger, "k")
    doubted(ledger, "k")
    spoil(str(ledger), "k", "lease_until", "2026-01-01T00:00:00")
    code, out, _ = cli(capsys, "doubt", ledger, "--json")
    assert code == 1
    assert json.loads(out) == {
        "key": "k",
        "corrupt": "lease_until is '2026-01-01T00:00:00', a time without its UTC offset",
        "column": "lease_until",
    }


def test_doubt_reads_only_the_unsettled_keys(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`doubt` reads only the keys that may need a decision; `check` names the rest.

    A settled key corrupt in a column is not doubt's business (exit 0); `check` names it.
    """
    paid(ledger, "a", "k")
    spoil(str(ledger), "k", "owner_pid", 0)
    code, out, err = cli(capsys, "doubt", ledger)
    assert (code, out, err) == (0, "nothing in doubt\n", "")
    code, out, _ = cli(capsys, "check", ledger)
    assert code == 1
    assert out.splitlines()[0] == "calls  k  owner_pid is 0, not a process id (a positive integer)"


def test_doubt_lists_a_corrupt_late_completion_and_exits_1(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`doubt` lists a corrupt late completion among the late ones, and exits 1."""
    paid(ledger, "k")
    corrupt(str(ledger), LATE, "old", "succeeded", "whenever")
    code, out, _ = cli(capsys, "doubt", ledger)
    assert code == 1
    assert out.splitlines()[-1] == "  k  (corrupt) finished_at is 'whenever', not an ISO 8601 time"


def test_sagas_marks_a_corrupt_saga(ledger: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`sagas` lists every saga, a corrupt one as corrupt with what is wrong; exit 0."""
    two_sagas(ledger)
    corrupt(str(ledger), "UPDATE sagas SET state = 'sulking' WHERE saga_id = 'order-1'")
    code, out, err = cli(capsys, "sagas", ledger)
    rows = [line.split()[:2] for line in out.splitlines()]
    assert code == 0
    assert rows == [["SAGA", "STATE"], ["order-1", "corrupt"], ["order-2", "completed"]]
    assert "state is 'sulking', not one of running" in out
    assert "1 corrupt row" in err


# Reading a result: as json.loads reads it, whatever the text.

JSON_TEXTS = st.builds(
    lambda before, value, after: before + json.dumps(value) + after,
    st.sampled_from(["", " ", "\n", "\ufeff", "x"]),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda items: st.lists(items) | st.dictionaries(st.text(), items),
        max_leaves=5,
    ),
    st.sampled_from(["", " ", "\n", "x", " 1", "]"]),
)
"""JSON texts, some with what json.loads skips (white space) or refuses around them."""


def loaded(read: Callable[[str], object], text: str) -> tuple[str, object]:
    """What ``read(text)`` gives ("value", it) or raises ("error", its message)."""
    try:
        return ("value", read(text))
    except ValueError as error:
        return ("error", str(error))


@given(JSON_TEXTS | st.text())
def test_a_stored_result_is_read_as_json_loads_reads_it(text: str) -> None:
    """A result's text reads as the value json.loads gives, or fails with json.loads' message."""
    # Compared by repr: a NaN read is not equal to itself.
    assert repr(loaded(_whole_json, text)) == repr(loaded(json.loads, text))
