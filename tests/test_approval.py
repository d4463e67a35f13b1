"""Approval bound to the call: a person's yes authorizes one action, with exactly these arguments.

Each test runs on every backend (``store``): SQLite, PostgreSQL and the in-memory ledger.
"""

import asyncio
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from returns.result import Failure

from safeact import (
    ApprovalState,
    AsyncSafeTool,
    AwaitingApproval,
    AwaitingApprovalError,
    DoubtReason,
    Failed,
    InDoubt,
    KeyConflictError,
    ReplayOnlyError,
    SafeError,
    SafeTool,
    State,
    Store,
    Succeeded,
    Why,
    raise_on_doubt,
    replay_only,
    safe,
)
from safeact._protocol import Checkpoint, checkpoint_hook
from tests.actions import Receipt, count_effects, expire_leases, record_effect
from tests.test_replay_only import snapshot


class Crash(BaseException):
    """The process dies here."""


def crash_at(where: Checkpoint) -> Callable[[Checkpoint], None]:
    def hook(point: Checkpoint) -> None:
        if point == where:
            raise Crash

    return hook


def payments(store: Store, effects: Path, **settings: object) -> SafeTool[[str, int], Receipt]:
    """A guarded payment that needs approval and counts its effects."""

    @safe(store, name="tests.pay", approval=True, **settings)  # type: ignore[arg-type] # test settings
    def pay(key: str, to: str, amount: int) -> Receipt:
        record_effect(effects, key)
        return Receipt(to, amount)

    return pay


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    return tmp_path / "effects"


def test_a_call_asks_for_approval_and_runs_nothing(store: Store, effects: Path) -> None:
    """The first call records a pending request bound to its digest and returns at once."""
    pay = payments(store, effects)
    outcome = pay("pay-1", "ada", 50)
    assert isinstance(outcome, AwaitingApproval)
    approval = store.approval("pay-1")
    assert approval is not None
    assert (approval.state, approval.tool, approval.args_hash) == (
        ApprovalState.PENDING,
        "tests.pay",
        outcome.args_hash,
    )
    assert outcome == AwaitingApproval(
        "pay-1", "tests.pay", approval.requested_at, approval.args_hash
    )
    assert store.get("pay-1") is None
    assert count_effects(effects, "pay-1") == 0


def test_asking_again_while_pending_records_no_second_request(store: Store, effects: Path) -> None:
    """A retry while a person has not decided returns the same request; the history has one."""
    pay = payments(store, effects)
    first, second = pay("pay-1", "ada", 50), pay("pay-1", "ada", 50)
    assert first == second
    assert [e.why for e in store.history("pay-1")] == [Why.APPROVAL_REQUESTED]


def test_an_approved_call_runs_once_and_replays(store: Store, effects: Path) -> None:
    """After approve, the next call runs the action; later calls replay it."""
    pay = payments(store, effects)
    pay("pay-1", "ada", 50)
    store.approve("pay-1", by="grace", note="checked the invoice")
    assert pay("pay-1", "ada", 50) == Succeeded("pay-1", Receipt("ada", 50))
    assert pay("pay-1", "ada", 50) == Succeeded("pay-1", Receipt("ada", 50), replayed=True)
    assert count_effects(effects, "pay-1") == 1


def test_the_claim_consumes_the_approval(store: Store, effects: Path) -> None:
    """The approval is consumed by the attempt that ran, recorded in the same transaction."""
    pay = payments(store, effects)
    pay("pay-1", "ada", 50)
    store.approve("pay-1", by="grace")
    pay("pay-1", "ada", 50)
    approval, record = store.approval("pay-1"), store.get("pay-1")
    assert approval is not None
    assert record is not None
    assert (approval.state, approval.attempt_id) == (ApprovalState.CONSUMED, record.attempt_id)


def test_an_approval_is_not_for_other_arguments_under_its_key(store: Store, effects: Path) -> None:
    """Other arguments under an approved key are a conflict, and nothing runs."""
    pay = payments(store, effects)
    pay("pay-1", "ada", 50)
    store.approve("pay-1", by="grace")
    with pytest.raises(KeyConflictError, match="approval request for other arguments"):
        pay("pay-1", "ada", 5000)
    assert count_effects(effects, "pay-1") == 0
    assert store.approval("pay-1") is not None
    assert store.get("pay-1") is None


