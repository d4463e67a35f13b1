"""Replay-only runs: settled keys replay, nothing else runs, and nothing is written.

Most tests keep a store opened *before* the scope (writable) and check, by the ledger's own
bytes (SQLite: the file and its WAL) or its rows (PostgreSQL: every table), that the calls
made in the scope wrote nothing: that is the machine's promise, whatever the store allows.
The others open the ledger inside the scope, read-only.
"""

import asyncio
import contextlib
import hashlib
import json
import pickle
import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from safeact import (
    AsyncSafeTool,
    DoubtReason,
    Failed,
    InDoubt,
    KeyConflictError,
    ReplayOnlyError,
    SafeTool,
    Saga,
    SagaFailed,
    SagaState,
    State,
    Store,
    StoreError,
    Succeeded,
    Unknown,
    Verdict,
    get_store,
    replay_only,
    safe,
)
from safeact._protocol import Checkpoint, checkpoint_hook
from safeact._replay_only import ENVIRONMENT
from tests.actions import Receipt, count_effects, expire_leases, record_effect
from tests.processes import CHILD, report, run_child, run_python

TABLES = ("calls", "late_completions", "sagas", "saga_steps", "history", "tools", "approvals")


def rows(location: str) -> dict[str, list[str]]:
    """Every row of every table of the ledger, as text, read without writing."""
    if "://" in location:
        import psycopg

        with psycopg.connect(location) as connection:
            return {
                table: sorted(
                    row[0]
                    for row in connection.execute(f"SELECT row_to_json(t)::text FROM {table} t")  # noqa: S608
                )
                for table in TABLES
            }
    reading = sqlite3.connect(f"{Path(location).resolve().as_uri()}?mode=ro", uri=True)
    try:
        return {
            table: sorted(repr(row) for row in reading.execute(f"SELECT * FROM {table}"))  # noqa: S608
            for table in TABLES
        }
    finally:
        reading.close()


def snapshot(location: str) -> object:
    """What the ledger holds, to compare before and after a replay-only run.

    SQLite: the SHA-256 of the file and of its WAL (a missing WAL counts as empty: a
    read-only connection may create an empty one, as SQLite needs, which writes nothing).
    PostgreSQL: every row of every table (``rows``), history's sequence numbers included.
    """
    if "://" in location:
        return rows(location)
    wal = Path(f"{location}-wal")
    return (
        hashlib.sha256(Path(location).read_bytes()).hexdigest(),
        hashlib.sha256(wal.read_bytes() if wal.exists() else b"").hexdigest(),
    )


def charges(
    store: Store | str, effects: Path, probed: list[str] | None = None
) -> SafeTool[[str, int], Receipt]:
    """A guarded charge that counts its effects; a negative amount fails."""

    def probe(key: str, receipt: InDoubt) -> Verdict[Receipt]:
        assert probed is not None
        probed.append(key)
        return Unknown()

    @safe(store, name="tests.charge", wait=0.05, reconcile=None if probed is None else probe)
    def charge(key: str, to: str, amount: int) -> Receipt:
        record_effect(effects, key)
        if amount < 0:
            raise ValueError("negative amount")
        return Receipt(to, amount)

    return charge


class Crash(BaseException):
    """The process dies here."""


def crash_at(where: Checkpoint) -> Callable[[Checkpoint], None]:
    def hook(point: Checkpoint) -> None:
        if point == where:
            raise Crash

    return hook


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    return tmp_path / "effects"


@pytest.fixture
def recorded(any_ledger: str, effects: Path) -> Iterator[Store]:
    """An open store on a ledger where key "paid" succeeded and key "declined" failed."""
    with get_store(any_ledger) as store:
        charge = charges(store, effects)
        assert charge("paid", "a@example.com", 50) == Succeeded(
            "paid", Receipt("a@example.com", 50)
        )
        assert isinstance(charge("declined", "b@example.com", -1), Failed)
        yield store


