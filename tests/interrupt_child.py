"""Processes for the test of a Ctrl-C that lands as a claim gets SQLite's write lock.

Usage: python tests/interrupt_child.py hold LEDGER
       python tests/interrupt_child.py worker LEDGER EFFECTS

hold: takes the ledger's write lock on a plain SQLite connection (``BEGIN IMMEDIATE``),
prints "locked", commits when a line arrives on stdin, prints "released", and ends at EOF.

worker: opens the store, prints "ready", then for each line KEY on stdin makes one guarded
call of KEY (its action appends a line to EFFECTS) and prints one line of JSON: the outcome,
``{"interrupted": true}`` when a KeyboardInterrupt ends the call (it goes on with the next
line, as a worker loop that survives Ctrl-C does), or ``{"error": ...}`` for a StoreError.
"""

import json
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from safeact import (
    AwaitingApproval,
    Failed,
    InDoubt,
    Outcome,
    StoreError,
    Succeeded,
    get_store,
    safe,
)
from tests.actions import record_effect


def hold(ledger: str) -> None:
    connection = sqlite3.connect(ledger, isolation_level=None)
    connection.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    sys.stdin.readline()
    connection.execute("COMMIT")
    print("released", flush=True)
    sys.stdin.read()
    connection.close()


def work(ledger: str, effects: Path) -> None:
    store = get_store(ledger)

    @safe(store, name="tests.interrupted")
    def act(key: str) -> int:
        record_effect(effects, key)
        return 1

    print("ready", flush=True)
    for line in sys.stdin:
        try:
            said = describe(act(line.strip()))
        except KeyboardInterrupt:
            said = {"interrupted": True}
        except StoreError as exc:
            said = {"error": str(exc)}
        print(json.dumps(said), flush=True)


def describe(outcome: Outcome[int]) -> dict[str, object]:
    match outcome:
        case Succeeded(value=value, replayed=replayed):
            return {"kind": "Succeeded", "value": value, "replayed": replayed}
        case InDoubt(reason=reason):
            return {"kind": "InDoubt", "reason": reason.value}
        case Failed(error_type=error_type):
            return {"kind": "Failed", "error": error_type}
        case AwaitingApproval(key=key):
            return {"kind": "AwaitingApproval", "key": key}


if __name__ == "__main__":
    if sys.argv[1] == "hold":
        hold(sys.argv[2])
    else:
        work(sys.argv[2], Path(sys.argv[3]))
