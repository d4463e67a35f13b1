"""Sagas in one process: reverse compensation, once each, replays, conflicts, the report."""

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from safeact import (
    DoubtReason,
    Failed,
    InDoubt,
    KeyConflictError,
    SafeError,
    Saga,
    SagaFailed,
    SagaRecord,
    SagaState,
    State,
    Store,
    StoreError,
    get_store,
    safe,
)
from safeact._protocol import Checkpoint, checkpoint_hook
from tests.conftest import new_postgres_schema


class Bank:
    """Fake back ends that log every real action, in order."""

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
            self.log.append(f"undo {what} {key} {value}")
            if f"undo {what}" in self.failing:
                raise RuntimeError(f"cannot undo {what}")

        compensation.__name__ = compensation.__qualname__ = f"undo_{what}"
        return compensation


def refund(store: Store, bank: Bank, saga_id: str = "refund-8842") -> list[int]:
    """Charge, send a receipt, write the ledger: the first two can be undone."""
    with Saga(saga_id, store) as saga:
        return [
            saga.step(bank.act("charge"), 50, compensate=bank.undo("charge")),
            saga.step(bank.act("send"), 1, compensate=bank.undo("send")),
            saga.step(bank.act("note"), 2),
            saga.step(bank.act("ledger"), 3),
        ]


def test_completed_saga_returns_step_values_and_replays_them(store: Store) -> None:
    """A saga that completes returns its steps' values; a re-run replays them, running nothing."""
    bank = Bank()
    assert refund(store, bank) == [50, 1, 2, 3]
    assert refund(store, bank) == [50, 1, 2, 3]
    assert bank.log == [
        "charge refund-8842:0:charge",
        "send refund-8842:1:send",
        "note refund-8842:2:note",
        "ledger refund-8842:3:ledger",
    ]
    saga = store.get_saga("refund-8842")
    assert saga is not None
    assert saga.state is SagaState.COMPLETED
    assert saga.steps == tuple(line.split()[1] for line in bank.log)


def test_failing_step_compensates_completed_steps_newest_first(store: Store) -> None:
    """A failed step undoes the completed steps in reverse, skipping those without undo."""
    bank = Bank()
    bank.failing.add("ledger")
    with pytest.raises(SagaFailed) as caught:
        refund(store, bank)
    assert bank.log[4:] == [
        "undo send refund-8842:1:send:compensate 1",
        "undo charge refund-8842:0:charge:compensate 50",
    ]
    failure = caught.value
    assert isinstance(failure.__cause__, RuntimeError)
    assert (failure.step, failure.reason) == ("refund-8842:3:ledger", None)
    assert isinstance(failure.outcome, Failed)
    assert failure.outcome.message == "ledger is down"
    # The step's own outcome, live exception and all, not one read back from the ledger.
    assert failure.outcome.exception is failure.__cause__
    assert failure.compensated == ("refund-8842:1:send", "refund-8842:0:charge")
    assert failure.skipped == ("refund-8842:2:note",)
    assert (failure.replayed, failure.failed, failure.in_doubt) == ((), (), ())
    assert failure.fully_rolled_back
    assert (
        "step 'refund-8842:3:ledger' failed (RuntimeError: ledger is down); fully rolled back."
        in str(failure)
    )
    saga = store.get_saga("refund-8842")
    assert saga is not None
    assert (saga.state, saga.aborted_step) == (SagaState.COMPENSATED, "refund-8842:3:ledger")
    compensation = store.get("refund-8842:0:charge:compensate")
    assert compensation is not None
    assert compensation.state is State.SUCCEEDED


def test_rolled_back_saga_raises_again_and_runs_nothing(store: Store) -> None:
    """Re-running a rolled-back saga raises SagaFailed at once; no step or undo runs again."""
    bank = Bank()
    bank.failing.add("ledger")
    with pytest.raises(SagaFailed):
        refund(store, bank)
    ran = list(bank.log)
    bank.failing.clear()
    with pytest.raises(SagaFailed) as caught:
        refund(store, bank)
    assert bank.log == ran
    failure = caught.value
    assert failure.replayed == ("refund-8842:1:send", "refund-8842:0:charge")
    assert failure.compensated == ()
    assert failure.step == "refund-8842:3:ledger"
    assert isinstance(failure.outcome, Failed)


