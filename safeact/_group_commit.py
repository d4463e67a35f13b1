"""Group commit: concurrent commits made durable by one fsync, each before its caller goes on.

A claim commits without syncing (the write lock is released at once, so the next claim can
commit meanwhile), then waits here until an fsync that *started after its commit* has ended.
One caller at a time runs the fsync, for every commit made before it started; the callers
that committed while it ran wait for it to end and then share the next one. N concurrent
claims therefore cost two fsyncs rather than N, and no claim returns (so no action starts)
before an fsync covering its commit has returned.

An fsync that fails fails every commit it was to cover: after a failed fsync the kernel may
have dropped the dirty pages and report the next fsync clean, so retrying proves nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["GroupCommit"]


class GroupCommit:
    """Share fsyncs among the commits of one process's threads."""

    __slots__ = ("_committed", "_done", "_failed", "_synced", "_syncing")

    def __init__(self) -> None:
        """Start with no commits and no fsync running."""
        self._done = threading.Condition(threading.Lock())
        self._committed = 0
        """Commits that asked to be made durable, numbered from 1."""
        self._synced = 0
        """The highest commit covered by an fsync that has ended."""
        self._syncing = False
        self._failed: list[tuple[int, int, OSError]] = []
        """Each failed fsync: the commits it covered, ``(first, last)``, and its error."""

    def durable(self, fsync: Callable[[], None]) -> None:
        """Return once an fsync begun after the caller's commit has returned.

        Call it after the commit. ``fsync`` makes every commit made before it started
        durable; it runs in one calling thread at a time.

        Raises:
            OSError: the fsync covering this commit failed: the commit is in the file but
                may not be on disk.

        """
        with self._done:
            self._committed += 1
            mine = self._committed
            while self._synced < mine:
                if self._syncing:
                    self._done.wait()
                else:
                    self._sync(fsync)
            for first, last, error in self._failed:
                if first <= mine <= last:
                    raise OSError(
                        f"the fsync that was to make this commit durable failed: {error}"
                    ) from error

    def _sync(self, fsync: Callable[[], None]) -> None:
        """Run ``fsync`` for every commit numbered so far; called holding the condition.

        An interrupt (a ``BaseException``) in ``fsync`` leaves its commits unsynced for
        the next caller's fsync to cover.
        """
        self._syncing = True
        first, last = self._synced + 1, self._committed
        self._done.release()
        failure: OSError | None = None
        ended = False
        try:
            fsync()
            ended = True
        except OSError as error:
            failure, ended = error, True
        finally:
            self._done.acquire()
            self._syncing = False
            if failure is not None:
                self._failed.append((first, last, failure))
            if ended:
                self._synced = last
            self._done.notify_all()
