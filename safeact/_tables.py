"""The ledger's tables, declared once, and their DDL for SQLite and for PostgreSQL.

``TABLES`` is the current schema, version ``SCHEMA_VERSION``: a new ledger of either
database is built from it, by ``sqlite_ddl()`` or ``postgres_ddl()``. An older ledger is
not rebuilt from it: each backend keeps the historical steps that took its ledgers from one
version to the next (``safeact._schema`` for SQLite, ``safeact._postgres`` for PostgreSQL),
and ``tests/test_schema.py`` checks that a migrated ledger ends with exactly the schema of
a new one, and that the two databases' schemas agree.
"""

from __future__ import annotations

import attrs

from safeact._protocol import UNSETTLED, ApprovalState, SagaState, State

__all__ = [
    "SCHEMA_VERSION",
    "TABLES",
    "UNSETTLED_SQL",
    "Column",
    "Index",
    "Table",
    "Type",
    "postgres_ddl",
    "sqlite_ddl",
]

SCHEMA_VERSION = 7
"""The version of the schema declared here. A change to ``TABLES`` bumps it and adds, for
each database, the migration step from the version before."""

# Sorted, so the partial index and the queries spell the same condition in every process.
UNSETTLED_SQL = ", ".join(sorted(f"'{s.value}'" for s in UNSETTLED))

_COUNT_SHARDS = 64
"""PostgreSQL keeps each count in this many rows, one per session's ``pg_backend_pid() %
_COUNT_SHARDS``: one row per count would be updated by every settling transaction of a tool
and held until its commit, so that tool's settles would take turns (SQLite has one writer
at a time, so one row, shard 0)."""


@attrs.frozen
class Type:
    """A column's type as each database spells it.

    ``numbered``: the database numbers the rows itself. Such a column must be its table's
    whole primary key, on a table with a rowid: on SQLite it is then the rowid.
    """

    sqlite: str
    postgres: str
    numbered: bool = False


TEXT = Type("TEXT", "TEXT")
INTEGER = Type("INTEGER", "INTEGER")
BIGINT = Type("INTEGER", "BIGINT")
"""Process ids and start times: an INTEGER holds 64 bits on SQLite, only 32 on PostgreSQL."""
NUMBERED = Type("INTEGER", "BIGINT GENERATED ALWAYS AS IDENTITY", numbered=True)


@attrs.frozen
class Column:
    """One column: NOT NULL unless ``null``; ``one_of`` (if any) is a CHECK on its values.

    ``default`` is a SQL literal; ``references`` names a ``table (column)`` it points to.
    """

    name: str
    type: Type
    null: bool = False
    one_of: tuple[str, ...] = ()
    default: str | None = None
    references: str | None = None


@attrs.frozen
class Index:
    """A secondary index; ``where`` makes it partial (the same SQL on both databases)."""

    name: str
    columns: tuple[str, ...]
    where: str | None = None


@attrs.frozen
class Table:
    """A table, its primary key and indexes.

    ``without_rowid``: on SQLite the rows are stored in the primary key's own b-tree
    (PostgreSQL has no such choice). ``append_only``: no row is ever updated or deleted,
    which each database enforces with a trigger.
    """

    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]
    indexes: tuple[Index, ...] = ()
    without_rowid: bool = True
    append_only: bool = False


