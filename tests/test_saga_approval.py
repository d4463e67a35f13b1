"""Sagas whose steps need a person's approval: a wait pauses the saga, a denial aborts it.

Each test runs on every backend (``store``): SQLite, PostgreSQL and the in-memory ledger.
"""

import asyncio
from collections.abc import Callable

import pytest

from safeact import (
    AsyncSafeTool,
    AwaitingApprovalError,
    Failed,
    SafeTool,
    Saga,
    SagaFailed,
    SagaState,
    Store,
    safe,
)

PAY = "s:1:pay"
"""The key of the gated step, and so of its approval request."""


class Bank:
    """Fake back ends that log every real action and compensation, in order."""

    def __init__(self) -> None:
        self.log: list[str] = []

    def charge(self, key: str, cents: int) -> int:
        self.log.append(f"charge {key}")
        return cents

    def refund(self, key: str, cents: int) -> None:
        self.log.append(f"refund {key} {cents}")

    def note(self, key: str, cents: int) -> int:
        self.log.append(f"note {key}")
        return cents

    def payment(self, store: Store, *, gated_undo: bool = False) -> SafeTool[[int], int]:
        """The step that needs approval, compensated by ``unpay`` (gated too if asked)."""

        @safe(store, name="unpay", approval=gated_undo)
        def unpay(key: str, cents: int) -> None:
            self.log.append(f"unpay {key} {cents}")

        @safe(store, name="pay", approval=True, compensate=unpay)
        def pay(key: str, cents: int) -> int:
            self.log.append(f"pay {key}")
            return cents

        return pay

    def async_payment(self, store: Store) -> AsyncSafeTool[[int], int]:
        """``payment`` as an async tool."""

        @safe(store, name="pay", approval=True)
        async def pay(key: str, cents: int) -> int:
            self.log.append(f"pay {key}")
            await asyncio.sleep(0)
            return cents

        return pay


def order(store: Store, bank: Bank, pay: SafeTool[[int], int]) -> list[int]:
    """Charge, pay (needs approval), note: the first two can be undone."""
    with Saga("s", store) as saga:
        return [
            saga.step(bank.charge, 50, compensate=bank.refund),
            saga.step(pay, 20),
            saga.step(bank.note, 1),
        ]


async def async_order(store: Store, bank: Bank, pay: AsyncSafeTool[[int], int]) -> list[int]:
    """``order`` as an async saga of an async gated step."""
    async with Saga("s", store) as saga:
        return [
            saga.step(bank.charge, 50, compensate=bank.refund),
            await saga.step(pay, 20),
            saga.step(bank.note, 1),
        ]


def waits(run: Callable[[], object]) -> AwaitingApprovalError:
    """The AwaitingApprovalError that ``run`` raises."""
    with pytest.raises(AwaitingApprovalError) as caught:
        run()
    return caught.value


def state(store: Store) -> SagaState:
    saga = store.get_saga("s")
    assert saga is not None
    return saga.state


def test_a_gated_step_stops_the_saga_running_undoing_nothing(store: Store) -> None:
    """The step raises AwaitingApprovalError: it did not run, nothing is undone, still RUNNING."""
    bank = Bank()
    waiting = waits(lambda: order(store, bank, bank.payment(store)))
    assert (waiting.key, waiting.tool) == (PAY, "pay")
    assert bank.log == ["charge s:0:charge"]
    assert state(store) is SagaState.RUNNING
    approval = store.approval(PAY)
    assert approval is not None
    assert approval.args_hash == waiting.args_hash


def test_no_later_step_runs_before_a_waiting_one(store: Store) -> None:
    """A block that catches the wait and goes on gets the same error; the next step never runs."""
    bank = Bank()
    with Saga("s", store) as saga:
        saga.step(bank.charge, 50, compensate=bank.refund)
        with pytest.raises(AwaitingApprovalError) as first:
            saga.step(bank.payment(store), 20)
        with pytest.raises(AwaitingApprovalError) as second:
            saga.step(bank.note, 1)
    assert first.value is second.value
    assert bank.log == ["charge s:0:charge"]


def test_a_block_that_ends_quietly_while_waiting_leaves_the_saga_running(store: Store) -> None:
    """Catching the wait and ending the block does not complete the saga."""
    bank = Bank()
    with Saga("s", store) as saga:
        saga.step(bank.charge, 50, compensate=bank.refund)
        with pytest.raises(AwaitingApprovalError):
            saga.step(bank.payment(store), 20)
    assert state(store) is SagaState.RUNNING


def test_a_rerun_while_pending_waits_again_and_runs_nothing_new(store: Store) -> None:
    """Re-running before anyone decided replays the steps before and waits again at the step."""
    bank = Bank()
    pay = bank.payment(store)
    first = waits(lambda: order(store, bank, pay))
    second = waits(lambda: order(store, bank, pay))
    assert (second.key, second.requested_at) == (first.key, first.requested_at)
    assert bank.log == ["charge s:0:charge"]


