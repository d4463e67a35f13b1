"""Every wait of safeact on a PostgreSQL ledger is bounded, and says what it waited for.

Another session holds a lock on the ledger in an open transaction (a migration, a long
``ALTER TABLE``, an operator's ``LOCK TABLE``): every session of safeact gives up after
``LOCK_TIMEOUT`` (30 s, as a SQLite ledger waits; shortened here), whatever the connection
string or role say, with a ``StoreError`` naming the table and who holds its lock. The
blocking session takes its lock before safeact asks: nothing sleeps to synchronise.
"""

import contextlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from safeact import StoreError, Succeeded, _postgres, get_store
from safeact._owner import this_process
from safeact._postgres import _first_words, _owner_lock, migrate_postgres
from safeact._tables import SCHEMA_VERSION
from safeact.postgres import PostgresStore
from tests.actions import count_effects
from tests.test_postgres import DEADLINE, LONG_LEASE, Admin, charge

SHORT_LOCK_TIMEOUT = 0.5
"""Seconds safeact waits for a lock in these tests, in place of 30."""
BLOCKER = "safeact-test-blocker"
"""The application name of the session that holds the lock."""

Blocker = psycopg.Connection[tuple[object, ...]]


@pytest.fixture
def admin(postgres_ledger: str) -> Iterator[Admin]:
    """A session of the test's own, for making roles and looking at the others."""
    with psycopg.connect(postgres_ledger, autocommit=True) as connection:
        yield connection


@pytest.fixture
def short_wait(monkeypatch: pytest.MonkeyPatch) -> float:
    """Make safeact give up waiting for a lock after SHORT_LOCK_TIMEOUT."""
    monkeypatch.setattr(_postgres, "LOCK_TIMEOUT", SHORT_LOCK_TIMEOUT)
    return SHORT_LOCK_TIMEOUT


@pytest.fixture
def blocker(postgres_ledger: str) -> Iterator[Blocker]:
    """A session that the test has take locks in its open transaction, rolled back after.

    Should safeact wait without limit, the server ends this session after DEADLINE idle in
    its transaction: its locks go, safeact's wait ends, and the test fails instead of hanging.
    """
    options = conninfo_to_dict(postgres_ledger).get("options", "")
    watched = f"{options} -c idle_in_transaction_session_timeout={int(DEADLINE * 1000)}"
    dsn = make_conninfo(postgres_ledger, options=watched, application_name=BLOCKER)
    with psycopg.connect(dsn) as connection:
        yield connection
        with contextlib.suppress(psycopg.OperationalError):  # ended by the server: failed
            connection.rollback()


@pytest.fixture(params=["connection string", "role"])
def unbounded_dsn(
    request: pytest.FixtureRequest, postgres_ledger: str, admin: Admin
) -> Iterator[str]:
    """A DSN whose sessions start with no lock timeout: by its options, or its role's setting."""
    if request.param == "connection string":
        options = conninfo_to_dict(postgres_ledger).get("options", "")
        yield make_conninfo(postgres_ledger, options=f"{options} -c lock_timeout=0")
        return
    (schema,) = admin.execute("SELECT current_schema()").fetchone() or ("",)
    role = f"safeact_role_{uuid.uuid4().hex[:12]}"
    admin.execute(f"CREATE ROLE {role} LOGIN")
    admin.execute(f"ALTER ROLE {role} SET lock_timeout = 0")
    admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
    admin.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO {role}")
    admin.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA {schema} TO {role}")
    yield make_conninfo(postgres_ledger, user=role)
    admin.execute(
        "SELECT pg_terminate_backend(pid, %s) FROM pg_stat_activity WHERE usename = %s",
        (int(DEADLINE * 1000), role),
    )
    admin.execute(f"DROP OWNED BY {role}")
    admin.execute(f"DROP ROLE {role}")


def lock(blocker: Blocker, table: str, mode: str) -> int:
    """Have ``blocker`` lock ``table`` in ``mode`` until it ends its transaction; its pid."""
    blocker.execute(f"LOCK TABLE {table} IN {mode} MODE")
    return blocker.info.backend_pid


def test_every_session_waits_for_a_lock_30_s_whatever_the_dsn_or_role_say(
    unbounded_dsn: str,
) -> None:
    """Pooled sessions, in and out of a transaction, have lock_timeout 30 s, not the DSN's 0."""
    with PostgresStore(unbounded_dsn, lease=LONG_LEASE) as store:
        outside = store._read("SHOW lock_timeout", ())
        with store._transaction(sync=True) as db:
            inside = db.execute("SHOW lock_timeout").fetchall()
    assert (outside, inside) == ([("30s",)], [("30s",)])


@pytest.mark.parametrize("mode", ["ACCESS EXCLUSIVE", "EXCLUSIVE"])
def test_a_call_behind_a_lock_on_calls_fails_naming_the_table_and_its_holder(
    postgres_ledger: str, blocker: Blocker, short_wait: float, tmp_path: Path, mode: str
) -> None:
    """A lock on calls (reads wait, or only writes): the call raises StoreError; nothing ran."""
    effects = tmp_path / "effects"
    with get_store(postgres_ledger, lease=LONG_LEASE) as store:
        pid = lock(blocker, "calls", mode)
        with pytest.raises(StoreError) as raised:
            charge(store, effects)("k")
    message = str(raised.value)
    held = "".join(word.title() for word in mode.split()) + "Lock"  # as pg_locks names it
    first_words = " ".join(f"LOCK TABLE calls IN {mode} MODE".split()[:5])
    assert f"gave up after {short_wait:g} s waiting for a lock on the ledger" in message
    assert f"table calls: session {pid} (application {BLOCKER!r}" in message
    assert f"{first_words!r}) holds {held}" in message
    assert "pg_terminate_backend(pid)" in message
    assert count_effects(effects, "k") == 0