def test_exception_in_the_block_aborts_and_chains(store: Store) -> None:
    """An exception raised in the block rolls the saga back; SagaFailed is chained from it."""
    bank = Bank()
    error = ValueError("the agent changed its mind")
    with pytest.raises(SagaFailed) as caught, Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
        raise error
    assert caught.value.__cause__ is error
    assert caught.value.reason == "ValueError: the agent changed its mind"
    assert caught.value.step is None
    assert str(caught.value) == (
        "saga 's' aborted: the saga block raised ValueError: the agent changed its mind; "
        "fully rolled back. compensated: s:0:charge"
    )
    assert bank.log == ["charge s:0:charge", "undo charge s:0:charge:compensate 50"]


def test_in_doubt_step_is_not_compensated(store: Store) -> None:
    """A step left in doubt aborts the saga; it is reported, and only older steps are undone."""
    bank = Bank()

    def interrupted(key: str, amount: int) -> int:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
        saga.step(interrupted, 1, compensate=bank.undo("interrupted"))
    saga_record = store.get_saga("s")
    assert saga_record is not None
    assert saga_record.state is SagaState.RUNNING  # an interrupt is not a rollback

    with pytest.raises(SagaFailed) as caught, Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
        saga.step(interrupted, 1, compensate=bank.undo("interrupted"))
    assert isinstance(caught.value.outcome, InDoubt)
    assert caught.value.step == "s:1:interrupted"
    assert caught.value.compensated == ("s:0:charge",)
    assert bank.log == ["charge s:0:charge", "undo charge s:0:charge:compensate 50"]


def test_failed_compensation_does_not_stop_the_rollback(store: Store) -> None:
    """An undo that fails is reported; older steps are still undone; the saga is incomplete."""
    bank = Bank()
    bank.failing |= {"ledger", "undo send"}
    with pytest.raises(SagaFailed) as caught:
        refund(store, bank)
    failure = caught.value
    assert failure.failed == ("refund-8842:1:send",)
    assert failure.compensated == ("refund-8842:0:charge",)
    assert not failure.fully_rolled_back
    assert "NOT fully rolled back" in str(failure)
    saga = store.get_saga("refund-8842")
    assert saga is not None
    assert saga.state is SagaState.ROLLBACK_INCOMPLETE
    bank.failing.clear()
    with pytest.raises(SagaFailed) as again:
        refund(store, bank)
    assert again.value.failed == ("refund-8842:1:send",)
    assert bank.log.count("undo send refund-8842:1:send:compensate 1") == 1


def test_tool_compensation_is_used_unless_the_step_gives_one(store: Store) -> None:
    """safe(store, compensate=...) undoes a tool's step; a step's compensate= takes precedence."""
    bank = Bank()

    @safe(store, compensate=bank.undo("tool_default"))
    def book(key: str, amount: int) -> int:
        bank.log.append(f"book {key}")
        return amount

    with pytest.raises(SagaFailed), Saga("s", store) as saga:
        saga.step(book, 1)
        saga.step(book, 2, compensate=bank.undo("override"))
        raise RuntimeError
    name = book.name
    assert bank.log[2:] == [
        f"undo override s:1:{name}:compensate 2",
        f"undo tool_default s:0:{name}:compensate 1",
    ]


def test_other_step_name_on_rerun_conflicts_before_anything_runs(store: Store) -> None:
    """A re-run whose step at some index has another name raises KeyConflictError; no undo runs."""
    bank = Bank()
    with Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
    with (
        pytest.raises(KeyConflictError, match="an earlier run took 's:0:charge'") as caught,
        Saga("s", store) as saga,
    ):
        saga.step(bank.act("refund"), 50, compensate=bank.undo("refund"))
    assert caught.value.key == "s:0:refund"
    assert bank.log == ["charge s:0:charge"]
    saga_record = store.get_saga("s")
    assert saga_record is not None
    assert saga_record.state is SagaState.COMPLETED