def test_settled_keys_replay_their_outcomes(
    recorded: Store, any_ledger: str, effects: Path
) -> None:
    """Under replay-only a succeeded key replays its value, a failed one its failure."""
    charge = charges(recorded, effects)
    before = snapshot(any_ledger)
    with replay_only():
        paid = charge("paid", "a@example.com", 50)
        declined = charge("declined", "b@example.com", -1)
    assert paid == Succeeded("paid", Receipt("a@example.com", 50), replayed=True)
    assert isinstance(declined, Failed)
    assert (declined.replayed, declined.error_type, declined.message) == (
        True,
        "ValueError",
        "negative amount",
    )
    assert effects.read_text().splitlines() == ["paid", "declined"]
    assert snapshot(any_ledger) == before


def test_a_new_key_is_refused_and_nothing_runs(
    recorded: Store, any_ledger: str, effects: Path
) -> None:
    """A key with no record raises ReplayOnlyError: the action does not run, nothing is written."""
    charge = charges(recorded, effects)
    before = snapshot(any_ledger)
    with replay_only(), pytest.raises(ReplayOnlyError) as refused:
        charge("new", "c@example.com", 10)
    assert (refused.value.key, refused.value.tool) == ("new", "tests.charge")
    assert "would have run" in str(refused.value)
    assert "nothing ran and nothing was written" in str(refused.value)
    assert count_effects(effects, "new") == 0
    assert recorded.get("new") is None
    assert snapshot(any_ledger) == before


def test_a_released_key_is_refused(recorded: Store, any_ledger: str, effects: Path) -> None:
    """A key released as not happened would run again: under replay-only it is refused."""
    charge = charges(recorded, effects)
    with checkpoint_hook(crash_at("after_claim")), pytest.raises(Crash):
        charge("cut", "c@example.com", 10)
    expire_leases(recorded)
    recorded.resolve("cut", happened=False, force=True, note="checked")
    before = snapshot(any_ledger)
    with replay_only(), pytest.raises(ReplayOnlyError):
        charge("cut", "c@example.com", 10)
    assert count_effects(effects, "cut") == 0
    assert snapshot(any_ledger) == before


def test_an_abandoned_key_is_in_doubt_as_read_neither_marked_nor_probed(
    recorded: Store, any_ledger: str, effects: Path
) -> None:
    """An attempt whose lease ran out gives InDoubt: no mark is written and no probe is asked."""
    probed: list[str] = []
    charge = charges(recorded, effects, probed)
    with checkpoint_hook(crash_at("after_claim")), pytest.raises(Crash):
        charge("cut", "c@example.com", 10)
    expire_leases(recorded)
    before = snapshot(any_ledger)
    with replay_only():
        doubt = charge("cut", "c@example.com", 10)
    assert isinstance(doubt, InDoubt)
    assert doubt.reason is DoubtReason.LEASE_EXPIRED
    stored = recorded._stored("cut")
    assert stored is not None
    assert (stored.state, probed) == (State.ATTEMPTING, [])
    assert snapshot(any_ledger) == before
    assert count_effects(effects, "cut") == 0


def test_a_key_in_doubt_is_not_probed(recorded: Store, any_ledger: str, effects: Path) -> None:
    """A key in doubt gives InDoubt as recorded; its probe, whose verdict writes, is not asked."""
    probed: list[str] = []
    charge = charges(recorded, effects, probed)
    with checkpoint_hook(crash_at("after_claim")), pytest.raises(Crash):
        charge("cut", "c@example.com", 10)
    expire_leases(recorded)
    assert isinstance(charge("cut", "c@example.com", 10), InDoubt)  # marked, and probed once
    assert probed == ["cut"]
    before = snapshot(any_ledger)
    with replay_only():
        doubt = charge("cut", "c@example.com", 10)
    assert isinstance(doubt, InDoubt)
    assert probed == ["cut"]
    assert snapshot(any_ledger) == before


def test_a_key_running_under_a_live_owner_is_waited_for_then_in_flight(
    recorded: Store, any_ledger: str, effects: Path
) -> None:
    """A live owner's key is waited on (reading only), then InDoubt in flight; nothing is marked."""
    charge = charges(recorded, effects)
    with checkpoint_hook(crash_at("after_claim")), pytest.raises(Crash):
        charge("running", "c@example.com", 10)
    before = snapshot(any_ledger)
    with replay_only():
        doubt = charge("running", "c@example.com", 10)
    assert isinstance(doubt, InDoubt)
    assert doubt.reason is DoubtReason.IN_FLIGHT
    assert snapshot(any_ledger) == before


