"""Archiving the history: old events go to JSON lines, then leave the ledger; unsettled stay."""

import contextlib
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safeact import (
    Archived,
    DoubtReason,
    Event,
    SafeError,
    Saga,
    SagaFailed,
    State,
    Store,
    StoreError,
    Why,
    get_store,
    safe,
)
from safeact._archive import ARCHIVE_FIELDS, _tail
from safeact._audit import record_event
from safeact._protocol import Checkpoint, checkpoint_hook, utc_now
from safeact._tool import SafeTool
from tests.actions import bury_attempt, bury_owners
from tests.test_corrupt_rows import add_event

CHILD = Path(__file__).with_name("operator_child.py")


def line_of(kind: str, seq: int, event: Event) -> dict[str, object]:
    """The line an archive should hold for ``event``, written out field by field."""
    return {
        "kind": kind,
        "subject": event.subject,
        "seq": seq,
        "at": event.at.astimezone(UTC).isoformat(timespec="microseconds"),
        "from": None if event.from_state is None else event.from_state.value,
        "to": None if event.to_state is None else event.to_state.value,
        "why": event.why.value,
        "by": event.by,
        "host": event.host,
        "pid": event.pid,
        "attempt_id": event.attempt_id,
        "note": event.note,
        "corrupt": None,
    }


def ledger_lines(store: Store) -> dict[int, dict[str, object]]:
    """Every event in the ledger, by seq, as its line should read (from ``store.history``)."""
    numbers: dict[tuple[str, str], list[int]] = {}
    for seq, kind, subject in store._read("SELECT seq, kind, subject FROM history", ()):
        numbers.setdefault((kind, subject), []).append(seq)
    lines = {}
    for (kind, subject), seqs in numbers.items():
        events = store.history(subject) if kind == "key" else store.saga_history(subject)
        for seq, event in zip(sorted(seqs), events, strict=True):
            lines[seq] = line_of(kind, seq, event)
    return lines


def parsed(text: str) -> list[dict[str, object]]:
    """The JSON lines of an export, each checked to be one line with every field, in order."""
    lines = [json.loads(line) for line in text.splitlines()]
    assert all(tuple(line) == ARCHIVE_FIELDS for line in lines)
    return lines


def numbers(text: str) -> list[int]:
    """The seq of each line of an export, in order."""
    return [json.loads(line)["seq"] for line in text.splitlines()]


def seqs(store: Store) -> list[int]:
    """The numbers of the events in the ledger, in order."""
    return [seq for (seq,) in store._read("SELECT seq FROM history ORDER BY seq", ())]


def tools(store: Store) -> tuple[SafeTool[[], int], SafeTool[[], int]]:
    """A tool that succeeds and one that fails."""

    @safe(store, name="ok")
    def ok(key: str) -> int:
        return 1

    @safe(store, name="no")
    def no(key: str) -> int:
        raise ValueError("declined")

    return ok, no


def some_history(store: Store) -> datetime:
    """Settled keys (one released, with a note), a completed saga, a cut-off, one key more.

    Returns the cut-off.
    """
    ok, no = tools(store)
    ok("a")
    no("b")
    store._claim("c", "ok", "h", attempt_id="c-1", previous=None)
    bury_attempt(store, "c-1")
    store.resolve("c", happened=False, note="the bank has no such payment")
    with Saga("done", store) as saga:
        saga.step(ok)
    cutoff = utc_now()
    ok("later")
    return cutoff


def test_export_writes_each_event_before_the_cutoff_as_a_json_line_in_order(
    store: Store,
) -> None:
    """One JSON object per line, in seq order, each as store.history reads it; nothing dropped."""
    cutoff = some_history(store)
    expected = ledger_lines(store)
    out = io.StringIO()
    exported = store.export_history(out, before=cutoff)
    lines = parsed(out.getvalue())
    older = [seq for seq in seqs(store) if expected[seq]["subject"] != "later"]
    assert lines == [expected[seq] for seq in older]
    assert {line["kind"] for line in lines} == {"key", "saga"}
    assert exported == Archived(events=len(older), corrupt=0, kept_keys=(), kept_sagas=())
    assert ledger_lines(store) == expected