def test_other_arguments_on_rerun_conflict(store: Store) -> None:
    """A re-run whose step has other arguments raises KeyConflictError and compensates nothing."""
    bank = Bank()
    with pytest.raises(KeyboardInterrupt), Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
        saga.step(bank.act("send"), 1)
        raise KeyboardInterrupt  # stops the saga without a rollback
    with pytest.raises(KeyConflictError, match="other arguments"), Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
        saga.step(bank.act("send"), 2)
    assert bank.log == ["charge s:0:charge", "send s:1:send"]


def test_completed_saga_refuses_an_extra_step(store: Store) -> None:
    """A completed saga re-run with one more step raises KeyConflictError; the step never runs."""
    bank = Bank()
    with Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50)
    with (
        pytest.raises(KeyConflictError, match="completed with 1 steps") as caught,
        Saga("s", store) as saga,
    ):
        saga.step(bank.act("charge"), 50)
        saga.step(bank.act("send"), 1)
    assert caught.value.key == "s:1:send"
    assert bank.log == ["charge s:0:charge"]


def test_list_sagas_puts_stuck_rollbacks_first(store: Store) -> None:
    """list_sagas shows sagas mid-rollback before the others, and filters by state."""
    bank = Bank()
    with Saga("done", store) as saga:
        saga.step(bank.act("charge"), 1)
    store._begin_saga("stuck")
    store._move_saga("stuck", SagaState.COMPENSATING, abort_reason="RuntimeError: x")
    assert [s.saga_id for s in store.list_sagas()] == ["stuck", "done"]
    assert [s.saga_id for s in store.list_sagas(SagaState.COMPLETED)] == ["done"]


def test_tool_of_another_ledger_is_refused(tmp_path: Path, store: Store) -> None:
    """A tool whose ledger is not the saga's is a ValueError before anything runs."""
    with get_store(tmp_path / "other.db") as other:

        @safe(other)
        def act(key: str) -> int:
            return 1

        with pytest.raises(ValueError, match="make the tool with safe"), Saga("s", store) as s:
            s.step(act)


def test_tool_of_another_store_on_the_same_ledger_is_accepted(any_ledger: str) -> None:
    """A tool made on another Store object of the saga's own ledger runs as one of its steps."""
    with get_store(any_ledger) as tools, get_store(any_ledger) as sagas:

        @safe(tools, name="double")
        def double(key: str, n: int) -> int:
            return 2 * n

        with Saga("s", sagas) as saga:
            value = saga.step(double, 2)
    assert value == 4


SPELLINGS = ["relative", "dot-relative", "absolute", "pathlike", "through ..", "symlink"]


def spelt(spelling: str, here: Path) -> str | Path:
    """The ledger ``agent.db`` in the working directory ``here``, named as ``spelling`` says."""
    names: dict[str, str | Path] = {
        "relative": "agent.db",
        "dot-relative": "./agent.db",
        "absolute": str(here / "agent.db"),
        "pathlike": Path("agent.db"),
        "through ..": "sub/../agent.db",
        "symlink": "link.db",
    }
    return names[spelling]