def test_a_key_conflict_stays_a_key_conflict(recorded: Store, effects: Path) -> None:
    """A key recorded with other arguments is a KeyConflictError, replay-only or not."""
    charge = charges(recorded, effects)
    with replay_only(), pytest.raises(KeyConflictError):
        charge("paid", "a@example.com", 51)


def test_async_tools_replay_and_refuse(any_ledger: str, effects: Path) -> None:
    """An async tool replays its settled key and refuses a new one, writing nothing."""
    with get_store(any_ledger) as store:

        @safe(store, name="tests.acharge")
        async def acharge(key: str, amount: int) -> int:
            record_effect(effects, key)
            return amount

        assert asyncio.run(acharge("paid", 5)) == Succeeded("paid", 5)
        before = snapshot(any_ledger)
        with replay_only():
            assert asyncio.run(acharge("paid", 5)) == Succeeded("paid", 5, replayed=True)
            with pytest.raises(ReplayOnlyError) as refused:
                asyncio.run(acharge("new", 6))
        assert (refused.value.key, refused.value.tool) == ("new", "tests.acharge")
        assert isinstance(acharge, AsyncSafeTool)
        assert effects.read_text().splitlines() == ["paid"]
        assert snapshot(any_ledger) == before


def test_scopes_nest_and_the_end_of_the_last_makes_calls_act_again(
    recorded: Store, effects: Path
) -> None:
    """Replay-only lasts until the outermost block ends; a store opened before then acts again."""
    charge = charges(recorded, effects)
    with replay_only():
        with replay_only():
            pass
        with pytest.raises(ReplayOnlyError):
            charge("new", "c@example.com", 10)
    assert charge("new", "c@example.com", 10) == Succeeded("new", Receipt("c@example.com", 10))
    assert count_effects(effects, "new") == 1


def test_the_scope_holds_in_threads_that_do_not_copy_the_context(
    recorded: Store, effects: Path
) -> None:
    """A thread without the caller's context is replay-only too: the scope is the process's."""
    charge = charges(recorded, effects)
    raised: list[BaseException] = []

    def worker() -> None:
        try:
            charge("new", "c@example.com", 10)
        except ReplayOnlyError as exc:
            raised.append(exc)

    with replay_only():
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    assert [type(exc) for exc in raised] == [ReplayOnlyError]
    assert count_effects(effects, "new") == 0


def test_a_store_opened_in_the_scope_stays_read_only(
    recorded: Store, any_ledger: str, effects: Path
) -> None:
    """A ledger opened under replay-only refuses every write for its life, after the scope too."""
    with checkpoint_hook(crash_at("after_claim")), pytest.raises(Crash):
        charges(recorded, effects)("cut", "c@example.com", 10)
    expire_leases(recorded)
    with replay_only():
        reading = get_store(any_ledger)
    try:
        charge = charges(reading, effects)
        before = snapshot(any_ledger)
        with pytest.raises(StoreError, match="opened read-only, under replay-only"):
            charge("new", "c@example.com", 10)
        with pytest.raises(StoreError, match="opened read-only"):
            reading.resolve("cut", happened=False, force=True)
        assert charge("paid", "a@example.com", 50) == Succeeded(
            "paid", Receipt("a@example.com", 50), replayed=True
        )
    finally:
        reading.close()
    assert count_effects(effects, "new") == 0
    assert snapshot(any_ledger) == before


def test_a_postgres_store_opened_in_the_scope_has_read_only_sessions(postgres_ledger: str) -> None:
    """The server itself refuses writes on the sessions of a store opened under replay-only."""
    from safeact._postgres import PostgresStore

    for scoped, expected in ((True, ("on",)), (False, ("off",))):
        with contextlib.ExitStack() as scope:
            if scoped:
                scope.enter_context(replay_only())
            store = scope.enter_context(get_store(postgres_ledger))
            assert isinstance(store, PostgresStore)
            with store._pool.connection() as connection:
                shown = connection.execute("SHOW default_transaction_read_only").fetchone()
        assert shown == expected


