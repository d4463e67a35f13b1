"""PostgreSQL as the ledger of a fleet: hosts killed, sessions cut, schemas missing or racing.

Every test here needs only the ``postgres_ledger`` fixture (a fresh migrated schema of its
own), so the file skips without a server. Faults are real: worker processes are SIGKILLed,
and server sessions are ended with ``pg_terminate_backend``, never by restarting the server
(other sessions share it). A process's sessions are found by the ``application_name`` its
DSN gives it.
"""

import contextlib
import json
import logging
import queue
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

import attrs
import psycopg
import pytest

from safeact import (
    DoubtReason,
    InDoubt,
    Outcome,
    SafeTool,
    State,
    Store,
    StoreError,
    Succeeded,
    get_store,
    safe,
)
from safeact._owner import Owner, is_gone, this_process
from safeact._postgres import _owner_lock, migrate_postgres
from safeact._protocol import CALL_CHECKPOINTS, Checkpoint, checkpoint_hook, utc_now
from safeact._tables import SCHEMA_VERSION
from safeact.postgres import PostgresStore
from tests.actions import count_effects, record_effect
from tests.fleet_worker import TOOL

WORKER = Path(__file__).with_name("fleet_worker.py")
POSTGRES_V2 = Path(__file__).with_name("data") / "postgres-v2.sql"
LONG_LEASE = 300.0
"""Longer than any test: a key seen in doubt before it ends was judged by PostgreSQL alone."""
DEADLINE = 20.0
"""Seconds a test waits for a worker's line or a server session's change before failing."""

SESSIONS = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
LIVENESS_SESSIONS = (
    "SELECT DISTINCT a.pid FROM pg_stat_activity a JOIN pg_locks l ON l.pid = a.pid "
    "WHERE a.application_name = %s AND l.locktype = 'advisory' AND l.granted"
)
BLOCKED_SESSIONS = SESSIONS + " AND wait_event_type = 'Lock'"

Admin = psycopg.Connection[tuple[Any, ...]]


def named(dsn: str, application: str) -> str:
    """``dsn`` with the ``application_name`` its sessions show in ``pg_stat_activity``."""
    return f"{dsn}{'&' if '?' in dsn else '?'}application_name={application}"


def sessions(admin: Admin, query: str, application: str) -> list[int]:
    return [pid for (pid,) in admin.execute(query, (application,)).fetchall()]


def holders_of(admin: Admin, lock: int) -> list[int]:
    """The sessions holding advisory ``lock`` (a bigint lock shows as two 32-bit halves)."""
    unsigned = lock & 0xFFFF_FFFF_FFFF_FFFF
    rows = admin.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 "
        "AND classid = %s::bigint::oid AND objid = %s::bigint::oid",
        (unsigned >> 32, unsigned & 0xFFFF_FFFF),
    ).fetchall()
    return [pid for (pid,) in rows]


def cut(admin: Admin, application: str, *, liveness_only: bool = False) -> int:
    """End the server sessions of ``application`` (or only its liveness session); say how many.

    ``pg_terminate_backend`` with a timeout returns once each session has ended, so its
    locks, the advisory lock among them, are released when this returns.
    """
    pids = sessions(admin, LIVENESS_SESSIONS if liveness_only else SESSIONS, application)
    for pid in pids:
        (ended,) = admin.execute(
            "SELECT pg_terminate_backend(%s, %s)", (pid, int(DEADLINE * 1000))
        ).fetchone() or (False,)
        assert ended, f"session {pid} of {application} did not end"
    return len(pids)


def wait_until_no_sessions(admin: Admin, application: str) -> None:
    """Poll ``pg_stat_activity`` until ``application`` has no session left."""
    deadline = time.monotonic() + DEADLINE
    while sessions(admin, SESSIONS, application):
        assert time.monotonic() < deadline, f"{application} still has sessions"
        time.sleep(0.01)


