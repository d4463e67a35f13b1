"""Sagas and doubt: a rollback is not done while a step or an undo may or may not have happened.

Also: a re-run that does not reach every step an earlier run recorded does not complete.
A step or an undo whose result cannot be stored (NaN under ``-> float``) is left IN_DOUBT,
the in-process stand-in for a crash after the effect. Every test runs on both backends.
"""

import asyncio
import threading
from collections import Counter

import pytest

from safeact import (
    DoubtReason,
    InDoubt,
    NotHappened,
    SafeError,
    Saga,
    SagaFailed,
    SagaState,
    Store,
    Unknown,
    Verdict,
    safe,
)
from tests.actions import NO_GROUP

NAN = float("nan")


class Effects:
    """Fake back ends: count every real action by key; some leave their result unstorable."""

    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()
        self.args: dict[str, float] = {}  # what each action was last called with
        self.unstorable: set[str] = set()  # keys whose first run returns NaN: left in doubt
        self.interrupted: set[str] = set()  # keys whose first call dies before acting

    def charge(self, key: str, cents: int) -> float:
        return self._act(key, cents)

    def refund(self, key: str, cents: float) -> float:
        return self._act(key, cents)

    def book(self, key: str, seat: int) -> float:
        return self._act(key, seat)

    def cancel(self, key: str, seat: float) -> float:
        return self._act(key, seat)

    def _act(self, key: str, value: float) -> float:
        if key in self.interrupted:
            self.interrupted.remove(key)
            raise KeyboardInterrupt
        self.runs[key] += 1
        self.args[key] = value
        return NAN if key in self.unstorable and self.runs[key] == 1 else value


def trip(store: Store, effects: Effects, *, steps: int = 2, abort: bool = True) -> list[float]:
    """Charge, then book a seat, both undoable; optionally give up at the end of the block."""
    with Saga("trip", store) as saga:
        values = [saga.step(effects.charge, 500, compensate=effects.refund)]
        if steps > 1:
            values.append(saga.step(effects.book, 12, compensate=effects.cancel))
        if abort:
            raise RuntimeError("the agent gave up")
        return values


CHARGE, BOOK = "trip:0:charge", "trip:1:book"


def saga_state(store: Store) -> SagaState:
    saga = store.get_saga("trip")
    assert saga is not None
    return saga.state


def test_compensation_in_doubt_is_not_counted_as_rolled_back(store: Store) -> None:
    """An undo left in doubt is reported in doubt, and the saga is ROLLBACK_INCOMPLETE."""
    effects = Effects()
    effects.unstorable.add(f"{BOOK}:compensate")
    with pytest.raises(SagaFailed) as caught:
        trip(store, effects)
    assert (caught.value.in_doubt, caught.value.compensated) == ((BOOK,), (CHARGE,))
    assert not caught.value.fully_rolled_back
    assert saga_state(store) is SagaState.ROLLBACK_INCOMPLETE


def test_compensation_in_doubt_stays_in_doubt_on_rerun(store: Store) -> None:
    """Re-running a saga whose undo is still in doubt runs nothing and stays incomplete."""
    effects = Effects()
    effects.unstorable.add(f"{BOOK}:compensate")
    with pytest.raises(SagaFailed):
        trip(store, effects)
    with pytest.raises(SagaFailed) as again:
        trip(store, effects)
    assert (again.value.in_doubt, again.value.replayed) == ((BOOK,), (CHARGE,))
    assert saga_state(store) is SagaState.ROLLBACK_INCOMPLETE
    assert effects.runs[f"{BOOK}:compensate"] == 1


def test_compensation_resolved_as_happened_completes_the_rollback(store: Store) -> None:
    """An in-doubt undo resolved happened=True replays on re-run: COMPENSATED, run once."""
    effects = Effects()
    effects.unstorable.add(f"{BOOK}:compensate")
    with pytest.raises(SagaFailed):
        trip(store, effects)
    store.resolve(f"{BOOK}:compensate", happened=True, result=12.0)
    with pytest.raises(SagaFailed) as again:
        trip(store, effects)
    assert again.value.replayed == (BOOK, CHARGE)
    assert again.value.fully_rolled_back
    assert saga_state(store) is SagaState.COMPENSATED
    assert effects.runs[f"{BOOK}:compensate"] == 1


