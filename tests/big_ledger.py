"""Large ledgers made in SQL: a key's row and first event, copied under new keys.

A million keys take seconds this way, where a million calls would take an hour: for the
benchmark of the operator's reads (``bench.operator``) and the tests of long purges.
"""

import contextlib
import sqlite3
from pathlib import Path
from typing import NamedTuple

_TIMES = frozenset({"attempted_at", "finished_at", "lease_until", "at"})
"""The columns of ``calls`` and ``history`` that hold a time: set to ``at`` in aged copies."""


class _Dialect(NamedTuple):
    numbers: str
    """A ``WITH`` of the numbers 1 to the first parameter, as ``n(i)``."""
    named: str
    """A copy's key from its source's (``{}``) and ``n.i``; ``{label}`` is the copies'."""
    mark: str
    """The placeholder of a parameter."""


_SQLITE = _Dialect(
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)",
    "printf('%s-{label}-%07d', {}, n.i)",
    "?",
)
_POSTGRES = _Dialect(
    "WITH n(i) AS (SELECT generate_series(1, %s))",
    "{} || '-{label}-' || lpad(n.i::text, 7, '0')",
    "%s",
)


def copy_key(
    location: str | Path, source: str, count: int, label: str, *, at: str | None = None
) -> None:
    """Copy key ``source``'s row and its first event ``count`` times, in one transaction.

    ``location`` is a SQLite file or a PostgreSQL URL. The copies are keys
    ``{source}-{label}-0000001`` on; with ``at`` (a time as the ledger writes it), every
    time of theirs is ``at``, else each keeps the source's.
    """

    def statements(
        dialect: _Dialect, tables: dict[str, list[str]]
    ) -> list[tuple[str, tuple[object, ...]]]:
        made: list[tuple[str, tuple[object, ...]]] = []
        for table, key, where in (
            ("calls", "key", "key = {}"),
            ("history", "subject", "seq = (SELECT min(seq) FROM history WHERE subject = {})"),
        ):
            names = [c for c in tables[table] if c != "seq"]
            aged = [c for c in names if at is not None and c in _TIMES]
            copied = ", ".join(
                dialect.named.format(c, label=label)
                if c == key
                else dialect.mark
                if c in aged
                else c
                for c in names
            )
            sql = (
                f"INSERT INTO {table} ({', '.join(names)}) {dialect.numbers} "  # noqa: S608 - the tables' own columns
                f"SELECT {copied} FROM {table}, n WHERE {where.format(dialect.mark)}"
            )
            made.append((sql, (count, *(at for _ in aged), source)))
        return made

    tables = ("calls", "history")
    if str(location).startswith("postgresql://"):
        import psycopg

        with psycopg.connect(str(location)) as db:
            found = {t: [row[0] for row in db.execute(_COLUMNS, (t,))] for t in tables}
            for sql, parameters in statements(_POSTGRES, found):
                db.execute(sql, parameters)
        return
    with contextlib.closing(sqlite3.connect(location, isolation_level=None)) as lite:
        found = {t: [row[1] for row in lite.execute(f"PRAGMA table_info({t})")] for t in tables}
        lite.execute("BEGIN")
        for sql, parameters in statements(_SQLITE, found):
            lite.execute(sql, parameters)
        lite.execute("COMMIT")


_COLUMNS = (
    "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
    "AND table_schema = current_schema() ORDER BY ordinal_position"
)
