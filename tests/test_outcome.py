"""Outcomes convert to returns' Result, unwrap to values or exceptions, and adapt tools."""

from datetime import UTC, datetime

import pytest
from returns.result import Failure, Success

from safeact import (
    Failed,
    FailedCallError,
    InDoubt,
    InDoubtError,
    Store,
    Succeeded,
    raise_on_doubt,
    safe,
)

RECEIPT = InDoubt("k", "tool", datetime(2026, 1, 2, tzinfo=UTC), "abc")


def test_succeeded_to_result_is_success() -> None:
    """Succeeded becomes Success(value)."""
    assert Succeeded("k", 3).to_result() == Success(3)


@pytest.mark.parametrize(
    "outcome", [RECEIPT, Failed("k", "tool", "ValueError", "bad", replayed=True)]
)
def test_in_doubt_and_failed_to_result_are_failure_of_themselves(
    outcome: InDoubt | Failed,
) -> None:
    """InDoubt and Failed become Failure(outcome)."""
    assert outcome.to_result() == Failure(outcome)


def test_unwrap_succeeded_gives_the_value() -> None:
    """Succeeded.unwrap() returns the value."""
    assert Succeeded("k", [1, 2]).unwrap() == [1, 2]


def test_unwrap_in_doubt_raises_with_receipt() -> None:
    """InDoubt.unwrap() raises InDoubtError carrying the receipt."""
    with pytest.raises(InDoubtError) as caught:
        RECEIPT.unwrap()
    error = caught.value
    assert (error.key, error.tool, error.attempted_at, error.args_hash) == (
        RECEIPT.key,
        RECEIPT.tool,
        RECEIPT.attempted_at,
        RECEIPT.args_hash,
    )


def test_unwrap_in_doubt_carries_the_attempt_and_the_note() -> None:
    """InDoubtError also carries the attempt in doubt and a probe's note, for frameworks."""
    receipt = InDoubt(
        "k", "tool", datetime(2026, 1, 2, tzinfo=UTC), "abc", note="bank: unknown", attempt_id="a1"
    )
    with pytest.raises(InDoubtError) as caught:
        receipt.unwrap()
    assert (caught.value.attempt_id, caught.value.note) == ("a1", "bank: unknown")


def test_unwrap_failed_chains_the_live_exception() -> None:
    """Failed.unwrap() raises FailedCallError from the live exception."""
    cause = ValueError("bad")
    with pytest.raises(FailedCallError) as caught:
        Failed("k", "tool", "ValueError", "bad", exception=cause).unwrap()
    assert caught.value.__cause__ is cause
    assert (caught.value.error_type, caught.value.message) == ("ValueError", "bad")


def test_failed_equality_ignores_the_live_exception() -> None:
    """Two Failed outcomes with the same record are equal whatever exception object they hold."""
    assert Failed("k", "t", "E", "m", exception=ValueError()) == Failed("k", "t", "E", "m")


def test_raise_on_doubt_returns_value_then_replays_it(store: Store) -> None:
    """The adapter returns the action's value and, on a replay, the stored one."""
    runs: list[str] = []

    @safe(store)
    def double(key: str, x: int) -> int:
        runs.append(key)
        return 2 * x

    call = raise_on_doubt(double)
    assert (call("k", 4), call("k", 4)) == (8, 8)
    assert runs == ["k"]
    assert call.__name__ == "double"


def test_raise_on_doubt_raises_failed_call_error_then_on_replay(store: Store) -> None:
    """The adapter raises FailedCallError, chained on the first call, bare on the replay."""

    @safe(store)
    def decline(key: str) -> int:
        raise ValueError("declined")

    call = raise_on_doubt(decline)
    with pytest.raises(FailedCallError) as first:
        call("k")
    assert isinstance(first.value.__cause__, ValueError)
    with pytest.raises(FailedCallError) as second:
        call("k")
    assert second.value.__cause__ is None


def test_raise_on_doubt_raises_in_doubt_error(store: Store) -> None:
    """The adapter raises InDoubtError for a key left in doubt."""

    @safe(store)
    def stop(key: str) -> int:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stop("k")
    with pytest.raises(InDoubtError) as caught:
        raise_on_doubt(stop)("k")
    assert caught.value.key == "k"


def test_unwrap_failed_names_the_key_and_the_tool() -> None:
    """The FailedCallError that Failed.unwrap() raises names the key and the tool that failed."""
    with pytest.raises(FailedCallError) as caught:
        Failed("k", "tool", "ValueError", "bad").unwrap()
    assert (caught.value.key, caught.value.tool) == ("k", "tool")


def test_safeact_errors_pickle_with_their_fields() -> None:
    """Engines that pickle exceptions (DBOS, multiprocessing) get them back whole."""
    import pickle

    from safeact import CorruptRecordError, DoubtReason, KeyConflictError, NotProvenError

    errors: list[Exception] = [
        InDoubtError(
            "k",
            "tool",
            datetime(2026, 1, 2, tzinfo=UTC),
            "abc",
            DoubtReason.CRASHED,
            attempt_id="a",
        ),
        FailedCallError("k", "tool", "ValueError", "bad"),
        KeyConflictError("k", "other arguments"),
        NotProvenError("k", "its lease ran out"),
        CorruptRecordError(
            "agent.db: key 'k'",
            table="calls",
            subject="k",
            column="result",
            problem="is not JSON",
            fix="restore it",
        ),
    ]
    for error in errors:
        back = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own bytes
        assert (type(back), back.args, vars(back)) == (type(error), error.args, vars(error))