# Columns a migration added come last, where ALTER TABLE puts them: a new ledger's columns
# are in a migrated one's order.
TABLES = (
    Table(
        "calls",
        (
            Column("key", TEXT),
            Column("tool", TEXT),
            Column("args_hash", TEXT),
            Column("state", TEXT, one_of=tuple(s.value for s in State)),
            Column("attempt_id", TEXT),
            Column("attempted_at", TEXT),
            Column("finished_at", TEXT, null=True),
            Column("result", TEXT, null=True),
            Column("error_type", TEXT, null=True),
            Column("error_message", TEXT, null=True),
            Column("owner_host", TEXT),
            Column("owner_boot", TEXT),
            Column("owner_pid", BIGINT),
            Column("owner_started", BIGINT),
            Column("lease_until", TEXT),
            Column("doubt_reason", TEXT, null=True),
            Column("schema_version", INTEGER),
            # Schema 3. Attempts from before have none: '' is "not known".
            Column("owner_machine", TEXT, default="''"),
            Column("owner_pidns", TEXT, default="''"),
            # Schema 4. Attempts from before have none: 0 is "not known".
            Column("owner_group", BIGINT, default="0"),
            # Schema 6. The call's arguments as JSON, redacted, kept only for a tool that
            # keeps them for display (``keep_arguments``); NULL otherwise.
            Column("arguments", TEXT, null=True),
        ),
        key=("key",),
        indexes=(Index("calls_unsettled", ("attempted_at",), where=f"state IN ({UNSETTLED_SQL})"),),
    ),
    Table(
        "late_completions",
        (
            Column("key", TEXT),
            Column("attempt_id", TEXT),
            Column("state", TEXT),
            Column("result", TEXT, null=True),
            Column("error_type", TEXT, null=True),
            Column("error_message", TEXT, null=True),
            Column("finished_at", TEXT),
            Column("schema_version", INTEGER),
        ),
        key=("key", "attempt_id"),
    ),
    Table(
        "sagas",
        (
            Column("saga_id", TEXT),
            Column("state", TEXT, one_of=tuple(s.value for s in SagaState)),
            Column("started_at", TEXT),
            Column("updated_at", TEXT),
            Column("aborted_step", TEXT, null=True),
            Column("abort_reason", TEXT, null=True),
            Column("schema_version", INTEGER),
        ),
        key=("saga_id",),
        indexes=(Index("sagas_by_state", ("state", "started_at")),),
    ),
    Table(
        "saga_steps",
        (
            Column("saga_id", TEXT, references="sagas (saga_id)"),
            Column("step_index", INTEGER),
            Column("name", TEXT),
            Column("key", TEXT),
            Column("compensation", TEXT, null=True),
        ),
        key=("saga_id", "step_index"),
    ),
    # Schema 2: the audit trail. Nothing rewrites history; only an operator's archive moves
    # old events out (``_archive``), lifting the guard inside its own transaction.
    Table(
        "history",
        (
            Column("seq", NUMBERED),
            Column("kind", TEXT, one_of=("key", "saga")),
            Column("subject", TEXT),
            Column("attempt_id", TEXT, null=True),
            Column("from_state", TEXT, null=True),
            Column("to_state", TEXT, null=True),
            Column("at", TEXT),
            Column("by_kind", TEXT, one_of=("process", "operator")),
            Column("by_host", TEXT),
            Column("by_pid", BIGINT),
            Column("why", TEXT),
            Column("note", TEXT, null=True),
        ),
        key=("seq",),
        indexes=(Index("history_by_subject", ("kind", "subject", "seq")),),
        without_rowid=False,
        append_only=True,
    ),
    # Schema 5: what each tool's results look like as stored JSON (``safeact._shape``),
    # written by the tool's process at its first claim, so that an operator's result is
    # checked without importing the tool's code. The latest writer's description holds.
    Table(
        "tools",
        (
            Column("name", TEXT),
            Column("result_shape", TEXT),
            Column("written_at", TEXT),
            Column("schema_version", INTEGER),
        ),
        key=("name",),
    ),
    # Schema 6: each key's approval, for a tool that needs one (``safeact._protocol``'s gate).
    Table(
        "approvals",
        (
            Column("key", TEXT),
            Column("tool", TEXT),
            Column("args_hash", TEXT),
            Column("state", TEXT, one_of=tuple(s.value for s in ApprovalState)),
            Column("requested_at", TEXT),
            Column("decided_at", TEXT, null=True),
            Column("decided_by", TEXT, null=True),
            Column("note", TEXT, null=True),
            Column("attempt_id", TEXT, null=True),
            Column("arguments", TEXT, null=True),
            Column("schema_version", INTEGER),
        ),
        key=("key",),
        indexes=(
            Index(
                "approvals_pending",
                ("requested_at",),
                where=f"state = '{ApprovalState.PENDING.value}'",
            ),
        ),
    ),
    # Schema 7: how many settled keys each tool has in each state, kept by triggers on calls
    # (``_sqlite_counting``, ``_postgres_counting``), so that counting them (``stats``) reads
    # a few rows, however many keys the ledger holds. The unsettled keys are not counted here:
    # they are read through their partial index, and a claim then costs no count. The values
    # are copied as they are in calls, unchecked: the reads judge them as they judge a row.
    Table(
        "key_counts",
        (
            Column("tool", TEXT),
            Column("state", TEXT),
            Column("shard", INTEGER),
            Column("n", BIGINT),
        ),
        key=("tool", "state", "shard"),
    ),
)