def test_approved_the_rerun_runs_the_step_once_and_completes(store: Store) -> None:
    """After approve, a re-run replays the charge, pays once, and completes; later runs replay."""
    bank = Bank()
    pay = bank.payment(store)
    waits(lambda: order(store, bank, pay))
    store.approve(PAY, by="grace")
    assert order(store, bank, pay) == [50, 20, 1]
    assert order(store, bank, pay) == [50, 20, 1]
    assert bank.log == ["charge s:0:charge", "pay s:1:pay", "note s:2:note"]
    assert state(store) is SagaState.COMPLETED


def test_denied_the_rerun_aborts_and_compensates_once(store: Store) -> None:
    """A denied step aborts the saga; the charge before it is compensated once; pay never runs."""
    bank = Bank()
    pay = bank.payment(store)
    waits(lambda: order(store, bank, pay))
    store.deny(PAY, by="grace", note="no invoice")
    with pytest.raises(SagaFailed) as caught:
        order(store, bank, pay)
    failure = caught.value
    assert failure.step == PAY
    assert isinstance(failure.outcome, Failed)
    assert (failure.outcome.error_type, failure.outcome.message) == (
        "safeact.Denied",
        "denied by grace: no invoice",
    )
    assert failure.compensated == ("s:0:charge",)
    assert failure.fully_rolled_back
    assert bank.log == ["charge s:0:charge", "refund s:0:charge:compensate 50"]
    assert state(store) is SagaState.COMPENSATED


def test_a_rerun_after_the_denial_runs_nothing_and_names_the_denied_step(store: Store) -> None:
    """Re-running a saga aborted by a denial raises SagaFailed naming the step and the denial."""
    bank = Bank()
    pay = bank.payment(store)
    waits(lambda: order(store, bank, pay))
    store.deny(PAY, by="grace", note="no invoice")
    with pytest.raises(SagaFailed):
        order(store, bank, pay)
    ran = list(bank.log)
    with pytest.raises(SagaFailed) as caught:
        order(store, bank, pay)
    assert bank.log == ran
    failure = caught.value
    assert (failure.step, failure.reason) == (PAY, "safeact.Denied: denied by grace: no invoice")
    assert failure.replayed == ("s:0:charge",)
    assert f"step {PAY!r} failed (safeact.Denied: denied by grace: no invoice)" in str(failure)


def test_a_gated_tool_called_in_the_block_pauses_without_rollback(store: Store) -> None:
    """An AwaitingApprovalError leaving the block (not from a step) rolls nothing back."""
    bank = Bank()
    with pytest.raises(AwaitingApprovalError), Saga("s", store) as saga:
        saga.step(bank.charge, 50, compensate=bank.refund)
        bank.payment(store)("approval-outside", 20).unwrap()
    assert bank.log == ["charge s:0:charge"]
    assert state(store) is SagaState.RUNNING


def test_a_compensation_awaiting_approval_leaves_the_rollback_incomplete(store: Store) -> None:
    """A gated compensation waits, reported as awaiting; approved, a re-run runs it once."""
    bank = Bank()
    pay = bank.payment(store, gated_undo=True)
    waits(lambda: order(store, bank, pay))
    store.approve(PAY, by="grace")

    def failing_note(key: str, cents: int) -> int:
        raise RuntimeError("the ledger service is down")

    def order_failing() -> None:
        with Saga("s", store) as saga:
            saga.step(bank.charge, 50, compensate=bank.refund)
            saga.step(pay, 20)
            saga.step(failing_note, 1)

    with pytest.raises(SagaFailed) as caught:
        order_failing()
    assert (caught.value.awaiting, caught.value.compensated) == ((PAY,), ("s:0:charge",))
    assert not caught.value.fully_rolled_back
    assert state(store) is SagaState.ROLLBACK_INCOMPLETE
    store.approve(f"{PAY}:compensate", by="grace")
    with pytest.raises(SagaFailed) as again:
        order_failing()
    assert again.value.compensated == (PAY,)
    assert state(store) is SagaState.COMPENSATED
    assert bank.log.count(f"unpay {PAY}:compensate 20") == 1


def test_async_gated_step_waits_then_runs_once_when_approved(store: Store) -> None:
    """In an async saga the gated step waits without rollback; approved, a re-run pays once."""
    bank = Bank()
    pay = bank.async_payment(store)
    waits(lambda: asyncio.run(async_order(store, bank, pay)))
    assert (bank.log, state(store)) == (["charge s:0:charge"], SagaState.RUNNING)
    store.approve(PAY, by="grace")
    assert asyncio.run(async_order(store, bank, pay)) == [50, 20, 1]
    assert bank.log == ["charge s:0:charge", "pay s:1:pay", "note s:2:note"]
    assert state(store) is SagaState.COMPLETED


def test_async_denied_step_aborts_and_compensates_once(store: Store) -> None:
    """In an async saga a denied step aborts it and the charge is compensated once."""
    bank = Bank()
    pay = bank.async_payment(store)
    waits(lambda: asyncio.run(async_order(store, bank, pay)))
    store.deny(PAY, by="grace")
    for _ in range(2):
        with pytest.raises(SagaFailed) as caught:
            asyncio.run(async_order(store, bank, pay))
        assert caught.value.step == PAY
    assert bank.log == ["charge s:0:charge", "refund s:0:charge:compensate 50"]
