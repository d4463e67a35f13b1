"""Schema versions: an older ledger is refused untouched until it is migrated, explicitly.

That a migrated ledger has exactly the schema of a new one is tests/test_schema.py's.
"""

import concurrent.futures
import hashlib
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from safeact import (
    ApprovalState,
    AwaitingApproval,
    DoubtReason,
    InDoubt,
    State,
    StoreError,
    Succeeded,
    Why,
    get_store,
    safe,
)
from safeact._owner import Owner
from safeact._schema import migrate, prepare
from safeact._shape import shape_text
from safeact._tables import SCHEMA_VERSION

V1 = Path(__file__).with_name("data") / "ledger-v1.db"
"""A ledger written by safeact 0.1.0 (schema 1): keys paid-1 (succeeded, 5), declined-1
(failed), doubt-1 (in doubt) and the saga order-1 (completed), all of tool tests.charge."""
V2 = Path(__file__).with_name("data") / "ledger-v2.db"
"""A ledger written at schema 2 (commit 4eacb99) by a process of host ledger-v2-host: keys
paid-2 (succeeded, 5), declined-2 (failed), doubt-2 (in doubt, interrupted) and running-2
(attempting; its process has long exited), all of tool tests.charge, with their history."""
V2_OWNER = Owner("ledger-v2-host", "5a6463b3-ad0f-4727-9947-bbced0800950", 25926, 110924)
"""Who wrote every key of V2: no machine id or PID namespace (schema 2 had none)."""
V3 = Path(__file__).with_name("data") / "ledger-v3.db"
"""A ledger written at schema 3 (commit fd6c73b) by a process of host ledger-v3-host: keys
paid-3 (succeeded, 5), declined-3 (failed), doubt-3 (in doubt, interrupted) and running-3
(attempting; its process has long exited), all of tool tests.charge."""
V3_OWNER = Owner(
    "ledger-v3-host",
    "18cdbfc1-8091-45f2-bfc8-d9652138c86e",
    4731,
    112920,
    machine_id="3d1219c7c4c5404aaa1f6d2a48adfda4",
    pid_namespace="4026531836",
)
"""Who wrote every key of V3: systemd's machine id, no process group (schema 3 had none)."""
V4 = Path(__file__).with_name("data") / "ledger-v4.db"
"""A ledger written at schema 4 (the tree before schema 5, issue 30) by processes of host
ledger-v4-host: keys paid-4 (succeeded, 5), declined-4 (failed, ValueError), doubt-4 (in doubt,
interrupted) and running-4 (attempting; a child process exited inside the action), all of tool
tests.charge (``charge(key, amount: int) -> int``), with their history; no tool described its
results (schema 4 had no tools table)."""
V5 = Path(__file__).with_name("data") / "ledger-v5.db"
"""A ledger written at schema 5 (commit 60dc051) by processes of host ledger-v5-host: keys
paid-5 (succeeded, 5), declined-5 (failed, ValueError), doubt-5 (in doubt, interrupted) and
running-5 (attempting; a child process exited inside the action), all of tool tests.charge
(``charge(key, amount: int) -> int``, described in its tools table), with their history; no
approvals and no arguments (schema 5 had neither)."""
POSTGRES_V5 = Path(__file__).with_name("data") / "postgres-v5.sql"
"""The same keys, written by the same safeact on PostgreSQL: its schema, version row and rows."""
V6 = Path(__file__).with_name("data") / "ledger-v6.db"
"""A ledger written at schema 6 (the tree before schema 7, issue 36) by processes of host
ledger-v6-host: keys paid-6 (succeeded, 6), declined-6 (failed, ValueError), doubt-6 (in doubt,
interrupted) and running-6 (attempting; a child process exited inside the action) of tool
tests.charge (``charge(key, amount: int) -> int``), and wire-6 of tool tests.wire, which needs
approval and keeps its arguments (pending), with their history; no counts (schema 6 had none)."""
POSTGRES_V6 = Path(__file__).with_name("data") / "postgres-v6.sql"
"""The same keys, written by the same safeact on PostgreSQL: its schema, version row and rows."""


@pytest.fixture
def old_ledger(tmp_path: Path) -> Path:
    copy = tmp_path / "old.db"
    shutil.copyfile(V1, copy)
    return copy


