"""The audit trail: every change of a key's or a saga's state is appended, and never rewritten."""

import os
import signal
from pathlib import Path

import pytest

from safeact import (
    DoubtReason,
    Event,
    Happened,
    InDoubt,
    Saga,
    SagaFailed,
    SagaState,
    State,
    Store,
    StoreError,
    Succeeded,
    Why,
    get_store,
    safe,
)
from tests.actions import bury_owners, expire_leases
from tests.processes import report, run_child

KEY = "refund-8842"


def steps(
    events: list[Event],
) -> list[tuple[State | SagaState | None, State | SagaState | None, Why]]:
    """Each event as (from-state, to-state, why)."""
    return [(event.from_state, event.to_state, event.why) for event in events]


def test_a_call_that_ran_is_claimed_then_ran(store: Store) -> None:
    """A new key's history: claimed (→ ATTEMPTING), then ran (→ SUCCEEDED), by this process."""

    @safe(store)
    def act(key: str) -> int:
        return 1

    act("k")
    act("k")  # a replay changes nothing
    history = store.history("k")
    assert steps(history) == [
        (None, State.ATTEMPTING, Why.CLAIMED),
        (State.ATTEMPTING, State.SUCCEEDED, Why.RAN),
    ]
    record = store.get("k")
    assert record is not None
    assert {(e.by, e.host, e.pid, e.attempt_id) for e in history} == {
        ("process", store.owner.host, os.getpid(), record.attempt_id)
    }
    assert history[0].at == record.attempted_at
    assert history[1].at == record.finished_at


def test_a_call_that_raised_is_claimed_then_raised(store: Store) -> None:
    """An action that raises: claimed, then raised (→ FAILED)."""

    @safe(store)
    def act(key: str) -> int:
        raise ValueError("declined")

    act("k")
    assert steps(store.history("k")) == [
        (None, State.ATTEMPTING, Why.CLAIMED),
        (State.ATTEMPTING, State.FAILED, Why.RAISED),
    ]


@pytest.mark.parametrize(
    ("abandon", "why"),
    [(bury_owners, Why.CRASHED), (expire_leases, Why.LEASE_EXPIRED)],
    ids=["crashed", "lease-expired"],
)
def test_an_abandoned_attempt_is_marked_in_doubt_by_the_caller_that_finds_it(
    store: Store, abandon: object, why: Why
) -> None:
    """The caller that finds a dead or silent owner records why it put the key in doubt."""

    @safe(store, name="act")
    def act(key: str) -> int:
        return 1

    store._claim("k", "act", act._digest("k", (), {}), attempt_id="a", previous=None)
    assert callable(abandon)
    abandon(store)
    assert isinstance(act("k"), InDoubt)
    assert steps(store.history("k")) == [
        (None, State.ATTEMPTING, Why.CLAIMED),
        (State.ATTEMPTING, State.IN_DOUBT, why),
    ]


def test_an_interrupted_action_is_recorded_as_interrupted(store: Store) -> None:
    """A KeyboardInterrupt in the action: claimed, then interrupted (→ IN_DOUBT)."""

    @safe(store)
    def act(key: str) -> int:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        act("k")
    assert steps(store.history("k"))[-1] == (State.ATTEMPTING, State.IN_DOUBT, Why.INTERRUPTED)


def test_a_result_that_cannot_be_stored_is_recorded_as_such(store: Store) -> None:
    """An action whose result cannot be stored: → IN_DOUBT, why result_not_stored."""

    @safe(store)
    def act(key: str) -> int:
        return "not an int"  # type: ignore[return-value] # the mistake under test

    act("k")
    assert steps(store.history("k"))[-1] == (
        State.ATTEMPTING,
        State.IN_DOUBT,
        Why.RESULT_NOT_STORED,
    )


def test_resolve_records_the_operator_and_the_note(store: Store) -> None:
    """A resolve is logged as resolved, by the operator, with the note; a re-run is a new claim."""
    store._claim("k", "act", "h", attempt_id="a", previous=None)
    bury_owners(store)
    released = store.resolve("k", happened=False, note="bank says no transfer")
    store._claim("k", "act", "h", attempt_id="b", previous=released)
    history = store.history("k")
    assert steps(history) == [
        (None, State.ATTEMPTING, Why.CLAIMED),
        (State.ATTEMPTING, State.RELEASED, Why.RESOLVED),
        (State.RELEASED, State.ATTEMPTING, Why.CLAIMED),
    ]
    assert (history[1].by, history[1].note, history[1].attempt_id) == (
        "operator",
        "bank says no transfer",
        "a",
    )
    assert history[2].attempt_id == "b"


def test_a_late_completion_is_in_the_history_with_its_own_attempt(store: Store) -> None:
    """An attempt that finishes after its key moved on leaves a late_completion event."""
    store._claim("k", "act", "h", attempt_id="a", previous=None)
    expire_leases(store)
    released = store.resolve("k", happened=False, force=True)
    store._claim("k", "act", "h", attempt_id="b", previous=released)
    assert not store._finish("k", "a", state=State.SUCCEEDED, result=1)
    last = store.history("k")[-1]
    assert (last.from_state, last.to_state, last.why, last.attempt_id) == (
        State.ATTEMPTING,
        State.SUCCEEDED,
        Why.LATE_COMPLETION,
        "a",
    )
    record = store.get("k")
    assert record is not None
    assert record.state is State.ATTEMPTING