@pytest.mark.parametrize("tool_spelling", SPELLINGS)
@pytest.mark.parametrize("saga_spelling", ["relative", "pathlike"])
def test_saga_and_its_tools_agree_on_a_ledger_however_it_is_spelt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool_spelling: str, saga_spelling: str
) -> None:
    """A tool and a saga given one ledger file under any two names run as one ledger."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    get_store("agent.db").close()
    (tmp_path / "link.db").symlink_to(tmp_path / "agent.db")

    @safe(spelt(tool_spelling, tmp_path), name="double")
    def double(key: str, n: int) -> int:
        return 2 * n

    with Saga("saga-1", spelt(saga_spelling, tmp_path)) as saga:
        value = saga.step(double, 2)
    assert value == 4
    double.store.close()
    saga.store.close()


@pytest.mark.parametrize("saga_spelling", ["relative", "pathlike"])
def test_a_sagas_ledger_location_is_absolute_as_its_tools_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, saga_spelling: str
) -> None:
    """A saga made on a relative path keeps it made absolute, as a tool on it does."""
    monkeypatch.chdir(tmp_path)
    with Saga("saga-1", spelt(saga_spelling, tmp_path)) as saga:
        location = saga.store.location
    saga.store.close()
    assert location == str(tmp_path / "agent.db")


def test_tool_on_another_schema_of_the_sagas_database_is_refused(postgres_ledger: str) -> None:
    """On PostgreSQL, a tool whose ledger is another schema of the saga's database is refused."""
    other, drop = new_postgres_schema()
    try:
        with get_store(other) as tools, get_store(postgres_ledger) as sagas:

            @safe(tools, name="act")
            def act(key: str) -> int:
                return 1

            with pytest.raises(ValueError, match="make the tool with safe"), Saga("s", sagas) as s:
                s.step(act)
    finally:
        drop()


def test_saga_id_must_be_a_non_empty_string(store: Store) -> None:
    """A saga id that is not a non-empty str is refused."""
    with pytest.raises(ValueError, match="saga id"):
        Saga("", store)
    with pytest.raises(TypeError, match="saga id"):
        Saga(7, store)  # type: ignore[arg-type] # the misuse under test


class Crash(BaseException):
    """The process dies here."""


def crash_mid_rollback(store: Store, bank: Bank) -> None:
    """Charge, send, abort; the process dies after undoing send, before undoing the charge."""

    def die_before_second_undo(point: Checkpoint) -> None:
        if point == "before_claim" and bank.log and bank.log[-1].startswith("undo send"):
            raise Crash

    with pytest.raises(Crash), checkpoint_hook(die_before_second_undo), Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
        saga.step(bank.act("send"), 1, compensate=bank.undo("send"))
        raise RuntimeError("abort")


def test_rollback_cut_short_is_finished_even_if_the_block_changed(store: Store) -> None:
    """A saga stuck mid-rollback finishes it on re-run and starts no new step."""
    bank = Bank()
    crash_mid_rollback(store, bank)
    stuck = store.get_saga("s")
    assert stuck is not None
    assert (stuck.state, stuck.abort_reason) == (SagaState.COMPENSATING, "RuntimeError: abort")

    with pytest.raises(SagaFailed) as caught, Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
        saga.step(bank.act("send"), 1, compensate=bank.undo("send"))
        saga.step(bank.act("new"), 2)
    assert bank.log == [
        "charge s:0:charge",
        "send s:1:send",
        "undo send s:1:send:compensate 1",
        "undo charge s:0:charge:compensate 50",
    ]
    assert (caught.value.compensated, caught.value.replayed) == (("s:0:charge",), ("s:1:send",))
    assert caught.value.reason == "RuntimeError: abort"


def test_block_of_a_rolled_back_saga_does_not_run(store: Store) -> None:
    """Entering a rolled-back saga raises SagaFailed before the block: no new step can run."""
    bank = Bank()
    with pytest.raises(SagaFailed), Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
        raise RuntimeError("abort")
    entered: list[str] = []
    with pytest.raises(SagaFailed) as caught, Saga("s", store) as saga:
        entered.append("block")
        saga.step(bank.act("other"), 1)
    assert entered == []
    assert caught.value.replayed == ("s:0:charge",)
    assert caught.value.reason == "RuntimeError: abort"


