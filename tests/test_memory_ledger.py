"""``memory_ledger()``: the SQLite ledger in this process's memory, for unit tests of tools.

The ledger's semantics are the SQLite ledger's: the core acceptance tests run on it too (the
``store`` fixture's ``memory`` runs, ``tests/conftest.py``). Here: what is its own.
"""

import re
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from safeact import (
    InDoubt,
    Outcome,
    Saga,
    State,
    Store,
    StoreError,
    Succeeded,
    get_store,
    memory_ledger,
    safe,
)


@pytest.fixture
def in_memory() -> Iterator[Store]:
    with memory_ledger() as opened:
        yield opened


def in_thread(fn: Callable[[], object]) -> object:
    """What ``fn`` returns when called in a new thread, once that thread has ended."""
    returned: list[object] = []
    worker = threading.Thread(target=lambda: returned.append(fn()))
    worker.start()
    worker.join()
    assert len(returned) == 1
    return returned[0]


def open_files() -> set[str]:
    """The regular files this process holds open."""
    found = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = fd.readlink()
        except FileNotFoundError:  # the descriptor that listed the directory
            continue
        if target.is_absolute() and target.is_file():
            found.add(str(target))
    return found


def test_it_is_never_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Claims, in two threads, an abandoned attempt and a resolve make no file anywhere."""
    monkeypatch.chdir(tmp_path)
    memory_ledger().close()  # loads what a first use loads, which reads files
    before = open_files()
    with memory_ledger() as ledger:

        @safe(ledger)
        def act(key: str) -> int:
            return 1

        act("here")
        in_thread(lambda: act("there"))
        with pytest.raises(KeyboardInterrupt):
            safe(ledger, name="stop")(interrupted)("stopped")
        ledger.resolve("stopped", happened=False, force=True)
        assert open_files() == before
    assert list(tmp_path.rglob("*")) == []


def interrupted(key: str) -> int:
    raise KeyboardInterrupt


def test_nothing_is_fsynced(in_memory: Store, fsyncs: list[str]) -> None:
    """A claim and a resolve, each durable before it returns on a file, sync nothing."""
    with pytest.raises(KeyboardInterrupt):
        safe(in_memory)(interrupted)("k")
    in_memory.resolve("k", happened=True, result=1)
    assert fsyncs == []


def test_its_location_is_no_path(in_memory: Store, tmp_path: Path) -> None:
    """``memory:`` and 8 hex digits, which opens nothing: no path, and refused as a location."""
    assert re.fullmatch(r"memory:[0-9a-f]{8}", in_memory.location)
    assert in_memory.location in repr(in_memory)
    with pytest.raises(AttributeError, match="an in-memory ledger has no file path"):
        in_memory.path  # type: ignore[attr-defined] # noqa: B018 - SqliteStore's, refused here
    with pytest.raises(ValueError, match="so pass that store"):
        get_store(in_memory.location)
    assert not (Path.cwd() / in_memory.location).exists()


def test_a_full_ledger_is_said_full_in_sqlites_words_naming_no_disk(in_memory: Store) -> None:
    """SQLite's errors name the in-memory ledger, without a file's advice (a full disk...)."""
    with pytest.raises(KeyboardInterrupt):
        safe(in_memory)(interrupted)("k")
    # White box: this thread's connection may not grow the database by another page.
    connection: sqlite3.Connection = in_memory._connection()  # type: ignore[attr-defined]
    pages = connection.execute("PRAGMA page_count").fetchone()[0]
    connection.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StoreError) as raised:
        in_memory.resolve("k", happened=True, result="x" * 100_000)
    assert str(raised.value) == f"{in_memory.location}: database or disk is full"


def test_each_ledger_is_new_empty_and_its_own() -> None:
    """A key recorded in one in-memory ledger is unknown to another, which runs it again."""
    runs: list[str] = []

    def act(key: str) -> int:
        runs.append(key)
        return len(runs)

    with memory_ledger() as one, memory_ledger() as other:
        assert safe(one)(act)("k") == Succeeded("k", 1)
        assert other.get("k") is None
        assert other.records() == []
        assert safe(other)(act)("k") == Succeeded("k", 2)
        assert one.location != other.location
    assert runs == ["k", "k"]


def test_closing_it_drops_it(tmp_path: Path) -> None:
    """Once closed, with the threads that used it ended, its database is gone from memory."""
    ledger = memory_ledger()
    uri: str = ledger._uri  # type: ignore[attr-defined] # white box: the database's name

    def tables() -> int:
        with sqlite3.connect(uri, uri=True) as db:
            count: int = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        db.close()
        return count

    in_thread(lambda: ledger.get("k"))
    assert tables() > 0
    ledger.close()
    assert tables() == 0  # a new, empty database of that name
    with pytest.raises(StoreError, match=f"{ledger.location}: the store is closed"):
        ledger.get("k")


def test_a_claim_in_one_thread_is_seen_in_another(in_memory: Store) -> None:
    """The threads of the process share it: a key recorded in one replays in another."""
    runs: list[str] = []

    @safe(in_memory)
    def act(key: str) -> int:
        runs.append(key)
        return 7

    assert in_thread(lambda: act("k")) == Succeeded("k", 7)
    record = in_memory.get("k")
    assert record is not None
    assert record.state is State.SUCCEEDED
    assert act("k") == Succeeded("k", 7, replayed=True)
    assert runs == ["k"]


def test_threads_racing_on_one_key_run_the_action_once(in_memory: Store) -> None:
    """Eight threads released together on one key: one runs it, the others replay it."""
    runs: list[str] = []
    start = threading.Barrier(8)
    outcomes: list[Outcome[int]] = []

    @safe(in_memory, wait=60)
    def act(key: str) -> int:
        runs.append(key)
        return 3

    def call() -> None:
        start.wait()
        outcomes.append(act("k"))

    workers = [threading.Thread(target=call) for _ in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert runs == ["k"]
    assert Counter(outcomes) == {
        Succeeded("k", 3): 1,
        Succeeded("k", 3, replayed=True): 7,
    }


def test_a_guarded_tool_runs_once_per_key_and_replays() -> None:
    """``safe(memory_ledger())``: each key runs once; a call again replays its result."""
    runs: list[str] = []

    @safe(memory_ledger())
    def send(key: str, to: str) -> str:
        runs.append(key)
        return f"sent to {to}"

    try:
        assert send("a", "ada") == Succeeded("a", "sent to ada")
        assert send("b", "bob") == Succeeded("b", "sent to bob")
        assert send("a", "ada") == Succeeded("a", "sent to ada", replayed=True)
        assert runs == ["a", "b"]
    finally:
        send.store.close()


def test_a_key_in_doubt_is_resolved(in_memory: Store) -> None:
    """An interrupted action is in doubt, runs no more, and replays what the resolve said."""
    runs: list[str] = []

    @safe(in_memory)
    def pay(key: str) -> int:
        runs.append(key)
        if len(runs) <= 2:
            raise KeyboardInterrupt
        return 10

    for key in ("happened", "did-not"):
        with pytest.raises(KeyboardInterrupt):
            pay(key)
        assert isinstance(pay(key), InDoubt)
    in_memory.resolve("happened", happened=True, result=5)
    in_memory.resolve("did-not", happened=False, force=True)
    assert pay("happened") == Succeeded("happened", 5, replayed=True)
    assert pay("did-not") == Succeeded("did-not", 10)
    assert runs == ["happened", "did-not", "did-not"]


def test_a_saga_refuses_a_tool_of_another_in_memory_ledger() -> None:
    """Two in-memory ledgers are two ledgers to a saga too: a tool of the other is refused."""
    with memory_ledger() as sagas, memory_ledger() as other:

        @safe(other)
        def act(key: str) -> int:
            return 1

        with pytest.raises(ValueError, match="make the tool with safe"), Saga("s", sagas) as s:
            s.step(act)
        with Saga("s2", other) as s:
            assert s.step(act) == 1


def test_its_settings_are_the_stores() -> None:
    """``lease``, ``heartbeat`` and ``host`` are taken, and checked, as ``get_store`` takes them."""
    with memory_ledger(lease=5, heartbeat=1, host="tests") as ledger:
        assert (ledger.lease, ledger.heartbeat, ledger.owner.host) == (5, 1, "tests")
    with pytest.raises(ValueError, match="heartbeat < lease"):
        memory_ledger(lease=1, heartbeat=2)


CHILD = """
import os, sys
from safeact import StoreError, memory_ledger, safe

ledger = memory_ledger()

@safe(ledger)
def act(key: str) -> int:
    return 1

act("before")
pid = os.fork()
if pid == 0:
    try:
        act("in the child")
    except StoreError as exc:
        print(exc)
        os._exit(0)
    os._exit(1)
_, status = os.waitpid(pid, 0)
print(act("after"))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_child_is_refused() -> None:
    """A forked child has a copy of the ledger, not the ledger: it may not claim in it."""
    # In a fresh interpreter: forking pytest's own process would copy its threads' locks.
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
    refusal, after = child.stdout.splitlines()
    assert "this forked child has only a copy" in refusal
    assert after == "Succeeded(key='after', value=1, replayed=False, recorded=True)"
