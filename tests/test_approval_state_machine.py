"""Random requests, approvals, denials, crashes and releases of a gated tool, against a model.

The machine runs on both backends, on a fresh ledger per example: a SQLite file, then a
PostgreSQL schema. One tool needs a person's approval (``approval=True``); its calls come
under a few keys, each with one of two sets of arguments. A person approves or denies a key,
having seen its request's digest, another digest, or none. A call may crash (a
``BaseException`` at a checkpoint; its process is then gone and the store reopened), or have
another call, or a person's withdrawal of the approval, come between its read of the approval
and its claim. An honest operator resolves a crashed key: as happened if its action ran,
released (on the proof of the crash) if not. The action itself checks, as it starts, that
the ledger holds the approval of exactly this key and digest, consumed by this attempt.

So: the action runs only under an approval of its key and digest, consumed by its claim;
one approval authorizes at most one claim, and a released attempt asks again; a denied key
never runs; every call's outcome is the one the model predicts, and the ledger's key and
approval are where the model says.
"""

from collections import Counter
from collections.abc import Callable, Generator
from pathlib import Path
from typing import ClassVar, Literal

import attrs
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from safeact import (
    ApprovalState,
    AwaitingApproval,
    DoubtReason,
    Failed,
    InDoubt,
    KeyConflictError,
    Outcome,
    SafeError,
    SafeTool,
    State,
    Store,
    Succeeded,
    Why,
    get_store,
    safe,
)
from safeact._call import Read, ReadApproval, Request
from safeact._protocol import CALL_CHECKPOINTS, Checkpoint, checkpoint_hook
from tests.actions import Receipt, bury_owners
from tests.conftest import new_ledger, require

Seen = Literal["request", "other", "none"]
"""What a person deciding had seen: the request's digest, another one, or none given."""

KEYS = st.sampled_from(["a", "b", "c"])
AMOUNTS = st.sampled_from([50, 5000])
SEEN: st.SearchStrategy[Seen] = st.sampled_from(["request", "other", "none"])
CHECKPOINTS = st.sampled_from(CALL_CHECKPOINTS)
TOOL = "pay"
LEASE = 3600.0
"""So long that no lease runs out during an example: only a crash leaves a key in doubt."""


class Crash(BaseException):
    """The process dies here: no `except Exception` may catch it."""


def other(amount: int) -> int:
    return 5000 if amount == 50 else 50


@attrs.define
class Expected:
    """What the model says about one key."""

    amount: int
    """The arguments the key is bound to, by its first request."""
    approval: ApprovalState | None = None
    state: State | None = None
    ran: bool = False
    """Whether the current attempt's action ran (what the honest operator finds out)."""
    runs: int = 0
    approved: int = 0
    """Approvals a person recorded."""
    consumed: int = 0
    """Claims that consumed one."""


def paying(store: Store, body: Callable[[str, int], Receipt]) -> SafeTool[[int], Receipt]:
    """The gated tool, on ``store``, running ``body``."""

    @safe(store, name=TOOL, approval=True, wait=0)
    def pay(key: str, amount: int) -> Receipt:
        return body(key, amount)

    return pay


