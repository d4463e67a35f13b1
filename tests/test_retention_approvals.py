"""Retention of approvals: a purged key takes its request (and kept arguments) with it.

A request denied long ago, whose action never began, goes as a failed key goes; one that
waits for a person, or for the call a person allowed, keeps its key. Each test runs on every
backend (``store``).
"""

from datetime import timedelta

import pytest

from safeact import (
    ApprovalState,
    AwaitingApproval,
    Failed,
    Purged,
    SafeTool,
    State,
    Store,
    Succeeded,
    Why,
    safe,
)
from safeact._protocol import Checkpoint, checkpoint_hook, utc_now
from tests.actions import bury_owners

CUTOFF = timedelta(days=30)


def pay(key: str, to: str, amount: int) -> int:
    return amount


def paying(store: Store) -> SafeTool[[str, int], int]:
    """A payment that needs approval and keeps its arguments for display."""
    return safe(store, name="pay", approval=True, keep_arguments=True)(pay)


def days_ago(days: int) -> str:
    return (utc_now() - timedelta(days=days)).isoformat(timespec="microseconds")


def age_key(store: Store, key: str, days: int) -> None:
    """Make ``key``'s row look as if it finished ``days`` ago."""
    with store._transaction(sync=False) as db:
        db.execute("UPDATE calls SET finished_at = ? WHERE key = ?", (days_ago(days), key))


def age_request(store: Store, key: str, days: int) -> None:
    """Make ``key``'s request look as if it was asked, and decided, ``days`` ago."""
    with store._transaction(sync=False) as db:
        db.execute(
            "UPDATE approvals SET requested_at = ?, decided_at = "
            "CASE WHEN decided_at IS NULL THEN NULL ELSE ? END WHERE key = ?",
            (days_ago(days), days_ago(days), key),
        )


def purge(store: Store, *states: State, dry_run: bool = False) -> Purged:
    """Purge what finished more than 30 days ago (settled states as asked, or the default)."""
    return store.purge(
        utc_now() - CUTOFF,
        states=states or (State.SUCCEEDED, State.FAILED),
        dry_run=dry_run,
    )


def ran(store: Store, key: str) -> None:
    """Request, approve and run ``key``, then make it all look 40 days old."""
    tool = paying(store)
    tool(key, "ada", 50)
    store.approve(key, by="grace")
    assert tool(key, "ada", 50) == Succeeded(key, 50)
    age_request(store, key, 40)
    age_key(store, key, 40)


def test_a_purged_key_takes_its_approval_and_kept_arguments_with_it(store: Store) -> None:
    """The consumed approval (and the arguments it kept) goes with the key's row."""
    ran(store, "pay-1")
    assert purge(store) == Purged(keys=("pay-1",), sagas=())
    assert (store.get("pay-1"), store.approval("pay-1")) == (None, None)


def test_a_purged_key_asks_for_approval_again(store: Store) -> None:
    """Forgotten with its key, the old yes authorizes nothing: the next call asks again."""
    ran(store, "pay-1")
    purge(store)
    assert isinstance(paying(store)("pay-1", "ada", 50), AwaitingApproval)


def test_an_old_denial_with_no_attempt_is_purged_as_a_failed_key(store: Store) -> None:
    """Denied 40 days ago, never run: purged with FAILED, with a purged event in its history."""
    tool = paying(store)
    tool("pay-1", "ada", 50)
    store.deny("pay-1", by="grace", note="no")
    age_request(store, "pay-1", 40)
    assert purge(store) == Purged(keys=("pay-1",), sagas=())
    assert store.approval("pay-1") is None
    last = store.history("pay-1")[-1]
    assert (last.why, last.by, last.from_state, last.to_state, last.note) == (
        Why.PURGED,
        "operator",
        None,
        None,
        "denied approval",
    )


def test_a_recent_denial_stays(store: Store) -> None:
    """A request denied after the cut-off stays, and its key still replays the no."""
    tool = paying(store)
    tool("pay-1", "ada", 50)
    store.deny("pay-1", by="grace")
    assert purge(store) == Purged(keys=(), sagas=())
    assert isinstance(tool("pay-1", "ada", 50), Failed)


def test_a_denial_stays_unless_failed_keys_are_purged(store: Store) -> None:
    """A denial replays as a failure: a purge of succeeded keys only leaves it."""
    tool = paying(store)
    tool("pay-1", "ada", 50)
    store.deny("pay-1", by="grace")
    age_request(store, "pay-1", 40)
    assert purge(store, State.SUCCEEDED, State.RELEASED) == Purged(keys=(), sagas=())
    approval = store.approval("pay-1")
    assert approval is not None
    assert approval.state is ApprovalState.DENIED


@pytest.mark.parametrize("decided", ["pending", "approved"])
def test_a_request_a_person_or_a_call_still_waits_for_is_never_purged(
    store: Store, decided: str
) -> None:
    """A pending request, or an approval no call has used, stays however old."""
    paying(store)("pay-1", "ada", 50)
    if decided == "approved":
        store.approve("pay-1", by="grace")
    age_request(store, "pay-1", 400)
    assert purge(store, State.SUCCEEDED, State.FAILED, State.RELEASED) == Purged((), ())
    approval = store.approval("pay-1")
    assert approval is not None
    assert approval.state.value == decided


class Crash(BaseException):
    """The process dies here."""


def released_and_asked_again(store: Store, key: str) -> None:
    """Approve and claim ``key``, crash before the action, release it: its next call asks."""
    tool = paying(store)
    tool(key, "ada", 50)
    store.approve(key, by="grace")

    def crash(point: Checkpoint) -> None:
        if point == "after_claim":
            raise Crash

    with checkpoint_hook(crash), pytest.raises(Crash):
        tool(key, "ada", 50)
    bury_owners(store)
    store.resolve(key, happened=False, note="never reached the bank")
    assert isinstance(tool(key, "ada", 50), AwaitingApproval)


def test_a_released_key_asked_again_keeps_its_row_and_request(store: Store) -> None:
    """A released key whose request is pending again is in use: the purge leaves it whole."""
    released_and_asked_again(store, "pay-1")
    age_key(store, "pay-1", 40)
    assert purge(store, State.RELEASED) == Purged((), ())
    record, approval = store.get("pay-1"), store.approval("pay-1")
    assert record is not None
    assert approval is not None
    assert (record.state, approval.state) == (State.RELEASED, ApprovalState.PENDING)


def test_a_key_decided_after_the_cutoff_stays_with_its_old_row(store: Store) -> None:
    """An approval decided after the cut-off keeps its key, however long ago its row finished."""
    tool = paying(store)
    tool("pay-1", "ada", 50)
    store.approve("pay-1", by="grace")
    tool("pay-1", "ada", 50)
    age_key(store, "pay-1", 40)
    assert purge(store) == Purged((), ())
    assert store.approval("pay-1") is not None


def test_a_dry_run_removes_no_approval(store: Store) -> None:
    """dry_run names the keys, the denied one too, and removes no request."""
    ran(store, "pay-1")
    paying(store)("pay-2", "bob", 5)
    store.deny("pay-2", by="grace")
    age_request(store, "pay-2", 40)
    assert purge(store, dry_run=True) == Purged(keys=("pay-1", "pay-2"), sagas=())
    assert [store.approval(k) is not None for k in ("pay-1", "pay-2")] == [True, True]
