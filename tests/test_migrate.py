"""Schema versions: an older ledger is refused untouched until it is migrated, explicitly.

That a migrated ledger has exactly the schema of a new one is tests/test_schema.py's.
"""

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from safeact import DoubtReason, State, StoreError, Why, get_store, safe
from safeact._owner import Owner
from safeact._schema import migrate, prepare
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
        records = {record.key: record for record in store.records()}
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
        # An owner without a machine id is judged as before: by host name, boot and process.
        assert store._owner_gone(records["running-2"].owner)


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