class ApprovalMachine(RuleBasedStateMachine):
    backend: ClassVar[str] = "sqlite"

    def __init__(self) -> None:
        super().__init__()
        self.location, self.remove = new_ledger(self.backend)
        self.model: dict[str, Expected] = {}
        self.runs: Counter[str] = Counter()  # side effects, kept outside the store
        self.unapproved: list[str] = []  # runs the ledger held no approval of, for that call
        self.open()

    def open(self) -> None:
        self.store = get_store(self.location, lease=LEASE)
        self.pay = paying(self.store, self.act)

    def act(self, key: str, amount: int) -> Receipt:
        """The action: counted, and checked against the ledger as it starts."""
        self.runs[key] += 1
        approval, record = self.store.approval(key), self.store._stored(key)
        if not (
            approval is not None
            and record is not None
            and approval.state is ApprovalState.CONSUMED
            and approval.attempt_id == record.attempt_id
            and approval.args_hash == record.args_hash == self.digest(amount)
        ):
            self.unapproved.append(key)
        return Receipt(key, amount)

    def digest(self, amount: int) -> str:
        return self.pay._digest("-", (amount,), {})

    def teardown(self) -> None:
        self.store.close()
        self.remove()

    # The model's steps.

    def runnable(self) -> list[str]:
        """The keys whose next call with their own arguments claims them and runs the action."""
        return [
            key
            for key, known in sorted(self.model.items())
            if known.state in (None, State.RELEASED) and known.approval is ApprovalState.APPROVED
        ]

    def in_doubt(self) -> list[str]:
        return [
            key
            for key, known in sorted(self.model.items())
            if known.state in (State.ATTEMPTING, State.IN_DOUBT)
        ]

    def claimed(self, known: Expected, *, ran: bool) -> None:
        known.approval, known.consumed = ApprovalState.CONSUMED, known.consumed + 1
        known.state, known.ran = State.ATTEMPTING, ran
        known.runs += ran

    def call_once(self, key: str, amount: int) -> None:
        """A caller calls the tool with ``amount``; check its outcome against the model."""
        known = self.model.setdefault(key, Expected(amount))  # bound by its first request
        if known.amount != amount:
            with pytest.raises(KeyConflictError):
                self.pay(key, amount)
            return
        self.check_call(key, known, self.pay(key, amount))

    def check_call(self, key: str, known: Expected, outcome: Outcome[Receipt]) -> None:
        """Check a call with the key's own arguments against the model, which it moves on."""
        receipt = Receipt(key, known.amount)
        match known.state, known.approval:
            case State.SUCCEEDED, _:
                assert outcome == Succeeded(key, receipt, replayed=True)
            case State.ATTEMPTING | State.IN_DOUBT, _:
                assert isinstance(outcome, InDoubt)
                assert outcome.reason is DoubtReason.CRASHED
                known.state = State.IN_DOUBT  # the caller marks it
            case _, ApprovalState.APPROVED:
                assert outcome == Succeeded(key, receipt)
                self.claimed(known, ran=True)
                known.state = State.SUCCEEDED
            case _, ApprovalState.DENIED:
                assert outcome == Failed(
                    key, TOOL, "safeact.Denied", "denied by grace: no", replayed=True
                )
            case _:  # none yet, pending, or consumed by an attempt since released: ask
                assert isinstance(outcome, AwaitingApproval)
                assert (outcome.key, outcome.args_hash) == (key, self.digest(known.amount))
                known.approval = ApprovalState.PENDING

    def decide(self, key: str, seen: Seen, *, approve: bool) -> None:
        """A person approves or denies ``key``, having seen ``seen``."""
        known = self.model[key]
        shown = {
            "request": self.digest(known.amount),
            "other": self.digest(other(known.amount)),
            "none": None,
        }[seen]
        allowed = {ApprovalState.PENDING, ApprovalState.APPROVED}
        if approve:
            allowed = {ApprovalState.PENDING}
        decision = self.store.approve if approve else self.store.deny
        if known.approval not in allowed or seen == "other":
            with pytest.raises(SafeError):
                decision(key, by="grace", note="no", args_hash=shown)
            return
        decided = decision(key, by="grace", note="no", args_hash=shown)
        known.approval = decided.state
        assert decided.state is (ApprovalState.APPROVED if approve else ApprovalState.DENIED)
        known.approved += approve

    # The rules.

    @rule(key=KEYS, amount=AMOUNTS)
    def call(self, key: str, amount: int) -> None:
        """A caller calls the tool: it asks, waits, runs, replays, conflicts, or gets the no."""
        self.call_once(key, amount)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        """A caller calls a key it asked about before, with the same arguments."""
        key = data.draw(st.sampled_from(sorted(self.model)))
        self.call_once(key, self.model[key].amount)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), seen=SEEN)
    def approve(self, data: st.DataObject, seen: Seen) -> None:
        self.decide(data.draw(st.sampled_from(sorted(self.model))), seen, approve=True)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), seen=SEEN)
    def deny(self, data: st.DataObject, seen: Seen) -> None:
        self.decide(data.draw(st.sampled_from(sorted(self.model))), seen, approve=False)

    @precondition(lambda self: self.runnable())
    @rule(data=st.data(), point=CHECKPOINTS)
    def crash(self, data: st.DataObject, point: Checkpoint) -> None:
        """The process dies at ``point`` of an approved call; then it restarts."""
        key = data.draw(st.sampled_from(self.runnable()))
        known = self.model[key]

        def die(reached: Checkpoint) -> None:
            if reached == point:
                raise Crash

        with checkpoint_hook(die), pytest.raises(Crash):
            self.pay(key, known.amount)
        if point != "before_claim":  # the claim committed, and consumed the approval
            self.claimed(known, ran=point in ("after_call", "after_record"))
        if point == "after_record":
            known.state = State.SUCCEEDED
        bury_owners(self.store)  # the process that owned it is gone
        self.restart()

    @precondition(lambda self: self.runnable())
    @rule(data=st.data())
    def racing_caller(self, data: st.DataObject) -> None:
        """Another caller claims between this one's read of the approval and its claim."""
        key = data.draw(st.sampled_from(self.runnable()))
        known = self.model[key]
        ahead: list[Outcome[Receipt]] = []
        racing = True

        def race(reached: Checkpoint) -> None:
            nonlocal racing
            if reached == "before_claim" and racing:
                racing = False  # the caller ahead reaches this checkpoint too
                ahead.append(self.pay(key, known.amount))

        with checkpoint_hook(race):
            outcome = self.pay(key, known.amount)
        assert len(ahead) == 1
        self.check_call(key, known, ahead[0])
        assert outcome == Succeeded(key, Receipt(key, known.amount), replayed=True)

    @precondition(lambda self: self.runnable())
    @rule(data=st.data())
    def withdrawn_before_claim(self, data: st.DataObject) -> None:
        """A person withdraws the yes between a call's read of it and its claim: nothing runs."""
        key = data.draw(st.sampled_from(self.runnable()))
        known = self.model[key]
        withdrawn: list[object] = []

        def withdraw(reached: Checkpoint) -> None:
            if reached == "before_claim" and not withdrawn:
                withdrawn.append(self.store.deny(key, by="grace", note="no"))

        with checkpoint_hook(withdraw):
            outcome = self.pay(key, known.amount)
        assert len(withdrawn) == 1
        known.approval = ApprovalState.DENIED
        self.check_call(key, known, outcome)

    @precondition(lambda self: self.in_doubt())
    @rule(data=st.data())
    def resolve(self, data: st.DataObject) -> None:
        """An honest operator closes a crashed key: happened if its action ran, else released."""
        key = data.draw(st.sampled_from(self.in_doubt()))
        known = self.model[key]
        if known.ran:
            self.store.resolve(key, happened=True, result=Receipt(key, known.amount))
            known.state = State.SUCCEEDED
        else:
            self.store.resolve(key, happened=False, note="nothing was paid")
            known.state = State.RELEASED

    @rule()
    def restart(self) -> None:
        """The process restarts: the store is opened again on the same ledger."""
        self.store.close()
        self.open()

    # The invariants.

    @invariant()
    def ledger_matches_model(self) -> None:
        """Each key and its approval are where the model says, bound to the key's arguments."""
        for key, known in self.model.items():
            record, approval = self.store._stored(key), self.store.approval(key)
            assert (record.state if record else None) is known.state
            assert (approval.state if approval else None) is known.approval
            if approval is not None:
                assert approval.args_hash == self.digest(known.amount)

    @invariant()
    def every_run_was_approved_for_its_call(self) -> None:
        """The action ran only under its own approval, consumed by its claim; at most once each."""
        assert self.unapproved == []
        for key, known in self.model.items():
            assert self.runs[key] == known.runs
            assert known.runs <= known.consumed <= known.approved

    @invariant()
    def a_denied_key_never_ran(self) -> None:
        for key, known in self.model.items():
            if known.approval is ApprovalState.DENIED:
                assert self.runs[key] == 0

    @invariant()
    def each_claim_spent_a_yes_of_its_own(self) -> None:
        """In each key's history, a yes comes between two claims, and no claim after a no."""
        for key, known in self.model.items():
            unspent, claims = False, 0
            for event in self.store.history(key):
                if event.why is Why.APPROVED:
                    unspent = True
                elif event.why is Why.DENIED:
                    unspent = False
                elif event.why is Why.CLAIMED:
                    assert unspent, f"key {key!r} was claimed without an approval of its own"
                    unspent, claims = False, claims + 1
            assert claims == known.consumed