@pytest.fixture
def v2_ledger(tmp_path: Path) -> Path:
    copy = tmp_path / "v2.db"
    shutil.copyfile(V2, copy)
    return copy


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def names_in(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def version_of(path: Path) -> int:
    connection = sqlite3.connect(path)
    try:
        return int(connection.execute("PRAGMA user_version").fetchone()[0])
    finally:
        connection.close()


def test_an_older_ledger_is_refused_untouched(old_ledger: Path) -> None:
    """Opening a schema-1 ledger raises StoreError naming `safeact migrate`; no byte changes."""
    before = old_ledger.read_bytes()
    with pytest.raises(StoreError, match=r"schema version 1, older .* `safeact migrate "):
        get_store(old_ledger)
    assert old_ledger.read_bytes() == before
    assert version_of(old_ledger) == 1


def test_migrate_upgrades_and_keeps_every_record(old_ledger: Path) -> None:
    """After migrate, the old keys replay as before and new calls get a history."""
    assert migrate(old_ledger) == (1, SCHEMA_VERSION)
    with get_store(old_ledger) as store:

        @safe(store, name="tests.charge")
        def charge(key: str, amount: int) -> int:
            raise AssertionError

        assert charge("paid-1", 5).unwrap() == 5
        assert [r.key for r in store.list_in_doubt()] == ["doubt-1"]
        declined = store.get("declined-1")
        assert declined is not None
        assert declined.state is State.FAILED
        saga = store.get_saga("order-1")
        assert saga is not None
        assert saga.steps == ("order-1:0:tests.charge",)
        assert store.history("paid-1") == []
        store.resolve("doubt-1", happened=False, note="checked after the upgrade")
        assert [e.why for e in store.history("doubt-1")] == [Why.RESOLVED]


def test_migrate_keeps_a_copy_of_the_old_file(old_ledger: Path) -> None:
    """The old ledger is copied beside it first, still at schema 1 with the same rows."""
    migrate(old_ledger)
    backup = old_ledger.with_name("old.db.v1.bak")
    assert version_of(backup) == 1
    connection = sqlite3.connect(backup)
    try:
        keys = connection.execute("SELECT key, state FROM calls ORDER BY key").fetchall()
    finally:
        connection.close()
    assert keys == [
        ("declined-1", "failed"),
        ("doubt-1", "in_doubt"),
        ("order-1:0:tests.charge", "succeeded"),
        ("paid-1", "succeeded"),
    ]
    migrate(old_ledger)  # a second migrate finds nothing to do and copies nothing
    assert sorted(p.name for p in old_ledger.parent.iterdir() if ".bak" in p.name) == [
        "old.db.v1.bak"
    ]


def test_migrating_a_current_ledger_changes_nothing(ledger: Path) -> None:
    """Migrating an up-to-date ledger reports it and makes no copy."""
    get_store(ledger).close()
    assert migrate(ledger) == (SCHEMA_VERSION, SCHEMA_VERSION)
    assert not list(ledger.parent.glob("*.bak"))


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no ledger"), (b"", "empty file"), (b"hello", "not a database")],
    ids=["missing", "empty", "not-sqlite"],
)
def test_migrate_refuses_what_is_not_a_ledger(
    ledger: Path, content: bytes | None, message: str
) -> None:
    """A missing, empty or foreign file is refused with StoreError."""
    if content is not None:
        ledger.write_bytes(content)
    with pytest.raises(StoreError, match=message):
        migrate(ledger)


MIGRATE = (
    "import sys; from pathlib import Path; from safeact._schema import migrate; "
    "print(migrate(Path(sys.argv[1])))"
)


def test_many_processes_migrating_at_once_upgrade_once(old_ledger: Path) -> None:
    """Four workers migrating together: all succeed, one upgrade, one copy of the old file."""
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", MIGRATE, str(old_ledger)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    reports = [worker.communicate(timeout=120) for worker in workers]
    assert [worker.returncode for worker in workers] == [0] * 4, reports
    assert sorted(out.strip() for out, _ in reports).count(f"(1, {SCHEMA_VERSION})") == 1
    assert len(list(old_ledger.parent.glob("*.bak*"))) == 1
    assert version_of(old_ledger) == SCHEMA_VERSION


def test_opening_refuses_an_older_ledger_swapped_in_after_the_check(old_ledger: Path) -> None:
    """A file swapped for an older ledger after the read-only check is refused under the lock."""
    connection = sqlite3.connect(old_ledger, isolation_level=None)
    try:
        with pytest.raises(StoreError, match="older than this safeact"):
            prepare(connection, old_ledger)
    finally:
        connection.close()
    assert version_of(old_ledger) == 1


