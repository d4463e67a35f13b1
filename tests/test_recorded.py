"""When the ledger cannot take an outcome, the caller is told and the key is left in doubt."""

import pytest

from safeact import DoubtReason, Failed, InDoubt, State, Store, StoreError, Succeeded, safe


def lose_the_ledger_on_finish(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make recording an outcome fail, as when the connection to the ledger is cut."""

    def finish(*_: object, **__: object) -> bool:
        raise StoreError("connection lost")

    monkeypatch.setattr(store, "_finish", finish)


def test_a_success_that_cannot_be_recorded_says_so(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The action's value comes back with recorded=False; later calls get InDoubt, not a re-run."""
    runs: list[str] = []

    @safe(store, name="act")
    def act(key: str) -> int:
        runs.append(key)
        lose_the_ledger_on_finish(store, monkeypatch)
        return 7

    assert act("k") == Succeeded("k", 7, recorded=False)
    monkeypatch.undo()
    record = store.get("k")
    assert record is not None
    assert (record.state, record.doubt_reason) == (State.IN_DOUBT, DoubtReason.RESULT_NOT_STORED)
    assert record in store.list_in_doubt()
    assert act("k") == InDoubt(
        "k",
        "act",
        record.attempted_at,
        record.args_hash,
        DoubtReason.RESULT_NOT_STORED,
        attempt_id=record.attempt_id,
    )
    assert runs == ["k"]


def test_a_failure_that_cannot_be_recorded_says_so(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An action that raised, unrecorded: Failed(recorded=False), and the key is not FAILED."""

    @safe(store, name="act")
    def act(key: str) -> int:
        lose_the_ledger_on_finish(store, monkeypatch)
        raise ValueError("declined")

    outcome = act("k")
    assert outcome == Failed("k", "act", "ValueError", "declined", recorded=False)
    monkeypatch.undo()
    record = store.get("k")
    assert record is not None
    assert (record.state, record.doubt_reason) == (State.IN_DOUBT, DoubtReason.FAILURE_NOT_STORED)
    assert "could not be stored: connection lost" in (record.error_message or "")


def test_an_unwritable_outcome_is_marked_in_doubt_on_a_fresh_connection(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the first try to mark the key fails too, a later try on a fresh connection marks it."""
    marks: list[str] = []
    real_mark = store._mark_in_doubt

    def flaky_mark(*args: object, **kwargs: object) -> bool:
        marks.append("try")
        if len(marks) == 1:
            raise StoreError("database is locked")
        return real_mark(*args, **kwargs)  # type: ignore[arg-type]

    @safe(store, name="act")
    def act(key: str) -> int:
        lose_the_ledger_on_finish(store, monkeypatch)
        monkeypatch.setattr(store, "_mark_in_doubt", flaky_mark)
        return 7

    assert act("k") == Succeeded("k", 7, recorded=False)
    monkeypatch.undo()
    record = store.get("k")
    assert record is not None
    assert (record.state, record.doubt_reason) == (State.IN_DOUBT, DoubtReason.RESULT_NOT_STORED)
    assert marks == ["try", "try"]