class PostgresApprovalMachine(ApprovalMachine):
    """The same machine on a PostgreSQL schema."""

    backend = "postgres"


MACHINES: dict[str, type[ApprovalMachine]] = {
    "sqlite": ApprovalMachine,
    "postgres": PostgresApprovalMachine,
}
EXAMPLES = {
    "sqlite": max(settings().max_examples, 100),
    # A PostgreSQL example costs a schema, a migration and a new pool at every restart, and
    # the rules are the ones both backends share: a quarter as many keep the suite short.
    "postgres": max(settings().max_examples // 4, 25),
}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_approval_state_machine(backend: str) -> None:
    """Random requests, decisions, crashes, races, releases and restarts keep to the model."""
    require(backend)
    run_state_machine_as_test(
        MACHINES[backend],
        settings=settings(settings(), max_examples=EXAMPLES[backend], stateful_step_count=30),
    )


def test_a_caller_that_read_the_key_before_another_claim_does_not_ask_again(
    tmp_path: Path,
) -> None:
    """A caller that read "no row" before another's claim replays it; the yes stays consumed."""
    runs: list[str] = []

    def act(key: str, amount: int) -> Receipt:
        runs.append(key)
        return Receipt(key, amount)

    with get_store(tmp_path / "agent.db") as store:
        pay = paying(store, act)
        pay("k", 50)
        store.approve("k", by="grace")
        steps = pay._steps("k", (50,), {})
        request = next(steps)
        assert isinstance(request, Read)
        request = steps.send(pay._ledger(request))  # the key has no row yet
        assert isinstance(request, ReadApproval)
        assert pay("k", 50) == Succeeded("k", Receipt("k", 50))  # another caller, meanwhile
        outcome = drive(pay, steps, request)
        approval = store.approval("k")
        assert approval is not None
        assert (outcome, approval.state, runs) == (
            Succeeded("k", Receipt("k", 50), replayed=True),
            ApprovalState.CONSUMED,
            ["k"],
        )


def drive(
    pay: SafeTool[[int], Receipt],
    steps: Generator[Request, object, Outcome[Receipt]],
    request: Request,
) -> Outcome[Receipt]:
    """Answer ``steps``' requests from the ledger, from ``request`` on, to its outcome.

    A request to act or to pause fails (``_ledger`` refuses it): this call must only replay.
    """
    while True:
        try:
            request = steps.send(pay._ledger(request))
        except StopIteration as done:
            outcome: Outcome[Receipt] = done.value
            return outcome
