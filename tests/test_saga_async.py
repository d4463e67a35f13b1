"""Async sagas: async steps and compensations, the same order and once-only guarantees."""

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, cast

import pytest

from safeact import KeyConflictError, SafeError, Saga, SagaFailed, SagaState, Store, safe
from safeact._ledger import Executor
from safeact._open import StoreHandle


class Backends:
    """Async fakes that log what they do."""

    def __init__(self) -> None:
        self.log: list[str] = []

    async def charge(self, key: str, cents: int) -> int:
        self.log.append(f"charge {key}")
        await asyncio.sleep(0)
        return cents

    async def refund(self, key: str, cents: int) -> None:
        self.log.append(f"refund {key} {cents}")

    def send(self, key: str, to: str) -> str:
        self.log.append(f"send {key}")
        return to

    def correct(self, key: str, to: str) -> None:
        self.log.append(f"correct {key} {to}")

    async def ledger(self, key: str) -> None:
        self.log.append(f"ledger {key}")
        raise ConnectionError("ledger down")


async def refund(store: Store, backends: Backends, *, with_ledger: bool) -> list[object]:
    async with Saga("s", store) as saga:
        cents = await saga.step(backends.charge, 500, compensate=backends.refund)
        to = saga.step(backends.send, "a@b.c", compensate=backends.correct)
        if with_ledger:
            await saga.step(backends.ledger)
        return [cents, to]


def test_async_saga_completes_and_replays(store: Store) -> None:
    """An async saga returns its values; a re-run replays them without running anything."""
    backends = Backends()
    assert asyncio.run(refund(store, backends, with_ledger=False)) == [500, "a@b.c"]
    assert asyncio.run(refund(store, backends, with_ledger=False)) == [500, "a@b.c"]
    assert backends.log == ["charge s:0:charge", "send s:1:send"]


def test_async_saga_rolls_back_newest_first_with_async_and_sync_undos(store: Store) -> None:
    """A failing async step undoes the sync step, then the async one, once each."""
    backends = Backends()
    with pytest.raises(SagaFailed) as caught:
        asyncio.run(refund(store, backends, with_ledger=True))
    assert isinstance(caught.value.__cause__, ConnectionError)
    assert caught.value.compensated == ("s:1:send", "s:0:charge")
    assert backends.log == [
        "charge s:0:charge",
        "send s:1:send",
        "ledger s:2:ledger",
        "correct s:1:send:compensate a@b.c",
        "refund s:0:charge:compensate 500",
    ]
    with pytest.raises(SagaFailed):
        asyncio.run(refund(store, backends, with_ledger=True))
    assert len(backends.log) == 5
    saga = store.get_saga("s")
    assert saga is not None
    assert saga.state is SagaState.COMPENSATED


def test_exception_in_an_async_block_rolls_back(store: Store) -> None:
    """An exception raised in an async with block aborts the saga like in a sync one."""
    backends = Backends()

    async def run() -> None:
        async with Saga("s", store) as saga:
            await saga.step(backends.charge, 500, compensate=backends.refund)
            raise ValueError("agent gave up")

    with pytest.raises(SagaFailed) as caught:
        asyncio.run(run())
    assert caught.value.reason == "ValueError: agent gave up"
    assert backends.log == ["charge s:0:charge", "refund s:0:charge:compensate 500"]


def test_async_step_before_the_block_began_is_refused_before_it_runs(store: Store) -> None:
    """An async step taken before the saga's async with block is a SafeError, with no await."""
    backends = Backends()
    saga = Saga("s", store)
    with pytest.raises(SafeError, match=r"before its block began; nothing ran\. .*`async with"):
        _ = saga.step(backends.charge, 500)  # raised by the call: no coroutine is left over
    assert backends.log == []
    assert store.get_saga("s") is None


def test_async_step_after_the_block_ended_is_refused_before_it_runs(store: Store) -> None:
    """An async step taken after the saga's async with block ended is a SafeError."""
    backends = Backends()

    async def run() -> object:
        async with Saga("s", store) as saga:
            await saga.step(backends.charge, 500)
        return await saga.step(backends.charge, 600)

    with pytest.raises(SafeError, match=r"after its block ended; nothing ran\. .*`async with"):
        asyncio.run(run())
    assert backends.log == ["charge s:0:charge"]


def test_async_step_awaited_after_the_block_ended_is_refused(store: Store) -> None:
    """An async step made in the block but first awaited after it ended does not run."""
    backends = Backends()

    async def run() -> object:
        async with Saga("s", store) as saga:
            late = saga.step(backends.charge, 500)
        return await late

    with pytest.raises(SafeError, match="after its block ended; nothing ran"):
        asyncio.run(run())
    assert backends.log == []