def test_a_missing_sqlite_ledger_is_not_created(tmp_path: Path) -> None:
    """Under replay-only a path with no ledger is an error, and no file is made."""
    missing = tmp_path / "none.db"
    with replay_only(), pytest.raises(StoreError, match="there is no ledger here"):
        get_store(missing)
    assert list(tmp_path.iterdir()) == []


def test_an_empty_sqlite_file_is_not_made_a_ledger(tmp_path: Path) -> None:
    """An empty file is refused read-only: no schema is created in it."""
    empty = tmp_path / "empty.db"
    empty.touch()
    with replay_only(), pytest.raises(StoreError, match="holds no ledger yet"):
        get_store(empty)
    assert empty.read_bytes() == b""


def test_a_sqlite_ledger_not_in_wal_mode_is_refused(tmp_path: Path, effects: Path) -> None:
    """A ledger switched out of WAL outside safeact is refused read-only, and not switched back."""
    path = tmp_path / "agent.db"
    with get_store(path) as store:
        charges(store, effects)("paid", "a@example.com", 50)
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode = DELETE")
    connection.close()
    before = snapshot(str(path))
    with replay_only(), pytest.raises(StoreError, match="not in WAL mode"):
        get_store(path)
    assert snapshot(str(path)) == before


def test_a_read_only_copy_of_a_production_ledger_replays(tmp_path: Path, effects: Path) -> None:
    """A copy of a closed ledger, chmod 0444, replays under replay-only and refuses new keys."""
    production = tmp_path / "production" / "agent.db"
    production.parent.mkdir()
    with get_store(production) as store:
        charge = charges(store, effects)
        charge("paid", "a@example.com", 50)
        charge("declined", "b@example.com", -1)
    copy = tmp_path / "replay" / "agent.db"
    copy.parent.mkdir()
    shutil.copyfile(production, copy)
    copy.chmod(0o444)
    before = snapshot(str(copy))
    with replay_only(), get_store(copy) as reading:
        charge = charges(reading, effects)
        assert charge("paid", "a@example.com", 50) == Succeeded(
            "paid", Receipt("a@example.com", 50), replayed=True
        )
        assert isinstance(charge("declined", "b@example.com", -1), Failed)
        with pytest.raises(ReplayOnlyError):
            charge("new", "c@example.com", 10)
    assert effects.read_text().splitlines() == ["paid", "declined"]
    assert snapshot(str(copy)) == before
    assert oct(copy.stat().st_mode & 0o777) == oct(0o444)


def test_a_copy_of_a_live_ledger_and_its_wal_stays_byte_for_byte(
    tmp_path: Path, effects: Path
) -> None:
    """A copy taken while the ledger runs (its WAL holding commits) is read as it is: no checkpoint.

    A writable connection, the last to close, would copy the WAL into the file: SQLite
    itself must have the copy open read-only.
    """
    production = tmp_path / "production" / "agent.db"
    production.parent.mkdir()
    copy = tmp_path / "replay" / "agent.db"
    copy.parent.mkdir()
    with get_store(production) as store:
        charges(store, effects)("paid", "a@example.com", 50)
        shutil.copyfile(production, copy)
        shutil.copyfile(f"{production}-wal", f"{copy}-wal")
    assert Path(f"{copy}-wal").stat().st_size > 0
    before = snapshot(str(copy))
    with replay_only(), get_store(copy) as reading:
        assert charges(reading, effects)("paid", "a@example.com", 50) == Succeeded(
            "paid", Receipt("a@example.com", 50), replayed=True
        )
    assert snapshot(str(copy)) == before


def test_a_tool_made_on_a_location_opens_it_read_only(tmp_path: Path, effects: Path) -> None:
    """``safe(path)`` opened at its first call in the scope opens the ledger read-only."""
    path = tmp_path / "agent.db"
    charges(str(path), effects)("paid", "a@example.com", 50)
    before = snapshot(str(path))
    charge = charges(str(path), effects)
    with replay_only():
        assert charge("paid", "a@example.com", 50) == Succeeded(
            "paid", Receipt("a@example.com", 50), replayed=True
        )
    with pytest.raises(StoreError, match="read-only"):
        charge("new", "c@example.com", 10)
    assert snapshot(str(path)) == before