def test_archive_appends_the_exported_lines_and_drops_exactly_those(
    store: Store, tmp_path: Path
) -> None:
    """The file holds the export's very lines; the ledger keeps every other event; rows stay."""
    cutoff = some_history(store)
    before, records = seqs(store), store.records()
    out = io.StringIO()
    store.export_history(out, before=cutoff)
    archive = tmp_path / "history.jsonl"
    archived = store.archive_history(archive, before=cutoff, batch=2)
    assert archive.read_text() == out.getvalue()
    taken = numbers(out.getvalue())
    assert archived.events == len(taken) > 0
    assert seqs(store) == [seq for seq in before if seq not in taken]
    assert store.history("a") == store.history("b") == store.saga_history("done") == []
    assert [event.why for event in store.history("later")] == [Why.CLAIMED, Why.RAN]
    assert store.records() == records
    assert archive.stat().st_mode & 0o777 == 0o600


def test_the_file_and_its_directory_are_synced_before_the_drop(
    store: Store, tmp_path: Path, fsyncs: list[str]
) -> None:
    """When the drop is about to commit, the new file and its directory are on disk."""
    cutoff = some_history(store)
    synced: list[list[str]] = []

    def note(point: Checkpoint) -> None:
        if point == "archiving":
            synced.append(list(fsyncs))

    with checkpoint_hook(note):
        store.archive_history(tmp_path / "history.jsonl", before=cutoff)
    assert len(synced) == 1
    assert {"history.jsonl", tmp_path.name} <= set(synced[0])


def test_unsettled_keys_keep_their_whole_history(store: Store, tmp_path: Path) -> None:
    """ATTEMPTING (live or under a dead owner) and IN_DOUBT keys keep every event, however old."""
    ok, _ = tools(store)
    ok("settled")
    store._claim("live", "act", "h", attempt_id="a1", previous=None)
    store._claim("crashed", "act", "h", attempt_id="a2", previous=None)
    bury_attempt(store, "a2")
    store._claim("doubted", "act", "h", attempt_id="a3", previous=None)
    store._mark_in_doubt("doubted", "a3", DoubtReason.LEASE_EXPIRED)
    # Stored ATTEMPTING, read as in doubt: its owner is provably gone.
    assert store._read("SELECT state FROM calls WHERE key = 'crashed'", ()) == [("attempting",)]
    crashed = store.get("crashed")
    assert crashed is not None
    assert (crashed.state, crashed.doubt_reason) == (State.IN_DOUBT, DoubtReason.CRASHED)
    cutoff = utc_now()
    ok("later")
    kept = {key: store.history(key) for key in ("live", "crashed", "doubted")}
    out = io.StringIO()
    assert store.export_history(out, before=cutoff).kept_keys == ("crashed", "doubted", "live")
    archive = tmp_path / "history.jsonl"
    archived = store.archive_history(archive, before=cutoff)
    assert archived.kept_keys == ("crashed", "doubted", "live")
    assert archive.read_text() == out.getvalue()
    assert {key: store.history(key) for key in kept} == kept
    assert {line["subject"] for line in parsed(archive.read_text())} == {"settled"}
    assert store.history("settled") == []


def test_a_decided_result_keeps_the_event_that_decided_it(store: Store, tmp_path: Path) -> None:
    """Resolved (then amended) keys keep that history from the decision on: amend still works.

    A result its action returned is archived whole, and stays one amend refuses.
    """
    ok, _ = tools(store)
    ok("ran")
    for key in ("resolved", "amended"):
        store._claim(key, "ok", "h", attempt_id=f"{key}-1", previous=None)
        store._mark_in_doubt(key, f"{key}-1", DoubtReason.LEASE_EXPIRED)
        store.resolve(key, happened=True, result="oops", note="checked")
    store.amend("amended", result=2)
    cutoff = utc_now()
    ok("later")
    decided = {key: store.history(key) for key in ("resolved", "amended")}
    archive = tmp_path / "history.jsonl"
    archived = store.archive_history(archive, before=cutoff)
    assert [event.why for event in store.history("resolved")] == [Why.RESOLVED]
    assert [event.why for event in store.history("amended")] == [Why.RESOLVED, Why.AMENDED]
    assert store.history("amended")[-1].note == 'was "oops"'
    assert {key: store.history(key) for key in decided} == {
        key: events[-len(store.history(key)) :] for key, events in decided.items()
    }
    lines = parsed(archive.read_text())
    assert archived.events == len(lines)
    assert {(line["subject"], line["why"]) for line in lines} == {
        ("ran", "claimed"),
        ("ran", "ran"),
        ("resolved", "claimed"),
        ("resolved", "lease_expired"),
        ("amended", "claimed"),
        ("amended", "lease_expired"),
    }
    assert store.history("ran") == []
    assert store.amend("resolved", result=1).result == 1
    assert ok.replay(store.amend("amended", result=3)) == 3
    with pytest.raises(SafeError, match="the one its action returned"):
        store.amend("ran", result=2)


