"""Group commit: concurrent commits made durable by one fsync, each before its caller goes on.

A claim commits without syncing (the write lock is released at once, so the next claim can
commit meanwhile), then waits here until an fsync that *began after its commit* has ended.
One fsync runs at a time, each for every commit numbered before it began; the commits
numbered while it runs share the next one. N concurrent claims therefore cost two fsyncs
rather than N, and no claim returns (so no action starts) before an fsync covering its
commit has returned.

Who runs an fsync: a committing thread that is not the main thread runs it itself, when
none is running (it leads; the others wait for it or lead the next). The main thread never
does: a signal (Ctrl-C) is delivered to it between any two bytecodes, and a leader
interrupted half way could leave the others waiting for ever; so its commits are synced by
a thread of the store's own, started at its first, and a main thread that is interrupted
only stops waiting. Python delivers signals to the main thread alone, so a leader's round
always ends, unless an exception is injected into its thread from outside
(``PyThreadState_SetAsyncExc``, which some thread-timeout libraries use, and which can
leave any lock of any library held). The store's thread is woken for the main thread's
commits only: leading costs no hand-off, and on a fast disk the thread switches of a
hand-off cost more CPU than the fsync (DESIGN, "Group commit").

A failed fsync fails every commit from then on, until the store is opened again: after a
failed fsync Linux may have dropped the dirty pages and report the next fsync clean, which
would pass off as durable a commit that was written before the failure and lost with it.

A ledger thread (``safeact._ledger_work``) carries out many async callers' work in turn, so
it defers the wait for their claims: a claim made under ``claim_deferred`` inside a job's
``batch`` is only numbered, and the thread waits once for all of them (``made_durable``)
before it answers any of those callers. Nothing a deferred commit allowed (an action)
starts before then, and no other commit is deferred.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

import safeact._telemetry as telemetry

__all__ = ["GroupCommit", "batch", "claim_deferred"]

_deferring = threading.local()
"""A ledger thread's job: ``commits`` (set by ``batch``) and ``armed`` (by ``claim_deferred``)."""


@contextlib.contextmanager
def batch(commits: dict[GroupCommit, int]) -> Iterator[None]:
    """One job of a ledger thread: the claim it defers is numbered into ``commits``.

    ``commits`` maps each group to the highest commit deferred in it; the thread must
    ``made_durable`` each before anything those commits allowed goes on. Never on the main
    thread (it never runs an fsync, and nothing would sync its deferred commits).
    """
    _deferring.commits = commits
    try:
        yield
    finally:
        _deferring.commits = None
        _deferring.armed = False


@contextlib.contextmanager
def claim_deferred() -> Iterator[None]:
    """Inside a ``batch``, the next commit of this thread is only numbered: the claim's own.

    Once: any other commit, before or after it (a call that a hook or a handler makes in the
    same thread, say), waits for its fsync as always, so its action cannot start first.
    """
    _deferring.armed = True
    try:
        yield
    finally:
        _deferring.armed = False


