"""Retention: purge forgets old settled keys and finished sagas, never what is in doubt."""

from datetime import timedelta

import pytest

from safeact import (
    DoubtReason,
    Purged,
    Saga,
    SagaFailed,
    SagaState,
    State,
    Store,
    Succeeded,
    Why,
    safe,
)
from safeact._protocol import utc_now
from safeact._tool import SafeTool
from tests.actions import bury_owners

LATER = timedelta(seconds=1)


def age(store: Store, key: str, days: int) -> None:
    """Make ``key`` look as if it finished ``days`` ago."""
    when = (utc_now() - timedelta(days=days)).isoformat(timespec="microseconds")
    with store._transaction(sync=False) as db:
        db.execute("UPDATE calls SET finished_at = ? WHERE key = ?", (when, key))


def tools(store: Store, runs: list[str]) -> tuple[SafeTool[[], int], SafeTool[[], int]]:
    @safe(store, name="ok")
    def ok(key: str) -> int:
        runs.append(key)
        return 1

    @safe(store, name="no")
    def no(key: str) -> int:
        runs.append(key)
        raise ValueError("declined")

    return ok, no


def test_purge_removes_settled_keys_older_than_the_cutoff(store: Store) -> None:
    """Succeeded and failed keys finished before the cutoff go; newer ones stay."""
    ok, no = tools(store, [])
    ok("old-ok")
    no("old-no")
    ok("new-ok")
    age(store, "old-ok", 40)
    age(store, "old-no", 40)
    purged = store.purge(utc_now() - timedelta(days=30))
    assert purged == Purged(keys=("old-no", "old-ok"), sagas=())
    assert [r.key for r in store.records()] == ["new-ok"]


def test_purge_never_touches_keys_in_doubt(store: Store) -> None:
    """ATTEMPTING and IN_DOUBT keys survive any purge, and asking to purge them is refused."""
    store._claim("attempting", "act", "h", attempt_id="a", previous=None)
    store._claim("in-doubt", "act", "h", attempt_id="b", previous=None)
    store._mark_in_doubt("in-doubt", "b", DoubtReason.CRASHED)
    assert store.purge(utc_now() + LATER, states=[State.SUCCEEDED, State.FAILED]) == Purged((), ())
    for states, named in (
        ([State.IN_DOUBT], "in_doubt"),
        ([State.SUCCEEDED, State.ATTEMPTING], "attempting"),
    ):
        with pytest.raises(ValueError, match=rf"never purged: .* \(asked for {named}\)"):
            store.purge(utc_now() + LATER, states=states)
    assert [r.key for r in store.records()] == ["attempting", "in-doubt"]


def test_only_the_states_asked_for_are_purged(store: Store) -> None:
    """states= picks which settled keys go: here only the failed one."""
    ok, no = tools(store, [])
    ok("a")
    no("b")
    assert store.purge(utc_now() + LATER, states=[State.FAILED]).keys == ("b",)
    assert [r.key for r in store.records()] == ["a"]


def test_released_keys_can_be_purged(store: Store) -> None:
    """A released key (resolved as not having happened) is purged when asked for."""
    store._claim("k", "act", "h", attempt_id="a", previous=None)
    bury_owners(store)
    store.resolve("k", happened=False)
    assert store.purge(utc_now() + LATER, states=[State.RELEASED]).keys == ("k",)


def test_a_dry_run_removes_nothing(store: Store) -> None:
    """dry_run reports what a purge would remove and leaves the ledger as it was."""
    ok, _ = tools(store, [])
    ok("a")
    before = store.records()
    assert store.purge(utc_now() + LATER, dry_run=True).keys == ("a",)
    assert store.records() == before
    assert [e.why for e in store.history("a")] == [Why.CLAIMED, Why.RAN]