def test_the_environment_variable_makes_a_process_replay_only(
    any_ledger: str, effects: Path
) -> None:
    """A child started with SAFEACT_REPLAY_ONLY=1 replays a recorded key and refuses a new one."""
    assert report(run_child(any_ledger, effects, "paid")) == {
        "kind": "Succeeded",
        "replayed": False,
        "value": {"to": "a@example.com", "amount": 50},
    }
    before = snapshot(any_ledger)
    replaying = {ENVIRONMENT: "1"}
    child = run_python(CHILD, any_ledger, effects, "paid", env=replaying)
    assert report(child)["replayed"] is True
    child = run_python(CHILD, any_ledger, effects, "new", env=replaying)
    assert report(child) == {"kind": "ReplayOnlyError", "key": "new"}
    assert effects.read_text().splitlines() == ["paid"]
    assert snapshot(any_ledger) == before


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("yes", True), ("ture", True), ("0", False), ("off", False), ("", False)],
)
def test_what_the_environment_variable_says(value: str, expected: bool) -> None:
    """Only an empty value or an explicit no leaves a process free to act; anything else is on."""
    code = "from safeact._replay_only import in_force; print(in_force())"
    child = run_python("-c", code, env={ENVIRONMENT: value})
    assert child.stdout.strip() == str(expected), child.stderr


def test_the_environment_is_read_once_per_process() -> None:
    """Read at the first question and kept: a process cannot leave replay-only by changing it."""
    code = (
        "import os, json; from safeact._replay_only import in_force; first = in_force(); "
        f"os.environ[{ENVIRONMENT!r}] = '0'; print(json.dumps([first, in_force()]))"
    )
    child = run_python("-c", code, env={ENVIRONMENT: "1"})
    assert json.loads(child.stdout) == [True, True], child.stderr


def test_the_refusal_pickles_with_its_fields() -> None:
    """Engines that store a step's error (DBOS) rebuild a ReplayOnlyError whole."""
    refused = ReplayOnlyError("k", "tests.charge")
    again = pickle.loads(pickle.dumps(refused))  # noqa: S301 - our own bytes
    assert (type(again), again.key, again.tool, str(again)) == (
        ReplayOnlyError,
        "k",
        "tests.charge",
        str(refused),
    )


# Sagas


class Bank:
    """Fake back ends that log every real action."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.failing: set[str] = set()

    def act(self, what: str) -> Callable[[str, int], int]:
        def action(key: str, amount: int) -> int:
            self.log.append(f"{what} {key}")
            if what in self.failing:
                raise RuntimeError(f"{what} is down")
            return amount

        action.__name__ = action.__qualname__ = what
        return action

    def undo(self, what: str) -> Callable[[str, int], None]:
        def compensation(key: str, value: int) -> None:
            self.log.append(f"undo {what} {key}")
            if f"undo {what}" in self.failing:
                raise RuntimeError(f"cannot undo {what}")

        compensation.__name__ = compensation.__qualname__ = f"undo_{what}"
        return compensation


def transfer(saga: Saga, bank: Bank, *, steps: int = 2) -> list[int]:
    """Charge, then send: both undoable."""
    done = [saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))]
    if steps > 1:
        done.append(saga.step(bank.act("send"), 1, compensate=bank.undo("send")))
    return done


def test_a_recorded_saga_replays_its_steps(any_ledger: str) -> None:
    """A completed saga's steps replay their values replay-only: nothing runs or is written."""
    bank = Bank()
    with get_store(any_ledger) as store:
        with Saga("s", store) as saga:
            assert transfer(saga, bank) == [50, 1]
        before, log = snapshot(any_ledger), list(bank.log)
        with replay_only(), Saga("s", store) as saga:
            assert transfer(saga, bank) == [50, 1]
        assert (bank.log, snapshot(any_ledger)) == (log, before)


