"""A key is released only on proof that its attempt's owner is finished, never on suspicion.

Real processes (tests/release_child.py) and a real counter of the side effect: an owner frozen
by SIGSTOP or holding the GIL past its lease, an owner whose PostgreSQL session was cut, and a
child forked inside the action are all still able to act, so neither a probe's "not happened"
nor an operator's resolve may release their key; only ``force`` may, and says who asserted it.
"""

import contextlib
import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Self

import pytest

from safeact import DoubtReason, NotProvenError, SafeError, State, Store, Why, get_store
from tests.actions import count_effects

CHILD = Path(__file__).with_name("release_child.py")
KEY = "refund-8842"
RECEIPT = {"to": "a@example.com", "amount": 50}
FAST_LEASE = ("--lease", "1", "--heartbeat", "0.3")
DEADLINE = 10.0
"""Seconds any one wait of these tests may take before it fails."""


class Child:
    """A running tests/release_child.py: its stdout lines as they come, its stdin to go on."""

    def __init__(
        self,
        ledger: str,
        effects: Path,
        stderr: IO[str],
        *options: str,
        prefix: Sequence[str] = (),
    ) -> None:
        self.process = subprocess.Popen(
            [*prefix, sys.executable, str(CHILD), ledger, str(effects), KEY, *options],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        self._stderr = stderr
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def expect(self, line: str) -> None:
        """Wait (boundedly) for the child to print ``line`` next."""
        got = self.next_line()
        assert got == line, f"expected {line!r}, got {got!r}; stderr: {self.stderr()}"

    def next_line(self) -> str:
        """Wait (boundedly) for the next line the child prints."""
        try:
            return self._lines.get(timeout=DEADLINE) or "<the end>"
        except queue.Empty:
            return "<nothing>"

    def go(self) -> None:
        """Let the child go on past its pause."""
        assert self.process.stdin is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()

    def freeze(self, ledger: str) -> None:
        """SIGSTOP the child, outside any transaction on ``ledger`` (its heartbeat's)."""
        stat = Path(f"/proc/{self.pid}/stat")
        for _ in range(20):
            os.kill(self.pid, signal.SIGSTOP)
            until(lambda: stat.read_text().rsplit(")", 1)[1].split()[0] == "T", "a stop")
            if not key_is_locked(ledger):
                return
            os.kill(self.pid, signal.SIGCONT)  # frozen inside a write: try another moment
            time.sleep(0.05)
        pytest.fail("the child was always inside a transaction when stopped")

    def thaw(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def outcome(self) -> dict[str, object]:
        """Wait for the child to end; return the outcome it printed last."""
        self.process.wait(timeout=DEADLINE)
        lines = []
        while (line := self._lines.get(timeout=DEADLINE)) is not None:
            lines.append(line)
        assert self.process.returncode == 0, self.stderr()
        assert lines, self.stderr()
        decoded: dict[str, object] = json.loads(lines[-1])
        return decoded

    def stderr(self) -> str:
        self._stderr.flush()
        return Path(self._stderr.name).read_text()

    def end(self) -> None:
        """Whatever state it is in (stopped too), make sure the child is gone."""
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGCONT)
            self.process.kill()
        self.process.wait(timeout=DEADLINE)
        self._reader.join(timeout=DEADLINE)
        for stream in (self.process.stdin, self.process.stdout, self._stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


class Children:
    """Starts children; the fixture ends every one of them, pass or fail."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self.started: list[Child] = []

    def start(self, ledger: str, effects: Path, *options: str, prefix: Sequence[str] = ()) -> Child:
        """Start a child; ``prefix`` is a command that runs it (in namespaces of its own)."""
        stderr = (self._directory / f"child-{len(self.started)}.err").open("w+")
        child = Child(ledger, effects, stderr, *options, prefix=prefix)
        self.started.append(child)
        return child

    def run(self, ledger: str, effects: Path, *options: str) -> dict[str, object]:
        """Run a child to its end; return its outcome."""
        return self.start(ledger, effects, *options).outcome()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for child in self.started:
            child.end()


@pytest.fixture
def children(tmp_path: Path) -> Iterator[Children]:
    with Children(tmp_path) as started:
        yield started


def until(condition: object, what: str) -> None:
    """Poll ``condition()`` until it holds; fail after DEADLINE seconds."""
    assert callable(condition)
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def key_is_locked(ledger: str) -> bool:
    """Whether a transaction holds the ledger's write lock (SQLite) or KEY's row (PostgreSQL)."""
    if ledger.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(ledger) as db:
            db.execute("SET lock_timeout = '200ms'")
            try:
                db.execute("SELECT 1 FROM calls WHERE key = %s FOR UPDATE", (KEY,))
            except psycopg.errors.LockNotAvailable:
                return True
            return False
    lite = sqlite3.connect(ledger, timeout=0.2, isolation_level=None)
    try:
        lite.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return True
    else:
        lite.execute("ROLLBACK")
        return False
    finally:
        lite.close()


def lease_runs_out(ledger: str) -> None:
    """Wait until KEY is claimed and its lease has run out."""
    with get_store(ledger) as store:

        def expired() -> bool:
            record = store.get(KEY)
            return record is not None and record.lease_until <= datetime.now(UTC)

        until(expired, "the owner's lease to run out")


def whys(store: Store) -> list[Why]:
    return [event.why for event in store.history(KEY)]


def start_frozen_owner(children: Children, ledger: str, effects: Path) -> Child:
    """An owner that claimed KEY and was SIGSTOPped before its effect, past its lease."""
    owner = children.start(ledger, effects, "--pause", *FAST_LEASE)
    owner.expect("paused")
    owner.freeze(ledger)
    lease_runs_out(ledger)
    return owner


def thaw_and_finish(owner: Child) -> dict[str, object]:
    owner.thaw()
    owner.go()
    return owner.outcome()


def test_a_probe_does_not_release_the_key_of_a_frozen_owner(
    any_ledger: str, tmp_path: Path, children: Children
) -> None:
    """A SIGSTOPped owner past its lease: a probe's "not happened" is withheld; one effect."""
    effects = tmp_path / "effects"
    owner = start_frozen_owner(children, any_ledger, effects)
    outcome = children.run(any_ledger, effects, "--probe")
    assert (outcome["kind"], outcome["reason"]) == ("InDoubt", "lease_expired")
    assert isinstance(outcome["note"], str)
    assert outcome["note"]
    with get_store(any_ledger) as store:
        record = store.get(KEY)
        assert record is not None
        assert record.state is State.IN_DOUBT
        assert Why.RELEASE_WITHHELD in whys(store)
        assert Why.RECONCILED not in whys(store)
    assert count_effects(effects, KEY) == 0
    assert thaw_and_finish(owner) == {
        "kind": "Succeeded",
        "replayed": False,
        "recorded": True,
        "value": RECEIPT,
    }
    with get_store(any_ledger) as store:
        record = store.get(KEY)
        assert record is not None
        assert record.state is State.SUCCEEDED
        assert store.late_completions(KEY) == []
    assert count_effects(effects, KEY) == 1


def test_a_probe_does_not_release_the_key_of_an_owner_holding_the_gil(
    any_ledger: str, tmp_path: Path, children: Children
) -> None:
    """An owner stuck in one C call past its lease (no heartbeat): "not happened" is withheld."""
    effects = tmp_path / "effects"
    caller = children.start(any_ledger, effects, "--probe", "--armed")
    caller.expect("armed")
    owner = children.start(any_ledger, effects, "--hog", "4", *FAST_LEASE)
    owner.expect("hogging")
    hogging_since = time.monotonic()
    lease_runs_out(any_ledger)
    caller.go()
    outcome = caller.outcome()
    assert time.monotonic() - hogging_since < 3.5, "the caller decided after the owner's hog"
    assert owner.process.poll() is None
    assert (outcome["kind"], outcome["reason"]) == ("InDoubt", "lease_expired")
    assert outcome["note"]
    with get_store(any_ledger) as store:
        assert Why.RELEASE_WITHHELD in whys(store)
    assert owner.outcome() == {
        "kind": "Succeeded",
        "replayed": False,
        "recorded": True,
        "value": RECEIPT,
    }
    with get_store(any_ledger) as store:
        record = store.get(KEY)
        assert record is not None
        assert record.state is State.SUCCEEDED
        assert Why.RECONCILED not in whys(store)
    assert count_effects(effects, KEY) == 1


def test_resolve_not_happened_refuses_an_owner_alive_on_this_host(
    any_ledger: str, tmp_path: Path, children: Children
) -> None:
    """resolve(happened=False) on a frozen owner's key raises NotProvenError and changes nothing."""
    effects = tmp_path / "effects"
    owner = start_frozen_owner(children, any_ledger, effects)
    with get_store(any_ledger) as store:
        before, history = store.get(KEY), store.history(KEY)
        assert before is not None
        with pytest.raises(NotProvenError):
            store.resolve(KEY, happened=False, attempt_id=before.attempt_id, note="no payment")
        assert (store.get(KEY), store.history(KEY)) == (before, history)
    assert thaw_and_finish(owner)["kind"] == "Succeeded"
    assert count_effects(effects, KEY) == 1


def test_forced_resolve_releases_a_live_owners_key_and_says_who_asserted_it(
    any_ledger: str, tmp_path: Path, children: Children
) -> None:
    """resolve(happened=False, force=True) releases; the history says forced_release by operator."""
    effects = tmp_path / "effects"
    owner = start_frozen_owner(children, any_ledger, effects)
    with get_store(any_ledger) as store:
        released = store.resolve(KEY, happened=False, force=True, note="the bank has nothing")
        assert released.state is State.RELEASED
        last = store.history(KEY)[-1]
        assert (last.to_state, last.why, last.by) == (
            State.RELEASED,
            Why.FORCED_RELEASE,
            "operator",
        )
        assert last.note is not None
        assert "the bank has nothing" in last.note
    assert thaw_and_finish(owner)["kind"] == "Succeeded"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "safeact", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_cli_resolve_not_happened_refuses_a_live_owner_and_mentions_force(
    any_ledger: str, tmp_path: Path, children: Children
) -> None:
    """`safeact resolve --not-happened` on a frozen owner's key exits non-zero, naming --force."""
    effects = tmp_path / "effects"
    owner = start_frozen_owner(children, any_ledger, effects)
    with get_store(any_ledger) as store:
        before, history = store.get(KEY), store.history(KEY)
        refused = cli("resolve", any_ledger, KEY, "--not-happened")
        assert refused.returncode != 0
        assert "--force" in refused.stderr
        assert "Traceback" not in refused.stderr
        assert (store.get(KEY), store.history(KEY)) == (before, history)
    assert thaw_and_finish(owner)["kind"] == "Succeeded"
    assert count_effects(effects, KEY) == 1


def test_cli_resolve_not_happened_with_force_releases_a_live_owners_key(
    any_ledger: str, tmp_path: Path, children: Children
) -> None:
    """`safeact resolve --not-happened --force` releases; the history says forced_release."""
    effects = tmp_path / "effects"
    owner = start_frozen_owner(children, any_ledger, effects)
    forced = cli("resolve", any_ledger, KEY, "--not-happened", "--force", "--note", "checked")
    assert forced.returncode == 0, forced.stderr
    with get_store(any_ledger) as store:
        record = store.get(KEY)
        assert record is not None
        assert record.state is State.RELEASED
        last = store.history(KEY)[-1]
        assert (last.to_state, last.why, last.by) == (
            State.RELEASED,
            Why.FORCED_RELEASE,
            "operator",
        )
    assert thaw_and_finish(owner)["kind"] == "Succeeded"


def left_with_result_not_stored(
    children: Children, ledger: str, effects: Path
) -> dict[str, object]:
    """Run the action whose result cannot be stored; return what its caller got."""
    return children.run(ledger, effects, "--unstorable")


@pytest.mark.parametrize("force", [False, True], ids=["plain", "forced"])
def test_a_key_whose_action_ran_cannot_be_released_even_by_force(
    any_ledger: str, tmp_path: Path, children: Children, force: bool
) -> None:
    """IN_DOUBT result_not_stored: the action ran, so resolve(happened=False) raises, forced too."""
    effects = tmp_path / "effects"
    outcome = left_with_result_not_stored(children, any_ledger, effects)
    assert (outcome["kind"], outcome["recorded"]) == ("Succeeded", False)
    with get_store(any_ledger) as store:
        before, history = store.get(KEY), store.history(KEY)
        assert before is not None
        assert (before.state, before.doubt_reason) == (
            State.IN_DOUBT,
            DoubtReason.RESULT_NOT_STORED,
        )
        with pytest.raises(SafeError):
            store.resolve(KEY, happened=False, force=force)
        assert (store.get(KEY), store.history(KEY)) == (before, history)
    again = children.run(any_ledger, effects, "--unstorable")
    assert again["kind"] == "InDoubt"
    assert count_effects(effects, KEY) == 1


def test_a_key_whose_action_ran_can_be_resolved_as_happened(
    any_ledger: str, tmp_path: Path, children: Children
) -> None:
    """IN_DOUBT result_not_stored: resolve(happened=True, result=...) closes it; calls replay."""
    effects = tmp_path / "effects"
    left_with_result_not_stored(children, any_ledger, effects)
    with get_store(any_ledger) as store:
        resolved = store.resolve(KEY, happened=True, result=7, note="it returned 7")
        assert resolved.state is State.SUCCEEDED
    again = children.run(any_ledger, effects, "--unstorable")
    assert again == {"kind": "Succeeded", "replayed": True, "recorded": True, "value": 7}
    assert count_effects(effects, KEY) == 1


@pytest.mark.parametrize("how", ["exit", "raise"])
def test_a_child_forked_by_the_action_leaves_the_ledger_alone(
    any_ledger: str, tmp_path: Path, children: Children, how: str
) -> None:
    """A forked child unwinding (sys.exit or raise) marks nothing: the parent's attempt runs on."""
    effects = tmp_path / "effects"
    owner = children.start(any_ledger, effects, "--fork", how)
    owner.expect("forked")
    with get_store(any_ledger) as store:
        record = store.get(KEY)
        assert record is not None
        assert record.state is State.ATTEMPTING
        assert whys(store) == [Why.CLAIMED]
    outcome = children.run(any_ledger, effects, "--probe")
    assert (outcome["kind"], outcome["reason"]) == ("InDoubt", "in_flight")
    owner.go()
    assert owner.outcome() == {
        "kind": "Succeeded",
        "replayed": False,
        "recorded": True,
        "value": RECEIPT,
    }
    with get_store(any_ledger) as store:
        record = store.get(KEY)
        assert record is not None
        assert record.state is State.SUCCEEDED
        assert whys(store) == [Why.CLAIMED, Why.RAN]
        assert store.late_completions(KEY) == []
    assert count_effects(effects, KEY) == 1


def client_ports(pid: int) -> set[int]:
    """The local TCP ports of the sockets process ``pid`` has open."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = str(fd.readlink())
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target.removeprefix("socket:[").removesuffix("]"))
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def end_liveness_session(ledger: str, pid: int) -> None:
    """pg_terminate_backend the session of process ``pid`` that holds an advisory lock."""
    import psycopg

    ports = sorted(client_ports(pid))
    with psycopg.connect(ledger, autocommit=True) as admin:
        sessions = admin.execute(
            "SELECT DISTINCT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
            "WHERE l.locktype = 'advisory' AND l.granted AND a.client_port = ANY(%s)",
            (ports,),
        ).fetchall()
        assert len(sessions) == 1, (ports, sessions)
        ((session,),) = sessions
        admin.execute("SELECT pg_terminate_backend(%s)", (session,))

        def gone() -> bool:
            found = admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (session,))
            return found.fetchone() is None

        until(gone, "the liveness session to end")


@pytest.mark.parametrize("frozen", [True, False], ids=["frozen", "waiting-on-a-pipe"])
def test_a_lost_session_of_an_owner_on_another_host_does_not_release_its_key_on_postgres(
    postgres_ledger: str, tmp_path: Path, children: Children, frozen: bool
) -> None:
    """The owner's liveness session is cut while it runs: a probe's "not happened" is withheld.

    PostgreSQL only: the owner claims as another host, so only its session could tell that
    it ended, and a lost session is no proof that the process did.
    """
    effects = tmp_path / "effects"
    owner = children.start(postgres_ledger, effects, "--pause", "--host", "elsewhere")
    owner.expect("paused")
    if frozen:
        owner.freeze(postgres_ledger)
    end_liveness_session(postgres_ledger, owner.pid)
    outcome = children.run(postgres_ledger, effects, "--probe")
    assert outcome["kind"] == "InDoubt"
    assert outcome["reason"] in {"session_lost", "lease_expired"}
    with get_store(postgres_ledger) as store:
        record = store.get(KEY)
        assert record is not None
        assert record.state in {State.ATTEMPTING, State.IN_DOUBT}
        assert Why.RECONCILED not in whys(store)
    assert count_effects(effects, KEY) == 0
    assert thaw_and_finish(owner)["kind"] == "Succeeded"
    with get_store(postgres_ledger) as store:
        record = store.get(KEY)
        assert record is not None
        assert record.state is State.SUCCEEDED
    assert count_effects(effects, KEY) == 1