def test_a_purged_key_keeps_its_history_and_is_forgotten(store: Store) -> None:
    """The history ends with purged (by the operator); the next call runs the action again."""
    runs: list[str] = []
    ok, _ = tools(store, runs)
    ok("a")
    store.purge(utc_now() + LATER)
    history = store.history("a")
    attempt = history[0].attempt_id
    assert [(e.from_state, e.to_state, e.why, e.by, e.attempt_id) for e in history[2:]] == [
        (State.SUCCEEDED, None, Why.PURGED, "operator", attempt)
    ]
    assert ok("a") == Succeeded("a", 1)
    assert runs == ["a", "a"]


def test_a_late_completion_goes_with_its_key(store: Store) -> None:
    """Purging a key removes its late completions too."""
    store._claim("k", "act", "h", attempt_id="a", previous=None)
    bury_owners(store)
    released = store.resolve("k", happened=False)
    store._claim("k", "act", "h", attempt_id="b", previous=released)
    store._finish("k", "a", state=State.SUCCEEDED, result=1)
    store._finish("k", "b", state=State.SUCCEEDED, result=2)
    assert len(store.late_completions("k")) == 1
    store.purge(utc_now() + LATER)
    assert store.late_completions() == []
    assert store._read("SELECT count(*) FROM late_completions", ()) == [(0,)]


def saga_steps(store: Store) -> tuple[SafeTool[[int], int], SafeTool[[int], None]]:
    @safe(store, name="undo")
    def undo(key: str, value: int) -> None:
        pass

    @safe(store, name="step", compensate=undo)
    def step(key: str, n: int) -> int:
        if n < 0:
            raise ValueError("declined")
        return n

    return step, undo


def test_a_running_sagas_steps_are_kept(store: Store) -> None:
    """Keys of a saga that is not finished stay, however old, until the saga goes."""
    step, _ = saga_steps(store)
    saga = Saga("order", store)
    saga.__enter__()
    saga.step(step, 1)
    assert store.purge(utc_now() + LATER) == Purged((), ())
    saga.__exit__(None, None, None)
    assert store.purge(utc_now() + LATER) == Purged(("order:0:step",), ("order",))
    assert store.get_saga("order") is None
    last = store.saga_history("order")[-1]
    assert (last.from_state, last.to_state, last.why, last.by) == (
        SagaState.COMPLETED,
        None,
        Why.PURGED,
        "operator",
    )


def test_no_states_purges_finished_sagas_and_no_keys(store: Store) -> None:
    """states=() purges no key, but still the finished sagas; their steps' keys stay."""
    step, _ = saga_steps(store)
    with Saga("order", store) as saga:
        saga.step(step, 1)
    assert store.purge(utc_now() + LATER, states=()) == Purged(keys=(), sagas=("order",))
    assert store.get_saga("order") is None
    assert [r.key for r in store.records()] == ["order:0:step"]


def test_a_rolled_back_saga_goes_with_its_steps_and_compensations(store: Store) -> None:
    """A compensated saga is purged with its failed step, its done step and its compensation."""
    step, _ = saga_steps(store)
    with pytest.raises(SagaFailed), Saga("order", store) as saga:
        saga.step(step, 1)
        saga.step(step, -1)
    purged = store.purge(utc_now() + LATER)
    assert purged == Purged(
        keys=("order:0:step", "order:0:step:compensate", "order:1:step"), sagas=("order",)
    )
    assert store.records() == []


def test_a_stuck_rollback_is_never_purged(store: Store) -> None:
    """A ROLLBACK_INCOMPLETE saga needs a human: it and its keys stay."""

    @safe(store, name="undo")
    def undo(key: str, value: int) -> None:
        raise RuntimeError("cannot undo")

    @safe(store, name="step", compensate=undo)
    def step(key: str, n: int) -> int:
        if n < 0:
            raise ValueError("declined")
        return n

    with pytest.raises(SagaFailed), Saga("order", store) as saga:
        saga.step(step, 1)
        saga.step(step, -1)
    record = store.get_saga("order")
    assert record is not None
    assert record.state is SagaState.ROLLBACK_INCOMPLETE
    assert store.purge(utc_now() + LATER) == Purged((), ())
    assert len(store.records()) == 3