def test_on_postgres_a_claim_in_flight_is_waited_for(postgres_ledger: str, tmp_path: Path) -> None:
    """A released key being claimed as the archive starts is read claimed: its history stays."""
    import psycopg

    with get_store(postgres_ledger) as store:
        store._claim("k", "act", "h", attempt_id="a1", previous=None)
        bury_owners(store)
        store.resolve("k", happened=False)
        cutoff = utc_now()
        tools(store)[0]("later")
        released = store.history("k")
        with (
            psycopg.connect(postgres_ledger) as claimer,
            psycopg.connect(postgres_ledger, autocommit=True) as watcher,
            ThreadPoolExecutor(1) as pool,
        ):
            # A claim as safeact writes one: the row, then its event; not committed yet.
            claimer.execute(
                "UPDATE calls SET state = 'attempting', attempt_id = 'a2' WHERE key = 'k'"
            )
            claimer.execute(
                "INSERT INTO history (kind, subject, attempt_id, from_state, to_state, at, "
                "by_kind, by_host, by_pid, why) VALUES ('key', 'k', 'a2', 'released', "
                "'attempting', %s, 'process', 'h', 7, 'claimed')",
                (utc_now().isoformat(timespec="microseconds"),),
            )
            archiving = pool.submit(store.archive_history, tmp_path / "h.jsonl", before=cutoff)
            deadline = time.monotonic() + 20
            while watcher.execute(
                "SELECT count(*) FROM pg_locks WHERE relation = 'history'::regclass AND NOT granted"
            ).fetchone() != (1,):
                assert time.monotonic() < deadline, "the archive never waited for the claim"
                time.sleep(0.01)
            claimer.commit()
            assert archiving.result(timeout=60).kept_keys == ("k",)
        assert store.history("k")[: len(released)] == released


def test_an_unfinished_saga_and_its_steps_keep_their_history(store: Store, tmp_path: Path) -> None:
    """A running saga and one whose rollback is incomplete keep theirs, and their keys' too."""

    @safe(store, name="undo")
    def undo(key: str, value: int) -> None:
        raise RuntimeError("cannot undo")

    @safe(store, name="step", compensate=undo)
    def step(key: str, n: int) -> int:
        if n < 0:
            raise ValueError("declined")
        return n

    with pytest.raises(SagaFailed), Saga("stuck", store) as stuck:
        stuck.step(step, 1)
        stuck.step(step, -1)
    running = Saga("running", store)
    running.__enter__()
    running.step(step, 1)
    with Saga("done", store) as done:
        done.step(step, 1)
    cutoff = utc_now()
    tools(store)[0]("later")
    stuck_keys = ("stuck:0:step", "stuck:0:step:compensate", "stuck:1:step")
    kept = {key: store.history(key) for key in (*stuck_keys, "running:0:step")}
    sagas = {saga_id: store.saga_history(saga_id) for saga_id in ("running", "stuck")}
    archived = store.archive_history(tmp_path / "history.jsonl", before=cutoff)
    assert archived.kept_sagas == ("running", "stuck")
    assert archived.kept_keys == tuple(sorted(kept))
    assert {key: store.history(key) for key in kept} == kept
    assert {saga_id: store.saga_history(saga_id) for saga_id in sagas} == sagas
    assert store.saga_history("done") == store.history("done:0:step") == []
    running.__exit__(None, None, None)


def test_a_second_archive_takes_nothing_twice(store: Store, tmp_path: Path) -> None:
    """Two archives into one file: every event before the second cut-off once, in order."""
    ok, _ = tools(store)
    ok("a")
    first = utc_now()
    ok("b")
    second = utc_now()
    ok("later")
    expected = ledger_lines(store)
    archive = tmp_path / "history.jsonl"
    store.archive_history(archive, before=first)
    store.archive_history(archive, before=second)
    wanted = [expected[seq] for seq in sorted(expected) if expected[seq]["subject"] != "later"]
    assert parsed(archive.read_text()) == wanted


