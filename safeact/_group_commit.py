"""Group commit: concurrent commits made durable by one fsync, each before its caller goes on.

A claim commits without syncing (the write lock is released at once, so the next claim can
commit meanwhile), then waits here until an fsync that *began after its commit* has ended.
One thread of the store's own runs the fsyncs, each for every commit numbered before it
began; the commits numbered while it runs share the next one. N concurrent claims therefore
cost two fsyncs rather than N, and no claim returns (so no action starts) before an fsync
covering its commit has returned. The fsyncs run on a thread of their own because a signal
(Ctrl-C) is delivered to the main thread between any two bytecodes: a caller interrupted
half way through running one could leave the others waiting for ever; a waiter that is
interrupted only stops waiting.

A failed fsync fails every commit from then on, until the store is opened again: after a
failed fsync Linux may have dropped the dirty pages and report the next fsync clean, which
would pass off as durable a commit that was written before the failure and lost with it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import safeact._telemetry as telemetry

__all__ = ["GroupCommit"]


class GroupCommit:
    """Share fsyncs among the commits of one process's threads, on one store."""

    __slots__ = ("_committed", "_done", "_failure", "_fsync", "_synced", "_syncer")

    def __init__(self, fsync: Callable[[], None]) -> None:
        """``fsync`` makes every commit made before it began durable, or raises."""
        self._fsync = fsync
        self._done = threading.Condition(threading.Lock())
        self._committed = 0
        """Commits that asked to be made durable, numbered from 1."""
        self._synced = 0
        """The highest commit covered by an fsync that has returned."""
        self._failure: Exception | None = None
        self._syncer: threading.Thread | None = None

    def durable(self) -> None:
        """Return once an fsync begun after the caller's commit has returned.

        Call it after the commit.

        Raises:
            OSError: an fsync failed, this one or an earlier one: the commit is in the file
                but may not be on disk. Open the store again once the disk is sound.

        """
        with self._done:
            if self._failure is None:
                self._committed += 1
                mine = self._committed
                if self._syncer is None:
                    # Kept only once started: a syncer kept but never started (a Ctrl-C in
                    # start()) would leave this commit and every later one waiting for ever.
                    syncer = threading.Thread(
                        target=self._sync, name="safeact-group-commit", daemon=True
                    )
                    syncer.start()
                    self._syncer = syncer
                self._done.notify_all()
                while self._synced < mine and self._failure is None:
                    self._done.wait()
                if self._synced >= mine:
                    return
            raise OSError(
                f"an fsync of the ledger failed, so this commit may not be on disk: "
                f"{self._failure}; open the store again once the disk is sound"
            ) from self._failure

    def _sync(self) -> None:
        """The syncer thread: fsync for the commits numbered so far, until one fails."""
        while True:
            with self._done:
                while self._synced == self._committed:
                    self._done.wait()
                last = self._committed
            started = time.perf_counter()
            try:
                self._fsync()
            except Exception as failure:  # noqa: BLE001 - every waiter gets it, and the next ones
                with self._done:
                    self._failure = failure
                    self._done.notify_all()
                return
            took = time.perf_counter() - started
            with self._done:
                # Never backwards: a Ctrl-C in start() after its thread ran makes the next
                # commit start a second syncer, and either may finish first.
                self._synced = max(self._synced, last)
                self._done.notify_all()
            telemetry.fsynced(took)  # after the waiters are released, and it never raises
