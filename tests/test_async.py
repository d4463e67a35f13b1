"""Async tools: the same guarantees under asyncio, and a ledger that does not stall the loop."""

import asyncio
import contextlib
import sqlite3
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

from safeact import (
    AsyncSafeTool,
    DoubtReason,
    Failed,
    InDoubt,
    Outcome,
    State,
    Store,
    Succeeded,
    _sqlite,
    safe,
)
from safeact._protocol import Record
from tests.actions import Receipt

T = TypeVar("T")


def charge_tool(store: Store, runs: list[str]) -> AsyncSafeTool[[int], Receipt]:
    @safe(store, wait=60)
    async def charge(key: str, amount: int) -> Receipt:
        runs.append(key)
        await asyncio.sleep(0)  # let the other tasks in while this one owns the key
        return Receipt("a@b.c", amount)

    return charge


def test_async_tool_runs_once_then_replays(store: Store) -> None:
    """Await tool(key, ...) runs the coroutine once; a second await replays its result."""
    runs: list[str] = []
    charge = charge_tool(store, runs)

    async def twice() -> list[Outcome[Receipt]]:
        return [await charge("k", 5), await charge("k", 5)]

    assert asyncio.run(twice()) == [
        Succeeded("k", Receipt("a@b.c", 5)),
        Succeeded("k", Receipt("a@b.c", 5), replayed=True),
    ]
    assert runs == ["k"]


def test_async_failure_is_recorded_and_replayed(store: Store) -> None:
    """A raising coroutine gives Failed with the live exception, then the stored Failed."""

    @safe(store, name="decline")
    async def decline(key: str) -> None:
        raise ValueError("declined")

    async def twice() -> tuple[Outcome[None], Outcome[None]]:
        return await decline("k"), await decline("k")

    first, second = asyncio.run(twice())
    assert first == Failed("k", "decline", "ValueError", "declined")
    assert isinstance(first, Failed)
    assert isinstance(first.exception, ValueError)
    assert second == Failed("k", "decline", "ValueError", "declined", replayed=True)


@pytest.mark.parametrize("keys", [1, 10])
def test_two_hundred_tasks_run_each_key_once(store: Store, keys: int) -> None:
    """200 concurrent tasks over one key or ten: each key runs once, every other call replays."""
    runs: list[str] = []
    charge = charge_tool(store, runs)

    async def crowd() -> list[Outcome[Receipt]]:
        return await asyncio.gather(*(charge(f"k{n % keys}", 5) for n in range(200)))

    outcomes = asyncio.run(crowd())
    kinds = Counter(
        "ran" if isinstance(o, Succeeded) and not o.replayed else type(o).__name__ for o in outcomes
    )
    assert kinds == {"ran": keys, "Succeeded": 200 - keys}
    assert {outcome.unwrap() for outcome in outcomes} == {Receipt("a@b.c", 5)}
    assert sorted(runs) == sorted(f"k{n}" for n in range(keys))


