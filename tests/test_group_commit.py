"""Group commit: concurrent claims share fsyncs, and no action runs before its claim is synced."""

import os
import signal
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

    def __init__(self, expected: int, fsync: Callable[[], None]) -> None:
        super().__init__(fsync)
        self._expected, self._count = expected, 0
        self._all_in = threading.Event()

    def durable(self) -> None:
        with self._done:
            self._count += 1
            if self._count == self._expected:
                self._all_in.set()
        super().durable()

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
    arrivals = _Arrivals(CALLERS, store._sync_wal)
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


FAILED = (
    "an fsync of the ledger failed, so this commit may not be on disk: [Errno 5] "
    "Input/output error; open the store again once the disk is sound"
)


class _Fsyncs:
    """An fsync for a ``GroupCommit``: each call takes the next of ``plan``'s behaviours.

    "hold" waits until ``release`` is set; "fail" raises EIO; "ok" returns. Every call is
    recorded with the thread it ran on.
    """

    def __init__(self, *plan: str) -> None:
        self.plan = list(plan)
        self.threads: list[str] = []
        self.holding, self.release = threading.Event(), threading.Event()

    def __call__(self) -> None:
        self.threads.append(threading.current_thread().name)
        step = self.plan.pop(0)
        if step == "hold":
            self.holding.set()
            assert self.release.wait(30)
        elif step == "fail":
            raise OSError(5, "Input/output error")


def _durable(group: GroupCommit, results: list[str], name: str) -> threading.Thread:
    """Start a thread that commits as ``name`` and records how ``durable`` ended for it."""

    def caller() -> None:
        try:
            group.durable()
        except OSError as exc:
            results.append(f"{name}: {exc}")
        else:
            results.append(f"{name}: durable")

    thread = threading.Thread(target=caller, name=name)
    thread.start()
    return thread


class _Counted(GroupCommit):
    """A ``GroupCommit`` that tells ``_numbered`` of each commit it numbers.

    The group itself wakes nobody when a commit is numbered (no waiter needs it); a test
    that must know how many have been needs this.
    """

    __slots__ = ("_numbered",)

    @property  # the slot of the base, observed
    def _committed(self) -> int:
        return self._numbered

    @_committed.setter
    def _committed(self, value: int) -> None:
        self._numbered = value
        with self._done:  # held already inside durable (the lock is re-entrant); not in init
            self._done.notify_all()


def _numbered(group: GroupCommit, commits: int) -> None:
    """Wait until ``commits`` commits have asked to be made durable; fail after 30 s."""
    with group._done:
        assert group._done.wait_for(lambda: group._committed >= commits, timeout=30), (
            f"{group._committed} commits asked to be made durable, not {commits}"
        )


def test_commits_made_while_an_fsync_runs_share_the_next_one() -> None:
    """Three commits behind a running fsync cost one more fsync, not three."""
    fsyncs = _Fsyncs("hold", "ok")
    group = _Counted(fsyncs)
    results: list[str] = []
    first = _durable(group, results, "first")
    assert fsyncs.holding.wait(30)
    later = [_durable(group, results, name) for name in ("a", "b", "c")]
    _numbered(group, 4)
    fsyncs.release.set()
    for thread in [first, *later]:
        thread.join()
    assert sorted(results) == ["a: durable", "b: durable", "c: durable", "first: durable"]
    # Callers other than the main thread lead: the first ran the first fsync, one of the
    # three behind it the second, and no thread of the store's own was started.
    assert (fsyncs.threads[0], fsyncs.threads[1] in {"a", "b", "c"}) == ("first", True)
    assert len(fsyncs.threads) == 2
    assert group._syncer is None


def test_the_main_thread_never_runs_an_fsync_and_shares_one_with_the_callers_behind_it() -> None:
    """A Ctrl-C could cut the main thread's fsync round short: the store's thread runs it.

    The main thread's commit waits on that thread's held fsync; a caller's commit made
    meanwhile is covered by the next (run by whichever of the two gets to it first).
    """
    fsyncs = _Fsyncs("hold", "ok")
    group = _Counted(fsyncs)
    assert threading.current_thread() is threading.main_thread()
    results: list[str] = []

    def release_once_both_committed() -> None:
        assert fsyncs.holding.wait(30)
        behind = _durable(group, results, "behind")
        _numbered(group, 2)
        fsyncs.release.set()
        behind.join()

    helper = threading.Thread(target=release_once_both_committed)
    helper.start()
    group.durable()
    helper.join()
    assert (results, fsyncs.threads[0], len(fsyncs.threads)) == (
        ["behind: durable"],
        "safeact-group-commit",
        2,
    )


def test_a_failed_fsync_fails_every_commit_from_then_on() -> None:
    """After a failed fsync the kernel may report the next one clean: every commit fails.

    Those waiting for it, and those that come later, which could otherwise be told durable
    by a clean fsync though written before the failure. No fsync is tried again.
    """
    fsyncs = _Fsyncs("hold", "fail")
    group = _Counted(fsyncs)
    results: list[str] = []
    first = _durable(group, results, "first")
    assert fsyncs.holding.wait(30)
    waiting = [_durable(group, results, name) for name in ("a", "b")]
    _numbered(group, 3)
    fsyncs.release.set()
    for thread in [first, *waiting]:
        thread.join()
    _durable(group, results, "later").join()
    assert sorted(results) == [
        f"a: {FAILED}",
        f"b: {FAILED}",
        "first: durable",
        f"later: {FAILED}",
    ]
    assert len(fsyncs.threads) == 2