class CutOnBlock:
    """Cut a process's sessions while one of its writes is in flight, before it commits.

    ``arm`` (called at a checkpoint) locks the ``calls`` table against writes (reads go on)
    and starts a thread that waits for a session of ``application`` to block on that lock,
    then ends every session of ``application``, and lifts the lock.
    """

    def __init__(self, dsn: str, application: str) -> None:
        self._dsn = dsn
        self._application = application
        self._blocker: Admin | None = None
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self.cut = 0

    def arm(self) -> None:
        self._blocker = psycopg.connect(self._dsn)
        self._blocker.execute("LOCK TABLE calls IN EXCLUSIVE MODE")
        self._thread = threading.Thread(target=self._watch, args=(self._blocker,))
        self._thread.start()

    def _watch(self, blocker: Admin) -> None:
        try:
            with psycopg.connect(self._dsn, autocommit=True) as admin:
                deadline = time.monotonic() + DEADLINE
                while not sessions(admin, BLOCKED_SESSIONS, self._application):
                    assert time.monotonic() < deadline, "no write blocked on the lock"
                    time.sleep(0.005)
                self.cut = cut(admin, self._application)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            self._failure = exc
        finally:
            blocker.rollback()
            blocker.close()

    def check(self) -> None:
        """Wait for the thread; raise what went wrong in it."""
        assert self._thread is not None, "the checkpoint was never reached"
        self._thread.join(DEADLINE)
        if self._failure is not None:
            raise self._failure
        assert self.cut >= 1


def at(point: Checkpoint, do: Callable[[], object]) -> Callable[[Checkpoint], None]:
    """A checkpoint hook that does ``do`` at ``point`` only."""

    def hook(reached: Checkpoint) -> None:
        if reached == point:
            do()

    return hook


def charge(
    store: Store,
    effects: Path,
    *,
    wait: float = 0.0,
    during: Callable[[str], object] = lambda _: None,
) -> SafeTool[[], str]:
    """The fleet's tool on ``store``: it records its run, calls ``during``, returns its host."""

    @safe(store, name=TOOL, wait=wait)
    def tool(key: str) -> str:
        record_effect(effects, key)
        during(key)
        return store.owner.host

    return tool


def call_or_error(tool: SafeTool[[], str], key: str) -> Outcome[str] | StoreError:
    try:
        return tool(key)
    except StoreError as exc:
        return exc


@pytest.fixture
def admin(postgres_ledger: str) -> Iterator[Admin]:
    """A session of the test's own, for looking at and ending the others."""
    with psycopg.connect(postgres_ledger, autocommit=True) as connection:
        yield connection


@attrs.frozen
class Victim:
    """A store of this process as host-a, whose server sessions the test cuts."""

    store: PostgresStore
    dsn: str
    """The ledger's URL, without the victim's application name."""
    application: str
    admin: Admin

    def cut(self, *, liveness_only: bool = False) -> int:
        """End the victim's pooled sessions and its liveness session, or only the latter.

        The liveness session is shared by every store of this process that names its owner
        alike, so it is found by the advisory lock it holds, not by an application name.
        """
        pooled = [] if liveness_only else sessions(self.admin, SESSIONS, self.application)
        pids = sorted({*pooled, *holders_of(self.admin, _owner_lock(self.store.owner))})
        for pid in pids:
            (ended,) = self.admin.execute(
                "SELECT pg_terminate_backend(%s, %s)", (pid, int(DEADLINE * 1000))
            ).fetchone() or (False,)
            assert ended, f"session {pid} did not end"
        return len(pids)

    def cut_on_block(self) -> CutOnBlock:
        return CutOnBlock(self.dsn, self.application)


@pytest.fixture
def victim(postgres_ledger: str, admin: Admin, tmp_path: Path) -> Iterator[Victim]:
    """Host-a on the ledger, after one call: it holds a pooled session and its liveness one."""
    application = f"safeact-victim-{uuid.uuid4().hex[:12]}"
    dsn = named(postgres_ledger, application)
    with PostgresStore(dsn, host="host-a", lease=LONG_LEASE) as store:
        assert charge(store, tmp_path / "warm-up")("warm-up") == Succeeded("warm-up", "host-a")
        yield Victim(store, postgres_ledger, application, admin)


@pytest.fixture
def observer(postgres_ledger: str) -> Iterator[Store]:
    """Another host (host-b) on the same ledger, whose sessions nobody cuts."""
    with get_store(postgres_ledger, host="host-b", lease=LONG_LEASE) as store:
        yield store