def test_the_claim_consumes_only_an_approval_of_its_own_arguments(
    store: Store, effects: Path
) -> None:
    """The claim's statement binds the approval to the claim's digest, not to the one read.

    The gate compares them first; this is the second lock: a claim handed an approval of
    other arguments (as a wrong gate would) claims nothing and leaves the approval unused.
    """
    pay = payments(store, effects)
    pay("pay-1", "ada", 50)
    approved = store.approve("pay-1", by="grace")
    other = pay._digest("pay-1", ("ada", 5000), {})
    claimed = store._claim(
        "pay-1", "tests.pay", other, attempt_id="a-1", previous=None, approval=approved
    )
    assert (claimed, store.get("pay-1"), store.approval("pay-1")) == (None, None, approved)


def test_other_arguments_under_a_new_key_need_a_new_approval(store: Store, effects: Path) -> None:
    """An approval of one key authorizes no call under another."""
    pay = payments(store, effects)
    pay("pay-1", "ada", 50)
    store.approve("pay-1", by="grace")
    assert isinstance(pay("pay-2", "ada", 5000), AwaitingApproval)
    assert count_effects(effects, "pay-2") == 0


def test_a_denied_call_never_runs_and_replays_the_denial(store: Store, effects: Path) -> None:
    """Deny is final for the key: every call returns the person's no, and nothing runs."""
    pay = payments(store, effects)
    pay("pay-1", "ada", 50)
    store.deny("pay-1", by="grace", note="wrong customer")
    denied = Failed(
        "pay-1", "tests.pay", "safeact.Denied", "denied by grace: wrong customer", replayed=True
    )
    assert pay("pay-1", "ada", 50) == denied
    assert pay("pay-1", "ada", 50) == denied
    with pytest.raises(SafeError, match="its approval is denied"):
        store.approve("pay-1", by="grace")
    assert count_effects(effects, "pay-1") == 0


def test_an_approval_not_yet_used_can_be_withdrawn(store: Store, effects: Path) -> None:
    """Deny after approve, before any call used it: the action never runs."""
    pay = payments(store, effects)
    pay("pay-1", "ada", 50)
    store.approve("pay-1", by="grace")
    store.deny("pay-1", by="grace", note="changed my mind")
    assert isinstance(pay("pay-1", "ada", 50), Failed)
    assert count_effects(effects, "pay-1") == 0


def test_a_used_approval_cannot_be_denied(store: Store, effects: Path) -> None:
    """Once a claim consumed it the action has begun: deny is refused, nothing changes."""
    pay = payments(store, effects)
    pay("pay-1", "ada", 50)
    store.approve("pay-1", by="grace")
    pay("pay-1", "ada", 50)
    with pytest.raises(SafeError, match="its approval is consumed"):
        store.deny("pay-1", by="grace")
    assert pay("pay-1", "ada", 50) == Succeeded("pay-1", Receipt("ada", 50), replayed=True)


@pytest.mark.parametrize(
    ("key", "args_hash", "refused"),
    [
        ("pay-9", None, "no approval was requested"),
        ("pay-1", "0" * 64, "not 000000000000"),
    ],
)
def test_a_decision_on_no_request_or_other_arguments_is_refused(
    store: Store, effects: Path, key: str, args_hash: str | None, refused: str
) -> None:
    """Approve of an unknown key, or of arguments the person did not see, changes nothing."""
    pay = payments(store, effects)
    pay("pay-1", "ada", 50)
    with pytest.raises(SafeError, match=refused):
        store.approve(key, by="grace", args_hash=args_hash)
    approval = store.approval("pay-1")
    assert approval is not None
    assert approval.state is ApprovalState.PENDING


@pytest.mark.parametrize(("by", "error"), [("", ValueError), ("  ", ValueError), (7, TypeError)])
def test_a_decision_names_who_made_it(
    store: Store, effects: Path, by: object, error: type[Exception]
) -> None:
    """Approve without a person's name is refused before anything changes."""
    payments(store, effects)("pay-1", "ada", 50)
    with pytest.raises(error, match="by must"):
        store.approve("pay-1", by=by)  # type: ignore[arg-type] # the misuse under test