def test_an_interrupted_caller_stops_waiting_and_the_others_go_on() -> None:
    """A signal (Ctrl-C) in a waiting caller ends its wait; the fsyncs and the rest go on."""
    fsyncs = _Fsyncs("hold", "ok")
    group = _Counted(fsyncs)
    main = threading.main_thread().ident
    assert main == threading.get_ident()

    interrupted = threading.Event()

    def interrupt(signum: int, frame: object) -> None:
        if not interrupted.is_set():
            interrupted.set()
            raise KeyboardInterrupt

    def signal_main_once_held() -> None:
        assert fsyncs.holding.wait(30)
        # A signal that lands just before the main thread blocks in its wait is handled
        # only when it wakes; sent again, one lands in the wait itself (the handler raises once).
        while not interrupted.wait(0.01):
            signal.pthread_kill(main, signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        sender = threading.Thread(target=signal_main_once_held)
        sender.start()
        with pytest.raises(KeyboardInterrupt):
            group.durable()
        sender.join()
    finally:
        signal.signal(signal.SIGUSR1, previous)
    results: list[str] = []
    later = _durable(group, results, "later")
    _numbered(group, 2)
    fsyncs.release.set()
    later.join()
    assert results == ["later: durable"]


def test_a_ctrl_c_before_the_syncer_starts_leaves_no_later_commit_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Interrupted as it starts the fsync thread, a commit leaves the next one to start it."""
    fsyncs = _Fsyncs("ok")
    group = _Counted(fsyncs)
    start = threading.Thread.start

    def interrupted(thread: threading.Thread) -> None:
        if thread.name == "safeact-group-commit":
            monkeypatch.undo()  # this once
            raise KeyboardInterrupt
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        group.durable()
    # The later commit is the main thread's too (another thread would run its own fsync);
    # were it left waiting for ever, a signal after 10 s ends the wait and fails the test.
    main = threading.get_ident()

    def waited_too_long(signum: int, frame: object) -> None:
        raise AssertionError("the later commit was left waiting for a syncer never started")

    previous = signal.signal(signal.SIGUSR1, waited_too_long)
    watchdog = threading.Timer(10, signal.pthread_kill, (main, signal.SIGUSR1))
    watchdog.start()
    try:
        group.durable()
    finally:
        watchdog.cancel()
        signal.signal(signal.SIGUSR1, previous)
    assert fsyncs.threads == ["safeact-group-commit"]


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
    with pytest.raises(StoreError, match="open the store again once the disk is sound"):
        act("k2")  # whatever the next fsync would say
    record = store.get("k")
    store.close()
    assert ran == []
    assert record is not None
    assert (record.state, record.doubt_reason) == (State.IN_DOUBT, DoubtReason.INTERRUPTED)
    monkeypatch.undo()
    with SqliteStore(ledger) as reopened:
        assert safe(reopened, name="unsynced")(act.__wrapped__)("k3") == Succeeded("k3", 1)
    assert ran == ["k3"]


def _synced_paths(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every file fsynced from Python from now on, by its full path."""
    synced: list[Path] = []
    fsync = os.fsync

    def recorded(fd: int) -> None:
        fsync(fd)
        synced.append(Path(f"/proc/self/fd/{fd}").readlink())

    monkeypatch.setattr(os, "fsync", recorded)
    return synced


def test_the_wal_synced_is_the_ledgers_after_a_change_of_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger opened by a relative path: a later chdir does not point the fsync elsewhere."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    monkeypatch.chdir(tmp_path / "a")
    with SqliteStore("ledger.db") as store, SqliteStore(tmp_path / "b" / "ledger.db") as other:
        other._claim("o", "t", "h", attempt_id="o", previous=None)  # b has a WAL of that name
        monkeypatch.chdir(tmp_path / "b")
        synced = _synced_paths(monkeypatch)
        store._claim("k", "t", "h", attempt_id="a", previous=None)
    assert synced == [(tmp_path / "a" / "ledger.db-wal").resolve()]


def test_the_wal_synced_is_the_linked_files_when_the_path_is_a_symlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite writes the WAL beside the file a symlink names; that is the one fsynced."""
    (tmp_path / "real").mkdir()
    SqliteStore(tmp_path / "real" / "ledger.db").close()
    link = tmp_path / "link.db"
    link.symlink_to(tmp_path / "real" / "ledger.db")
    with SqliteStore(link) as store:
        synced = _synced_paths(monkeypatch)
        assert store._claim("k", "t", "h", attempt_id="a", previous=None) is not None
    assert synced == [(tmp_path / "real" / "ledger.db-wal").resolve()]


def test_the_main_thread_cannot_release_a_hold_of_another_threads() -> None:
    """The lock the committers share is owned: a release by a thread not holding it fails.

    ``Condition.wait`` takes its lock back at its end. With a plain ``Lock``, a Ctrl-C that
    lands there leaves the main thread without the lock, and leaving ``durable``'s block
    then releases the hold of whichever thread has it (a leader in its round's
    bookkeeping): two threads inside at once, a ``notify_all`` on a lock nobody holds. An
    ``RLock`` takes itself back in a wait without being interrupted, and refuses this.
    """
    group = GroupCommit(lambda: None)
    held, leave = threading.Event(), threading.Event()

    def leader() -> None:
        with group._done:
            held.set()
            assert leave.wait(30)

    holder = threading.Thread(target=leader)
    holder.start()
    assert held.wait(30)
    try:
        with pytest.raises(RuntimeError, match="un-acquired lock"):
            group._done.release()
    finally:
        leave.set()
        holder.join()
