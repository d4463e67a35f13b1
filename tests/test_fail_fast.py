"""Fail fast and say why: an unreachable PostgreSQL, a bad location, nothing opened at import.

A ledger that cannot be opened fails within the connect timeout with one line that carries
the server's (or libpq's) own reason, without the password and without the connection
pool's retries; a tool made with a location opens it at its first use, so importing a
module of tools never opens a file or connects.
"""

import asyncio
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import safeact._open
from safeact import Saga, Store, StoreError, Succeeded, get_store, safe
from tests.conftest import postgres_or_skip

TIMEOUT = 2
"""The connect timeout the tests set: libpq's least."""
BOUND = 10.0
"""Seconds within which a failure bounded by TIMEOUT has surely come, far below the 30 s the
connection pool used to wait and the 130 s psycopg waits without a timeout."""


@pytest.fixture
def closed_port() -> int:
    """A port of 127.0.0.1 that nothing listens on: bound, then let go."""
    pytest.importorskip("psycopg")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port of 127.0.0.1 whose server takes connections and never answers a word."""
    pytest.importorskip("psycopg")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield int(server.getsockname()[1])


def one_line_without_secret(message: str) -> None:
    assert "\n" not in message
    assert "secret" not in message


def warnings_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_closed_port_fails_at_once_with_libpqs_reason(
    closed_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Nothing listening: one line saying "Connection refused", no password, nothing logged."""
    caplog.set_level(logging.WARNING)
    started = time.monotonic()
    with pytest.raises(StoreError) as raised:
        get_store(f"postgresql://app:secret@127.0.0.1:{closed_port}/x", connect_timeout=TIMEOUT)
    assert time.monotonic() - started < TIMEOUT
    message = str(raised.value)
    one_line_without_secret(message)
    assert message.startswith(f"postgresql://app:***@127.0.0.1:{closed_port}/x: cannot connect: ")
    assert "Connection refused" in message
    assert warnings_logged(caplog) == []


TIMEOUT_SETTINGS: dict[str, tuple[str, int | None, dict[str, str]]] = {
    "keyword": ("url", TIMEOUT, {}),
    "in the URL": (f"url?connect_timeout={TIMEOUT}", None, {}),
    "in libpq keywords": (f"keywords connect_timeout={TIMEOUT}", None, {}),
    "keyword over the URL": ("url?connect_timeout=60", TIMEOUT, {}),
    "PGCONNECT_TIMEOUT": ("url", None, {"PGCONNECT_TIMEOUT": str(TIMEOUT)}),
}
"""Where the connect timeout is set: the location given, the keyword, the environment."""


@pytest.mark.parametrize("setting", TIMEOUT_SETTINGS.values(), ids=TIMEOUT_SETTINGS)
def test_a_server_that_never_answers_fails_within_the_connect_timeout(
    silent_port: int,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    setting: tuple[str, int | None, dict[str, str]],
) -> None:
    """However the timeout is set, a silent server fails after it, in one line, no password."""
    location, connect_timeout, environment = setting
    caplog.set_level(logging.WARNING)
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    given = location.replace("url", f"postgresql://app:secret@127.0.0.1:{silent_port}/x")
    given = given.replace(
        "keywords", f"host=127.0.0.1 port={silent_port} user=app password=secret dbname=x"
    )
    started = time.monotonic()
    with pytest.raises(StoreError) as raised:
        get_store(given, connect_timeout=connect_timeout)
    assert TIMEOUT - 0.5 < time.monotonic() - started < BOUND
    message = str(raised.value)
    one_line_without_secret(message)
    assert f"cannot connect: no answer within {TIMEOUT} s (connect_timeout)" in message
    assert warnings_logged(caplog) == []


def test_without_a_setting_a_silent_server_fails_after_five_seconds(
    silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default connect timeout is CONNECT_TIMEOUT, 5 s, not psycopg's 130 s."""
    from safeact.postgres import CONNECT_TIMEOUT

    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"no answer within 5 s \(connect_timeout\)"):
        get_store(f"postgresql://app:secret@127.0.0.1:{silent_port}/x")
    assert CONNECT_TIMEOUT == 5
    assert CONNECT_TIMEOUT - 0.5 < time.monotonic() - started < CONNECT_TIMEOUT + BOUND