def test_the_history_says_who_decided_and_why(store: Store, effects: Path) -> None:
    """The request, the approval with its person and note, and the claim are in the history."""
    pay = payments(store, effects)
    pay("pay-1", "ada", 50)
    store.approve("pay-1", by="grace", note="invoice 7")
    pay("pay-1", "ada", 50)
    events = [(e.why, e.by, e.note) for e in store.history("pay-1")]
    assert events == [
        (Why.APPROVAL_REQUESTED, "process", None),
        (Why.APPROVED, "operator", "approved by grace: invoice 7"),
        (Why.CLAIMED, "process", "approved by grace"),
        (Why.RAN, "process", None),
    ]


def test_a_released_attempt_needs_a_new_approval(store: Store, effects: Path) -> None:
    """An approval authorizes one attempt: once that attempt is released, asked again."""
    pay = payments(store, effects)
    pay("pay-1", "ada", 50)
    store.approve("pay-1", by="grace")
    with checkpoint_hook(crash_at("after_claim")), pytest.raises(Crash):
        pay("pay-1", "ada", 50)
    expire_leases(store)  # the crashed caller stopped renewing its lease
    assert isinstance(pay("pay-1", "ada", 50), InDoubt)
    store.resolve("pay-1", happened=False, force=True, note="checked: nothing was paid")
    again = pay("pay-1", "ada", 50)
    assert isinstance(again, AwaitingApproval)
    assert count_effects(effects, "pay-1") == 0
    store.approve("pay-1", by="grace", note="second try")
    assert isinstance(pay("pay-1", "ada", 50), Succeeded)
    assert count_effects(effects, "pay-1") == 1


def test_a_key_in_doubt_is_in_doubt_whatever_its_approval(store: Store, effects: Path) -> None:
    """A crash after the claim keeps today's guarantee: the retry gets InDoubt, not a new run."""
    pay = payments(store, effects)
    pay("pay-1", "ada", 50)
    store.approve("pay-1", by="grace")
    with checkpoint_hook(crash_at("after_call")), pytest.raises(Crash):
        pay("pay-1", "ada", 50)
    expire_leases(store)  # the crashed caller stopped renewing its lease
    doubt = pay("pay-1", "ada", 50)
    assert isinstance(doubt, InDoubt)
    assert doubt.reason is DoubtReason.LEASE_EXPIRED
    assert count_effects(effects, "pay-1") == 1


def test_a_crash_between_approval_and_claim_keeps_the_approval(store: Store, effects: Path) -> None:
    """Killed before its claim committed, the call left the approval for the next one."""
    pay = payments(store, effects)
    pay("pay-1", "ada", 50)
    store.approve("pay-1", by="grace")
    with checkpoint_hook(crash_at("before_claim")), pytest.raises(Crash):
        pay("pay-1", "ada", 50)
    assert isinstance(pay("pay-1", "ada", 50), Succeeded)
    assert count_effects(effects, "pay-1") == 1


def test_waiting_is_not_doubt_for_exception_style_callers(store: Store, effects: Path) -> None:
    """``raise_on_doubt`` and ``unwrap`` raise AwaitingApprovalError; ``to_result`` is a Failure."""
    pay = payments(store, effects)
    outcome = pay("pay-1", "ada", 50)
    assert outcome.to_result() == Failure(outcome)
    with pytest.raises(AwaitingApprovalError) as raised:
        raise_on_doubt(pay)("pay-1", "ada", 50)
    assert (raised.value.key, raised.value.tool) == ("pay-1", "tests.pay")
    assert "safeact approve" in str(raised.value)


def test_the_error_carries_the_arguments_a_tool_keeps(store: Store, effects: Path) -> None:
    """AwaitingApprovalError has what AwaitingApproval has: the arguments, as kept, too."""
    pay = payments(store, effects, keep_arguments=True, redact=("amount",))
    waiting = pay("pay-1", "ada", 50)
    assert isinstance(waiting, AwaitingApproval)
    with pytest.raises(AwaitingApprovalError) as raised:
        waiting.unwrap()
    error = raised.value
    assert (error.key, error.tool, error.requested_at, error.args_hash, error.arguments) == (
        waiting.key,
        waiting.tool,
        waiting.requested_at,
        waiting.args_hash,
        {"to": "ada", "amount": "[redacted]"},
    )


