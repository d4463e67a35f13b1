"""Group commit: concurrent claims share fsyncs, and no action runs before its claim is synced."""

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from safeact import DoubtReason, State, StoreError, Succeeded, safe
from safeact._group_commit import GroupCommit
from safeact._sqlite import SqliteStore

CALLERS = 8


class _Arrivals(GroupCommit):
    """A ``GroupCommit`` that signals once ``expected`` commits have asked to be made durable."""

    __slots__ = ("_all_in", "_count", "_expected")

    def __init__(self, expected: int) -> None:
        super().__init__()
        self._expected, self._count = expected, 0
        self._all_in = threading.Event()

    def durable(self, fsync: Callable[[], None]) -> None:
        with self._done:
            self._count += 1
            if self._count == self._expected:
                self._all_in.set()
        super().durable(fsync)

    def wait_for_all(self) -> None:
        assert self._all_in.wait(30), "the callers never all committed"


def _wal(fd: int) -> bool:
    return Path(f"/proc/self/fd/{fd}").readlink().name.endswith("-wal")


def test_concurrent_claims_share_fsyncs_and_none_acts_before_its_claim_is_synced(
    ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8 threads claim at once: fewer than 8 fsyncs, and each action runs after one covering it.

    The first fsync is held until every caller has committed, so the others must share the
    next one. An fsync covers the claims committed when it starts; the action checks that its
    key was among them.
    """
    store = SqliteStore(ledger)
    arrivals = _Arrivals(CALLERS)
    store._group = arrivals
    committed = sqlite3.connect(ledger, check_same_thread=False)
    synced: set[str] = set()
    syncs = 0
    fsync = os.fsync

    def counted(fd: int) -> None:
        nonlocal syncs
        if not _wal(fd):
            fsync(fd)
            return
        if syncs == 0:
            arrivals.wait_for_all()
        covered = {
            key for (key,) in committed.execute("SELECT key FROM calls WHERE state = 'attempting'")
        }
        fsync(fd)
        syncs += 1
        synced.update(covered)

    monkeypatch.setattr(os, "fsync", counted)
    early: list[str] = []

    @safe(store, name="grouped")
    def act(key: str) -> int:
        if key not in synced:
            early.append(key)
        return 1

    start = threading.Barrier(CALLERS)
    outcomes: list[object] = []

    def caller(n: int) -> None:
        start.wait()
        outcomes.append(act(f"k{n}"))

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(CALLERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    committed.close()
    store.close()
    assert [type(outcome) for outcome in outcomes] == [Succeeded] * CALLERS
    assert early == []
    assert 1 <= syncs < CALLERS


def test_a_commit_after_a_failed_fsync_is_synced_afresh() -> None:
    """A failed fsync fails its own commits only: the next commit gets an fsync of its own."""
    group = GroupCommit()

    def broken() -> None:
        raise OSError(5, "Input/output error")

    with pytest.raises(OSError, match="Input/output error"):
        group.durable(broken)
    synced: list[str] = []
    group.durable(lambda: synced.append("synced"))
    assert synced == ["synced"]


def test_every_commit_a_failed_fsync_covered_fails() -> None:
    """Commits waiting for the next fsync all fail when it fails, not only its caller.

    After a failed fsync the kernel may have dropped the pages and report the next fsync
    clean, so a waiter must not retry and succeed.
    """
    group = GroupCommit()
    first_syncing, finish_first = threading.Event(), threading.Event()
    results: list[str] = []

    def slow() -> None:
        first_syncing.set()
        assert finish_first.wait(30)

    def broken() -> None:
        raise OSError(5, "Input/output error")

    def caller(name: str, fsync: Callable[[], None]) -> None:
        try:
            group.durable(fsync)
        except OSError as exc:
            results.append(f"{name}: {exc}")
        else:
            results.append(f"{name}: durable")

    first = threading.Thread(target=caller, args=("first", slow))
    first.start()
    assert first_syncing.wait(30)
    later = [threading.Thread(target=caller, args=(name, broken)) for name in ("a", "b")]
    for thread in later:
        thread.start()
    with group._done:  # both commit while the first fsync runs, so one fsync covers both
        while group._committed < 3:
            group._done.wait(0.01)
    finish_first.set()
    for thread in [first, *later]:
        thread.join()
    assert results[0] == "first: durable"
    failed = "the fsync that was to make this commit durable failed: [Errno 5] Input/output error"
    assert sorted(results[1:]) == [f"a: {failed}", f"b: {failed}"]


def test_an_interrupted_fsync_leaves_its_commits_to_the_next_one() -> None:
    """An interrupt in the fsync proves nothing synced: a commit it covered syncs again."""
    group = GroupCommit()
    first_syncing, finish_first = threading.Event(), threading.Event()
    fsyncs: list[str] = []

    def slow() -> None:
        first_syncing.set()
        assert finish_first.wait(30)

    def interrupted_once() -> None:
        fsyncs.append("interrupted" if not fsyncs else "synced")
        if fsyncs == ["interrupted"]:
            raise KeyboardInterrupt

    def caller(fsync: Callable[[], None]) -> None:
        with contextlib.suppress(KeyboardInterrupt):
            group.durable(fsync)

    first = threading.Thread(target=caller, args=(slow,))
    first.start()
    assert first_syncing.wait(30)
    later = [threading.Thread(target=caller, args=(interrupted_once,)) for _ in range(2)]
    for thread in later:
        thread.start()
    with group._done:  # both commit while the first fsync runs, so one fsync covers both
        while group._committed < 3:
            group._done.wait(0.01)
    finish_first.set()
    for thread in [first, *later]:
        thread.join()
    assert fsyncs == ["interrupted", "synced"]


def test_a_claim_whose_fsync_fails_is_an_error_and_leaves_the_key_interrupted(
    ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim is committed but not durable: StoreError, no action, the key in doubt."""
    store = SqliteStore(ledger)
    fsync = os.fsync

    def failing(fd: int) -> None:
        if _wal(fd):
            raise OSError(5, "Input/output error")
        fsync(fd)

    monkeypatch.setattr(os, "fsync", failing)
    ran: list[str] = []

    @safe(store, name="unsynced")
    def act(key: str) -> int:
        ran.append(key)
        return 1

    with pytest.raises(StoreError, match=r"may not be on disk: .*Input/output error"):
        act("k")
    record = store.get("k")
    store.close()
    assert ran == []
    assert record is not None
    assert (record.state, record.doubt_reason) == (State.IN_DOUBT, DoubtReason.INTERRUPTED)
