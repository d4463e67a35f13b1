"""Async tools: the same guarantees under asyncio, and a ledger that does not stall the loop."""

import asyncio
import contextlib
import contextvars
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
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
from safeact._ledger_work import LedgerWork
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


def test_a_new_key_costs_two_hops_to_a_ledger_thread_and_a_replay_one(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ledger's work for a call runs in one hop per stretch, not one per statement."""
    hops: list[object] = []
    start = LedgerWork.__init__

    def counted(self: LedgerWork[T], work: Callable[[], T], *args: Any, **kwargs: Any) -> None:
        hops.append(work)
        start(self, work, *args, **kwargs)

    monkeypatch.setattr(LedgerWork, "__init__", counted)
    charge = charge_tool(store, [])

    async def new_then_replay() -> tuple[int, int]:
        await charge("k", 5)
        new = len(hops)
        await charge("k", 5)
        return new, len(hops) - new

    assert asyncio.run(new_then_replay()) == (2, 1)


def test_cancel_while_the_outcome_is_written_still_records_it(store: Store) -> None:
    """A task cancelled, twice, while its outcome is being written: the success is recorded."""
    writing, go_on = threading.Event(), threading.Event()
    finish = store._finish

    def held(*args: Any, **kwargs: Any) -> Any:
        writing.set()
        assert go_on.wait(30)
        return finish(*args, **kwargs)

    store._finish = held  # type: ignore[method-assign]

    @safe(store)
    async def pay(key: str) -> int:
        return 42

    async def cancel_while_writing() -> Outcome[int]:
        call = asyncio.create_task(pay("k"))
        assert await asyncio.to_thread(writing.wait, 30)
        call.cancel()
        await asyncio.sleep(0)  # the task takes its cancellation: the loop runs callbacks FIFO
        call.cancel()  # and a second one, while it waits for the write again
        await asyncio.sleep(0)
        assert not call.done()  # still waiting: the write is held
        go_on.set()
        with pytest.raises(asyncio.CancelledError):
            await call
        record = store.get("k")
        assert record is not None
        assert record.state is State.SUCCEEDED
        return await pay("k")

    assert asyncio.run(cancel_while_writing()) == Succeeded("k", 42, replayed=True)
    del store._finish


def test_a_hop_carries_the_callers_context(store: Store) -> None:
    """The ledger's work sees the context variables of the task that awaits it."""
    seen: list[str] = []
    label: contextvars.ContextVar[str] = contextvars.ContextVar("label")
    stored = store._stored

    def read(key: str) -> Record | None:
        seen.append(label.get("none"))
        return stored(key)

    store._stored = read  # type: ignore[method-assign]
    charge = charge_tool(store, [])

    async def labelled() -> None:
        label.set("caller's")
        await charge("k", 5)

    asyncio.run(labelled())
    del store._stored
    assert seen == ["caller's"]


def test_a_forked_child_runs_async_calls_with_threads_of_its_own(tmp_path: Path) -> None:
    """Ledger threads running at a fork do not exist in the child: it starts its own."""
    script = tmp_path / "child.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio, os, sys
            import safeact._ledger_work as work
            from safeact import get_store, safe

            work.IDLE = 3600  # the store's thread still runs at the fork
            store = get_store({str(tmp_path / "open.db")!r})

            @safe(store, name="pay")
            async def pay(key: str) -> int:
                return os.getpid()

            @safe({str(tmp_path / "later.db")!r}, name="send")
            async def send(key: str) -> int:
                return os.getpid()

            asyncio.run(pay("parent"))  # in the store's own thread
            asyncio.run(send("parent"))  # its first hop, before the store is open, in the pool
            # Until a pool thread is idle: a pool carried over would then give it the
            # child's work, and a thread that does not exist in the child never runs it.
            idle = work._threads()._idle_semaphore
            idle.acquire()
            idle.release()
            pid = os.fork()
            if pid == 0:
                @safe({str(tmp_path / "child.db")!r}, name="notify")
                async def notify(key: str) -> int:
                    return os.getpid()

                outcomes = [asyncio.run(tool("child")) for tool in (pay, notify)]
                os._exit(0 if [o.value for o in outcomes] == [os.getpid()] * 2 else 3)
            _, status = os.waitpid(pid, 0)
            sys.exit(os.waitstatus_to_exitcode(status))
            """
        )
    )
    done = subprocess.run([sys.executable, str(script)], timeout=30, check=False)
    assert done.returncode == 0


def test_keyword_only_arguments_reach_an_async_action(store: Store) -> None:
    """A keyword-only argument given by keyword is passed on to the coroutine."""

    @safe(store)
    async def send(key: str, *, to: str) -> str:
        return to

    assert Succeeded("k", "a", replayed=False) == asyncio.run(send("k", to="a"))