def test_a_saga_records_start_abort_and_rollback(store: Store) -> None:
    """A saga's history: started, aborted (→ COMPENSATING), rolled back (→ COMPENSATED)."""

    @safe(store)
    def undo(key: str, value: int) -> None:
        pass

    @safe(store, compensate=undo)
    def step(key: str, n: int) -> int:
        if n == 2:
            raise ValueError("declined")
        return n

    with pytest.raises(SagaFailed), Saga("order", store) as saga:
        saga.step(step, 1)
        saga.step(step, 2)
    assert steps(store.saga_history("order")) == [
        (None, SagaState.RUNNING, Why.STARTED),
        (SagaState.RUNNING, SagaState.COMPENSATING, Why.ABORTED),
        (SagaState.COMPENSATING, SagaState.COMPENSATED, Why.ROLLED_BACK),
    ]


def test_a_completed_saga_re_entered_adds_nothing(store: Store) -> None:
    """Re-running a completed saga replays it; its history stays started, completed."""

    @safe(store)
    def step(key: str) -> int:
        return 1

    for _ in range(2):
        with Saga("order", store) as saga:
            saga.step(step)
    assert steps(store.saga_history("order")) == [
        (None, SagaState.RUNNING, Why.STARTED),
        (SagaState.RUNNING, SagaState.COMPLETED, Why.COMPLETED),
    ]


def test_a_stuck_rollback_is_recorded(store: Store) -> None:
    """A compensation that fails leaves the saga ROLLBACK_INCOMPLETE, and the history says so."""

    @safe(store)
    def undo(key: str, value: int) -> None:
        raise RuntimeError("cannot undo")

    @safe(store, compensate=undo)
    def step(key: str, n: int) -> int:
        if n == 2:
            raise ValueError("declined")
        return n

    with pytest.raises(SagaFailed), Saga("order", store) as saga:
        saga.step(step, 1)
        saga.step(step, 2)
    assert steps(store.saga_history("order"))[-1] == (
        SagaState.COMPENSATING,
        SagaState.ROLLBACK_INCOMPLETE,
        Why.ROLLBACK_INCOMPLETE,
    )


@pytest.mark.parametrize(
    "statement", ["UPDATE history SET why = 'ran'", "DELETE FROM history"], ids=["update", "delete"]
)
def test_the_ledger_refuses_to_rewrite_history(store: Store, statement: str) -> None:
    """Even a direct SQL update or delete of the history is refused by the ledger file."""

    @safe(store)
    def act(key: str) -> int:
        return 1

    act("k")
    before = store.history("k")
    with (
        pytest.raises(StoreError, match="append-only"),
        store._errors(),
        store._transaction(sync=False) as db,
    ):
        db.execute(statement)
    assert store.history("k") == before


def test_an_unknown_key_has_no_history(store: Store) -> None:
    """history() of a key never seen is empty."""
    assert store.history("never") == []
    assert store.saga_history("never") == []


def test_a_real_crash_and_the_next_process_are_both_in_the_history(
    any_ledger: str, tmp_path: Path
) -> None:
    """Killed after the action: the dead process claimed, the next one marked it crashed."""
    ledger, effects = any_ledger, tmp_path / "effects"
    killed = run_child(ledger, effects, KEY, "--kill-at", "after_call")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert report(run_child(ledger, effects, KEY))["kind"] == "InDoubt"
    with get_store(ledger) as store:
        history = store.history(KEY)
        record = store.get(KEY)
    assert steps(history) == [
        (None, State.ATTEMPTING, Why.CLAIMED),
        (State.ATTEMPTING, State.IN_DOUBT, Why.CRASHED),
    ]
    assert record is not None
    assert history[0].pid == record.owner.pid
    assert history[1].pid not in {record.owner.pid, os.getpid()}
    assert record.doubt_reason is DoubtReason.CRASHED


def test_a_successful_probe_closes_the_key_in_one_logged_step(store: Store) -> None:
    """The history of a key closed by a probe names the probe's verdict."""

    @safe(store, name="act", reconcile=lambda _key, _receipt: Happened(7, "found it"))
    def act(key: str) -> int:
        raise AssertionError

    store._claim("k", "act", act._digest("k", (), {}), attempt_id="a", previous=None)
    bury_owners(store)
    assert act("k") == Succeeded("k", 7, replayed=True)
    last = store.history("k")[-1]
    assert (last.from_state, last.to_state, last.why, last.note) == (
        State.IN_DOUBT,
        State.SUCCEEDED,
        Why.RECONCILED,
        "probe: happened (found it)",
    )


def test_a_late_failure_keeps_its_own_error_and_no_doubt_reason(store: Store) -> None:
    """A late FAILED completion has its own error and no doubt reason, beside an in-doubt key."""
    store._claim("k", "act", "h", attempt_id="a", previous=None)
    expire_leases(store)
    released = store.resolve("k", happened=False, force=True)
    store._claim("k", "act", "h", attempt_id="b", previous=released)
    assert store._mark_in_doubt("k", "b", DoubtReason.LEASE_EXPIRED, detail="owner went silent")
    finished = store._finish(
        "k", "a", state=State.FAILED, error_type="ValueError", error_message="boom"
    )
    (late,) = store.late_completions("k")
    current = store.get("k")
    assert current is not None
    assert (
        finished,
        current.state,
        current.doubt_reason,
    ) == (False, State.IN_DOUBT, DoubtReason.LEASE_EXPIRED)
    assert (
        late.attempt_id,
        late.state,
        late.error_type,
        late.error_message,
        late.doubt_reason,
    ) == ("a", State.FAILED, "ValueError", "boom", None)