def test_step_in_doubt_with_a_compensation_leaves_the_rollback_incomplete(store: Store) -> None:
    """A step left in doubt that has an undo is reported unresolved: ROLLBACK_INCOMPLETE."""
    effects = Effects()
    effects.unstorable.add(BOOK)
    with pytest.raises(SagaFailed) as caught:
        trip(store, effects)
    assert isinstance(caught.value.outcome, InDoubt)
    assert (caught.value.unresolved, caught.value.compensated) == ((BOOK,), (CHARGE,))
    assert str(caught.value).startswith(
        f"saga 'trip' aborted: step {BOOK!r} is in doubt (not compensated); NOT fully rolled back."
    )
    assert not caught.value.fully_rolled_back
    assert saga_state(store) is SagaState.ROLLBACK_INCOMPLETE


def test_step_still_in_doubt_is_not_compensated_on_rerun(store: Store) -> None:
    """Re-running while the step is still in doubt runs neither it nor its undo again."""
    effects = Effects()
    effects.unstorable.add(BOOK)
    with pytest.raises(SagaFailed):
        trip(store, effects)
    with pytest.raises(SagaFailed) as again:
        trip(store, effects)
    assert (again.value.unresolved, again.value.replayed) == ((BOOK,), (CHARGE,))
    assert saga_state(store) is SagaState.ROLLBACK_INCOMPLETE
    assert (effects.runs[BOOK], effects.runs[f"{BOOK}:compensate"]) == (1, 0)


def test_step_resolved_as_happened_is_compensated_on_rerun(store: Store) -> None:
    """An in-doubt step resolved happened=True is undone, with the resolved value, on re-run."""
    effects = Effects()
    effects.unstorable.add(BOOK)
    with pytest.raises(SagaFailed):
        trip(store, effects)
    store.resolve(BOOK, happened=True, result=12.5)
    with pytest.raises(SagaFailed) as again:
        trip(store, effects)
    assert (again.value.compensated, again.value.replayed) == ((BOOK,), (CHARGE,))
    assert again.value.fully_rolled_back
    assert saga_state(store) is SagaState.COMPENSATED
    assert effects.args[f"{BOOK}:compensate"] == 12.5
    assert effects.runs == Counter(
        {CHARGE: 1, BOOK: 1, f"{CHARGE}:compensate": 1, f"{BOOK}:compensate": 1}
    )


def test_step_resolved_as_not_happened_needs_no_compensation(store: Store) -> None:
    """An in-doubt step released by an operator is neither re-run nor undone: COMPENSATED."""
    effects = Effects()
    effects.interrupted.add(BOOK)
    with pytest.raises(KeyboardInterrupt):
        trip(store, effects)
    with pytest.raises(SagaFailed):
        trip(store, effects)
    store.resolve(BOOK, happened=False, force=True)  # this process is done with it
    with pytest.raises(SagaFailed) as again:
        trip(store, effects)
    assert (again.value.outcome, again.value.step) == (None, BOOK)
    assert "was in doubt until an operator resolved it" in str(again.value)
    assert again.value.fully_rolled_back
    assert saga_state(store) is SagaState.COMPENSATED
    assert (effects.runs[BOOK], effects.runs[f"{BOOK}:compensate"]) == (0, 0)


def test_step_running_under_a_live_owner_aborts_as_in_flight(store: Store) -> None:
    """A step whose key another thread is running (wait=0) aborts the saga, in doubt: in flight."""
    started, finish = threading.Event(), threading.Event()

    def book(key: str, seat: int) -> int:
        started.set()
        finish.wait(timeout=60)  # only the other thread's call gets here
        return seat

    booking = safe(store, name="book", wait=0)(book)
    owner = threading.Thread(target=booking, args=("trip:0:book", 12))
    owner.start()
    try:
        assert started.wait(timeout=60)
        with pytest.raises(SagaFailed) as caught, Saga("trip", store) as saga:
            saga.step(booking, 12)
    finally:
        finish.set()
        owner.join()
    assert isinstance(caught.value.outcome, InDoubt)
    assert caught.value.step == "trip:0:book"
    assert caught.value.outcome.reason is DoubtReason.IN_FLIGHT