def test_a_recorded_saga_replays_from_a_read_only_store(any_ledger: str) -> None:
    """A saga opened on a location under replay-only (read-only) replays too."""
    bank = Bank()
    with Saga("s", any_ledger) as saga:
        transfer(saga, bank)
    saga.store.close()
    before = snapshot(any_ledger)
    with replay_only(), Saga("s", any_ledger) as saga:
        assert transfer(saga, bank) == [50, 1]
    saga.store.close()
    assert len(bank.log) == 2
    assert snapshot(any_ledger) == before


def test_a_new_saga_is_refused_before_anything_is_written(any_ledger: str) -> None:
    """A saga the ledger never began is refused when its block is entered; it stays unrecorded."""
    bank = Bank()
    with get_store(any_ledger) as store:
        before = snapshot(any_ledger)
        with replay_only(), pytest.raises(ReplayOnlyError) as refused, Saga("new", store) as saga:
            transfer(saga, bank)
        assert (refused.value.key, refused.value.tool) == ("new", None)
        assert store.get_saga("new") is None
        assert (bank.log, snapshot(any_ledger)) == ([], before)


def test_a_step_the_saga_never_recorded_is_refused(any_ledger: str) -> None:
    """A running saga's next, unrecorded step is refused: it is neither recorded nor run."""
    bank = Bank()
    with get_store(any_ledger) as store:
        with pytest.raises(Crash), Saga("s", store) as saga:
            transfer(saga, bank, steps=1)
            raise Crash
        before, log = snapshot(any_ledger), list(bank.log)
        with replay_only(), pytest.raises(ReplayOnlyError) as refused, Saga("s", store) as saga:
            transfer(saga, bank)
        assert "step 1 of saga 's' would have been recorded and run" in str(refused.value)
        assert (bank.log, snapshot(any_ledger)) == (log, before)


def test_a_saga_is_not_marked_completed(any_ledger: str) -> None:
    """A running saga whose replayed block ends would be marked completed: that is refused."""
    bank = Bank()
    with get_store(any_ledger) as store:
        with pytest.raises(Crash), Saga("s", store) as saga:
            transfer(saga, bank, steps=1)
            raise Crash
        before = snapshot(any_ledger)
        refused = pytest.raises(ReplayOnlyError, match="marked completed")
        with replay_only(), refused, Saga("s", store) as saga:
            transfer(saga, bank, steps=1)
        saga_record = store.get_saga("s")
        assert saga_record is not None
        assert saga_record.state is SagaState.RUNNING
        assert snapshot(any_ledger) == before


def test_a_rollback_is_not_started(any_ledger: str) -> None:
    """A running saga whose replayed block raises would be rolled back: refused, nothing undone."""
    bank = Bank()
    with get_store(any_ledger) as store:
        with pytest.raises(Crash), Saga("s", store) as saga:
            transfer(saga, bank, steps=1)
            raise Crash
        before, log = snapshot(any_ledger), list(bank.log)
        with replay_only(), pytest.raises(ReplayOnlyError) as refused, Saga("s", store) as saga:
            transfer(saga, bank, steps=1)
            raise RuntimeError("abort")
        assert "would have been rolled back" in str(refused.value)
        assert (bank.log, snapshot(any_ledger)) == (log, before)


def test_a_recorded_rollback_replays_its_report(any_ledger: str) -> None:
    """A saga left ROLLBACK_INCOMPLETE replays its steps and its undos: the same SagaFailed."""
    bank = Bank()
    bank.failing = {"send", "undo charge"}
    with get_store(any_ledger) as store:
        with pytest.raises(SagaFailed) as first, Saga("s", store) as saga:
            transfer(saga, bank)
        before, log = snapshot(any_ledger), list(bank.log)
        with replay_only(), pytest.raises(SagaFailed) as again, Saga("s", store) as saga:
            transfer(saga, bank)
        assert str(again.value) == str(first.value)
        assert again.value.failed == ("s:0:charge",)
        assert (bank.log, snapshot(any_ledger)) == (log, before)