HOT_WAL = (
    "import os, sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
    "c.execute('PRAGMA wal_autocheckpoint = 0'); "
    "c.execute(\"UPDATE calls SET error_message = 'hot' WHERE key = 'paid-1'\"); os._exit(0)"
)


def test_an_older_ledger_with_a_hot_wal_is_refused_without_a_checkpoint(old_ledger: Path) -> None:
    """Refusing an older ledger never checkpoints its WAL: the file and its WAL stay as they are."""
    subprocess.run([sys.executable, "-c", HOT_WAL, str(old_ledger)], check=True)
    wal = old_ledger.with_name("old.db-wal")
    before = (old_ledger.read_bytes(), wal.read_bytes())
    assert before[1]
    with pytest.raises(StoreError, match="older than this safeact"):
        get_store(old_ledger)
    assert (old_ledger.read_bytes(), wal.read_bytes()) == before


def test_a_schema_2_ledger_is_refused_untouched(v2_ledger: Path) -> None:
    """A ledger without owners' machine ids is refused, unchanged, until `safeact migrate`."""
    before = v2_ledger.read_bytes()
    with pytest.raises(StoreError, match=r"schema version 2, older .* `safeact migrate "):
        get_store(v2_ledger)
    assert v2_ledger.read_bytes() == before
    assert version_of(v2_ledger) == 2


def test_migrating_a_schema_2_ledger_keeps_its_keys_and_history(v2_ledger: Path) -> None:
    """After migrate, every key and event is as it was; owners have no machine or namespace."""
    assert migrate(v2_ledger) == (2, SCHEMA_VERSION)
    assert version_of(v2_ledger.with_name("v2.db.v2.bak")) == 2
    with get_store(v2_ledger, host="ledger-v2-host") as store:

        @safe(store, name="tests.charge")
        def charge(key: str, amount: int) -> int:
            raise AssertionError

        assert charge("paid-2", 5).unwrap() == 5
        # The rows as written (migrated), not as read: running-2's owner is gone from here.
        records = {r.key: store._stored(r.key) or r for r in store.records()}
        assert {key: record.state for key, record in records.items()} == {
            "declined-2": State.FAILED,
            "doubt-2": State.IN_DOUBT,
            "paid-2": State.SUCCEEDED,
            "running-2": State.ATTEMPTING,
        }
        assert records["declined-2"].error_type == "ValueError"
        assert records["doubt-2"].doubt_reason is DoubtReason.INTERRUPTED
        assert {record.owner for record in records.values()} == {V2_OWNER}
        assert [e.why for e in store.history("paid-2")] == [Why.CLAIMED, Why.RAN]
        # An owner of an older schema recorded no process group (nor safeact's identity of
        # its machine): its process proves nothing, a probe or an operator decides.
        assert not store._owner_gone(records["running-2"])


def test_migrating_a_schema_3_ledger_keeps_its_keys_and_judges_no_owner_by_its_process(
    tmp_path: Path,
) -> None:
    """After migrate, every key is as it was, and an owner of schema 3 is not judged gone."""
    copy = tmp_path / "v3.db"
    shutil.copyfile(V3, copy)
    with pytest.raises(StoreError, match=r"schema version 3, older .* `safeact migrate "):
        get_store(copy)
    assert migrate(copy) == (3, SCHEMA_VERSION)
    with get_store(copy, host="ledger-v3-host") as store:
        records = {r.key: store._stored(r.key) or r for r in store.records()}
        assert {key: record.state for key, record in records.items()} == {
            "declined-3": State.FAILED,
            "doubt-3": State.IN_DOUBT,
            "paid-3": State.SUCCEEDED,
            "running-3": State.ATTEMPTING,
        }
        assert {record.owner for record in records.values()} == {V3_OWNER}
        # Its owner is judged by nothing it recorded: another boot under systemd's machine
        # id is no proof of a reboot (tests/test_owner.py has each rule on its own).
        assert not store._owner_gone(records["running-3"])
        seen = store.get("running-3")
        assert seen is not None
        assert seen.doubt_reason is DoubtReason.LEASE_EXPIRED  # suspicion, not CRASHED