def interrupted_after_two_steps(store: Store, effects: Effects) -> None:
    """Take both steps, then die before the block ends: the saga stays RUNNING with two steps."""
    with pytest.raises(KeyboardInterrupt), Saga("trip", store) as saga:
        saga.step(effects.charge, 500, compensate=effects.refund)
        saga.step(effects.book, 12, compensate=effects.cancel)
        raise KeyboardInterrupt


def test_rerun_that_skips_a_recorded_step_does_not_complete(store: Store) -> None:
    """A re-run whose block ends before a recorded step raises SafeError; the saga stays RUNNING."""
    effects = Effects()
    interrupted_after_two_steps(store, effects)
    with pytest.raises(SafeError, match=f"not completed.*not reached: {BOOK}") as caught:
        trip(store, effects, steps=1, abort=False)
    assert not isinstance(caught.value, SagaFailed)
    assert saga_state(store) is SagaState.RUNNING
    assert effects.runs == Counter({CHARGE: 1, BOOK: 1})


def test_async_rerun_that_skips_a_recorded_step_does_not_complete(store: Store) -> None:
    """An async re-run whose block ends before a recorded step does not complete either."""
    effects = Effects()
    interrupted_after_two_steps(store, effects)

    async def first_step_only() -> None:
        async with Saga("trip", store) as saga:
            saga.step(effects.charge, 500, compensate=effects.refund)

    with pytest.raises(SafeError, match=f"not reached: {BOOK}"):
        asyncio.run(first_step_only())
    assert saga_state(store) is SagaState.RUNNING


def test_rerun_that_reaches_every_recorded_step_completes(store: Store) -> None:
    """After such a refusal, a re-run taking every recorded step completes, running nothing."""
    effects = Effects()
    interrupted_after_two_steps(store, effects)
    with pytest.raises(SafeError):
        trip(store, effects, steps=1, abort=False)
    assert trip(store, effects, abort=False) == [500.0, 12.0]
    assert saga_state(store) is SagaState.COMPLETED
    assert effects.runs == Counter({CHARGE: 1, BOOK: 1})


def test_rollback_rerun_never_runs_an_in_doubt_step(store: Store) -> None:
    """A re-run taking a rollback up again never calls a step in doubt.

    Its probe could otherwise release it and run the action in a run meant to undo it.
    """
    effects = Effects()
    effects.interrupted.add(BOOK)
    asked: list[str] = []

    def probe(key: str, _receipt: InDoubt) -> Verdict[float]:
        asked.append(key)
        return NotHappened() if len(asked) > 1 else Unknown()

    booking = safe(store, name="book", reconcile=probe)(effects.book)

    def run() -> None:
        with Saga("trip", store) as saga:
            saga.step(effects.charge, 500, compensate=effects.refund)
            saga.step(booking, 12, compensate=effects.cancel)

    with pytest.raises(KeyboardInterrupt):
        run()
    with pytest.raises(SagaFailed):
        run()  # the probe cannot tell: the saga rolls back, the step stays in doubt
    assert (saga_state(store), asked) == (SagaState.ROLLBACK_INCOMPLETE, [BOOK])
    with store._transaction(sync=False) as db:  # its owner is provably gone: proof
        db.execute(
            "UPDATE calls SET owner_started = -2, owner_group = ? WHERE key = ?", (NO_GROUP, BOOK)
        )
    with pytest.raises(SagaFailed) as caught:
        run()
    assert caught.value.unresolved == (BOOK,)
    assert (asked, effects.runs[BOOK]) == ([BOOK], 0)
