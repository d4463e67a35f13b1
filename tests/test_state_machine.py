"""Random calls, in-process crashes at every checkpoint, restarts and resolves, against a model.

The machine runs on both backends, on a fresh ledger per example: a SQLite file, then a
PostgreSQL schema.
"""

from collections import Counter
from collections.abc import Callable
from typing import ClassVar

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
    DoubtReason,
    Failed,
    Happened,
    InDoubt,
    KeyConflictError,
    NotHappened,
    SafeError,
    SagaState,
    State,
    Succeeded,
    Unknown,
    Verdict,
    Why,
    get_store,
    safe,
)
from safeact._protocol import CALL_CHECKPOINTS, Checkpoint, checkpoint_hook
from tests.actions import Receipt, bury_owners, expire_leases
from tests.conftest import new_ledger, require

KEYS = st.sampled_from(["a", "b", "c"])
VARIANTS = st.integers(0, 1)
CHECKPOINTS = st.sampled_from(CALL_CHECKPOINTS)


class Crash(BaseException):
    """The process dies here: no `except Exception` may catch it."""


@attrs.define
class Expected:
    """What the model says about one key."""

    variant: int
    fail: bool
    state: State | None = None
    value: Receipt | None = None
    runs: int = 0
    releases: int = 0
    reason: DoubtReason | None = None
    late: int = 0