def test_migrating_a_schema_4_ledger_keeps_its_keys_and_describes_tools_at_their_next_claim(
    tmp_path: Path,
) -> None:
    """After migrate, every key is as it was; a tool's description comes with its next claim."""
    copy = tmp_path / "v4.db"
    shutil.copyfile(V4, copy)
    with pytest.raises(StoreError, match=r"schema version 4, older .* `safeact migrate "):
        get_store(copy)
    assert migrate(copy) == (4, SCHEMA_VERSION)
    assert version_of(copy.with_name("v4.db.v4.bak")) == 4
    with get_store(copy, host="ledger-v4-host") as store:
        records = {r.key: store._stored(r.key) or r for r in store.records()}
        assert {key: record.state for key, record in records.items()} == {
            "declined-4": State.FAILED,
            "doubt-4": State.IN_DOUBT,
            "paid-4": State.SUCCEEDED,
            "running-4": State.ATTEMPTING,
        }
        assert [e.why for e in store.history("paid-4")] == [Why.CLAIMED, Why.RAN]
        assert store._result_shape("tests.charge") is None

        @safe(store, name="tests.charge")
        def charge(key: str, amount: int) -> int:
            return amount

        assert charge("paid-4", 5) == Succeeded("paid-4", 5, replayed=True)
        assert store._result_shape("tests.charge") is None  # a replay claims nothing
        assert charge("new-5", 6) == Succeeded("new-5", 6)
        assert store._result_shape("tests.charge") == shape_text(int)


def migrated(request: pytest.FixtureRequest, tmp_path: Path, version: int) -> str:
    """The ledger of schema ``version``, migrated: its location.

    SQLite's file, or PostgreSQL's dump in an empty schema, by ``request.param``.
    """
    if request.param == "sqlite":
        copy = tmp_path / f"v{version}.db"
        shutil.copyfile({5: V5, 6: V6}[version], copy)
        assert migrate(copy) == (version, SCHEMA_VERSION)
        return str(copy)
    import psycopg

    from safeact._postgres import migrate_postgres

    dsn: str = request.getfixturevalue("empty_postgres")
    with psycopg.connect(dsn) as connection:
        connection.execute({5: POSTGRES_V5, 6: POSTGRES_V6}[version].read_text())
    assert migrate_postgres(dsn) == (version, SCHEMA_VERSION)
    return dsn


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def migrated_v5(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The schema-5 ledger (V5, or POSTGRES_V5 in an empty schema), migrated: its location."""
    return migrated(request, tmp_path, 5)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def migrated_v6(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The schema-6 ledger (V6, or POSTGRES_V6 in an empty schema), migrated: its location."""
    return migrated(request, tmp_path, 6)


def test_migrating_a_schema_6_ledger_counts_its_settled_keys_and_keeps_counting(
    migrated_v6: str,
) -> None:
    """The keys of before are counted by the migration, and the keys' changes after it."""
    settled = (State.SUCCEEDED, State.FAILED, State.RELEASED)
    with get_store(migrated_v6, host="ledger-v6-host") as store:

        def counted() -> dict[tuple[str, State], int]:
            return {group: n for group, n in store.counts().items() if group[1] in settled}

        assert counted() == {
            ("tests.charge", State.SUCCEEDED): 1,
            ("tests.charge", State.FAILED): 1,
        }
        assert [a.key for a in store.approvals()] == ["wire-6"]

        @safe(store, name="tests.charge")
        def charge(key: str, amount: int) -> int:
            return amount

        assert charge("paid-6", 6) == Succeeded("paid-6", 6, replayed=True)
        assert charge("new-7", 7) == Succeeded("new-7", 7)
        store.resolve("doubt-6", happened=False, note="no charge")
        assert counted() == {
            ("tests.charge", State.SUCCEEDED): 2,
            ("tests.charge", State.FAILED): 1,
            ("tests.charge", State.RELEASED): 1,
        }


@pytest.mark.postgres
def test_a_postgres_migration_counts_a_key_settled_while_it_runs_once(empty_postgres: str) -> None:
    """A write in flight when the migration starts is counted once: by the count, or the trigger.

    The migration's trigger waits for the writes in flight to end and keeps new ones out
    until it commits; its count comes after, so it sees every key settled before.
    """
    import psycopg

    from safeact._postgres import migrate_postgres

    with psycopg.connect(empty_postgres, autocommit=True) as admin:
        admin.execute(POSTGRES_V6.read_text())
        with psycopg.connect(empty_postgres) as writer:  # settles running-6, and waits
            writer.execute("UPDATE calls SET state = 'succeeded' WHERE key = 'running-6'")
            migrated = concurrent.futures.ThreadPoolExecutor(1).submit(
                migrate_postgres, f"{empty_postgres}&application_name=migrating-v6"
            )
            deadline = time.monotonic() + 20
            while not admin.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = 'migrating-v6' "
                "AND wait_event_type = 'Lock'"
            ).fetchall():
                assert time.monotonic() < deadline, "the migration never waited for the write"
                assert not migrated.done(), migrated.result()
                time.sleep(0.01)
            writer.commit()
        assert migrated.result(timeout=20) == (6, SCHEMA_VERSION)
    with get_store(empty_postgres) as store:
        assert store.counts()[("tests.charge", State.SUCCEEDED)] == 2