class GroupCommit:
    """Share fsyncs among the commits of one process's threads, on one store."""

    __slots__ = (
        "_committed",
        "_done",
        "_failure",
        "_fsync",
        "_mains",
        "_synced",
        "_syncer",
        "_syncer_needed",
        "_syncing",
    )

    def __init__(self, fsync: Callable[[], None]) -> None:
        """``fsync`` makes every commit made before it began durable, or raises."""
        self._fsync = fsync
        # Owned, unlike a Lock: a Ctrl-C that lands while the main thread takes it back at
        # the end of a wait leaves it without the lock, and the block's exit would then
        # release a hold of another thread's (a Lock has no owner). An RLock takes itself
        # back in a wait without being interrupted, and refuses a release by a non-owner.
        lock = threading.RLock()
        self._done = threading.Condition(lock)
        """Committers wait on it for a round to end."""
        self._syncer_needed = threading.Condition(lock)
        """The store's thread waits on it for a commit of the main thread's to sync."""
        self._committed = 0
        """Commits that asked to be made durable, numbered from 1."""
        self._synced = 0
        """The highest commit covered by an fsync that has returned."""
        self._mains = 0
        """The main thread's latest commit: the store's thread syncs up to it, no further."""
        self._syncing = False
        """Whether an fsync is running (one at a time)."""
        self._failure: Exception | None = None
        self._syncer: threading.Thread | None = None

    def durable(self) -> None:
        """Return once an fsync begun after the caller's commit has returned.

        Call it after the commit. Inside ``claim_deferred`` in a ``batch`` it only numbers
        the commit.

        Raises:
            OSError: an fsync failed, this one or an earlier one: the commit is in the file
                but may not be on disk. Open the store again once the disk is sound.

        """
        leads = threading.current_thread() is not threading.main_thread()
        took: list[float] = []
        # One hold of the lock from numbering to the end of the wait: the main thread takes
        # it once, and a Ctrl-C landing as a lock is taken, in Condition.__enter__, would
        # leave it held for ever (a test signals the main thread as the fsync begins).
        with self._done:
            if self._failure is None:
                self._committed += 1
                mine = self._committed
                commits: dict[GroupCommit, int] | None = getattr(_deferring, "commits", None)
                if commits is not None and getattr(_deferring, "armed", False):
                    _deferring.armed = False
                    commits[self] = mine
                    return
                if not leads:
                    self._mains = mine
                    if self._syncer is None:
                        # Kept only once started: a syncer kept but never started (a Ctrl-C
                        # in start()) would leave this commit and every later one waiting.
                        syncer = threading.Thread(
                            target=self._sync, name="safeact-group-commit", daemon=True
                        )
                        syncer.start()
                        self._syncer = syncer
                    self._syncer_needed.notify()
                synced = self._covered(mine, took, leads=leads)
            else:
                synced = False
        self._reported(took, synced=synced)

    def made_durable(self, commit: int) -> None:
        """Return once an fsync covering ``commit`` (a number ``durable`` gave) has returned.

        Never on the main thread (only a ledger thread defers its claims).

        Raises:
            OSError: as ``durable``.

        """
        took: list[float] = []
        with self._done:
            synced = self._covered(commit, took, leads=True)
        self._reported(took, synced=synced)

    def _covered(self, commit: int, took: list[float], *, leads: bool) -> bool:
        """With the lock held: wait (or lead rounds) until ``commit`` is synced or one failed.

        Appends each fsync this thread ran to ``took``; returns whether ``commit`` is synced.
        """
        while self._synced < commit and self._failure is None:
            if leads and not self._syncing:
                took.extend(self._round())
            else:
                self._done.wait()
        return self._synced >= commit

    def _reported(self, took: list[float], *, synced: bool) -> None:
        """After the lock is released: report this thread's fsyncs; raise if not synced."""
        for seconds in took:
            telemetry.fsynced(seconds)  # after the waiters are released, and it never raises
        if synced:
            return
        raise OSError(
            f"an fsync of the ledger failed, so this commit may not be on disk: "
            f"{self._failure}; open the store again once the disk is sound"
        ) from self._failure

    def _round(self) -> list[float]:
        """Run one fsync for the commits numbered so far; return how long it took, if it did.

        Called with the lock held, and returns with it held; it is released during the
        fsync, so that commits go on being numbered meanwhile. Never on the main thread.
        """
        self._syncing = True
        last = self._committed
        failure: Exception | None = None
        took: list[float] = []
        self._done.release()
        try:
            started = time.perf_counter()
            try:
                self._fsync()
            except Exception as exc:  # noqa: BLE001 - every waiter gets it, and the next ones
                failure = exc
            else:
                took.append(time.perf_counter() - started)
        finally:
            self._done.acquire()
            self._syncing = False
            if failure is not None:
                self._failure = failure
            elif took:
                # Never backwards: a Ctrl-C in start() after its thread ran makes the next
                # commit of the main thread start a second syncer, and either may finish first.
                self._synced = max(self._synced, last)
            self._done.notify_all()
            if self._failure is not None or self._synced < self._mains:
                self._syncer_needed.notify_all()
        return took

    def _sync(self) -> None:
        """The syncer thread: fsync for the commits numbered so far, until one fails."""
        while True:
            with self._done:
                # Only for the main thread: another thread's commit is that thread's to sync,
                # and waking this one for it would bring back the hand-off it saves.
                while self._failure is None and (self._syncing or self._synced >= self._mains):
                    self._syncer_needed.wait()
                if self._failure is not None:
                    return
                took = self._round()
            for seconds in took:
                telemetry.fsynced(seconds)  # after the waiters are released; it never raises
