"""One declared schema: migrated ledgers equal new ones, and SQLite and PostgreSQL agree.

A new ledger is rendered from ``safeact._tables``; an older one is taken forward by each
backend's historical migration steps. These tests read the schema back from the database
(pragmas and ``sqlite_master``; PostgreSQL's catalogs), not from the SQL that made it, so
they go red when the declaration, a renderer or a migration step drifts.
"""

import contextlib
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from safeact import get_store
from safeact._postgres import _MIGRATIONS as POSTGRES_STEPS
from safeact._schema import _MIGRATIONS, migrate
from safeact._tables import SCHEMA_VERSION

DATA = Path(__file__).with_name("data")
SQLITE_LEDGERS = {version: DATA / f"ledger-v{version}.db" for version in (1, 2, 3, 4, 5, 6)}
"""A ledger file of each older version, as its safeact wrote it (see tests/test_migrate.py)."""
POSTGRES_DUMPS = {version: DATA / f"postgres-v{version}.sql" for version in (2, 3, 4, 5, 6)}
"""What a safeact of each older PostgreSQL schema version created (PostgreSQL began at 2).

The ones of schemas 5 and 6 hold the rows that safeact wrote too (see tests/test_migrate.py).
"""
POSTGRES_V2 = POSTGRES_DUMPS[2]
"""What a safeact of schema 2, the first on PostgreSQL, created in an empty schema."""
POSTGRES_CATALOG = {
    "columns": "SELECT table_name, ordinal_position, column_name, data_type, is_nullable, "
    "column_default, is_identity, identity_generation FROM information_schema.columns "
    "WHERE table_schema = current_schema() ORDER BY 1, 2",
    "constraints": "SELECT conrelid::regclass::text, conname, contype, pg_get_constraintdef(oid) "
    "FROM pg_constraint WHERE connamespace = current_schema()::regnamespace ORDER BY 1, 2",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes "
    "WHERE schemaname = current_schema() ORDER BY 1, 2",
    "triggers": "SELECT event_object_table, trigger_name, event_manipulation, action_timing, "
    "action_orientation, action_condition, action_statement FROM information_schema.triggers "
    "WHERE trigger_schema = current_schema() ORDER BY 1, 2, 3",
    "functions": "SELECT proname, prosrc FROM pg_proc "
    "WHERE pronamespace = current_schema()::regnamespace ORDER BY 1",
    "meta": "SELECT application, version FROM safeact_meta",
}
"""Where PostgreSQL shows each part of a ledger's schema (the current schema's only)."""


def spaced(sql: str) -> str:
    """``sql`` without its layout: one space between words, none around parentheses or commas."""
    return re.sub(r"\s*([(),])\s*", r"\1", " ".join(sql.split()))


def checks_in(sql: str) -> list[str]:
    """The parenthesised condition of every CHECK in a CREATE TABLE statement, ``spaced``."""
    found = []
    for match in re.finditer(r"\bCHECK\s*\(", sql, re.IGNORECASE):
        start, depth = match.end() - 1, 0
        for end in range(start, len(sql)):
            depth += {"(": 1, ")": -1}.get(sql[end], 0)
            if depth == 0:
                found.append(spaced(sql[start : end + 1]))
                break
    return sorted(found)


def one_of(condition: str) -> tuple[str, list[str]]:
    """A condition ``column IN (values)``, in either database's spelling: column and values."""
    column = re.search(r"\b(?!CHECK\b)[a-z_]+\b", condition)
    assert column is not None, condition
    return column[0], sorted(re.findall(r"'([^']*)'", condition))


def read_only(path: Path) -> contextlib.closing[sqlite3.Connection]:
    return contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True))


def sqlite_tables(path: Path) -> dict[str, dict[str, Any]]:
    """Each table of a SQLite ledger, as its pragmas and ``sqlite_master`` show it.

    Its columns (type, NOT NULL, default, position in the key), WITHOUT ROWID, references,
    CHECKs, and indexes with their columns and WHERE.
    """
    with read_only(path) as db:
        sql_of = dict(db.execute("SELECT name, sql FROM sqlite_master").fetchall())
        tables = {}
        for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            indexes = []
            for index, unique, origin, partial in db.execute(
                'SELECT name, "unique", origin, partial FROM pragma_index_list(?)', (name,)
            ).fetchall():
                info = db.execute("SELECT name FROM pragma_index_info(?) ORDER BY seqno", (index,))
                # A key's own index has no SQL.
                where = re.search(r"\bWHERE (.*)$", spaced(sql_of.get(index) or ""))
                columns = [column for (column,) in info]
                indexes.append((index, unique, origin, partial, columns, where and where[1]))
            tables[name] = {
                "columns": db.execute(
                    'SELECT cid, name, type, "notnull", dflt_value, pk FROM pragma_table_info(?)',
                    (name,),
                ).fetchall(),
                "without_rowid": db.execute(
                    "SELECT wr FROM pragma_table_list WHERE name = ?", (name,)
                ).fetchone()[0],
                "references": db.execute(
                    'SELECT "from", "table", "to" FROM pragma_foreign_key_list(?)', (name,)
                ).fetchall(),
                "checks": checks_in(sql_of[name]),
                "indexes": sorted(indexes),
            }
    return tables