def test_released_compensation_runs_when_the_saga_is_run_again(store: Store) -> None:
    """An in-doubt undo, resolved as not happened, runs on the next re-run; then all is done."""
    bank = Bank()

    def flaky_undo(key: str, value: int) -> None:
        bank.log.append(f"undo send {key}")
        if bank.log.count(f"undo send {key}") == 1:
            raise KeyboardInterrupt  # dies inside the undo: in doubt

    def run() -> None:
        with Saga("s", store) as saga:
            saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
            saga.step(bank.act("send"), 1, compensate=flaky_undo)
            raise RuntimeError("abort")

    with pytest.raises(KeyboardInterrupt):
        run()
    with pytest.raises(SagaFailed) as first:
        run()
    assert (first.value.in_doubt, first.value.compensated) == (("s:1:send",), ("s:0:charge",))
    store.resolve("s:1:send:compensate", happened=False, force=True)  # this process is done
    with pytest.raises(SagaFailed) as second:
        run()
    assert (second.value.compensated, second.value.replayed) == (("s:1:send",), ("s:0:charge",))
    assert second.value.fully_rolled_back
    with pytest.raises(SagaFailed):
        run()
    assert bank.log == [
        "charge s:0:charge",
        "send s:1:send",
        "undo send s:1:send:compensate",
        "undo charge s:0:charge:compensate 50",
        "undo send s:1:send:compensate",
    ]


def test_compensation_gets_the_stored_value_in_every_run(store: Store) -> None:
    """An int returned for a float is undone with that int, now and when the rollback resumes."""
    seen: list[object] = []

    def charge(key: str, amount: int) -> float:
        return amount  # an int where a float is promised (PEP 484 allows it): kept an int

    def refund(key: str, value: float) -> None:
        seen.append(value)

    def notify(key: str) -> None:
        return None

    def unnotify(key: str, value: None) -> None:
        raise RuntimeError("cannot unsend")

    def run() -> None:
        with Saga("s", store) as saga:
            saga.step(charge, 100, compensate=refund)
            saga.step(notify, compensate=unnotify)
            raise ValueError("agent gave up")

    with pytest.raises(SagaFailed):
        run()
    with pytest.raises(SagaFailed) as again:  # ROLLBACK_INCOMPLETE is taken up again
        run()
    assert again.value.replayed == ("s:0:charge",)
    assert again.value.failed == ("s:1:notify",)
    assert seen == [100]
    assert type(seen[0]) is int


def test_another_sagas_failure_still_rolls_this_one_back(store: Store) -> None:
    """A SagaFailed from a nested saga is an exception in this block like any other."""
    bank = Bank()
    with pytest.raises(SagaFailed) as caught, Saga("outer", store) as outer:
        outer.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
        with Saga("inner", store) as inner:
            inner.step(bank.act("fail"), 1)
            raise RuntimeError("inner gave up")
    assert caught.value.saga_id == "outer"
    assert caught.value.compensated == ("outer:0:charge",)


def test_completed_saga_is_not_undone_by_a_later_error(store: Store) -> None:
    """A re-run of a completed saga whose block then raises propagates it; nothing is undone."""
    bank = Bank()
    with Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
    with pytest.raises(ConnectionError), Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
        raise ConnectionError("could not print the summary")
    assert bank.log == ["charge s:0:charge"]
    saga_record = store.get_saga("s")
    assert saga_record is not None
    assert saga_record.state is SagaState.COMPLETED


def test_steps_a_resumed_rollback_does_not_reach_are_reported(store: Store) -> None:
    """A resumed rollback whose block ends before a step cannot undo it: ROLLBACK_INCOMPLETE."""
    bank = Bank()
    crash_mid_rollback(store, bank)
    with pytest.raises(SagaFailed) as caught, Saga("s", store):
        raise RuntimeError("abort")  # this run never reaches its steps
    assert caught.value.unreached == ("s:0:charge",)
    assert caught.value.replayed == ("s:1:send",)
    assert not caught.value.fully_rolled_back
    saga_record = store.get_saga("s")
    assert saga_record is not None
    assert saga_record.state is SagaState.ROLLBACK_INCOMPLETE
    with pytest.raises(SagaFailed) as finished, Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
        raise RuntimeError("abort")
    assert finished.value.compensated == ("s:0:charge",)
    assert finished.value.fully_rolled_back