def test_async_rerun_taking_another_step_conflicts_without_a_rollback(store: Store) -> None:
    """An async re-run with another step at a recorded index raises KeyConflictError; no undo."""
    backends = Backends()

    async def hold(key: str, cents: int) -> int:
        backends.log.append(f"hold {key}")
        return cents

    async def run(second: Callable[[str, int], Coroutine[Any, Any, int]]) -> None:
        async with Saga("s", store) as saga:
            await saga.step(backends.charge, 500, compensate=backends.refund)
            await saga.step(second, 600, compensate=backends.refund)
            raise KeyboardInterrupt  # stops the saga without a rollback

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(run(backends.charge))
    with pytest.raises(KeyConflictError, match="an earlier run took 's:1:charge'"):
        asyncio.run(run(hold))
    assert backends.log == ["charge s:0:charge", "charge s:1:charge"]
    saga = store.get_saga("s")
    assert saga is not None
    assert saga.state is SagaState.RUNNING


def test_async_rollback_goes_on_past_a_compensation_that_cannot_run(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """An undo that raises before running (its key is taken) is failed, logged; older ones run."""
    backends = Backends()
    store._claim("s:1:charge:compensate", "another.tool", "h", attempt_id="x", previous=None)

    async def run() -> None:
        async with Saga("s", store) as saga:
            await saga.step(backends.charge, 500, compensate=backends.refund)
            await saga.step(backends.charge, 600, compensate=backends.refund)
            raise ValueError("abort")

    with pytest.raises(SagaFailed) as caught:
        asyncio.run(run())
    assert caught.value.failed == ("s:1:charge",)
    assert caught.value.compensated == ("s:0:charge",)
    assert backends.log[-1] == "refund s:0:charge:compensate 500"
    (logged,) = [r for r in caplog.records if r.name == "safeact" and r.levelno == logging.ERROR]
    assert logged.getMessage() == "saga 's': the compensation of 's:1:charge' raised"
    assert logged.exc_info is not None
    assert isinstance(logged.exc_info[1], KeyConflictError)


def test_an_async_sagas_ledger_work_stays_off_its_event_loop(store: Store) -> None:
    """Every read and write of an async saga of async steps runs in a worker thread."""
    backends = Backends()
    on_loop: list[str] = []
    loop_thread: list[int] = []
    read, transaction = store._read, store._transaction

    def watched_read(sql: str, parameters: tuple[object, ...]) -> list[object]:
        if threading.get_ident() in loop_thread:
            on_loop.append(sql)
        return read(sql, parameters)

    def watched_transaction(*, sync: bool) -> contextlib.AbstractContextManager[Executor]:
        if threading.get_ident() in loop_thread:
            on_loop.append(f"transaction (sync={sync})")
        return transaction(sync=sync)

    async def run() -> None:
        loop_thread.append(threading.get_ident())
        async with Saga("s", store) as saga:
            await saga.step(backends.charge, 500, compensate=backends.refund)
            await saga.step(backends.ledger)

    store._read = watched_read  # type: ignore[method-assign]
    store._transaction = watched_transaction  # type: ignore[method-assign]
    with pytest.raises(SagaFailed):
        asyncio.run(run())
    assert (backends.log, on_loop) == (
        ["charge s:0:charge", "ledger s:1:ledger", "refund s:0:charge:compensate 500"],
        [],
    )


def test_keyword_arguments_reach_an_async_step(store: Store) -> None:
    """A keyword given to an awaited step(fn, name=value) reaches fn, an async function."""

    async def greet(key: str, *, to: str = "nobody") -> str:
        return to

    async def run() -> str:
        async with Saga("s", store) as saga:
            return cast("str", await saga.step(greet, to="Ada"))

    assert asyncio.run(run()) == "Ada"


@pytest.mark.located  # its tools open the store's ledger by its location
@pytest.mark.parametrize("by_location", ["step", "compensation"])
def test_an_async_step_opens_a_tools_ledger_off_its_event_loop(
    store: Store, by_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool given its ledger by location opens it at its first step, in a worker thread.

    Opening may connect (a PostgreSQL ledger, up to the connect timeout): never on the loop.
    """
    backends = Backends()
    opened_on: list[int] = []
    loop_thread: list[int] = []
    open_store = StoreHandle.open

    def watched_open(handle: StoreHandle) -> Store:
        if not handle.is_open:
            opened_on.append(threading.get_ident())
        return open_store(handle)

    monkeypatch.setattr(StoreHandle, "open", watched_open)
    by_path = safe(store.location)
    charge = by_path(backends.charge) if by_location == "step" else backends.charge
    undo = by_path(backends.refund) if by_location == "compensation" else backends.refund

    async def run() -> object:
        loop_thread.append(threading.get_ident())
        async with Saga("s", store) as saga:
            return await saga.step(charge, 500, compensate=undo)

    assert asyncio.run(run()) == 500
    assert [line.split()[0] for line in backends.log] == ["charge"]
    assert len(opened_on) == 1
    assert opened_on != loop_thread


def test_async_saga_and_its_tools_on_one_relative_path_share_the_ledger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An async saga and its async tool, both given the ledger as a relative path, run as one."""
    monkeypatch.chdir(tmp_path)
    backends = Backends()
    charge = safe("agent.db")(backends.charge)

    async def run() -> tuple[int, Saga]:
        async with Saga("saga-1", "agent.db") as saga:
            return await saga.step(charge, 500), saga

    value, saga = asyncio.run(run())
    assert value == 500
    charge.store.close()
    saga.store.close()