class LedgerMachine(RuleBasedStateMachine):
    backend: ClassVar[str] = "sqlite"

    def __init__(self) -> None:
        super().__init__()
        self.location, self.remove = new_ledger(self.backend)
        self.runs: Counter[str] = Counter()  # side effects, kept outside the store
        self.model: dict[str, Expected] = {}
        self.interrupting = False
        self.during: Callable[[str], None] | None = None  # runs inside the action, once
        self.open()

    def open(self) -> None:
        self.store = get_store(self.location)

        @safe(self.store, name="act", wait=0)
        def act(key: str, variant: int, fail: bool) -> Receipt:
            self.runs[key] += 1
            during, self.during = self.during, None
            if during is not None:
                during(key)
            if self.interrupting:
                raise KeyboardInterrupt
            if fail:
                raise ValueError(f"declined {variant}")
            return Receipt(key, variant)

        self.act = act

    def teardown(self) -> None:
        try:
            self.store.close()
        finally:
            self.remove()

    def expected(self, key: str, variant: int, fail: bool) -> Expected | None:
        """The model of ``key``, or None if this call conflicts with how it was first used."""
        known = self.model.get(key)
        if known is None or known.state is None:  # the key is bound by its first record
            known = self.model[key] = Expected(variant, fail)
        if (known.variant, known.fail) != (variant, fail):
            with pytest.raises(KeyConflictError):
                self.act(key, variant, fail)
            return None
        return known

    @rule(key=KEYS, variant=VARIANTS, fail=st.booleans())
    def call(self, key: str, variant: int, fail: bool) -> None:
        known = self.expected(key, variant, fail)
        if known is None:
            return
        outcome = self.act(key, variant, fail)
        match known.state:
            case None | State.RELEASED:
                known.runs += 1
                if fail:
                    assert outcome == Failed(key, "act", "ValueError", f"declined {variant}")
                    known.state = State.FAILED
                else:
                    known.value = Receipt(key, variant)
                    assert outcome == Succeeded(key, known.value)
                    known.state = State.SUCCEEDED
            case State.SUCCEEDED:
                assert outcome == Succeeded(key, known.value, replayed=True)
            case State.FAILED:
                assert outcome == Failed(
                    key, "act", "ValueError", f"declined {variant}", replayed=True
                )
            case State.ATTEMPTING | State.IN_DOUBT:
                assert isinstance(outcome, InDoubt)
                assert (outcome.key, outcome.tool) == (key, "act")
                assert outcome.reason is known.reason
                known.state = State.IN_DOUBT

    @rule(key=KEYS, variant=VARIANTS, fail=st.booleans(), point=CHECKPOINTS)
    def crash(self, key: str, variant: int, fail: bool, point: Checkpoint) -> None:
        """The process dies at ``point`` of a call that runs the action; then it restarts."""
        known = self.expected(key, variant, fail)
        if known is None or known.state not in (None, State.RELEASED):
            return

        def die(reached: Checkpoint) -> None:
            if reached == point:
                raise Crash

        with checkpoint_hook(die), pytest.raises(Crash):
            self.act(key, variant, fail)
        if point == "after_claim":
            known.state, known.reason = State.ATTEMPTING, DoubtReason.CRASHED
        elif point == "after_call":
            known.state, known.reason = State.ATTEMPTING, DoubtReason.CRASHED
            known.runs += 1
        elif point == "after_record":
            known.runs += 1
            known.state = State.FAILED if fail else State.SUCCEEDED
            known.value = None if fail else Receipt(key, variant)
        bury_owners(self.store)  # the process that owned it is gone
        self.restart()

    @rule(key=KEYS, variant=VARIANTS)
    def interrupt(self, key: str, variant: int) -> None:
        """A KeyboardInterrupt inside the action propagates and leaves the key in doubt."""
        known = self.expected(key, variant, fail=False)
        if known is None or known.state not in (None, State.RELEASED):
            return
        self.interrupting = True
        try:
            with pytest.raises(KeyboardInterrupt):
                self.act(key, variant, False)  # noqa: FBT003
        finally:
            self.interrupting = False
        known.runs += 1
        known.state, known.reason = State.IN_DOUBT, DoubtReason.INTERRUPTED

    @rule(key=KEYS, variant=VARIANTS)
    def concurrent_caller(self, key: str, variant: int) -> None:
        """A second caller arrives while the owner runs: in flight, nothing marked or re-run."""
        known = self.expected(key, variant, fail=False)
        if known is None or known.state not in (None, State.RELEASED):
            return
        seen: list[object] = []

        def second_caller(running: str) -> None:
            seen.append(self.act(running, variant, False))  # noqa: FBT003

        self.during = second_caller
        outcome = self.act(key, variant, False)  # noqa: FBT003
        assert len(seen) == 1
        assert isinstance(seen[0], InDoubt)
        assert seen[0].reason is DoubtReason.IN_FLIGHT
        assert outcome == Succeeded(key, Receipt(key, variant))
        known.runs += 1
        known.state, known.value = State.SUCCEEDED, Receipt(key, variant)

    @rule(key=KEYS, variant=VARIANTS)
    def late_completion(self, key: str, variant: int) -> None:
        """A running attempt is released and run again; the first completion is kept as late."""
        known = self.expected(key, variant, fail=False)
        if known is None or known.state not in (None, State.RELEASED):
            return

        def release_and_rerun(running: str) -> None:
            expire_leases(self.store)  # the owner looks frozen
            self.store.resolve(running, happened=False)
            again = self.act(running, variant, False)  # noqa: FBT003
            assert again == Succeeded(running, Receipt(running, variant))

        self.during = release_and_rerun
        assert self.act(key, variant, False) == Succeeded(key, Receipt(key, variant))  # noqa: FBT003
        known.runs += 2
        known.releases += 1
        known.late += 1
        known.state, known.value = State.SUCCEEDED, Receipt(key, variant)
        for other in self.model.values():
            if other.state is State.ATTEMPTING:  # its lease ran out too: that is checked first
                other.reason = DoubtReason.LEASE_EXPIRED

    @rule()
    def restart(self) -> None:
        self.store.close()
        self.open()

    @precondition(lambda self: self.model)
    @rule(data=st.data(), happened=st.booleans(), amount=st.integers(100, 199))
    def resolve(self, data: st.DataObject, happened: bool, amount: int) -> None:
        key = data.draw(st.sampled_from(sorted(self.model)))
        known = self.model[key]

        def decide() -> None:
            if happened:
                self.store.resolve(key, happened=True, result=Receipt(key, amount))
            else:
                self.store.resolve(key, happened=False)

        if known.state not in (State.ATTEMPTING, State.IN_DOUBT):
            with pytest.raises(SafeError):
                decide()
            return
        decide()
        if happened:
            known.state, known.value = State.SUCCEEDED, Receipt(key, amount)
        else:
            known.state = State.RELEASED
            known.releases += 1

    @precondition(lambda self: self.model)
    @rule(data=st.data(), verdict=st.sampled_from(["happened", "not_happened", "unknown"]))
    def reconcile(self, data: st.DataObject, verdict: str) -> None:
        """A probe answers for every key in doubt; the key follows its answer."""
        key = data.draw(st.sampled_from(sorted(self.model)))
        known = self.model[key]
        answers: dict[str, Verdict[Receipt]] = {
            "happened": Happened(Receipt(key, 300)),
            "not_happened": NotHappened(),
            "unknown": Unknown(),
        }

        def probe(asked: str, receipt: InDoubt) -> Verdict[Receipt]:
            return answers[verdict] if asked == key else Unknown()

        self.store.reconcile({"act": probe})
        for other in self.model.values():
            if other.state is State.ATTEMPTING:
                other.state = State.IN_DOUBT  # every dead owner's key is now marked in doubt
        if known.state is not State.IN_DOUBT:
            return
        if verdict == "happened":
            known.state, known.value = State.SUCCEEDED, Receipt(key, 300)
        elif verdict == "not_happened":
            known.state = State.RELEASED
            known.releases += 1

    @invariant()
    def history_replays_to_the_record(self) -> None:
        """Each key's history, change after change, leads to the state in its record."""
        for key in self.model:
            state: State | SagaState | None = None
            for event in self.store.history(key):
                if event.why is not Why.LATE_COMPLETION:
                    assert event.from_state is state, event
                    state = event.to_state
            record = self.store.get(key)
            assert state is (record.state if record else None)

    @invariant()
    def ledger_matches_model(self) -> None:
        for key, known in self.model.items():
            record = self.store.get(key)
            assert (record.state if record else None) is known.state

    @invariant()
    def every_late_completion_is_recorded(self) -> None:
        for key, known in self.model.items():
            assert len(self.store.late_completions(key)) == known.late

    @invariant()
    def each_action_ran_at_most_once_per_release(self) -> None:
        for key, known in self.model.items():
            assert self.runs[key] == known.runs
            assert self.runs[key] <= 1 + known.releases


class PostgresLedgerMachine(LedgerMachine):
    """The same machine on a PostgreSQL schema."""

    backend = "postgres"


MACHINES: dict[str, type[LedgerMachine]] = {
    "sqlite": LedgerMachine,
    "postgres": PostgresLedgerMachine,
}
EXAMPLES = {
    "sqlite": max(settings().max_examples, 100),
    # A PostgreSQL example costs a schema, a migration and a new pool at every restart:
    # about five times a SQLite one, so it runs half as many to keep the suite short.
    "postgres": max(settings().max_examples // 2, 50),
}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_ledger_state_machine(backend: str) -> None:
    """Random calls, crashes, restarts, resolves and probes keep the ledger true to the model."""
    require(backend)
    run_state_machine_as_test(
        MACHINES[backend],
        settings=settings(settings(), max_examples=EXAMPLES[backend], stateful_step_count=30),
    )