def test_the_newest_event_stays_so_that_no_seq_is_given_twice(store: Store, tmp_path: Path) -> None:
    """With every event before the cut-off, the newest stays: a later event gets a new seq."""
    ok, _ = tools(store)
    ok("a")
    cutoff = utc_now()
    archive = tmp_path / "history.jsonl"
    assert store.archive_history(archive, before=cutoff).events == 1
    assert [event.why for event in store.history("a")] == [Why.RAN]
    ok("b")
    taken = set(numbers(archive.read_text()))
    assert min(seqs(store)) > max(taken)
    assert store.archive_history(archive, before=utc_now()).events == 2
    assert len(taken | set(numbers(archive.read_text()))) == 3


def add(store: Store, subject: str, at: datetime) -> None:
    """Append an event of key ``subject`` recorded at ``at`` (by a host whose clock says so)."""
    event = Event(subject=subject, at=at, why=Why.CLAIMED, by="process", host="h", pid=7)
    with store._transaction(sync=False) as db:
        record_event(db, "key", event)


def test_a_history_is_taken_only_up_to_its_first_event_after_the_cutoff(
    store: Store, tmp_path: Path
) -> None:
    """An old time after a new one (a host's clock behind) stays: the ledger keeps an end."""
    now = utc_now()
    for days in (3, 0, 2):
        add(store, "k", now - timedelta(days=days))
    add(store, "newest", now)
    archive = tmp_path / "history.jsonl"
    assert store.archive_history(archive, before=now - timedelta(days=1)).events == 1
    assert [event.at for event in store.history("k")] == [now, now - timedelta(days=2)]


def test_a_corrupt_event_is_archived_as_stored_and_marked(any_ledger: str, tmp_path: Path) -> None:
    """A row safeact cannot read goes to the file as stored, with the reason; none is lost."""
    archive = tmp_path / "history.jsonl"
    with get_store(any_ledger) as store:
        add_event(any_ledger, why="boredom", note="checked by hand")
        add_event(any_ledger, subject="j", by_pid=0)
        cutoff = utc_now()
        tools(store)[0]("later")
        archived = store.archive_history(archive, before=cutoff)
        assert store.scan_history("k") == store.scan_history("j") == []
    boredom, no_pid = parsed(archive.read_text())
    assert (archived.events, archived.corrupt) == (2, 2)
    stored = {
        "kind": "key",
        "at": "2026-01-01T00:00:00.000000+00:00",
        "from": "succeeded",
        "to": "succeeded",
        "by": "process",
        "host": "h",
        "pid": 7,
        "attempt_id": "a",
    }
    assert {**boredom, "seq": 0, "corrupt": ""} == {
        **stored,
        "subject": "k",
        "seq": 0,
        "why": "boredom",
        "note": "checked by hand",
        "corrupt": "",
    }
    assert {**no_pid, "seq": 0, "corrupt": ""} == {
        **stored,
        "subject": "j",
        "seq": 0,
        "pid": 0,
        "why": "ran",
        "note": None,
        "corrupt": "",
    }
    assert str(boredom["corrupt"]).startswith(
        f"{store.location}: an event in the history of 'k' is corrupt: why is 'boredom', "
    )
    assert str(no_pid["corrupt"]).startswith(
        f"{store.location}: an event in the history of 'j' is corrupt: by_pid is 0, "
    )


def test_numbers_where_text_belongs_are_archived_as_numbers(ledger: Path, tmp_path: Path) -> None:
    """SQLite keeps a REAL in an INTEGER column: a finite one as a number, infinity as text."""
    archive = tmp_path / "history.jsonl"
    with get_store(ledger) as store:
        add_event(str(ledger), by_pid=2.5)
        add_event(str(ledger), by_pid=float("inf"))
        cutoff = utc_now()
        tools(store)[0]("later")
        store.archive_history(archive, before=cutoff)
    assert [line["pid"] for line in parsed(archive.read_text())] == [2.5, "inf"]


def test_a_subject_stored_as_bytes_is_archived_as_its_sql_literal(
    ledger: Path, tmp_path: Path
) -> None:
    """SQLite keeps a BLOB where text belongs: the line holds X'…' and says what is wrong."""
    archive = tmp_path / "history.jsonl"
    with get_store(ledger) as store:
        add_event(str(ledger), subject=b"\x00k")
        cutoff = utc_now()
        tools(store)[0]("later")
        assert store.archive_history(archive, before=cutoff).corrupt == 1
    (line,) = parsed(archive.read_text())
    assert line["subject"] == "X'006b'"
    assert str(line["corrupt"]).startswith(
        f"{ledger}: an event in the history of \"b'\\\\x00k'\" is corrupt: "
        "subject is b'\\x00k', not text"
    )