def sqlite_ddl() -> tuple[str, ...]:
    """The statements that create ``TABLES`` in an empty SQLite database, in order."""
    statements: list[str] = []
    for table in TABLES:
        lines = [_column(column, column.type.sqlite, sqlite=True) for column in table.columns]
        lines.append(f"PRIMARY KEY ({', '.join(table.key)})")
        tail = " WITHOUT ROWID" if table.without_rowid else ""
        statements.append(_create_table(table, lines) + tail)
        statements += _indexes(table)
        if table.append_only:
            statements += (
                f"CREATE TRIGGER {table.name}_is_append_only_{event.lower()} "
                f"BEFORE {event} ON {table.name}\n"
                f"BEGIN SELECT RAISE(ABORT, '{_append_only(table)}'); END"
                for event in ("UPDATE", "DELETE")
            )
    return (*statements, *_sqlite_counting())


# PostgreSQL only: SQLite keeps the application and the schema version in its file header
# (application_id, user_version), so this table has no twin in TABLES.
_POSTGRES_META = """CREATE TABLE safeact_meta (
    singleton   BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    application TEXT NOT NULL,
    version     INTEGER NOT NULL
)"""


def postgres_ddl() -> tuple[str, ...]:
    """The statements that create ``TABLES`` and ``safeact_meta`` in an empty PostgreSQL schema.

    Times are ISO 8601 text in UTC with microseconds, as in SQLite: they sort as they
    compare, and the logic above reads and writes one format on both databases.
    """
    statements = [_POSTGRES_META]
    for table in TABLES:
        lines = [_column(column, column.type.postgres, sqlite=False) for column in table.columns]
        lines.append(f"PRIMARY KEY ({', '.join(table.key)})")
        statements.append(_create_table(table, lines))
        statements += _indexes(table)
        if table.append_only:
            function = f"safeact_{table.name}_is_append_only"
            statements += (
                (
                    f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS\n"
                    f"$$ BEGIN RAISE EXCEPTION '{_append_only(table)}'; END $$"
                ),
                (
                    f"CREATE TRIGGER {table.name}_is_append_only BEFORE UPDATE OR DELETE "
                    f"ON {table.name}\nFOR EACH STATEMENT EXECUTE FUNCTION {function}()"
                ),
            )
    return (*statements, *_postgres_counting())


# A key is counted while it is settled: a row entering a settled state adds one to its
# (tool, state), a row leaving one takes one away. An upsert on both sides, so that a count
# never needs a row to exist first.
_ADD = (
    "INSERT INTO key_counts (tool, state, shard, n)\n{values}\n"
    "ON CONFLICT (tool, state, shard) DO UPDATE SET n = key_counts.n + excluded.n"
)


