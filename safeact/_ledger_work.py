"""The ledger's blocking work for an async caller: run in a thread, answered with one wake-up.

``asyncio.to_thread`` wraps each hop in a concurrent future chained to an asyncio future,
and ``shield`` (which the caller needs, since the work must not be cut off) adds a task and
another future: three turns of the loop, each a callback, before the caller runs again. Here
the thread hands its answer straight to the loop, and a cancelled caller can wait for the
same work again, so a hop is one wake of the loop and one turn (DESIGN, "The hot path").

The threads are the process's own (``safeact-ledger``), not the loop's default executor:
submitting to that one is only reachable through ``run_in_executor``, whose chained future
is the cost. A forked child starts a pool of its own: the parent's threads do not exist in it.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar, final

__all__ = ["LedgerWork"]

T = TypeVar("T")

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _threads() -> ThreadPoolExecutor:
    """The process's ledger threads, started on first use."""
    global _pool  # noqa: PLW0603 - one pool per process, made on first use
    with _pool_lock:
        if _pool is None:
            # As many as asyncio's default executor would have: a claim holds its thread
            # while it waits for its fsync, and the claims waiting together share one.
            _pool = ThreadPoolExecutor(
                max_workers=min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="safeact-ledger"
            )
        return _pool


def _forget_pool() -> None:
    """In a forked child: the parent's threads are gone, so the next work starts new ones."""
    global _pool, _pool_lock  # noqa: PLW0603 - the child's own pool and lock
    _pool = None
    _pool_lock = threading.Lock()  # a fork while another thread held it leaves it held


os.register_at_fork(after_in_child=_forget_pool)


@final
class LedgerWork(Generic[T]):
    """``work()`` running in a ledger thread, in a copy of the caller's context.

    Started at construction, from a coroutine on a running loop. The work always runs to its
    end: cancelling the task that awaits ``result()`` only stops that wait, and ``result()``
    can be awaited again for the same work.
    """

    __slots__ = ("_ended", "_error", "_loop", "_value", "_waiter")

    def __init__(self, work: Callable[[], T]) -> None:
        """Start ``work`` in a ledger thread.

        Raises:
            RuntimeError: no event loop is running in this thread.

        """
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] = self._loop.create_future()
        self._ended = False
        self._value: T | None = None
        self._error: BaseException | None = None
        _threads().submit(self._run, contextvars.copy_context(), work)

    def _run(self, context: contextvars.Context, work: Callable[[], T]) -> None:
        """In the ledger thread: run ``work`` and hand what came of it to the loop."""
        try:
            value = context.run(work)
        except BaseException as exc:  # noqa: BLE001 - whatever it raised is the caller's
            self._loop.call_soon_threadsafe(self._end, None, exc)
        else:
            self._loop.call_soon_threadsafe(self._end, value, None)

    def _end(self, value: T | None, error: BaseException | None) -> None:
        """On the loop: keep what came of the work and wake the caller, if it still waits."""
        self._value, self._error, self._ended = value, error, True
        if not self._waiter.done():
            self._waiter.set_result(None)

    async def result(self) -> T:
        """Wait for the work to end; return what it returned.

        Raises:
            BaseException: what the work raised.
            asyncio.CancelledError: the awaiting task was cancelled; the work goes on, and
                another ``result()`` waits for it.

        """
        if not self._ended:
            if self._waiter.done():  # cancelled by an earlier wait
                self._waiter = self._loop.create_future()
            await self._waiter
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value] # set with the error None: the work's T