def test_a_connect_timeout_under_a_second_is_refused(closed_port: int) -> None:
    """0 would mean no timeout to libpq: connect_timeout must be 1 or more."""
    with pytest.raises(ValueError, match="connect_timeout must be 1 or more"):
        get_store(f"postgresql://127.0.0.1:{closed_port}/x", connect_timeout=0)


def test_a_missing_database_fails_with_the_servers_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server's own "database ... does not exist", on one line, the password masked."""
    from psycopg.conninfo import make_conninfo

    caplog.set_level(logging.WARNING)
    missing = f"safeact_missing_{uuid.uuid4().hex[:12]}"
    location = make_conninfo(postgres_or_skip(), dbname=missing, password="secret")  # noqa: S106 - a password to mask
    started = time.monotonic()
    with pytest.raises(StoreError) as raised:
        get_store(location, connect_timeout=TIMEOUT)
    assert time.monotonic() - started < TIMEOUT
    message = str(raised.value)
    one_line_without_secret(message)
    assert "password=***" in message
    assert f'database "{missing}" does not exist' in message
    assert warnings_logged(caplog) == []


@pytest.mark.parametrize("command", ["ls", "doubt", "migrate"])
def test_the_command_line_says_why_in_one_line(closed_port: int, command: str) -> None:
    """`safeact CMD URL` on a closed port: exit 2, one line on stderr with the reason."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "safeact",
            command,
            f"postgresql://app:secret@127.0.0.1:{closed_port}/x",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        f"safeact: error: postgresql://app:***@127.0.0.1:{closed_port}/x: cannot connect: "
    )
    assert "Connection refused" in line
    assert "secret" not in line


TOOLS = """
from safeact import safe

@safe({location!r})
def act(key: str) -> int:
    return 1

@safe({location!r})
async def act_async(key: str) -> int:
    return 2
"""
"""A module of tools on one ledger, one blocking and one awaiting."""

USE = """
import asyncio, sys

sys.path.insert(0, sys.argv[1])
import tools

print("imported", flush=True)
sys.stdin.readline()
calls = (("act", tools.act), ("act_async", lambda key: asyncio.run(tools.act_async(key))))
for name, call in calls:
    try:
        print(name, call(name), flush=True)
    except Exception as exc:
        print(name, type(exc).__name__, exc, flush=True)
