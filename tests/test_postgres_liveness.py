"""PostgreSQL session settings that must not weaken the ledger, and the liveness session.

Synced commits turn ``synchronous_commit`` on whatever the server, role or connection
string say. What that protects against, a crash of the server itself, cannot be made here
(the server is shared by the whole suite): the tests read the setting each transaction
commits with. The liveness session outlives idle timeouts; when it ends anyway, that is
logged and its lock taken back; and a free lock is a suspicion (``owner_lost``), never
proof (``owner_gone``). Sessions are ended with ``pg_terminate_backend`` and waited for by
polling ``pg_stat_activity``, never by sleeping.
"""

import hashlib
import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from safeact import DoubtReason, State, Succeeded, _postgres, get_store
from safeact._owner import Owner, this_process
from safeact._postgres import _liveness, _owner_lock
from safeact.postgres import PostgresStore
from tests.conftest import POSTGRES
from tests.test_postgres import DEADLINE, LONG_LEASE, Admin, charge, holders_of

Role = Callable[[dict[str, str]], str]
"""Makes a login role with these settings (``ALTER ROLE ... SET``); returns its DSN."""


@pytest.fixture
def admin(postgres_ledger: str) -> Iterator[Admin]:
    """A session of the test's own, for looking at and ending the others."""
    with psycopg.connect(postgres_ledger, autocommit=True) as connection:
        yield connection


@pytest.fixture
def login_as(postgres_ledger: str, admin: Admin) -> Iterator[Role]:
    """Make roles allowed to use the ledger; end their sessions and drop them afterwards."""
    (schema,) = admin.execute("SELECT current_schema()").fetchone() or ("",)
    made: list[str] = []

    def make(settings: dict[str, str]) -> str:
        role = f"safeact_role_{uuid.uuid4().hex[:12]}"
        admin.execute(f"CREATE ROLE {role} LOGIN")
        made.append(role)
        for name, value in settings.items():
            admin.execute(f"ALTER ROLE {role} SET {name} = '{value}'")
        admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        admin.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO {role}")
        admin.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA {schema} TO {role}")
        return make_conninfo(postgres_ledger, user=role)

    yield make
    for role in made:
        admin.execute(
            "SELECT pg_terminate_backend(pid, %s) FROM pg_stat_activity WHERE usename = %s",
            (int(DEADLINE * 1000), role),
        )
        admin.execute(f"DROP OWNED BY {role}")
        admin.execute(f"DROP ROLE {role}")


@pytest.fixture
def host(admin: Admin) -> Iterator[str]:
    """A host name of the test's own; its liveness session, kept by the process, ends after."""
    name = f"host-{uuid.uuid4().hex[:12]}"
    yield name
    for pid in holders_of(admin, _owner_lock(this_process(name))):
        terminate(admin, pid)


@pytest.fixture
def owner(postgres_ledger: str, host: str, tmp_path: Path) -> Iterator[PostgresStore]:
    """A store of this process that has claimed once, so it holds its liveness lock."""
    with PostgresStore(postgres_ledger, host=host, lease=LONG_LEASE) as store:
        assert charge(store, tmp_path / "warm-up")("warm-up") == Succeeded("warm-up", host)
        yield store


@pytest.fixture(params=["connection string", "role"])
def unsynced_dsn(request: pytest.FixtureRequest, postgres_ledger: str, login_as: Role) -> str:
    """A DSN whose sessions start with synchronous_commit off: by its options, or its role's."""
    if request.param == "role":
        return login_as({"synchronous_commit": "off"})
    options = conninfo_to_dict(postgres_ledger).get("options", "")
    return make_conninfo(postgres_ledger, options=f"{options} -c synchronous_commit=off")


def terminate(admin: Admin, pid: int) -> None:
    """End session ``pid``; its locks are released when this returns."""
    (ended,) = admin.execute(
        "SELECT pg_terminate_backend(%s, %s)", (pid, int(DEADLINE * 1000))
    ).fetchone() or (False,)
    assert ended, f"session {pid} did not end"


def wait_until_ended(admin: Admin, pid: int) -> None:
    """Poll ``pg_stat_activity`` until session ``pid`` is gone."""
    deadline = time.monotonic() + DEADLINE
    while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchall():
        assert time.monotonic() < deadline, f"session {pid} was never ended"
        time.sleep(0.05)


def liveness_session(store: PostgresStore) -> psycopg.Connection[tuple[object, ...]]:
    """The session of this process that holds ``store``'s liveness lock (white-box)."""
    session = _liveness._sessions[(os.getpid(), store._database, _owner_lock(store.owner))]
    assert session is not None
    return session


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "safeact" and r.levelno >= 40]


