"""The ledger's blocking work for async callers: run in threads, answered with few wake-ups.

``asyncio.to_thread`` wraps each hop in a concurrent future chained to an asyncio future,
and ``shield`` (which the caller needs, since the work must not be cut off) adds a task and
another future: three turns of the loop, each a callback, before the caller runs again. Here
a thread hands its answers straight to the loop, and a cancelled caller waits for the same
work again (DESIGN, "The hot path").

Where the work runs depends on the store. A SQLite ledger's writes queue for one lock in the
process anyway, so its async callers' work runs in one thread of the store's
(``LedgerThread``): it takes every job queued, carries them out in turn, waits for one fsync
covering all their claims, and answers each loop with one wake-up. Threads that each wake
for one job and contend for the GIL cost more CPU than the work (measured: about three
times). Other stores (PostgreSQL, whose connections work in parallel) use a pool of threads.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar, final

from safeact._group_commit import GroupCommit, batch

__all__ = ["LedgerThread", "LedgerWork", "thread_of"]

T = TypeVar("T")

IDLE = 1.0
"""Seconds a store's ledger thread waits for more work before it ends (the next starts one)."""

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_store_threads: weakref.WeakKeyDictionary[object, LedgerThread] = weakref.WeakKeyDictionary()


def _threads() -> ThreadPoolExecutor:
    """The process's pool of ledger threads, started on first use."""
    global _pool  # noqa: PLW0603 - one pool per process, made on first use
    with _pool_lock:
        if _pool is None:
            # As many as asyncio's default executor would have: a PostgreSQL claim holds its
            # thread for its round trips, and the others go on meanwhile.
            _pool = ThreadPoolExecutor(
                max_workers=min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="safeact-ledger"
            )
        return _pool


def _forget_threads() -> None:
    """In a forked child: the parent's threads are gone, so the next work starts new ones."""
    global _pool, _pool_lock  # noqa: PLW0603 - the child's own pool and lock
    _pool = None
    _pool_lock = threading.Lock()  # a fork while another thread held it leaves it held
    for thread in list(_store_threads.values()):
        thread.forget()


os.register_at_fork(after_in_child=_forget_threads)


def thread_of(store: object) -> LedgerThread:
    """``store``'s own ledger thread (made on first use; it starts with the first work)."""
    thread = _store_threads.get(store)
    if thread is None:
        with _pool_lock:
            thread = _store_threads.setdefault(store, LedgerThread())
    return thread


@final
class LedgerWork(Generic[T]):
    """``work()`` running in a ledger thread, in a copy of the caller's context.

    Started at construction, from a coroutine on a running loop: in ``thread``, or in the
    process's pool. The work always runs to its end: cancelling the task that awaits
    ``result()`` only stops that wait, and ``result()`` can be awaited again for the same
    work. ``abandoned(value, why)`` is called when the value will not be acted on: the fsync
    of the claim the work deferred failed (``why`` is the ``OSError``), or its loop closed
    before it could be answered. It undoes what the value would have allowed and returns
    the error the caller gets instead.
    """

    __slots__ = (
        "_abandoned",
        "_context",
        "_ended",
        "_error",
        "_given_up",
        "_value",
        "_waiter",
        "_work",
        "answered",
        "caller_gone",
        "loop",
    )

    def __init__(
        self,
        work: Callable[[], T],
        abandoned: Callable[[T, Exception], BaseException],
        *,
        thread: LedgerThread | None = None,
    ) -> None:
        """Start ``work`` in ``thread``, or in the pool; ``loop`` is the running loop.

        Raises:
            RuntimeError: no event loop is running in this thread, or no thread can start.

        """
        self.loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] = self.loop.create_future()
        self._ended = False
        self._given_up = False
        self.answered = False
        """Handed to its loop, or undone: the ledger thread is done with it."""
        self.caller_gone = False
        """Nobody will act on the value: its loop closed, or an interrupt took its caller."""
        self._value: T | None = None
        self._error: BaseException | None = None
        self._work = work
        self._abandoned = abandoned
        self._context = contextvars.copy_context()
        if thread is None or thread.is_current():
            # From the store's thread itself (a hook run by its work that makes a call), the
            # thread cannot carry the work out: it waits for it.
            _threads().submit(self._in_pool)
        else:
            thread.submit(self)

    def run(self) -> None:
        """In a ledger thread: run the work, unless its loop is gone (nobody would act)."""
        if self.loop.is_closed():
            self.caller_gone = True
            return
        try:
            self._value = self._context.run(self._work)
        except BaseException as exc:  # noqa: BLE001 - whatever it raised is the caller's
            self._error = exc

    def give_up(self, why: Exception) -> None:
        """In a ledger thread: the value will not be acted on; undo it, once. Never raises."""
        if self._error is None and not self._given_up:
            try:
                self._error = self._abandoned(self._value, why)  # type: ignore[arg-type] # no error: the work's T
            except Exception as exc:  # noqa: BLE001 - the caller's error; the thread goes on
                self._error = exc
        self._given_up = True

    def refused(self, error: BaseException) -> None:
        """The work will never run: its caller gets ``error``."""
        self._error = error
        self.answer()

    def abandon(self) -> None:
        """The caller is gone (an interrupt as the work was queued): undo it, answer nobody."""
        self.caller_gone = True

    def answer(self) -> None:
        """Wake the caller on its loop; if the loop has closed, undo the work instead."""
        try:
            self.loop.call_soon_threadsafe(self.end)
        except RuntimeError as exc:  # the loop is closed: nobody will act on the value
            self.give_up(exc)

    def _in_pool(self) -> None:
        self.run()
        if self.caller_gone:
            self.give_up(RuntimeError("the event loop closed before the work was answered"))
        else:
            self.answer()

    def end(self) -> None:
        """On the loop: the work has ended; wake the caller, if it still waits."""
        self._ended = True
        if not self._waiter.done():
            self._waiter.set_result(None)

    async def result(self) -> T:
        """Wait for the work to end; return what it returned.

        Raises:
            BaseException: what the work raised (or ``abandoned`` made).
            asyncio.CancelledError: the awaiting task was cancelled; the work goes on, and
                another ``result()`` waits for it.

        """
        if not self._ended:
            if self._waiter.done():  # cancelled by an earlier wait
                self._waiter = self.loop.create_future()
            await self._waiter
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value] # set with the error None: the work's T