def test_migrating_a_schema_5_ledger_keeps_its_keys_and_history(migrated_v5: str) -> None:
    """After migrate, every key is as it was: a settled key replays, one in doubt stays so."""
    with get_store(migrated_v5, host="ledger-v5-host") as store:
        records = {r.key: store._stored(r.key) or r for r in store.records()}
        assert {key: record.state for key, record in records.items()} == {
            "declined-5": State.FAILED,
            "doubt-5": State.IN_DOUBT,
            "paid-5": State.SUCCEEDED,
            "running-5": State.ATTEMPTING,
        }
        assert [e.why for e in store.history("paid-5")] == [Why.CLAIMED, Why.RAN]

        @safe(store, name="tests.charge")
        def charge(key: str, amount: int) -> int:
            return amount

        assert charge("paid-5", 5) == Succeeded("paid-5", 5, replayed=True)
        doubt = charge("doubt-5", 5)
        assert isinstance(doubt, InDoubt)
        # Its reason is not pinned: a machine that proves the writer gone says CRASHED.
        assert doubt.attempt_id == records["doubt-5"].attempt_id


def test_a_migrated_schema_5_ledger_has_no_approvals_and_no_arguments(migrated_v5: str) -> None:
    """Its approvals table is empty and no key of before kept its arguments."""
    with get_store(migrated_v5, host="ledger-v5-host") as store:
        assert store.approvals(state=None) == []
        assert {r.key: (store._stored(r.key) or r).arguments for r in store.records()} == {
            "declined-5": None,
            "doubt-5": None,
            "paid-5": None,
            "running-5": None,
        }


def test_a_gated_tool_on_a_migrated_schema_5_ledger_asks_for_new_keys_only(
    migrated_v5: str,
) -> None:
    """Keys of before are decided as they were, unasked; a new key waits, then runs once."""
    with get_store(migrated_v5, host="ledger-v5-host") as store:

        @safe(store, name="tests.charge", approval=True)
        def charge(key: str, amount: int) -> int:
            return amount

        assert charge("paid-5", 5) == Succeeded("paid-5", 5, replayed=True)
        assert isinstance(charge("doubt-5", 5), InDoubt)
        assert isinstance(charge("new-6", 6), AwaitingApproval)
        assert [a.key for a in store.approvals()] == ["new-6"]
        charge.approve("new-6", by="ada")
        assert charge("new-6", 6) == Succeeded("new-6", 6)
        consumed = store.approval("new-6")
        assert consumed is not None
        assert consumed.state is ApprovalState.CONSUMED


def test_a_claim_records_its_owners_machine_and_pid_namespace(ledger: Path) -> None:
    """The columns new in schema 3 hold the claiming process's machine id and PID namespace."""
    with get_store(ledger) as store:
        claimed = store._claim("k", "t", "h", attempt_id="a", previous=None)
        assert claimed is not None
        assert store.get("k") == claimed
    connection = sqlite3.connect(ledger)
    try:
        row = connection.execute("SELECT owner_machine, owner_pidns FROM calls").fetchone()
    finally:
        connection.close()
    assert row == (claimed.owner.machine_id, claimed.owner.pid_namespace)
    assert claimed.owner.pid_namespace