def _sqlite_counting() -> tuple[str, ...]:
    """SQLite's triggers that keep ``key_counts``, one per event, each in shard 0."""
    settled = f"state NOT IN ({UNSETTLED_SQL})"
    leave = _ADD.format(values=f"SELECT OLD.tool, OLD.state, 0, -1 WHERE OLD.{settled}")
    enter = _ADD.format(values=f"SELECT NEW.tool, NEW.state, 0, 1 WHERE NEW.{settled}")
    return (
        (
            f"CREATE TRIGGER calls_counted_insert AFTER INSERT ON calls WHEN NEW.{settled}\n"
            f"BEGIN {_ADD.format(values='VALUES (NEW.tool, NEW.state, 0, 1)')}; END"
        ),
        (
            f"CREATE TRIGGER calls_counted_delete AFTER DELETE ON calls WHEN OLD.{settled}\n"
            f"BEGIN {_ADD.format(values='VALUES (OLD.tool, OLD.state, 0, -1)')}; END"
        ),
        (
            "CREATE TRIGGER calls_counted_update AFTER UPDATE OF tool, state ON calls\n"
            "WHEN OLD.tool IS NOT NEW.tool OR OLD.state IS NOT NEW.state\n"
            f"BEGIN {leave}; {enter}; END"
        ),
    )


def _postgres_counting() -> tuple[str, ...]:
    """PostgreSQL's function and triggers that keep ``key_counts``, in the session's shard.

    The triggers' WHEN spares the function's call where nothing is counted: the claim of a
    new key inserts it unsettled.
    """
    settled = f"state NOT IN ({UNSETTLED_SQL})"
    shard = f"pg_backend_pid() % {_COUNT_SHARDS}"
    leave = _ADD.format(values=f"VALUES (OLD.tool, OLD.state, {shard}, -1)")
    enter = _ADD.format(values=f"VALUES (NEW.tool, NEW.state, {shard}, 1)")
    changed = "OLD.tool IS DISTINCT FROM NEW.tool OR OLD.state IS DISTINCT FROM NEW.state"
    return (
        (
            "CREATE FUNCTION safeact_count_calls() RETURNS trigger LANGUAGE plpgsql AS\n$$ BEGIN\n"
            f"IF TG_OP <> 'INSERT' AND OLD.{settled} THEN\n{leave};\nEND IF;\n"
            f"IF TG_OP <> 'DELETE' AND NEW.{settled} THEN\n{enter};\nEND IF;\n"
            "RETURN NULL;\nEND $$"
        ),
        *(
            f"CREATE TRIGGER calls_counted_{event.split()[0].lower()} AFTER {event} ON calls\n"
            f"FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION safeact_count_calls()"
            for event, when in (
                ("INSERT", f"NEW.{settled}"),
                ("DELETE", f"OLD.{settled}"),
                ("UPDATE OF tool, state", changed),
            )
        ),
    )


def _column(column: Column, spelled: str, *, sqlite: bool) -> str:
    parts = [column.name, spelled]
    # SQLite's rowid is never NULL, and schema 2 declared it without NOT NULL: saying it here
    # would set a new ledger's notnull apart from a migrated one's.
    if not column.null and not (sqlite and column.type.numbered):
        parts.append("NOT NULL")
    if column.default is not None:
        parts.append(f"DEFAULT {column.default}")
    if column.one_of:
        allowed = ", ".join(f"'{value}'" for value in column.one_of)
        parts.append(f"CHECK ({column.name} IN ({allowed}))")
    if column.references is not None:
        parts.append(f"REFERENCES {column.references}")
    return " ".join(parts)


def _create_table(table: Table, lines: list[str]) -> str:
    body = ",\n".join(f"    {line}" for line in lines)
    return f"CREATE TABLE {table.name} (\n{body}\n)"


def _indexes(table: Table) -> list[str]:
    return [
        f"CREATE INDEX {index.name} ON {table.name} ({', '.join(index.columns)})"
        + (f" WHERE {index.where}" if index.where is not None else "")
        for index in table.indexes
    ]


def _append_only(table: Table) -> str:
    return f"the safeact {table.name} is append-only"