def test_a_synced_transaction_commits_with_synchronous_commit_on(unsynced_dsn: str) -> None:
    """Inside a synced transaction synchronous_commit is on, though the session starts off."""
    with PostgresStore(unsynced_dsn, lease=LONG_LEASE) as store:
        assert store._read("SHOW synchronous_commit", ()) == [("off",)]
        with store._transaction(sync=True) as db:
            assert db.execute("SHOW synchronous_commit").fetchall() == [("on",)]


def test_an_unsynced_transaction_commits_with_synchronous_commit_off(unsynced_dsn: str) -> None:
    """Outcomes, marks and lease renewals commit with synchronous_commit off, as designed."""
    with (
        PostgresStore(unsynced_dsn, lease=LONG_LEASE) as store,
        store._transaction(sync=False) as db,
    ):
        assert db.execute("SHOW synchronous_commit").fetchall() == [("off",)]


def test_the_liveness_session_outlives_its_roles_idle_session_timeout(
    login_as: Role, admin: Admin, host: str, tmp_path: Path
) -> None:
    """While the action runs, a role's 1 s idle timeout ends its other sessions, not this one."""
    dsn = login_as({"idle_session_timeout": "1s"})
    holders: list[list[int]] = []

    def outlast_the_timeout(key: str) -> None:
        lock = _owner_lock(this_process(host))
        holders.append(holders_of(admin, lock))
        # A session of the same role, opened after the liveness session last spoke: once the
        # server has ended it for idling, the liveness session has idled longer.
        idle = psycopg.connect(dsn, autocommit=True)
        try:
            wait_until_ended(admin, idle.info.backend_pid)
        finally:
            idle.close()
        holders.append(holders_of(admin, lock))

    with PostgresStore(dsn, host=host, lease=LONG_LEASE) as store:
        outcome = charge(store, tmp_path / "effects", during=outlast_the_timeout)("k")
    assert outcome == Succeeded("k", host)  # the test's own assertions in the action passed

    before, after = holders
    assert len(before) == 1
    assert before == after


@pytest.mark.parametrize(("dsn_sets", "idle"), [({}, 30), ({"keepalives_idle": "45"}, 45)])
def test_the_liveness_session_sends_tcp_keepalives(
    postgres_ledger: str, host: str, tmp_path: Path, dsn_sets: dict[str, str], idle: int
) -> None:
    """The liveness session probes its idle TCP connection, after 30 s unless the DSN says."""
    dsn = make_conninfo(postgres_ledger, **dsn_sets)
    with PostgresStore(dsn, host=host, lease=LONG_LEASE) as store:
        charge(store, tmp_path / "effects")("k")
        session = liveness_session(store)
        with socket.fromfd(session.fileno(), socket.AF_INET, socket.SOCK_STREAM) as tcp:
            probes = tcp.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
            after = tcp.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
    assert (1, idle) == (probes, after)


def test_the_liveness_session_turns_off_its_roles_idle_timeouts(
    login_as: Role, host: str, tmp_path: Path
) -> None:
    """A role's idle timeouts are off on the liveness session, and the server probes its client."""
    names = ("idle_session_timeout", "idle_in_transaction_session_timeout", "tcp_keepalives_idle")
    dsn = login_as(dict.fromkeys(names[:2], "1h"))
    with PostgresStore(dsn, host=host, lease=LONG_LEASE) as store:
        charge(store, tmp_path / "effects")("k")
        session = liveness_session(store)
        settings = session.execute(
            "SELECT current_setting(%s), current_setting(%s), current_setting(%s)", names
        ).fetchone()
    assert settings == ("0", "0", "30")


def test_a_check_takes_back_the_lock_of_an_ended_liveness_session_and_logs_it(
    owner: PostgresStore, admin: Admin, caplog: pytest.LogCaptureFixture
) -> None:
    """After its liveness session was terminated, a check takes the lock again and logs an error."""
    lock = _owner_lock(owner.owner)
    (ended,) = holders_of(admin, lock)
    terminate(admin, ended)
    with caplog.at_level(logging.ERROR, logger="safeact"):
        owner._check_liveness()
    (now,) = holders_of(admin, lock)
    assert now != ended
    (message,) = errors(caplog)
    assert f"{owner.location}: the liveness session" in message
    assert f"pid {owner.owner.pid} on host {owner.owner.host!r}" in message
    assert message.endswith("took its lock again")