def test_an_async_tool_asks_and_runs_once(store: Store, effects: Path) -> None:
    """An async tool passes the same gate."""

    @safe(store, name="tests.async_pay", approval=True)
    async def pay(key: str, to: str, amount: int) -> Receipt:
        record_effect(effects, key)
        return Receipt(to, amount)

    assert isinstance(pay, AsyncSafeTool)
    assert isinstance(asyncio.run(pay("pay-1", "ada", 50)), AwaitingApproval)
    store.approve("pay-1", by="grace")
    assert asyncio.run(pay("pay-1", "ada", 50)) == Succeeded("pay-1", Receipt("ada", 50))
    assert count_effects(effects, "pay-1") == 1


def test_a_tool_decides_only_its_own_requests(store: Store, effects: Path) -> None:
    """``tool.approve`` refuses a key another tool asked about."""
    payments(store, effects)("pay-1", "ada", 50)

    @safe(store, name="tests.other", approval=True)
    def other(key: str) -> int:
        return 1

    with pytest.raises(SafeError, match=r"tool tests\.pay, not tests\.other"):
        other.approve("pay-1", by="grace")


def test_an_ungated_tool_never_asks(store: Store, effects: Path) -> None:
    """Without ``approval=True`` a call runs at once and no request is recorded."""

    @safe(store, name="tests.free")
    def free(key: str) -> int:
        record_effect(effects, key)
        return 1

    assert free("k") == Succeeded("k", 1)
    assert count_effects(effects, "k") == 1
    assert store.approval("k") is None


@pytest.mark.located
def test_replay_only_asks_for_nothing(store: Store, effects: Path) -> None:
    """Replay-only, a call that would ask for approval raises, writes nothing; pending waits."""
    pay = payments(store, effects)
    pay("pay-1", "ada", 50)
    before = snapshot(store.location)
    with replay_only():
        assert isinstance(pay("pay-1", "ada", 50), AwaitingApproval)
        with pytest.raises(ReplayOnlyError):
            pay("pay-2", "ada", 50)
    assert snapshot(store.location) == before
    assert store.approval("pay-2") is None


def test_arguments_are_not_kept_by_default(store: Store, effects: Path) -> None:
    """The ledger holds the digest only, unless the tool keeps its arguments."""
    pay = payments(store, effects)
    assert isinstance(pay("pay-1", "ada", 50), AwaitingApproval)
    approval = store.approval("pay-1")
    assert approval is not None
    assert approval.arguments is None


def test_kept_arguments_are_redacted_before_they_are_written(store: Store, effects: Path) -> None:
    """A kept call shows its arguments, the declared fields replaced, to approvers and readers."""

    @attrs.frozen
    class Card:
        number: str
        holder: str

    @safe(store, name="tests.card", approval=True, keep_arguments=True, redact=("card.number",))
    def charge(key: str, card: Card, amount: int) -> int:
        return amount

    card = Card("4242424242424242", "Ada")
    waiting = charge("c-1", card, 50)
    shown = {"amount": 50, "card": {"holder": "Ada", "number": "[redacted]"}}
    assert isinstance(waiting, AwaitingApproval)
    assert waiting.arguments == shown
    store.approve("c-1", by="grace")
    charge("c-1", card, 50)
    record = store.get("c-1")
    assert record is not None
    assert record.arguments == shown
    assert record.state is State.SUCCEEDED


@pytest.mark.parametrize(
    ("settings", "error", "said"),
    [
        ({"redact": ("card",)}, ValueError, "goes with keep_arguments=True"),
        ({"keep_arguments": True, "redact": "card"}, TypeError, "collection of names"),
        ({"keep_arguments": True, "redact": ("pin",)}, ValueError, "names no parameter"),
        ({"approval": "yes"}, TypeError, "approval"),
    ],
)
def test_approval_settings_are_checked_when_the_tool_is_made(
    store: Store, settings: dict[str, object], error: type[Exception], said: str
) -> None:
    """A misspelled redaction or a non-bool switch is refused before any call."""
    with pytest.raises(error, match=said):

        @safe(store, **settings)  # type: ignore[arg-type] # the misuse under test
        def charge(key: str, card: str) -> int:
            return 1