TAMPERED = {
    "schema 1 with a history table made by hand": (
        V1,
        "CREATE TABLE history (seq INTEGER PRIMARY KEY)",
        1,
        "table history already exists",
    ),
    # The first of the step's two columns is added before the second fails.
    "schema 2 with one of its new columns added by hand": (
        V2,
        "ALTER TABLE calls ADD COLUMN owner_pidns TEXT",
        2,
        "duplicate column name: owner_pidns",
    ),
    "schema 4 with a tools table made by hand": (
        V4,
        "CREATE TABLE tools (name TEXT PRIMARY KEY)",
        4,
        "table tools already exists",
    ),
    # The step's new column is added before its new table fails.
    "schema 5 with an approvals table made by hand": (
        V5,
        "CREATE TABLE approvals (key TEXT PRIMARY KEY)",
        5,
        "table approvals already exists",
    ),
}


@pytest.mark.parametrize(
    ("original", "tampering", "version", "reason"), TAMPERED.values(), ids=TAMPERED
)
def test_a_migration_that_fails_leaves_the_ledger_as_it_was_and_says_what_to_do(
    tmp_path: Path, original: Path, tampering: str, version: int, reason: str
) -> None:
    """A step that fails rolls the whole migration back: same bytes, no copy, what to do."""
    ledger = tmp_path / "old.db"
    shutil.copyfile(original, ledger)
    connection = sqlite3.connect(ledger)
    try:
        connection.execute(tampering)
        connection.commit()
    finally:
        connection.close()
    before = sha256(ledger)
    with pytest.raises(StoreError) as raised:
        migrate(ledger)
    assert str(raised.value) == (
        f"{ledger}: migrating from schema {version} to {SCHEMA_VERSION} failed ({reason}); it "
        f"was rolled back: the ledger is unchanged, at schema {version}, and no copy was kept. "
        f"To do: its tables are not as a safeact of schema {version} left them (changed "
        "outside safeact?): restore the ledger from a backup, or report it to safeact with "
        "this message"
    )
    assert sha256(ledger) == before
    assert names_in(tmp_path) == ["old.db"]


FILES_LIMITED = """
import resource, signal, sys
from pathlib import Path
from safeact import StoreError
from safeact._schema import migrate

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead (EFBIG)
limit = int(sys.argv[2])
unlimited = resource.getrlimit(resource.RLIMIT_FSIZE)
# The migration's files only: coverage writes this process's data file as it exits.
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, unlimited[1]))
try:
    migrate(Path(sys.argv[1]))
except StoreError as exc:
    print(exc)
finally:
    resource.setrlimit(resource.RLIMIT_FSIZE, unlimited)
"""
"""Migrate in a process whose files may not grow past a limit, as on a disk that fills up."""


def test_a_copy_that_cannot_be_written_leaves_no_partial_copy_and_says_what_to_do(
    v2_ledger: Path,
) -> None:
    """The copy's last page cannot be written: same bytes, no partial copy; then it migrates."""
    before = sha256(v2_ledger)
    limit = v2_ledger.stat().st_size - 4096  # the ledger's WAL index (32 KiB) still fits
    result = subprocess.run(
        [sys.executable, "-c", FILES_LIMITED, str(v2_ledger), str(limit)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert result.stdout == (
        f"{v2_ledger}: copying the ledger to {v2_ledger}.v2.bak before migrating it failed "
        "(disk I/O error); nothing was changed and no copy was kept. To do: writing to the "
        f"disk failed: check its free space and health, then run `safeact migrate {v2_ledger}` "
        "again\n"
    )
    assert sha256(v2_ledger) == before
    assert names_in(v2_ledger.parent) == ["v2.db"]
    assert migrate(v2_ledger) == (2, SCHEMA_VERSION)  # doing what it said
    assert names_in(v2_ledger.parent) == ["v2.db", "v2.db.v2.bak"]


def test_the_command_line_reports_a_failed_migration_in_one_line(v2_ledger: Path) -> None:
    """`safeact migrate` of a ledger whose migration fails: exit 2, its one line on stderr."""
    connection = sqlite3.connect(v2_ledger)
    try:
        connection.execute("ALTER TABLE calls ADD COLUMN owner_machine TEXT")
        connection.commit()
    finally:
        connection.close()
    result = subprocess.run(
        [sys.executable, "-m", "safeact", "migrate", str(v2_ledger)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (result.returncode, result.stdout) == (2, "")
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        f"safeact: error: {v2_ledger}: migrating from schema 2 to {SCHEMA_VERSION} failed "
        "(duplicate column name: owner_machine); it was rolled back"
    )
    assert version_of(v2_ledger) == 2