def test_compensation_that_cannot_be_a_tool_is_refused_before_the_step(store: Store) -> None:
    """A compensation without a return annotation is a TypeError before its step runs."""
    bank = Bank()

    def cancel(key, value):  # type: ignore[no-untyped-def] # noqa: ANN001, ANN202 - the misuse
        return None

    with pytest.raises(TypeError, match="no return annotation"), Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
        saga.step(bank.act("book"), 1, compensate=cancel)
    assert bank.log == ["charge s:0:charge"]
    saga_record = store.get_saga("s")
    assert saga_record is not None
    assert saga_record.state is SagaState.RUNNING


def test_no_step_runs_after_the_saga_was_rolled_back(store: Store) -> None:
    """Catching SagaFailed inside the block does not let a later step run."""
    bank = Bank()
    bank.failing.add("fast")
    with Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
        try:
            saga.step(bank.act("fast"), 1)
        except SagaFailed:
            with pytest.raises(SagaFailed):
                saga.step(bank.act("slow"), 1)
    assert "slow s:2:slow" not in bank.log


def test_step_before_the_block_began_is_refused_before_it_runs(store: Store) -> None:
    """A step taken before the saga's with block is a SafeError; nothing runs or is recorded."""
    bank = Bank()
    saga = Saga("s", store)
    with pytest.raises(SafeError, match=r"before its block began; nothing ran\. .*`with saga:"):
        saga.step(bank.act("charge"), 50)
    assert bank.log == []
    assert store.get_saga("s") is None
    assert store.get("s:0:charge") is None


@pytest.mark.parametrize("ending", ["quietly", "interrupted"])
def test_step_after_the_block_ended_is_refused_before_it_runs(store: Store, ending: str) -> None:
    """A step taken after the saga's with block ended, however it ended, is a SafeError."""
    bank = Bank()
    saga = Saga("s", store)
    with contextlib.suppress(KeyboardInterrupt), saga:
        saga.step(bank.act("charge"), 50)
        if ending == "interrupted":
            raise KeyboardInterrupt
    with pytest.raises(SafeError, match=r"after its block ended; nothing ran\. .*`with saga:"):
        saga.step(bank.act("send"), 1)
    assert bank.log == ["charge s:0:charge"]
    assert store.get("s:1:send") is None


def test_resumed_rollback_finishes_even_if_the_block_now_ends_quietly(store: Store) -> None:
    """A saga left mid-rollback is rolled back when a re-run block ends without raising."""
    bank = Bank()
    crash_mid_rollback(store, bank)
    with pytest.raises(SagaFailed) as caught, Saga("s", store):
        pass
    assert caught.value.unreached == ("s:0:charge",)


def test_step_whose_result_cannot_be_stored_aborts_as_in_doubt(store: Store) -> None:
    """A step that ran but whose result could not be stored aborts the saga; it is in doubt."""
    bank = Bank()

    def quote(key: str) -> float:
        return float("nan")

    with pytest.raises(SagaFailed) as caught, Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
        saga.step(quote)
    assert isinstance(caught.value.outcome, InDoubt)
    assert caught.value.outcome.reason is DoubtReason.RESULT_NOT_STORED
    assert caught.value.step == "s:1:quote"
    assert caught.value.compensated == ("s:0:charge",)


def test_compensation_whose_result_cannot_be_stored_is_in_doubt(store: Store) -> None:
    """An undo that ran but could not store its result leaves the rollback incomplete."""
    bank = Bank()

    def undo(key: str, value: int) -> float:
        return float("nan")

    with pytest.raises(SagaFailed) as caught, Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=undo)
        raise RuntimeError("abort")
    assert caught.value.in_doubt == ("s:0:charge",)
    saga_record = store.get_saga("s")
    assert saga_record is not None
    assert saga_record.state is SagaState.ROLLBACK_INCOMPLETE