def test_the_history_is_append_only_again_after_an_archive(store: Store, tmp_path: Path) -> None:
    """The guard lifted for the drop is back: a direct delete is still refused."""
    cutoff = some_history(store)
    assert store.archive_history(tmp_path / "history.jsonl", before=cutoff).events > 0
    with (
        pytest.raises(StoreError, match="append-only"),
        store._errors(),
        store._transaction(sync=False) as db,
    ):
        db.execute("DELETE FROM history")


def triggers(ledger: Path) -> list[tuple[str, str]]:
    """The triggers of the history table: its append-only guards."""
    with contextlib.closing(sqlite3.connect(ledger)) as db:
        found: list[tuple[str, str]] = db.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'history' "
            "ORDER BY name"
        ).fetchall()
        return found


def test_sqlite_makes_its_guard_again_from_its_own_text(ledger: Path, tmp_path: Path) -> None:
    """The trigger dropped for the delete is made again word for word."""
    with get_store(ledger) as store:
        guards = triggers(ledger)
        cutoff = some_history(store)
        assert store.archive_history(tmp_path / "history.jsonl", before=cutoff).events > 0
    assert triggers(ledger) == guards
    assert len(guards) == 2


def test_a_ledger_without_its_guard_is_not_archived(ledger: Path, tmp_path: Path) -> None:
    """A SQLite ledger whose delete trigger was removed by hand is refused, before any line."""
    with get_store(ledger) as store:
        cutoff = some_history(store)
        with contextlib.closing(sqlite3.connect(ledger)) as db:
            db.execute("DROP TRIGGER history_is_append_only_delete")
        before = seqs(store)
        archive = tmp_path / "history.jsonl"
        with pytest.raises(StoreError, match=r"history_is_append_only_delete .* is missing"):
            store.archive_history(archive, before=cutoff)
        assert seqs(store) == before
    assert archive.read_text() == ""


