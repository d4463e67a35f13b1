"""One Store, two databases: which one a location opens, and what each costs to import."""

import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from safeact import SqliteStore, Store, get_store, safe
from safeact.postgres import PostgresStore


def test_a_path_opens_sqlite_and_a_url_opens_postgresql(ledger: Path, postgres_ledger: str) -> None:
    """get_store and safe() pick the backend from the location."""
    with get_store(ledger) as by_path, get_store(postgres_ledger) as by_url:
        assert type(by_path) is SqliteStore
        assert type(by_url) is PostgresStore
        assert safe(postgres_ledger)(noop).store.location == postgres_ledger


def noop(key: str) -> None:
    pass


def test_import_safeact_does_not_need_the_postgres_extra() -> None:
    """SQLite users never import psycopg: `import safeact` leaves it alone."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, safeact; print('psycopg' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout == "False\n"


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://agent:s3cret@db/agents", "postgresql://agent:***@db/agents"),
        ("host=db user=agent password=s3cret", "host=db user=agent password=***"),
        ("postgresql://agent@db/agents", "postgresql://agent@db/agents"),
        ("host=db password='s3 cr\\'et' user=agent", "host=db password=*** user=agent"),
        ("host=db password = s3cret", "host=db password=***"),
        (
            "postgresql://db/agents?password=s3cret&sslmode=require",
            "postgresql://db/agents?password=***&sslmode=require",
        ),
    ],
)
def test_a_postgres_location_never_shows_the_password(dsn: str, shown: str) -> None:
    """Messages and reprs name the database without its password."""
    from safeact._postgres import _without_password

    assert _without_password(dsn) == shown


def seven(key: str) -> int:
    return 7


def test_two_stores_of_one_process_share_its_liveness(postgres_ledger: str) -> None:
    """Two stores of one process on one database both claim; one closing keeps it alive."""
    with get_store(postgres_ledger) as first, get_store(postgres_ledger) as second:
        assert safe(first, name="a")(seven)("k1").unwrap() == 7
        assert safe(second, name="b")(seven)("k2").unwrap() == 7
        first.close()
        record = second.get("k2")
        assert record is not None
        assert not second._owner_gone(attrs.evolve(record, owner=second.owner))


def test_a_claims_owner_is_read_back_whole(store: Store) -> None:
    """The owner's machine id and PID namespace are stored with a claim and read back."""
    claimed = store._claim("k", "t", "h", attempt_id="a", previous=None)
    assert claimed is not None
    assert claimed.owner == store.owner
    assert store.owner.pid_namespace
    assert store.get("k") == claimed