def test_the_lock_waited_for_is_let_go_and_the_next_call_runs(
    postgres_ledger: str, blocker: Blocker, short_wait: float, tmp_path: Path
) -> None:
    """After a call gave up behind a lock, nothing of it is left: once the lock goes, it runs."""
    effects = tmp_path / "effects"
    with get_store(postgres_ledger, lease=LONG_LEASE) as store:
        lock(blocker, "calls", "EXCLUSIVE")
        with pytest.raises(StoreError):
            charge(store, effects)("k")
        blocker.rollback()
        outcome = charge(store, effects)("k")
    assert (outcome, count_effects(effects, "k")) == (Succeeded("k", store.owner.host), 1)


CLI_WAITING_SHORTER = """
import runpy, sys
import safeact._postgres
safeact._postgres.LOCK_TIMEOUT = float(sys.argv.pop(1))
runpy.run_module("safeact", run_name="__main__", alter_sys=True)
"""
"""``python -m safeact ARGS...``, with its lock timeout the first argument."""


def test_the_command_line_behind_a_lock_on_calls_fails_naming_it(
    postgres_ledger: str, blocker: Blocker
) -> None:
    """`safeact ls` behind a lock on calls exits 2 with one line naming the table and holder."""
    pid = lock(blocker, "calls", "ACCESS EXCLUSIVE")
    listed = subprocess.run(
        [sys.executable, "-c", CLI_WAITING_SHORTER, str(SHORT_LOCK_TIMEOUT), "ls", postgres_ledger],
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )
    assert listed.returncode == 2, listed.stderr
    (line,) = listed.stderr.splitlines()
    assert line.startswith("safeact: error: ")
    assert f"table calls: session {pid} (application {BLOCKER!r}" in line


def test_opening_a_store_behind_a_migration_fails_naming_the_table(
    postgres_ledger: str, blocker: Blocker, short_wait: float
) -> None:
    """A lock on safeact_meta (a migration's) makes opening give up, naming it; nothing hangs."""
    pid = lock(blocker, "safeact_meta", "ACCESS EXCLUSIVE")
    with pytest.raises(StoreError, match=f"table safeact_meta: session {pid} "):
        PostgresStore(postgres_ledger, lease=LONG_LEASE)


def test_a_row_locked_by_another_transaction_is_named_by_the_servers_words(
    postgres_ledger: str, blocker: Blocker, short_wait: float
) -> None:
    """A resolve waiting for a key's row that another session locked gives up naming calls."""
    with get_store(postgres_ledger, lease=LONG_LEASE) as store:
        store._claim("held", "charge", "0" * 64, attempt_id="held-attempt", previous=None)
        blocker.execute("SELECT 1 FROM calls WHERE key = 'held' FOR UPDATE")
        with pytest.raises(StoreError, match=r'waiting for a lock on the ledger: .* "calls"'):
            store.resolve("held", happened=True, result="paid")


def test_a_liveness_lock_held_elsewhere_fails_the_claim_naming_its_holder(
    postgres_ledger: str, blocker: Blocker, short_wait: float, tmp_path: Path
) -> None:
    """Another session holding this process's liveness lock: the claim gives up, naming it."""
    host = f"host-{uuid.uuid4().hex[:12]}"
    blocker.execute("SELECT pg_advisory_lock(%s)", (_owner_lock(this_process(host)),))
    with (
        PostgresStore(postgres_ledger, host=host, lease=LONG_LEASE) as store,
        pytest.raises(StoreError) as raised,
    ):
        charge(store, tmp_path / "effects")("k")
    message = str(raised.value)
    assert "waiting for this process's liveness lock" in message
    assert f"held by session {blocker.info.backend_pid}" in message


def test_a_holders_query_is_shown_by_its_first_words_never_its_values() -> None:
    """pg_stat_activity shows literals; the message keeps only the words before the first one."""
    shown = [
        _first_words("LOCK TABLE calls IN ACCESS EXCLUSIVE MODE"),
        _first_words("ALTER ROLE app PASSWORD 'hunter2'"),
        _first_words("UPDATE calls SET result = '{\"card\": 4242}' WHERE key = $1"),
        _first_words("select 1 as password"),
    ]
    assert shown == [
        "LOCK TABLE calls IN ACCESS",
        "ALTER ROLE app",
        "UPDATE calls SET result =",
        "select 1 as",
    ]


def test_a_migration_behind_a_reader_gives_up_and_leaves_the_ledger_as_it_was(
    empty_postgres: str, short_wait: float
) -> None:
    """Altering a table another transaction reads waits LOCK_TIMEOUT, then says so; unchanged."""
    from tests.test_schema import POSTGRES_DUMPS

    with psycopg.connect(empty_postgres) as setup:
        setup.execute(POSTGRES_DUMPS[3].read_text())
    # Should the migration wait without limit, the server ends the reader after DEADLINE.
    options = conninfo_to_dict(empty_postgres).get("options", "")
    watched = f"{options} -c idle_in_transaction_session_timeout={int(DEADLINE * 1000)}"
    with psycopg.connect(make_conninfo(empty_postgres, options=watched)) as reader:
        reader.execute("SELECT count(*) FROM calls")  # its lock stays until it ends
        with pytest.raises(StoreError, match=r"gave up after 0\.5 s waiting for a lock") as raised:
            migrate_postgres(empty_postgres)
        reader.rollback()
    assert "was rolled back" in str(raised.value)
    with psycopg.connect(empty_postgres) as check:
        assert check.execute("SELECT version FROM safeact_meta").fetchall() == [(3,)]
    assert migrate_postgres(empty_postgres) == (3, SCHEMA_VERSION)