def test_async_compensation_of_a_sync_saga_runs(store: Store) -> None:
    """A sync saga can be undone by an async compensation; it runs in its own event loop."""
    undone: list[str] = []

    async def refund(key: str, value: int) -> None:
        undone.append(key)

    def charge(key: str, amount: int) -> int:
        return amount

    with pytest.raises(SagaFailed) as caught, Saga("s", store) as saga:
        saga.step(charge, 50, compensate=refund)
        raise RuntimeError("abort")
    assert undone == ["s:0:charge:compensate"]
    assert caught.value.compensated == ("s:0:charge",)


def test_saga_opens_the_ledger_at_a_location_it_is_given(any_ledger: str) -> None:
    """Saga(saga_id, location) opens the ledger there itself; the saga completes in it."""

    def double(key: str, n: int) -> int:
        return 2 * n

    with Saga("s", any_ledger) as saga:
        value = saga.step(double, 3)
    saga.store.close()
    assert value == 6
    with get_store(any_ledger) as store:
        record = store.get_saga("s")
    assert record is not None
    assert record.state is SagaState.COMPLETED


def test_keyword_arguments_reach_a_plain_step(store: Store) -> None:
    """step(fn, name=value) passes the keyword on to fn, a plain function."""

    def greet(key: str, *, to: str = "nobody") -> str:
        return to

    with Saga("s", store) as saga:
        value = saga.step(greet, to="Ada")
    assert value == "Ada"


def test_rollback_cut_short_by_the_ledger_is_finished_when_the_block_ends(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rollback a StoreError cut short is finished when the block ends, even quietly."""
    bank = Bank()
    bank.failing.add("ledger")
    read_saga = store.get_saga
    cuts = [StoreError("connection lost")]

    def cut_once(saga_id: str) -> SagaRecord | None:
        if cuts:
            raise cuts.pop()
        return read_saga(saga_id)

    with pytest.raises(SagaFailed) as caught, Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
        monkeypatch.setattr(store, "get_saga", cut_once)
        with pytest.raises(StoreError, match="connection lost"):
            saga.step(bank.act("ledger"), 3)  # fails; its rollback cannot read the saga
    assert cuts == []
    assert bank.log == [
        "charge s:0:charge",
        "ledger s:1:ledger",
        "undo charge s:0:charge:compensate 50",
    ]
    assert (caught.value.step, caught.value.compensated) == ("s:1:ledger", ("s:0:charge",))
    saga_record = store.get_saga("s")
    assert saga_record is not None
    assert saga_record.state is SagaState.COMPENSATED


def test_compensation_that_raised_unrecorded_is_reported_failed(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An undo known to have raised is reported failed, even if its failure was not stored."""
    bank = Bank()

    def lost(*_: object, **__: object) -> bool:
        raise StoreError("connection lost")

    def cancel(key: str, value: int) -> None:
        monkeypatch.setattr(store, "_finish", lost)  # the ledger cannot record how it ends
        raise RuntimeError("cannot cancel")

    with pytest.raises(SagaFailed) as caught, Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=cancel)
        raise RuntimeError("abort")
    assert (caught.value.failed, caught.value.in_doubt) == (("s:0:charge",), ())


def test_rollback_goes_on_past_a_compensation_that_cannot_run(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """An undo that raises before running (its key is taken) is failed, logged; older ones run."""
    bank = Bank()
    store._claim("s:1:ship:compensate", "another.tool", "h", attempt_id="x", previous=None)
    with pytest.raises(SagaFailed) as caught, Saga("s", store) as saga:
        saga.step(bank.act("charge"), 50, compensate=bank.undo("charge"))
        saga.step(bank.act("ship"), 1, compensate=bank.undo("ship"))
        raise RuntimeError("abort")
    assert (caught.value.failed, caught.value.compensated) == (("s:1:ship",), ("s:0:charge",))
    assert bank.log[-1] == "undo charge s:0:charge:compensate 50"
    (logged,) = [r for r in caplog.records if r.name == "safeact" and r.levelno == logging.ERROR]
    assert logged.getMessage() == "saga 's': the compensation of 's:1:ship' raised"
    assert logged.exc_info is not None
    assert isinstance(logged.exc_info[1], KeyConflictError)