print("called", flush=True)
sys.stdin.readline()
"""
"""Import the module, then call each tool once when told, and wait to be told to end."""


class Importer:
    """A fresh interpreter that imports a module of tools on ``location``, then calls them."""

    def __init__(self, location: str, where: Path) -> None:
        (where / "tools.py").write_text(TOOLS.format(location=location))
        self.process = subprocess.Popen(
            [sys.executable, "-c", USE, str(where)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().rstrip("\n")

    def tell(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()

    def calls(self) -> list[str]:
        """Tell it to call, and return what each call printed."""
        self.tell()
        said = [self.line(), self.line()]
        assert self.line() == "called"
        return said

    def end(self) -> str:
        """Tell it to end; return its stderr."""
        _, stderr = self.process.communicate("\n", timeout=60)
        assert self.process.returncode == 0, stderr
        return stderr

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate()


@pytest.mark.parametrize("backend", ["postgres", "sqlite"])
def test_a_module_of_tools_on_an_unusable_ledger_imports_and_its_first_call_says_why(
    backend: str, tmp_path: Path, closed_port: int
) -> None:
    """Tools on a closed port or in a missing directory import; each call says why, one line."""
    location = (
        f"postgresql://app:secret@127.0.0.1:{closed_port}/x"
        if backend == "postgres"
        else str(tmp_path / "missing-dir" / "agent.db")
    )
    child = Importer(location, tmp_path)
    try:
        assert child.line() == "imported"
        said = child.calls()
        stderr = child.end()
    finally:
        child.kill()
    reason = (
        f"postgresql://app:***@127.0.0.1:{closed_port}/x: cannot connect: "
        if backend == "postgres"
        else f"{location}: cannot create the ledger: "
    )
    for name, line in zip(["act", "act_async"], said, strict=True):
        assert line.startswith(f"{name} StoreError {reason}")
        assert "secret" not in line
    assert stderr == ""


def test_importing_tools_on_a_file_creates_nothing_before_the_first_call(tmp_path: Path) -> None:
    """The ledger file appears at the first call, not at the import that made the tools."""
    ledger = tmp_path / "agent.db"
    child = Importer(str(ledger), tmp_path)
    try:
        assert child.line() == "imported"
        assert list(tmp_path.glob("agent.db*")) == []
        assert child.calls() == [
            "act Succeeded(key='act', value=1, replayed=False, recorded=True)",
            "act_async Succeeded(key='act_async', value=2, replayed=False, recorded=True)",
        ]
        assert ledger.is_file()
        child.end()
    finally:
        child.kill()


def sessions_of(application: str) -> int:
    import psycopg

    with psycopg.connect(postgres_or_skip(), autocommit=True) as admin:
        (count,) = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application,)
        ).fetchone() or (0,)
    return int(count)


def test_importing_tools_on_postgres_connects_only_at_the_first_call(
    postgres_ledger: str, tmp_path: Path
) -> None:
    """No session of the importing process exists until its first call; then it has some."""
    application = f"safeact_lazy_{uuid.uuid4().hex[:12]}"
    child = Importer(f"{postgres_ledger}&application_name={application}", tmp_path)
    try:
        assert child.line() == "imported"
        assert sessions_of(application) == 0
        assert child.calls() == [
            "act Succeeded(key='act', value=1, replayed=False, recorded=True)",
            "act_async Succeeded(key='act_async', value=2, replayed=False, recorded=True)",
        ]
        assert sessions_of(application) > 0
        child.end()
    finally:
        child.kill()


def seven(key: str) -> int:
    return 7


async def seven_async(key: str) -> int:
    return 7


@pytest.fixture
def stores_opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Store]]:
    """Every store a tool opens from its location, closed at the end."""
    opened: list[Store] = []
    real = safeact._open.get_store

    def counted(location: str | os.PathLike[str]) -> Store:
        opened.append(real(location))
        return opened[-1]

    monkeypatch.setattr(safeact._open, "get_store", counted)
    yield opened
    for store in opened:
        store.close()


def test_threads_calling_a_new_tool_at_once_open_one_store(
    any_ledger: str, stores_opened: list[Store]
) -> None:
    """Eight threads make a new tool's first calls together: one store, used by all."""
    tool = safe(any_ledger)(seven)
    start = threading.Barrier(8)
    seen: dict[int, tuple[object, Store]] = {}

    def call(n: int) -> None:
        start.wait()
        seen[n] = (tool(f"k{n}"), tool.store)

    threads = [threading.Thread(target=call, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(stores_opened) == 1
    assert seen == {n: (Succeeded(f"k{n}", 7), stores_opened[0]) for n in range(8)}


def test_tasks_awaiting_a_new_async_tool_at_once_open_one_store(
    any_ledger: str, stores_opened: list[Store]
) -> None:
    """Eight tasks make a new async tool's first calls together: one store, used by all."""
    tool = safe(any_ledger)(seven_async)

    async def calls() -> list[object]:
        return list(await asyncio.gather(*(tool(f"k{n}") for n in range(8))))

    assert asyncio.run(calls()) == [Succeeded(f"k{n}", 7) for n in range(8)]
    assert len(stores_opened) == 1
    assert tool.store is stores_opened[0]


def test_a_ledger_that_could_not_be_opened_is_tried_again_at_the_next_call(
    tmp_path: Path,
) -> None:
    """A failed open is not kept: once the directory exists, the next call opens the ledger."""
    directory = tmp_path / "later"
    tool = safe(directory / "agent.db")(seven)
    with pytest.raises(StoreError, match="cannot create the ledger"):
        tool("k")
    directory.mkdir()
    assert tool("k") == Succeeded("k", 7)
    tool.store.close()


def test_making_a_tool_and_looking_at_it_opens_nothing(tmp_path: Path) -> None:
    """Name, repr, signature and the type checks of a new tool leave the ledger unopened."""
    ledger = tmp_path / "agent.db"
    tool = safe(ledger)(seven)
    assert tool.name == "tests.test_fail_fast.seven"
    assert (
        repr(tool) == f"<SafeTool tests.test_fail_fast.seven on <ledger {ledger}, not opened yet>>"
    )
    assert list(tmp_path.iterdir()) == []
    assert tool("k") == Succeeded("k", 7)
    assert repr(tool) == f"<SafeTool tests.test_fail_fast.seven on SqliteStore('{ledger}')>"
    tool.store.close()


def test_a_store_given_open_is_the_tools_store(store: Store) -> None:
    """A Store passed to safe() is used as it is, by every tool made with it."""
    guard = safe(store)
    assert guard(seven).store is store
    assert guard(seven_async).store is store


def test_the_tools_of_one_decorator_share_one_store(ledger: Path) -> None:
    """Tools made by one safe(location) open one store between them, at the first use."""
    guard = safe(ledger)
    first, second = guard(seven), guard(seven_async)
    assert first("k") == Succeeded("k", 7)
    assert second.store is first.store
    first.store.close()


def test_a_postgres_tools_repr_never_shows_the_password(closed_port: int) -> None:
    """Before it is opened, a tool names its PostgreSQL ledger without the password."""
    tool = safe(f"postgresql://app:secret@127.0.0.1:{closed_port}/x")(seven)
    assert repr(tool) == (
        "<SafeTool tests.test_fail_fast.seven on "
        f"<ledger postgresql://app:***@127.0.0.1:{closed_port}/x, not opened yet>>"
    )


def pay(key: str, amount: int) -> int:
    return amount


def test_a_relative_ledger_path_names_the_file_of_the_directory_the_tool_was_made_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chdir between making a tool and its first call does not move its ledger."""
    made_in, later = tmp_path / "made-in", tmp_path / "later"
    made_in.mkdir()
    later.mkdir()
    monkeypatch.chdir(made_in)
    with get_store("agent.db") as store:
        safe(store, name="pay")(pay)("order-42", 5)
    tool = safe("agent.db", name="pay")(pay)
    monkeypatch.chdir(later)
    outcome = tool("order-42", 5)
    tool.store.close()
    assert isinstance(outcome, Succeeded)
    assert outcome.replayed
    assert list(later.iterdir()) == []


def test_a_thread_after_a_chdir_uses_the_ledger_the_store_was_opened_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store opened on a relative path connects each new thread to that same file."""
    made_in, later = tmp_path / "made-in", tmp_path / "later"
    made_in.mkdir()
    later.mkdir()
    monkeypatch.chdir(made_in)
    with get_store("agent.db") as store:
        paying = safe(store, name="pay")(pay)
        paying("order-42", 5)
        monkeypatch.chdir(later)
        outcomes: list[object] = []
        worker = threading.Thread(target=lambda: outcomes.append(paying("order-42", 5)))
        worker.start()
        worker.join()
    (outcome,) = outcomes
    assert isinstance(outcome, Succeeded)
    assert outcome.replayed
    assert list(later.iterdir()) == []


FORK_CHILD = """
import os, signal, sys, threading
from safeact._open import StoreHandle

handle = StoreHandle(sys.argv[1])
handle._lock.acquire()  # another thread is opening the store when the process forks
pid = os.fork()
if pid == 0:
    signal.alarm(20)  # a deadlocked child dies of SIGALRM instead of hanging the test
    handle.open().close()
    os._exit(0)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def test_a_child_forked_while_its_parent_was_opening_the_store_can_open_it(
    tmp_path: Path,
) -> None:
    """The handle's lock, held by another thread at fork, does not lock the child out."""
    result = subprocess.run(
        [sys.executable, "-c", FORK_CHILD, str(tmp_path / "agent.db")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (result.returncode, result.stderr) == (0, "")


def test_an_async_saga_step_opens_its_tools_ledger_off_the_event_loop(
    any_ledger: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool held by location, first used as an async saga's step, opens in a worker thread."""
    opened_in: list[threading.Thread] = []
    real = safeact._open.get_store

    def watched(location: str | os.PathLike[str]) -> Store:
        opened_in.append(threading.current_thread())
        return real(location)

    monkeypatch.setattr(safeact._open, "get_store", watched)
    tool = safe(any_ledger, name="seven")(seven_async)

    async def saga() -> object:
        async with Saga("order-1", any_ledger) as run:
            return await run.step(tool)

    try:
        assert asyncio.run(saga()) == 7
        assert opened_in != []
        assert threading.main_thread() not in opened_in
    finally:
        tool.store.close()