@final
class LedgerThread:
    """One store's thread: carries out its async callers' work in batches.

    It starts with the first work and ends once idle for ``IDLE`` seconds. Each batch is
    every job queued when it looked: they run one after another, each one's claim deferred
    (``claim_deferred`` in a ``batch``), then one wait covers them all (``made_durable``),
    and only then is any of them answered, each loop with one wake-up. A job whose claim's
    fsync failed is abandoned (undone, and its caller gets the error) instead.
    """

    __slots__ = ("_jobs", "_lock", "_running", "_thread", "_wake")

    def __init__(self) -> None:
        """No thread yet: ``submit`` starts one."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._jobs: deque[LedgerWork[Any]] = deque()
        self._running = False
        self._thread: threading.Thread | None = None

    def is_current(self) -> bool:
        """Whether the calling thread is this one's (running a job's work)."""
        return threading.current_thread() is self._thread

    def forget(self) -> None:
        """In a forked child: the thread is gone, and the lock may be held by no one."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._jobs = deque()
        self._running = False
        self._thread = None

    def submit(self, job: LedgerWork[Any]) -> None:
        """Queue ``job``, and start the thread if it is not running.

        Raises:
            RuntimeError: the thread could not start. Neither ``job`` nor any job queued
                meanwhile will run; those others' callers get the same error.
            BaseException: an interrupt as the thread started: if it did start, ``job`` is
                undone when its turn comes, since its caller is gone.

        """
        with self._lock:
            self._jobs.append(job)
            if self._running:
                self._wake.notify()
                return
            self._running = True
        thread = threading.Thread(target=self._drain, name="safeact-ledger", daemon=True)
        self._thread = thread
        try:
            thread.start()
        except BaseException as exc:
            if thread.ident is not None:  # it runs: it will take the queue, job undone
                job.abandon()
                raise
            with self._lock:
                stranded = [other for other in self._jobs if other is not job]
                self._jobs.clear()  # no thread will take them, and job's caller gives up
                self._running = False
            for other in stranded:
                other.refused(exc)
            raise

    def _drain(self) -> None:
        """The thread: carry out the queued jobs, a batch at a time, until idle."""
        while True:
            with self._lock:
                if not self._jobs:
                    self._wake.wait(IDLE)
                    if not self._jobs:
                        self._running = False
                        return
                jobs = list(self._jobs)
                self._jobs.clear()
            try:
                _carry_out(jobs)
            except BaseException as exc:
                # Only an exception from outside gets here (injected into this thread):
                # every job of the batch not yet answered is undone and told, and the next
                # work starts a new thread rather than waiting for this one.
                with self._lock:
                    self._running = False
                for job in jobs:
                    if not job.answered:
                        job.give_up(RuntimeError(f"the ledger thread stopped: {exc!r}"))
                        job.answer()
                raise


def _carry_out(jobs: list[LedgerWork[Any]]) -> None:
    """Run ``jobs``, make their claims durable with one wait per store, then answer them."""
    deferred: list[dict[GroupCommit, int]] = []
    for job in jobs:
        commits: dict[GroupCommit, int] = {}
        with batch(commits):
            job.run()
        deferred.append(commits)
    failures = _made_durable(deferred)
    by_loop: dict[asyncio.AbstractEventLoop, list[LedgerWork[Any]]] = {}
    for job, commits in zip(jobs, deferred, strict=True):
        failed = [failures[group] for group in commits if group in failures]
        if failed:
            job.give_up(failed[0])
        if job.caller_gone:
            job.give_up(RuntimeError("nobody waits for this work any more"))
        else:
            by_loop.setdefault(job.loop, []).append(job)
        job.answered = True
    for loop, answered in by_loop.items():
        try:
            loop.call_soon_threadsafe(_end_all, answered)
        except RuntimeError as exc:  # the loop closed meanwhile: nobody will act on these
            for job in answered:
                job.give_up(exc)


def _made_durable(deferred: list[dict[GroupCommit, int]]) -> dict[GroupCommit, OSError]:
    """Wait for an fsync covering each group's highest deferred commit; the failed ones."""
    highest: dict[GroupCommit, int] = {}
    for commits in deferred:
        for group, commit in commits.items():
            highest[group] = max(highest.get(group, 0), commit)
    failures: dict[GroupCommit, OSError] = {}
    for group, commit in highest.items():
        try:
            group.made_durable(commit)
        except OSError as exc:
            failures[group] = exc
    return failures


def _end_all(jobs: list[LedgerWork[Any]]) -> None:
    """On the loop: end each of ``jobs``."""
    for job in jobs:
        job.end()
