"""A process that archives a ledger's history, purges it, or claims keys during a purge.

Usage:
    python tests/operator_child.py archive LEDGER FILE BEFORE [--batch N] [--kill-at POINT]
    python tests/operator_child.py purge LEDGER BEFORE [--batch N] [--kill-at POINT [--nth K]]
        [--count-batches]
    python tests/operator_child.py claim LEDGER PREFIX

Each prints what it did as one JSON object. ``claim`` claims new keys ``PREFIX-1``,
``PREFIX-2``... through a real tool, one after another, for as long as a key a purge takes
(``*-old-*``) is left, and prints the kind of each outcome: started before the purge, it
claims all through it.

LEDGER is what ``get_store`` takes: a SQLite file path or a PostgreSQL URL; BEFORE is the
cut-off in ISO 8601 with its offset. --kill-at SIGKILLs this process the ``--nth`` time
(first, unless given) it reaches that checkpoint (``archiving``: a batch is in the file, its
drop not committed; ``purging``: a batch is removed, not committed). --count-batches (SQLite)
reports, for each transaction the purge committed, how many rows of ``calls`` it deleted,
as SQLite ran the statements (its trace of this process's connections).
"""

import argparse
import json
import os
import signal
import sqlite3
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import attrs

from safeact import get_store, safe
from safeact._protocol import Checkpoint, checkpoint_hook
from tests.sqlite_trace import each_statement_once


def counting(batches: list[int]) -> None:
    """Make every SQLite connection opened from now on count its deletes per transaction."""
    connect = sqlite3.connect
    open_count: list[int] = []

    def traced(statement: str) -> None:
        words = statement.split(None, 3)[:3]
        if words[:1] == ["BEGIN"]:
            open_count[:] = [0]
        elif words == ["DELETE", "FROM", "calls"] and open_count:
            open_count[0] += 1
        elif words[:1] == ["COMMIT"] and open_count:
            if open_count[0]:
                batches.append(open_count[0])
            open_count.clear()

    def connect_traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection: sqlite3.Connection = connect(*args, **kwargs)
        connection.set_trace_callback(each_statement_once(traced))
        return connection

    sqlite3.connect = connect_traced  # type: ignore[assignment]


def killer(point: str | None, nth: int) -> Callable[[Checkpoint], None]:
    """A checkpoint hook that SIGKILLs this process the ``nth`` time it reaches ``point``."""
    reached = [0]

    def kill_at(name: Checkpoint) -> None:
        if name == point:
            reached[0] += 1
            if reached[0] == nth:
                os.kill(os.getpid(), signal.SIGKILL)

    return kill_at


def claim(location: str, prefix: str) -> dict[str, object]:
    """Claim keys while a purge of ``location`` runs: see the module."""
    with get_store(location) as store:

        @safe(store, name="during")
        def during(key: str) -> int:
            return 1

        def left() -> bool:
            return bool(store._read("SELECT 1 FROM calls WHERE key LIKE ? LIMIT 1", ("%-old-%",)))

        outcomes: list[str] = []
        while left():
            outcomes.append(type(during(f"{prefix}-{len(outcomes) + 1}")).__name__)
    return {"outcomes": outcomes}


def main() -> None:
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command", required=True)
    archive = commands.add_parser("archive")
    purge = commands.add_parser("purge")
    for command in (archive, purge):
        command.add_argument("ledger")
        if command is archive:
            command.add_argument("file", type=Path)
        command.add_argument("before", type=datetime.fromisoformat)
        command.add_argument("--batch", type=int, default=1000)
        command.add_argument("--kill-at")
        command.add_argument("--nth", type=int, default=1)
    purge.add_argument("--count-batches", action="store_true")
    claiming = commands.add_parser("claim")
    claiming.add_argument("ledger")
    claiming.add_argument("prefix")
    options = parser.parse_args()
    if options.command == "claim":
        print(json.dumps(claim(options.ledger, options.prefix)), flush=True)
        return
    batches: list[int] = []
    if options.command == "purge" and options.count_batches:
        counting(batches)
    with get_store(options.ledger) as store, checkpoint_hook(killer(options.kill_at, options.nth)):
        if options.command == "archive":
            done = attrs.asdict(
                store.archive_history(options.file, before=options.before, batch=options.batch)
            )
        else:
            purged = store.purge(options.before, batch=options.batch)
            done = {"keys": list(purged.keys), "sagas": list(purged.sagas), "batches": batches}
    print(json.dumps(done), flush=True)


if __name__ == "__main__":
    main()