class Worker:
    """A ``fleet_worker.py`` process: one host, driven by JSON lines, read with a deadline."""

    def __init__(self, dsn: str, effects: Path, host: str, application: str) -> None:
        self.host = host
        self.application = application
        self._stderr: IO[str] = (effects.parent / f"{host}.stderr").open("w+")
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), named(dsn, application), str(effects), "--host", host],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def send(self, command: dict[str, object]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def expect(self) -> Any:
        """The next line the worker prints, decoded; fails with its stderr if none comes."""
        try:
            line = self._lines.get(timeout=DEADLINE)
        except queue.Empty:
            line = None
        if line is None:
            self._stderr.seek(0)
            pytest.fail(f"{self.host} printed nothing more; stderr:\n{self._stderr.read()}")
        return json.loads(line)

    def stop(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._stderr.close()


@contextlib.contextmanager
def fleet(dsn: str, effects: Path, hosts: list[str]) -> Iterator[dict[str, Worker]]:
    tag = uuid.uuid4().hex[:8]
    workers: dict[str, Worker] = {}
    try:
        for host in hosts:
            workers[host] = Worker(dsn, effects, host, f"safeact-fleet-{tag}-{host}")
        for worker in workers.values():
            assert "ready" in worker.expect()
        yield workers
    finally:
        for worker in workers.values():
            worker.stop()


def test_hosts_see_a_killed_host_lost_through_postgres_and_run_every_key_once(
    postgres_ledger: str, admin: Admin, tmp_path: Path
) -> None:
    """Hosts see one SIGKILLed mid-action lost by its session, not its lease; keys run once."""
    effects = tmp_path / "effects"
    keys = [f"order-{n}" for n in range(12)]
    hosts = ["host-a", "host-b", "host-c", "host-d"]
    with fleet(postgres_ledger, effects, hosts) as workers:
        killed, others = workers["host-a"], [workers[host] for host in hosts[1:]]
        killed.send({"hold": "victim"})
        assert killed.expect() == {"acting": "victim"}
        # Alive on another host under a long lease: only its session says it runs.
        others[0].send({"call": ["victim"], "wait": 0})
        assert others[0].expect() == {"outcomes": [{"kind": "InDoubt", "reason": "in_flight"}]}

        killed.process.kill()
        killed.process.wait(DEADLINE)
        wait_until_no_sessions(admin, killed.application)

        orders = []
        for n, worker in enumerate(others):  # each host its own order, the victim among them
            order = keys[4 * n :] + keys[: 4 * n]
            order.insert(5 * n, "victim")
            orders.append(order)
            worker.send({"call": order, "wait": DEADLINE})
        seen = [
            dict(zip(order, worker.expect()["outcomes"], strict=True))
            for order, worker in zip(orders, others, strict=True)
        ]

    for outcomes in seen:
        assert outcomes["victim"] == {"kind": "InDoubt", "reason": "session_lost"}
    assert count_effects(effects, "victim") == 1
    for key in keys:
        assert count_effects(effects, key) == 1, key
        runs = [outcomes[key] for outcomes in seen if not outcomes[key]["replayed"]]
        assert len(runs) == 1, (key, [outcomes[key] for outcomes in seen])
        assert all(
            outcomes[key] == {**runs[0], "replayed": outcomes[key]["replayed"]} for outcomes in seen
        ), key
        assert runs[0]["kind"] == "Succeeded"
        assert runs[0]["recorded"] is True

    with get_store(postgres_ledger, host="host-z", lease=LONG_LEASE) as store:
        record = store.get("victim")
        history = store.history("victim")
    assert record is not None
    assert (record.state, record.doubt_reason) == (State.IN_DOUBT, DoubtReason.SESSION_LOST)
    assert record.owner.host == "host-a"
    # Not the lease: it still had minutes to run. Not /proc: host-a is another host to all.
    assert record.lease_until > utc_now() + timedelta(seconds=LONG_LEASE / 2)
    assert not is_gone(record.owner, this_process("host-b"), alive_until=record.lease_until)
    assert history[-1].to_state is State.IN_DOUBT
    assert history[-1].host in {"host-b", "host-c", "host-d"}


@pytest.mark.parametrize("point", CALL_CHECKPOINTS)
def test_sessions_cut_at_a_checkpoint_never_run_the_action_twice(
    point: Checkpoint,
    victim: Victim,
    observer: Store,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A caller's sessions ended at a checkpoint: its action runs at most once, its outcome true."""
    effects = tmp_path / "effects"
    with (
        caplog.at_level(logging.ERROR, logger="safeact"),
        checkpoint_hook(at(point, victim.cut)),
    ):
        first = call_or_error(charge(victim.store, effects), "k")
    ran = count_effects(effects, "k")
    record = observer.get("k")
    later = charge(observer, effects)("k")

    if isinstance(first, StoreError):  # only reading or claiming raise: before the action
        assert ran == 0
        assert record is None
        assert later == Succeeded("k", "host-b")
    else:
        assert ran == 1
        assert isinstance(first, Succeeded)
        assert not first.replayed
        assert record is not None
        if first.recorded:
            assert record.state is State.SUCCEEDED
            assert later == Succeeded("k", "host-a", replayed=True)
        else:  # marked in doubt at once, on a fresh session
            assert (record.state, record.doubt_reason) == (
                State.IN_DOUBT,
                DoubtReason.RESULT_NOT_STORED,
            )
            assert f"{TOOL}: could not record succeeded for key 'k'" in caplog.text
            assert isinstance(later, InDoubt)
            assert later.reason is DoubtReason.RESULT_NOT_STORED
    assert count_effects(effects, "k") == 1


def test_a_claim_cut_before_it_commits_raises_and_runs_nothing(
    victim: Victim, observer: Store, tmp_path: Path
) -> None:
    """A connection cut while the claim is in flight raises StoreError; the action does not run."""
    effects = tmp_path / "effects"
    cutter = victim.cut_on_block()
    with checkpoint_hook(at("before_claim", cutter.arm)), pytest.raises(StoreError):
        charge(victim.store, effects)("k")
    cutter.check()
    assert count_effects(effects, "k") == 0
    assert observer.get("k") is None
    assert charge(observer, effects)("k") == Succeeded("k", "host-b")
    assert count_effects(effects, "k") == 1


def test_an_outcome_cut_before_it_commits_leaves_the_key_in_doubt(
    victim: Victim, observer: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A connection cut while SUCCEEDED is recorded: recorded=False, the key marked in doubt."""
    effects = tmp_path / "effects"
    cutter = victim.cut_on_block()
    with (
        caplog.at_level(logging.ERROR, logger="safeact"),
        checkpoint_hook(at("after_call", cutter.arm)),
    ):
        outcome = charge(victim.store, effects)("k")
    cutter.check()
    assert outcome == Succeeded("k", "host-a", recorded=False)
    assert f"{TOOL}: could not record succeeded for key 'k'" in caplog.text
    record = observer.get("k")
    assert record is not None
    assert (record.state, record.doubt_reason) == (State.IN_DOUBT, DoubtReason.RESULT_NOT_STORED)
    later = charge(observer, effects)("k")
    assert isinstance(later, InDoubt)
    assert later.reason is DoubtReason.RESULT_NOT_STORED
    assert count_effects(effects, "k") == 1


def test_pooled_sessions_cut_between_calls_do_not_break_the_next_call(
    victim: Victim, tmp_path: Path
) -> None:
    """After every session of a process is ended between two calls, its next call works."""
    effects = tmp_path / "effects"
    assert victim.cut() >= 1
    outcome = call_or_error(charge(victim.store, effects), "k")
    assert outcome == Succeeded("k", "host-a"), outcome
    assert count_effects(effects, "k") == 1


def test_many_pooled_sessions_cut_between_calls_do_not_break_the_next_call(
    victim: Victim, tmp_path: Path
) -> None:
    """With several idle sessions in its pool all ended, a process's next call still works."""
    effects = tmp_path / "effects"
    pool = victim.store._pool
    with contextlib.ExitStack() as taken:  # four sessions at once: the pool keeps them idle
        for _ in range(4):
            taken.enter_context(pool.connection())
    assert victim.cut() >= 5
    outcome = call_or_error(charge(victim.store, effects), "k")
    assert outcome == Succeeded("k", "host-a"), outcome
    assert count_effects(effects, "k") == 1


def test_a_live_owner_whose_liveness_session_is_cut_still_runs_its_action_once(
    victim: Victim, observer: Store, tmp_path: Path
) -> None:
    """An owner whose liveness session is cut mid-action looks lost, yet its action runs once."""
    effects = tmp_path / "effects"
    seen: list[Outcome[str]] = []

    def cut_liveness_then_ask(key: str) -> None:
        assert victim.cut(liveness_only=True) == 1
        seen.append(charge(observer, effects)(key))

    outcome = charge(victim.store, effects, during=cut_liveness_then_ask)("k")

    assert len(seen) == 1
    assert isinstance(seen[0], InDoubt)
    assert seen[0].reason is DoubtReason.SESSION_LOST  # a suspicion: it runs nothing
    assert outcome == Succeeded("k", "host-a")
    record = observer.get("k")
    assert record is not None
    assert record.state is State.SUCCEEDED  # the owner's word replaces its own row
    assert [(event.to_state, event.host) for event in observer.history("k")] == [
        (State.ATTEMPTING, "host-a"),
        (State.IN_DOUBT, "host-b"),
        (State.SUCCEEDED, "host-a"),
    ]
    assert charge(observer, effects)("k") == Succeeded("k", "host-a", replayed=True)
    assert count_effects(effects, "k") == 1


def test_an_owner_whose_liveness_session_was_cut_is_seen_alive_at_its_next_action(
    victim: Victim, observer: Store, tmp_path: Path
) -> None:
    """After its liveness session ends between calls, an owner's next action is seen in flight."""
    effects = tmp_path / "effects"
    assert victim.cut(liveness_only=True) == 1
    seen: list[Outcome[str]] = []

    def ask(key: str) -> None:
        seen.append(charge(observer, effects)(key))

    outcome = charge(victim.store, effects, during=ask)("k")

    assert outcome == Succeeded("k", "host-a")
    assert len(seen) == 1
    assert isinstance(seen[0], InDoubt)
    assert seen[0].reason is DoubtReason.IN_FLIGHT, "another host took a live owner for lost"
    assert count_effects(effects, "k") == 1


@pytest.fixture
def empty_schema(postgres_ledger: str, admin: Admin) -> Iterator[str]:
    """The URL of a schema of its own on the test server with nothing in it."""
    schema = f"safeact_empty_{uuid.uuid4().hex[:12]}"
    dsn = re.sub(r"search_path%3D\w+", f"search_path%3D{schema}", postgres_ledger)
    assert dsn != postgres_ledger
    admin.execute(f"CREATE SCHEMA {schema}")
    try:
        yield dsn
    finally:
        admin.execute(f"DROP SCHEMA {schema} CASCADE")


def test_a_database_without_the_schema_is_refused(empty_schema: str) -> None:
    """Opening a database that has no safeact schema fails and says to run safeact migrate."""
    with pytest.raises(StoreError, match=r"no safeact schema.*safeact migrate"):
        get_store(empty_schema)


def test_four_processes_migrating_at_once_create_the_schema_once(empty_schema: str) -> None:
    """Four processes migrating one database together all succeed, and exactly one creates it."""
    command = [sys.executable, str(WORKER), empty_schema, "--migrate"]
    migrators = [
        subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    for migrator in migrators:
        assert migrator.stdout is not None
        assert migrator.stdout.readline() == "ready\n"
    results = [migrator.communicate("go\n", timeout=DEADLINE) for migrator in migrators]

    for migrator, (_, stderr) in zip(migrators, results, strict=True):
        assert migrator.returncode == 0, stderr
    olds = sorted(json.loads(stdout.splitlines()[-1])[0] for stdout, _ in results)
    assert olds == [0, SCHEMA_VERSION, SCHEMA_VERSION, SCHEMA_VERSION]
    with get_store(empty_schema) as store:
        assert store.records() == []
    with psycopg.connect(empty_schema) as connection:
        assert connection.execute("SELECT count(*) FROM safeact_meta").fetchone() == (1,)


SCHEMA_2_ROW = (
    "INSERT INTO calls (key, tool, args_hash, state, attempt_id, attempted_at, owner_host, "
    "owner_boot, owner_pid, owner_started, lease_until, result, schema_version) VALUES "
    "('paid', 'tests.charge', 'h', 'succeeded', 'a-1', '2026-01-01T00:00:00.000000+00:00', "
    "'old-host', 'old-boot', 7, 70, '2026-01-01T00:00:30.000000+00:00', '5', 2)"
)
"""A key as a safeact of schema 2 wrote it: no owner machine id or PID namespace."""


def columns_of(dsn: str) -> list[tuple[Any, ...]]:
    """Every column of the ledger's tables: table, name, type, nullability and default."""
    with psycopg.connect(dsn) as connection:
        return connection.execute(
            "SELECT table_name, column_name, data_type, is_nullable, column_default "
            "FROM information_schema.columns WHERE table_schema = current_schema() "
            "ORDER BY table_name, ordinal_position"
        ).fetchall()


def test_a_schema_2_database_is_refused_until_migrated_then_keeps_its_keys(
    empty_schema: str, postgres_ledger: str
) -> None:
    """Schema 2 is refused, naming migrate; migrated, its keys are kept, with the new columns."""
    with psycopg.connect(empty_schema) as connection:
        connection.execute(POSTGRES_V2.read_text())  # what a safeact of schema 2 created
        connection.execute(SCHEMA_2_ROW)
    with pytest.raises(
        StoreError, match=rf"schema version 2, this safeact needs {SCHEMA_VERSION}.*safeact migrate"
    ):
        get_store(empty_schema)

    assert migrate_postgres(empty_schema) == (2, SCHEMA_VERSION)
    assert columns_of(empty_schema) == columns_of(postgres_ledger)
    with get_store(empty_schema) as store:
        old = store.get("paid")
        assert old is not None
        assert (old.state, old.result) == (State.SUCCEEDED, 5)
        assert old.owner == Owner("old-host", "old-boot", 7, 70, machine_id="", pid_namespace="")
        claimed = store._claim("new", "tests.charge", "h", attempt_id="a-2", previous=None)
        assert claimed is not None
        assert claimed.owner == store.owner
        assert claimed.owner.pid_namespace
        assert store.get("new") == claimed
    assert migrate_postgres(empty_schema) == (SCHEMA_VERSION, SCHEMA_VERSION)


def test_a_meta_row_claiming_a_version_no_safeact_wrote_is_refused_untouched(
    empty_schema: str,
) -> None:
    """A ledger whose safeact_meta says version 1 (PostgreSQL began at 2) is refused, unchanged."""
    with psycopg.connect(empty_schema) as connection:
        connection.execute(POSTGRES_V2.read_text())
        connection.execute("UPDATE safeact_meta SET version = 1")
    before = columns_of(empty_schema)
    with pytest.raises(StoreError, match=r"schema version 1, which no safeact wrote"):
        migrate_postgres(empty_schema)
    assert columns_of(empty_schema) == before


def meta_version(dsn: str) -> int:
    with psycopg.connect(dsn) as connection:
        (version,) = connection.execute("SELECT version FROM safeact_meta").fetchone() or (0,)
    return int(version)


def test_a_migration_that_fails_is_rolled_back_and_says_what_to_do(empty_schema: str) -> None:
    """A schema-2 database with a column of schema 3 added by hand: unchanged, and advice."""
    with psycopg.connect(empty_schema) as connection:
        connection.execute(POSTGRES_V2.read_text())
        connection.execute(SCHEMA_2_ROW)
        connection.execute("ALTER TABLE calls ADD COLUMN owner_pidns TEXT")
    before = columns_of(empty_schema)
    with pytest.raises(StoreError) as raised:
        migrate_postgres(empty_schema)
    assert str(raised.value) == (
        f"{empty_schema}: migrating from schema 2 to {SCHEMA_VERSION} failed (column "
        '"owner_pidns" of relation "calls" already exists); it was rolled back and the '
        "database is unchanged, at schema 2. To do: its tables are not as a safeact of that "
        "schema left them (changed outside safeact?): restore them from a backup, or report "
        "it to safeact with this message"
    )
    assert columns_of(empty_schema) == before
    assert meta_version(empty_schema) == 2


CUT_AT_THE_VERSION = """
CREATE FUNCTION cut_the_session() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$;
CREATE TRIGGER cut_the_session BEFORE UPDATE ON safeact_meta
FOR EACH ROW EXECUTE FUNCTION cut_the_session();
"""
"""The migrating session is ended by the server as the migration writes its new version."""


def test_a_migration_whose_session_is_cut_says_to_run_it_again(empty_schema: str) -> None:
    """Cut mid-migration: the error says it may or may not have committed; a rerun finishes."""
    with psycopg.connect(empty_schema) as connection:
        connection.execute(POSTGRES_V2.read_text())
        connection.execute(CUT_AT_THE_VERSION)
    with pytest.raises(StoreError) as raised:
        migrate_postgres(empty_schema)
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(
        f"{empty_schema}: migrating from schema 2 to {SCHEMA_VERSION} failed ("
    )
    assert message.endswith(
        "; the connection was lost, so it may or may not have been committed: run `safeact "
        "migrate` again, which finishes it or finds it done"
    )
    with psycopg.connect(empty_schema) as connection:
        connection.execute("DROP TRIGGER cut_the_session ON safeact_meta")
    assert migrate_postgres(empty_schema) == (2, SCHEMA_VERSION)
