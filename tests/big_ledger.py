"""Large SQLite ledgers made in SQL: a key's row and first event, copied under new keys.

A million keys take seconds this way, where a million calls would take an hour: for the
benchmark of the operator's reads (``bench.operator``) and the tests of long purges.
"""

import contextlib
import sqlite3
from pathlib import Path

_TIMES = frozenset({"attempted_at", "finished_at", "lease_until", "at"})
"""The columns of ``calls`` and ``history`` that hold a time: set to ``at`` in aged copies."""


def copy_key(path: Path, source: str, count: int, label: str, *, at: str | None = None) -> None:
    """Copy key ``source``'s row and its first event ``count`` times, in one transaction.

    The copies are keys ``{source}-{label}-0000001`` on; with ``at`` (a time as the ledger
    writes it), every time of theirs is ``at``, else each keeps the source's.
    """
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(calls)")]
        events = [row[1] for row in db.execute("PRAGMA table_info(history)") if row[1] != "seq"]
        numbers = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"

        def copied(names: list[str], named: str) -> str:
            return ", ".join(
                f"printf('%s-{label}-%07d', {c}, n.i)"
                if c == named
                else "?"
                if at is not None and c in _TIMES
                else c
                for c in names
            )

        def times(names: list[str]) -> tuple[str, ...]:
            return tuple(at for c in names if at is not None and c in _TIMES)

        db.execute("BEGIN")
        db.execute(
            f"INSERT INTO calls ({', '.join(columns)}) {numbers} "  # noqa: S608 - the table's own columns
            f"SELECT {copied(columns, 'key')} FROM calls, n WHERE key = ?",
            (count, *times(columns), source),
        )
        db.execute(
            f"INSERT INTO history ({', '.join(events)}) {numbers} "  # noqa: S608 - the table's own columns
            f"SELECT {copied(events, 'subject')} FROM history, n "
            "WHERE seq = (SELECT min(seq) FROM history WHERE subject = ?)",
            (count, *times(events), source),
        )
        db.execute("COMMIT")
