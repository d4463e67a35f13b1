"""When the ledger cannot take an outcome, the caller is told and the key is left in doubt."""

import pytest

from safeact import DoubtReason, Failed, InDoubt, State, Store, StoreError, Succeeded, safe


def lose_the_ledger_on_finish(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make recording an outcome fail, as when the connection to the ledger is cut."""

    def finish(*_: object, **__: object) -> bool:
        raise StoreError("connection lost")

    monkeypatch.setattr(store, "finish", finish)


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
    assert record.state is State.ATTEMPTING
    store.mark_in_doubt("k", record.attempt_id, DoubtReason.CRASHED)
    assert isinstance(act("k"), InDoubt)
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
    record = store.get("k")
    assert record is not None
    assert record.state is State.ATTEMPTING