def test_a_check_of_a_held_lock_keeps_its_session_and_logs_nothing(
    owner: PostgresStore, admin: Admin, caplog: pytest.LogCaptureFixture
) -> None:
    """A check while the liveness session holds its lock changes nothing and logs nothing."""
    lock = _owner_lock(owner.owner)
    before = holders_of(admin, lock)
    with caplog.at_level(logging.ERROR, logger="safeact"):
        owner._check_liveness()
    assert before == holders_of(admin, lock)
    assert errors(caplog) == []


def test_a_check_that_cannot_take_the_lock_back_logs_it_and_the_next_one_does(
    owner: PostgresStore, admin: Admin, postgres_ledger: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A lock held elsewhere when the check comes is logged, not raised; the next check takes it."""
    lock = _owner_lock(owner.owner)
    (ended,) = holders_of(admin, lock)
    terminate(admin, ended)
    with psycopg.connect(postgres_ledger, autocommit=True) as squatter:
        squatting = squatter.info.backend_pid
        squatter.execute("SELECT pg_advisory_lock(%s)", (lock,))
        with caplog.at_level(logging.ERROR, logger="safeact"):
            owner._check_liveness()
        assert [squatting] == holders_of(admin, lock)
        squatter.execute("SELECT pg_advisory_unlock(%s)", (lock,))
        owner._check_liveness()
    assert [
        f"could not take its lock again: another session holds lock {lock}",
        "took its lock again",
    ] == [message.rsplit("; ", 1)[1] for message in errors(caplog)]
    (now,) = holders_of(admin, lock)
    assert now not in {ended, squatting}


def test_a_claim_that_finds_its_liveness_session_ended_logs_it_and_takes_the_lock_back(
    owner: PostgresStore, admin: Admin, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A claim after the liveness session was terminated logs the loss and holds the lock again."""
    lock = _owner_lock(owner.owner)
    (ended,) = holders_of(admin, lock)
    terminate(admin, ended)
    with caplog.at_level(logging.ERROR, logger="safeact"):
        charge(owner, tmp_path / "effects")("k")
    (now,) = holders_of(admin, lock)
    assert now != ended
    (message,) = errors(caplog)
    assert f"pid {owner.owner.pid} on host {owner.owner.host!r}" in message


def test_a_claim_asks_the_server_about_its_liveness_session_only_when_it_spoke(
    owner: PostgresStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A quiet liveness session costs a claim no round trip; the heartbeat still asks."""
    asked: list[int] = []
    holds = _postgres._holds

    def recorded(session: psycopg.Connection[Any], lock: int) -> bool:
        asked.append(lock)
        return holds(session, lock)

    monkeypatch.setattr(_postgres, "_holds", recorded)
    charge(owner, tmp_path / "effects")("k")
    assert asked == []
    owner._check_liveness()
    assert asked == [_owner_lock(owner.owner)]


def test_an_owner_whose_liveness_session_ended_is_lost_but_not_gone(
    owner: PostgresStore, admin: Admin, postgres_ledger: str
) -> None:
    """Another host calls an owner whose lock is free lost (a suspicion), never gone (proof)."""
    with get_store(postgres_ledger, host="host-b", lease=LONG_LEASE) as observer:
        before = observer._owner_lost(owner.owner)
        (ended,) = holders_of(admin, _owner_lock(owner.owner))
        terminate(admin, ended)
        warm_up = owner.get("warm-up")
        assert warm_up is not None
        after = (observer._owner_lost(owner.owner), observer._owner_gone(warm_up))
    assert (before, after) == (False, (True, False))


def test_readers_see_a_running_key_whose_owners_liveness_session_ended_in_doubt(
    owner: PostgresStore, admin: Admin, postgres_ledger: str
) -> None:
    """``get`` and ``list_in_doubt`` show the suspicion (SESSION_LOST) and write nothing."""
    owner._claim("held", "charge", "0" * 64, attempt_id="held-attempt", previous=None)
    (ended,) = holders_of(admin, _owner_lock(owner.owner))
    terminate(admin, ended)
    with get_store(postgres_ledger, host="host-b", lease=LONG_LEASE) as observer:
        seen = observer.get("held")
        listed = [(record.key, record.doubt_reason) for record in observer.list_in_doubt()]
        stored = observer._stored("held")
    assert seen is not None
    assert (seen.state, seen.doubt_reason) == (State.IN_DOUBT, DoubtReason.SESSION_LOST)
    assert listed == [("held", DoubtReason.SESSION_LOST)]
    assert stored is not None
    assert stored.state is State.ATTEMPTING  # a suspicion is only shown, never recorded here


def test_an_owners_lock_held_in_another_database_does_not_make_it_look_alive(
    postgres_ledger: str,
) -> None:
    """Advisory locks are per database: the owner's lock id held in another one is not its."""
    stranger = Owner(host="host-z", boot_id=uuid.uuid4().hex, pid=1, started=1)
    elsewhere = make_conninfo(POSTGRES, dbname="postgres")
    with (
        get_store(postgres_ledger, host="host-b", lease=LONG_LEASE) as observer,
        psycopg.connect(elsewhere, autocommit=True) as other_database,
    ):
        other_database.execute("SELECT pg_advisory_lock(%s)", (_owner_lock(stranger),))
        assert observer._owner_lost(stranger)


def test_stores_of_one_process_logged_in_as_two_roles_share_its_liveness_lock(
    postgres_ledger: str, login_as: Role, host: str, tmp_path: Path
) -> None:
    """A second store of the process, as another role, claims at once: one lock, one session."""
    effects = tmp_path / "effects"
    with (
        PostgresStore(postgres_ledger, host=host, lease=LONG_LEASE) as first,
        PostgresStore(login_as({}), host=host, lease=LONG_LEASE) as second,
    ):
        assert Succeeded("a", host) == charge(first, effects)("a")
        assert Succeeded("b", host) == charge(second, effects)("b")


def test_the_heartbeat_takes_back_the_lock_of_an_ended_liveness_session(
    postgres_ledger: str, admin: Admin, host: str, tmp_path: Path
) -> None:
    """While an action runs, the heartbeat gives its terminated liveness session a successor."""
    successors: list[list[int]] = []

    def cut_then_wait_for_the_heartbeat(key: str) -> None:
        lock = _owner_lock(this_process(host))
        (ended,) = holders_of(admin, lock)
        terminate(admin, ended)
        deadline = time.monotonic() + DEADLINE
        while holders_of(admin, lock) in ([], [ended]):
            assert time.monotonic() < deadline, "the heartbeat never took the lock back"
            time.sleep(0.05)
        successors.append(holders_of(admin, lock))

    with PostgresStore(postgres_ledger, host=host, lease=LONG_LEASE, heartbeat=0.1) as store:
        outcome = charge(store, tmp_path / "effects", during=cut_then_wait_for_the_heartbeat)("k")
    assert outcome == Succeeded("k", host)  # the test's own assertions in the action passed
    assert [len(holders) for holders in successors] == [1]


def test_owners_apart_only_by_machine_or_pid_namespace_have_locks_of_their_own() -> None:
    """Two containers' processes with one host name, boot id and pid are two liveness locks."""
    me = this_process()
    twins = [me, attrs.evolve(me, machine_id="another"), attrs.evolve(me, pid_namespace="1")]
    assert len({_owner_lock(owner) for owner in twins}) == len(twins)


def test_an_owner_without_machine_or_namespace_keeps_its_schema_2_lock() -> None:
    """A row of schema 2 names the lock its owner took then, so a live one is not seen lost."""
    old = Owner(host="h", boot_id="b", pid=7, started=70)
    identity = f"{old.host}\0{old.boot_id}\0{old.pid}\0{old.started}".encode()  # as then
    schema_2 = int.from_bytes(hashlib.sha256(identity).digest()[:8], "big", signed=True)
    assert _owner_lock(old) == schema_2


USE_AND_EXIT = """
import sys
from safeact import get_store, safe
store = get_store(sys.argv[1])


@safe(store, name="t")
def one(key: str) -> int:
    return 1


print(one("k").unwrap())
"""


def test_a_process_ends_its_liveness_session_when_it_exits(postgres_ledger: str) -> None:
    """An interpreter that claimed a key closes its liveness session at exit, not leaking it."""
    done = subprocess.run(
        [sys.executable, "-W", "always::ResourceWarning", "-c", USE_AND_EXIT, postgres_ledger],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "1\n", "")


FORK_AND_EXIT = """
import os, sys
import psycopg
from safeact import safe
from safeact._owner import this_process
from safeact._postgres import _HOLDERS, _halves, _owner_lock
from safeact.postgres import PostgresStore

store = PostgresStore(sys.argv[1], host="forking")


@safe(store, name="t")
def seven(key: str) -> int:
    return 7


seven("k")
child = os.fork()
if child == 0:
    sys.exit(0)  # a normal end: the exit handlers run
os.waitpid(child, 0)
lock = _owner_lock(this_process("forking"))
with psycopg.connect(sys.argv[1]) as db:
    print(len(db.execute(_HOLDERS, _halves(lock)).fetchall()))
"""


def test_a_forked_child_exiting_leaves_its_parents_liveness_session(postgres_ledger: str) -> None:
    """A child forked after a claim ends normally; its parent's session still holds the lock."""
    done = subprocess.run(
        [sys.executable, "-c", FORK_AND_EXIT, postgres_ledger],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "1\n", "")