def sqlite_schema(path: Path) -> dict[str, Any]:
    """``sqlite_tables``, the triggers (``spaced``), and the header's application id and version."""
    with read_only(path) as db:
        triggers = db.execute(
            "SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
        ).fetchall()
        header = db.execute(
            "SELECT application_id, user_version FROM pragma_application_id, pragma_user_version"
        ).fetchone()
    return {
        "tables": sqlite_tables(path),
        "triggers": [(name, table, spaced(sql)) for name, table, sql in triggers],
        "header": header,
    }


def postgres_schema(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    """A PostgreSQL ledger's schema as ``POSTGRES_CATALOG`` shows it, its own schema's name cut."""
    import psycopg

    with psycopg.connect(dsn) as connection:
        (schema,) = connection.execute("SELECT current_schema()").fetchone() or ("",)
        found = {part: connection.execute(sql).fetchall() for part, sql in POSTGRES_CATALOG.items()}
    return {
        part: [tuple(cut(value, f"{schema}.") for value in row) for row in rows]
        for part, rows in found.items()
    }


def cut(value: object, prefix: str) -> object:
    return value.replace(prefix, "") if isinstance(value, str) else value


def sqlite_shape(path: Path) -> dict[str, dict[str, Any]]:
    """What both databases must agree on, read from a SQLite ledger, per table.

    Its columns (type family, nullable, default, numbered by the database), key, references,
    allowed values, indexes (columns and condition), and the statements refused on it.
    """
    with read_only(path) as db:
        triggers = db.execute("SELECT tbl_name, sql FROM sqlite_master WHERE type = 'trigger'")
        refused = [
            (table, event)
            for table, sql in triggers
            if "RAISE(ABORT" in sql
            for event in re.findall(r"BEFORE (UPDATE|DELETE) ON", sql)
        ]
    shape = {}
    for name, table in sqlite_tables(path).items():
        key = [column for _, column, *_, pk in sorted(table["columns"], key=lambda c: c[5]) if pk]
        types = {column: type_ for _, column, type_, *_ in table["columns"]}
        # A key column cannot hold NULL whatever its NOT NULL says in a WITHOUT ROWID table,
        # nor as a single INTEGER PRIMARY KEY, which is the rowid, numbered by SQLite.
        rowid = not table["without_rowid"] and len(key) == 1 and types[key[0]] == "INTEGER"
        never_null = set(key) if table["without_rowid"] or rowid else set()
        shape[name] = {
            "columns": [
                (
                    column,
                    type_.lower(),
                    not notnull and column not in never_null,
                    default,
                    rowid and column == key[0],
                )
                for _, column, type_, notnull, default, _ in table["columns"]
            ],
            "key": key,
            "references": sorted(table["references"]),
            "one_of": sorted(one_of(check) for check in table["checks"]),
            "indexes": sorted(
                (index, columns, one_of(where) if where else None)
                for index, _, origin, _, columns, where in table["indexes"]
                if origin == "c"
            ),
            "refused": sorted(event for table, event in refused if table == name),
        }
    return shape


def postgres_shape(dsn: str) -> dict[str, dict[str, Any]]:
    """``sqlite_shape`` of a PostgreSQL ledger, without ``safeact_meta``.

    That table is PostgreSQL's own: SQLite keeps the version in its file header.
    """
    schema = postgres_schema(dsn)
    shape: dict[str, dict[str, Any]] = {}
    for table, _, column, type_, nullable, default, identity, _ in schema["columns"]:
        shape.setdefault(table, {"columns": []})["columns"].append(
            (
                column,
                "integer" if type_ == "bigint" else type_,
                nullable == "YES",
                default and default.removesuffix("::text"),
                identity == "YES",
            )
        )
    del shape["safeact_meta"]
    for name, table in shape.items():
        mine = {(kind, key, d) for owner, key, kind, d in schema["constraints"] if owner == name}
        ((key, definition),) = [(key, d) for kind, key, d in mine if kind == "p"]
        table["key"] = re.findall(r"\w+", definition.removeprefix("PRIMARY KEY"))
        table["references"] = sorted(
            tuple(re.findall(r"\w+", d.replace("FOREIGN KEY", "").replace("REFERENCES", "")))
            for kind, _, d in mine
            if kind == "f"
        )
        table["one_of"] = sorted(one_of(d) for kind, _, d in mine if kind == "c")
        table["indexes"] = sorted(
            index_of(index, d)
            for owner, index, d in schema["indexes"]
            if owner == name and index != key  # the key's own index, as on SQLite
        )
        table["refused"] = sorted(
            event
            for owner, _, event, timing, *_ in schema["triggers"]
            if owner == name and timing == "BEFORE"
        )
    return shape


def index_of(name: str, definition: str) -> tuple[str, list[str], tuple[str, list[str]] | None]:
    """An index as ``sqlite_shape`` shows it, from PostgreSQL's CREATE INDEX statement."""
    found = re.search(r"USING \w+ \((.*?)\)(?: WHERE (.*))?$", definition)
    assert found is not None, definition
    return name, found[1].split(", "), one_of(found[2]) if found[2] else None


def test_every_older_version_has_a_ledger_to_migrate() -> None:
    """Each older schema version has its migration step and a ledger to test it, per database."""
    assert list(range(1, SCHEMA_VERSION)) == sorted(SQLITE_LEDGERS) == sorted(_MIGRATIONS)
    assert list(range(2, SCHEMA_VERSION)) == sorted(POSTGRES_DUMPS) == sorted(POSTGRES_STEPS)
    assert all(dump.exists() for dump in POSTGRES_DUMPS.values())


@pytest.mark.parametrize("version", sorted(SQLITE_LEDGERS))
def test_a_sqlite_ledger_migrated_from_each_older_version_has_the_schema_of_a_new_one(
    version: int, tmp_path: Path, ledger: Path
) -> None:
    """Migrated and new SQLite ledgers have the same columns, keys, CHECKs, indexes, triggers."""
    old = tmp_path / "old.db"
    shutil.copyfile(SQLITE_LEDGERS[version], old)
    assert migrate(old) == (version, SCHEMA_VERSION)
    get_store(ledger).close()
    assert sqlite_schema(ledger) == sqlite_schema(old)


@pytest.mark.parametrize("version", sorted(POSTGRES_DUMPS))
def test_a_postgres_ledger_migrated_from_each_older_version_has_the_schema_of_a_new_one(
    version: int, empty_postgres: str, postgres_ledger: str
) -> None:
    """Migrated and new PostgreSQL ledgers have the same columns, constraints, indexes, triggers."""
    import psycopg

    from safeact._postgres import migrate_postgres

    with psycopg.connect(empty_postgres) as connection:
        connection.execute(POSTGRES_DUMPS[version].read_text())
    assert migrate_postgres(empty_postgres) == (version, SCHEMA_VERSION)
    assert postgres_schema(postgres_ledger) == postgres_schema(empty_postgres)


def test_new_sqlite_and_postgres_ledgers_have_the_same_tables_columns_keys_and_indexes(
    ledger: Path, postgres_ledger: str
) -> None:
    """Both databases' new ledgers agree on tables, columns, nullability, keys, CHECKs, indexes."""
    get_store(ledger).close()
    assert sqlite_shape(ledger) == postgres_shape(postgres_ledger)


def test_a_ledger_built_by_the_migration_steps_opens_without_a_byte_changed(
    tmp_path: Path,
) -> None:
    """A current ledger whose tables' SQL text the steps wrote, not the renderer, opens as is."""
    old = tmp_path / "old.db"
    shutil.copyfile(SQLITE_LEDGERS[1], old)
    migrate(old)
    get_store(old).close()  # its first opening switches it to WAL, as for any migrated ledger
    before = old.read_bytes()
    with get_store(old) as store:
        assert store.get("paid-1") is not None
    assert old.read_bytes() == before


def test_migrating_a_current_postgres_ledger_writes_nothing(postgres_ledger: str) -> None:
    """A second migrate finds the PostgreSQL ledger current and leaves even its version row be."""
    import psycopg

    from safeact._postgres import migrate_postgres

    version_row = "SELECT xmin::text, version FROM safeact_meta"
    with psycopg.connect(postgres_ledger) as connection:
        before = connection.execute(version_row).fetchall()
    assert migrate_postgres(postgres_ledger) == (SCHEMA_VERSION, SCHEMA_VERSION)
    with psycopg.connect(postgres_ledger) as connection:
        assert connection.execute(version_row).fetchall() == before