def crash_in_the_undo(store: Store, bank: Bank, where: Checkpoint) -> None:
    """Charge, fail to send; the process dies in the charge's compensation, at ``where``.

    At ``after_claim`` the undo has not acted yet (the send is the last thing logged); at
    ``after_record`` it has, and its outcome is recorded.
    """
    bank.failing = {"send"}
    last = "send" if where == "after_claim" else "undo charge"

    def hook(point: Checkpoint) -> None:
        if point == where and bank.log and bank.log[-1].startswith(last):
            raise Crash

    with pytest.raises(Crash), checkpoint_hook(hook), Saga("s", store) as saga:
        transfer(saga, bank)


def test_a_rollback_ending_otherwise_than_recorded_is_refused(any_ledger: str) -> None:
    """A rollback cut short after its last undo would end now: under replay-only it is refused."""
    bank = Bank()
    with get_store(any_ledger) as store:
        crash_in_the_undo(store, bank, "after_record")
        assert (found := store.get_saga("s")) is not None
        assert found.state is SagaState.COMPENSATING
        before, log = snapshot(any_ledger), list(bank.log)
        with replay_only(), pytest.raises(ReplayOnlyError) as refused, Saga("s", store) as saga:
            transfer(saga, bank)
        assert "moved from compensating to compensated" in str(refused.value)
        assert (bank.log, snapshot(any_ledger)) == (log, before)


def test_a_compensation_that_would_run_is_refused_not_counted_failed(any_ledger: str) -> None:
    """A released compensation would run again: refused with its own key, not reported failed."""
    bank = Bank()
    with get_store(any_ledger) as store:
        crash_in_the_undo(store, bank, "after_claim")
        expire_leases(store)
        store.resolve("s:0:charge:compensate", happened=False, force=True)
        before, log = snapshot(any_ledger), list(bank.log)
        with replay_only(), pytest.raises(ReplayOnlyError) as refused, Saga("s", store) as saga:
            transfer(saga, bank)
        assert refused.value.key == "s:0:charge:compensate"
        assert (bank.log, snapshot(any_ledger)) == (log, before)


def test_an_async_saga_replays_and_refuses_a_compensation(any_ledger: str) -> None:
    """An async saga replays its steps, and refuses a compensation that would run."""
    log: list[str] = []

    async def charge(key: str, amount: int) -> int:
        log.append(f"charge {key}")
        return amount

    async def send(key: str, amount: int) -> int:
        log.append(f"send {key}")
        raise RuntimeError("send is down")

    async def undo_charge(key: str, value: int) -> None:
        log.append(f"undo {key}")

    async def run() -> None:
        async with Saga("a", store) as saga:
            await saga.step(charge, 50, compensate=undo_charge)
            await saga.step(send, 1)

    def die_in_undo(point: Checkpoint) -> None:
        if point == "after_claim" and log and log[-1].startswith("send"):
            raise Crash

    with get_store(any_ledger) as store:
        with checkpoint_hook(die_in_undo), pytest.raises(Crash):
            asyncio.run(run())
        expire_leases(store)
        store.resolve("a:0:charge:compensate", happened=False, force=True)
        before, ran = snapshot(any_ledger), list(log)
        with replay_only(), pytest.raises(ReplayOnlyError) as refused:
            asyncio.run(run())
        assert refused.value.key == "a:0:charge:compensate"
        assert (log, snapshot(any_ledger)) == (ran, before)


def test_a_refusal_in_the_block_is_not_answered_by_a_rollback(any_ledger: str) -> None:
    """The refusal a step raised leaves the block as it is: the saga's end adds nothing to it."""
    bank = Bank()
    with get_store(any_ledger) as store:
        crash = checkpoint_hook(crash_at("after_claim"))
        with crash, pytest.raises(Crash), Saga("s", store) as saga:
            transfer(saga, bank)
        expire_leases(store)  # the charge is in doubt: the saga would be rolled back
        raised: list[ReplayOnlyError] = []
        with replay_only(), pytest.raises(ReplayOnlyError) as refused, Saga("s", store) as saga:
            try:
                transfer(saga, bank)
            except ReplayOnlyError as exc:
                raised.append(exc)
                raise
        assert [refused.value] == raised