def test_cancelled_task_leaves_the_key_in_doubt(store: Store) -> None:
    """Cancelling the task while the action runs propagates; the key is IN_DOUBT (interrupted)."""
    started = asyncio.Event()
    runs: list[str] = []

    @safe(store)
    async def transfer(key: str) -> int:
        runs.append(key)
        started.set()
        await asyncio.Event().wait()  # never set: runs until cancelled
        return 1

    async def cancel_midway() -> Outcome[int]:
        task = asyncio.create_task(transfer("k"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await transfer("k")

    outcome = asyncio.run(cancel_midway())
    assert isinstance(outcome, InDoubt)
    assert outcome.reason is DoubtReason.INTERRUPTED
    record = store.get("k")
    assert record is not None
    assert (record.state, record.doubt_reason) == (State.IN_DOUBT, DoubtReason.INTERRUPTED)
    assert runs == ["k"]


@contextlib.asynccontextmanager
async def claiming(
    charge: AsyncSafeTool[[int], Receipt],
) -> AsyncIterator[asyncio.Task[Outcome[Receipt]]]:
    """Start ``charge("k", 5)`` as a task; enter once its claim is being written (in a thread)."""
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    store = charge.store
    claim = store._claim

    def signalled(*args: Any, **kwargs: Any) -> Record | None:
        loop.call_soon_threadsafe(started.set)
        return claim(*args, **kwargs)

    store._claim = signalled  # type: ignore[method-assign]
    try:
        call = asyncio.create_task(charge("k", 5))
        await started.wait()
        yield call
    finally:
        del store._claim


def hold_write_lock(location: str) -> Callable[[], None]:
    """Another session takes the ledger's write lock; return what commits and lets it go.

    SQLite: ``BEGIN IMMEDIATE`` on the file. PostgreSQL: ``LOCK TABLE calls IN EXCLUSIVE
    MODE``, which lets plain reads through but holds every claim's row lock.
    """
    if location.startswith("postgresql://"):
        import psycopg  # the SQLite half runs without it

        session = psycopg.connect(location)
        session.execute("LOCK TABLE calls IN EXCLUSIVE MODE")

        def release_postgres() -> None:
            session.commit()
            session.close()

        return release_postgres
    blocker = sqlite3.connect(location, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")

    def release_sqlite() -> None:
        blocker.execute("COMMIT")
        blocker.close()

    return release_sqlite


def test_ledger_work_does_not_stall_the_event_loop(
    store: Store, any_ledger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a claim waits for a locked ledger, other tasks keep running on the loop.

    Another session holds the write lock until a ticker task, started once the claim is
    under way, has ticked: were the claim blocking the loop, the ticker could not tick until
    the claim gave up, and the call would fail.
    """
    monkeypatch.setattr(_sqlite, "BUSY_TIMEOUT", 5.0)
    runs: list[str] = []
    charge = charge_tool(store, runs)
    release = hold_write_lock(any_ledger)

    async def both() -> tuple[Outcome[Receipt], list[int]]:
        async with claiming(charge) as call:
            ticks = []
            for tick in range(5):
                ticks.append(tick)
                await asyncio.sleep(0)
            release()
            return await call, ticks

    outcome, ticks = asyncio.run(both())
    assert outcome == Succeeded("k", Receipt("a@b.c", 5))
    assert ticks == [0, 1, 2, 3, 4]


def test_async_caller_that_runs_out_of_wait_gets_in_flight(store: Store) -> None:
    """A second task on a running key with wait=0 gets InDoubt (in flight); nothing is marked."""
    running = asyncio.Event()
    finish = asyncio.Event()

    @safe(store, wait=0)
    async def slow(key: str) -> int:
        running.set()
        await finish.wait()
        return 1

    async def two() -> tuple[Outcome[int], Outcome[int]]:
        owner = asyncio.create_task(slow("k"))
        await running.wait()
        second = await slow("k")
        finish.set()
        return await owner, second

    first, second = asyncio.run(two())
    assert first == Succeeded("k", 1)
    assert isinstance(second, InDoubt)
    assert second.reason is DoubtReason.IN_FLIGHT
    assert store.late_completions("k") == []
    record = store.get("k")
    assert record is not None
    assert (record.state, record.doubt_reason) == (State.SUCCEEDED, None)


@pytest.mark.parametrize("cancellations", [1, 2])
def test_cancel_during_the_claim_leaves_no_orphan(
    store: Store, any_ledger: str, monkeypatch: pytest.MonkeyPatch, cancellations: int
) -> None:
    """A task cancelled mid-claim, once or twice: the claim completes, marked interrupted.

    Nothing ran. Left alone, it would sit ATTEMPTING under a live process that no longer holds it.
    """
    monkeypatch.setattr(_sqlite, "BUSY_TIMEOUT", 5.0)
    runs: list[str] = []
    charge = charge_tool(store, runs)
    release = hold_write_lock(any_ledger)

    async def cancel_while_claiming() -> None:
        async with claiming(charge) as call:
            for _ in range(cancellations):
                call.cancel()
                await asyncio.sleep(0)  # the task takes it, and waits for its claim
            release()
            with pytest.raises(asyncio.CancelledError):
                await call

    asyncio.run(cancel_while_claiming())
    record = store.get("k")
    assert record is not None
    assert (record.state, record.doubt_reason) == (State.IN_DOUBT, DoubtReason.INTERRUPTED)
    assert runs == []


def test_a_task_cancelled_before_its_claim_claims_nothing(store: Store) -> None:
    """Cancelled while its key is read, a call stops before claiming: no row, nothing ran."""
    runs: list[str] = []
    charge = charge_tool(store, runs)
    reading, go_on = threading.Event(), threading.Event()
    get = store._stored

    def held(key: str) -> Record | None:
        reading.set()
        assert go_on.wait(30)
        return get(key)

    store._stored = held  # type: ignore[method-assign]

    async def cancel_while_reading() -> None:
        call = asyncio.create_task(charge("k", 5))
        assert await asyncio.to_thread(reading.wait, 30)
        call.cancel()
        await asyncio.sleep(0)  # the task takes its cancellation: the loop runs callbacks FIFO
        go_on.set()
        with pytest.raises(asyncio.CancelledError):
            await call

    asyncio.run(cancel_while_reading())
    del store._stored
    assert store.get("k") is None
    assert runs == []


def test_a_new_key_costs_two_hops_to_a_worker_thread_and_a_replay_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger's work for a call runs in one hop per stretch, not one per statement."""
    hops: list[str] = []
    to_thread = asyncio.to_thread

    async def counted(work: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        hops.append(work.__name__)
        return await to_thread(work, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counted)
    charge = charge_tool(store, [])

    async def new_then_replay() -> tuple[int, int]:
        await charge("k", 5)
        new = len(hops)
        await charge("k", 5)
        return new, len(hops) - new

    assert asyncio.run(new_then_replay()) == (2, 1)


def test_cancel_while_the_outcome_waits_to_be_recorded_still_records_it(store: Store) -> None:
    """A task cancelled while its outcome's write is still queued: the success is recorded."""
    gate = threading.Event()
    returned = asyncio.Event()

    @safe(store)
    async def pay(key: str) -> int:
        loop = asyncio.get_running_loop()
        loop.run_in_executor(None, gate.wait)  # the only worker is busy: the write queues
        returned.set()
        return 42

    async def cancel_after_the_action() -> Outcome[int]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        call = asyncio.create_task(pay("k"))
        await returned.wait()
        call.cancel()
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await call
        return await pay("k")

    assert asyncio.run(cancel_after_the_action()) == Succeeded("k", 42, replayed=True)


def test_keyword_only_arguments_reach_an_async_action(store: Store) -> None:
    """A keyword-only argument given by keyword is passed on to the coroutine."""

    @safe(store)
    async def send(key: str, *, to: str) -> str:
        return to

    assert Succeeded("k", "a", replayed=False) == asyncio.run(send("k", to="a"))