def run_archive(
    ledger: str, archive: Path, cutoff: datetime, *options: str
) -> subprocess.CompletedProcess[str]:
    """Run tests/operator_child.py archive to the end (or to its death)."""
    return subprocess.run(
        [sys.executable, str(CHILD), "archive", ledger, str(archive), cutoff.isoformat(), *options],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_a_kill_between_writing_and_dropping_loses_nothing(any_ledger: str, tmp_path: Path) -> None:
    """SIGKILLed with a batch synced to the file but not dropped: a re-run finishes the job.

    Each event is in the file once: the re-run finds the batch's lines there.
    """
    with get_store(any_ledger) as store:
        ok, _ = tools(store)
        for key in ("a", "b", "c", "d"):
            ok(key)
        cutoff = utc_now()
        ok("later")
        expected = ledger_lines(store)
        everything = seqs(store)
    archive = tmp_path / "history.jsonl"
    killed = run_archive(any_ledger, archive, cutoff, "--batch", "3", "--kill-at", "archiving")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with get_store(any_ledger) as store:
        assert seqs(store) == everything
    first = parsed(archive.read_text())
    assert first == [expected[seq] for seq in everything[:3]]
    rerun = run_archive(any_ledger, archive, cutoff, "--batch", "3")
    assert json.loads(rerun.stdout)["events"] == 8, rerun.stderr
    lines = parsed(archive.read_text())
    assert lines == [expected[seq] for seq in everything[:8]]  # each once
    with get_store(any_ledger) as store:
        assert seqs(store) == everything[8:]


@pytest.mark.parametrize(
    ("before", "error", "said"),
    [
        (datetime(2020, 1, 1), ValueError, "has no UTC offset"),  # noqa: DTZ001 - the mistake tested
        (datetime.now(UTC) + timedelta(hours=1), ValueError, "is in the future"),
        ("2020-01-01", TypeError, "must be a datetime, got str"),
    ],
    ids=["naive", "future", "text"],
)
def test_a_cutoff_that_is_no_moment_of_the_past_is_refused(
    store: Store, tmp_path: Path, before: datetime, error: type[Exception], said: str
) -> None:
    """A naive time, a time to come or text: a clear error, no file, nothing dropped."""
    some_history(store)
    everything = seqs(store)
    archive = tmp_path / "history.jsonl"
    with pytest.raises(error, match=said):
        store.archive_history(archive, before=before)
    with pytest.raises(error, match=said):
        store.export_history(io.StringIO(), before=before)
    assert not archive.exists()
    assert seqs(store) == everything


@pytest.mark.parametrize("batch", [1, 2, 10_000])
def test_an_export_in_batches_is_the_export_in_one(store: Store, batch: int) -> None:
    """Each batch goes on after the last event of the one before: none skipped, none twice."""
    cutoff = some_history(store)
    whole, batched = io.StringIO(), io.StringIO()
    store.export_history(whole, before=cutoff)
    exported = store.export_history(batched, before=cutoff, batch=batch)
    assert batched.getvalue() == whole.getvalue()
    assert exported.events == len(numbers(whole.getvalue())) > 2


@pytest.mark.parametrize("batch", [1, 10_000])
def test_a_batch_of_one_or_of_the_most_is_archived(
    store: Store, tmp_path: Path, batch: int
) -> None:
    """The bounds themselves are batches: everything before the cut-off goes."""
    cutoff = some_history(store)
    out = io.StringIO()
    store.export_history(out, before=cutoff)
    archive = tmp_path / "history.jsonl"
    assert store.archive_history(archive, before=cutoff, batch=batch).events > 2
    assert archive.read_text() == out.getvalue()


@pytest.mark.parametrize("batch", [0, 10_001])
def test_a_batch_out_of_range_is_refused(store: Store, tmp_path: Path, batch: int) -> None:
    """A batch must hold 1 to 10,000 events (they are named one by one in the drop)."""
    with pytest.raises(ValueError, match="batch must be between 1 and 10000"):
        store.archive_history(tmp_path / "history.jsonl", before=utc_now(), batch=batch)


def test_a_line_cut_short_by_a_crash_is_ended_before_the_next(store: Store, tmp_path: Path) -> None:
    """The fragment stays a line of its own; every line after it is whole and parses."""
    cutoff = some_history(store)
    out = io.StringIO()
    store.export_history(out, before=cutoff)
    archive = tmp_path / "history.jsonl"
    fragment = out.getvalue()[:25]
    archive.write_text(fragment)
    store.archive_history(archive, before=cutoff)
    first, *rest = archive.read_text().split("\n")
    assert first == fragment
    assert "\n".join(rest) == out.getvalue()


@pytest.mark.parametrize("character", ["\x9b", "\u2028", "\x85", "é"])
def test_lines_are_ascii_whatever_a_key_holds(store: Store, tmp_path: Path, character: str) -> None:
    """A key with a C1 control or a Unicode line break cannot split or spoof a line."""
    key = f"k{character}x"
    tools(store)[0](key)
    cutoff = utc_now()
    tools(store)[0]("later")
    archive = tmp_path / "history.jsonl"
    store.archive_history(archive, before=cutoff)
    data = archive.read_bytes()
    assert data.isascii()
    assert {line["subject"] for line in parsed(data.decode())} == {key}
    assert len(data.decode().splitlines()) == 2


def test_an_archive_must_be_a_regular_file_other_than_the_ledger(
    ledger: Path, tmp_path: Path
) -> None:
    """The ledger itself, its WAL, a directory or a FIFO: refused, and nothing dropped."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with get_store(ledger) as store:
        cutoff = some_history(store)
        everything = seqs(store)
        for path, said in [
            (ledger, "the ledger's own file"),
            (Path(f"{ledger}-wal"), "the ledger's own file"),
            (tmp_path, "not a regular file"),
            (fifo, "not a regular file"),
        ]:
            with pytest.raises(ValueError, match=said):
                store.archive_history(path, before=cutoff)
        assert seqs(store) == everything


@given(
    lines=st.lists(st.text(st.characters(codec="ascii", exclude_characters="\n"), max_size=3000)),
    cut=st.text(st.characters(codec="ascii", exclude_characters="\n"), max_size=50),
    most=st.integers(1, 60),
)
@settings(max_examples=60, deadline=None)
def test_the_tail_is_the_files_last_whole_lines(lines: list[str], cut: str, most: int) -> None:
    """What a re-run of an archive reads back: the last ``most`` whole lines, across blocks."""
    with tempfile.TemporaryFile() as file:
        file.write("".join(f"{line}\n" for line in lines).encode() + cut.encode())
        file.flush()
        assert _tail(file.fileno(), most) == frozenset(f"{line}\n" for line in lines[-most:])
