"""One host of a fleet sharing a PostgreSQL ledger: guarded calls on the test's command.

Usage: python tests/fleet_worker.py DSN EFFECTS --host HOST [--lease SECONDS]
       python tests/fleet_worker.py DSN --migrate

A host prints {"ready": PID} once its store is open, then reads one JSON command a line:
{"call": [KEY, ...], "wait": SECONDS} calls the tool on each key in turn and prints
{"outcomes": [...]}, one description per key; {"hold": KEY} calls it with an action that
prints {"acting": KEY} after its effect and waits for a line on stdin before it returns
(then the outcome is printed as for "call"). The tool records every run of its action in
EFFECTS and returns the name of the host that ran it.

With --migrate it prints "ready", waits for a line on stdin (so that several processes
start together), runs migrate_postgres and prints [OLD, NEW].
"""

import argparse
import faulthandler
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from safeact import (
    AwaitingApproval,
    Failed,
    InDoubt,
    Outcome,
    Store,
    StoreError,
    Succeeded,
    get_store,
    safe,
)
from safeact.postgres import migrate_postgres
from tests.actions import record_effect

TOOL = "tests.fleet.charge"


def describe(outcome: Outcome[str]) -> dict[str, object]:
    """An outcome as JSON: its kind and what the test checks of it."""
    match outcome:
        case Succeeded(value=value, replayed=replayed, recorded=recorded):
            return {"kind": "Succeeded", "value": value, "replayed": replayed, "recorded": recorded}
        case InDoubt(reason=reason):
            return {"kind": "InDoubt", "reason": reason.value}
        case Failed(error_type=error_type, message=message):
            return {"kind": "Failed", "error": f"{error_type}: {message}"}
        case AwaitingApproval(key=key):
            return {"kind": "AwaitingApproval", "key": key}


def call(store: Store, effects: Path, key: str, wait: float, *, hold: bool) -> object:
    """Make one guarded call; a ledger error is reported, not raised."""
    host = store.owner.host

    @safe(store, name=TOOL, wait=wait)
    def charge(key: str) -> str:
        record_effect(effects, key)
        if hold:
            print(json.dumps({"acting": key}), flush=True)
            sys.stdin.readline()
        return host

    try:
        return describe(charge(key))
    except StoreError as exc:
        return {"kind": "StoreError", "message": str(exc)}


def serve(dsn: str, effects: Path, host: str, lease: float) -> None:
    """Open the store as ``host`` and run the test's commands until stdin ends."""
    with get_store(dsn, host=host, lease=lease) as store:
        print(json.dumps({"ready": store.owner.pid}), flush=True)
        for line in sys.stdin:
            command = json.loads(line)
            if "hold" in command:
                outcome = call(store, effects, command["hold"], 0.0, hold=True)
                print(json.dumps({"outcomes": [outcome]}), flush=True)
            else:
                outcomes = [
                    call(store, effects, key, command["wait"], hold=False)
                    for key in command["call"]
                ]
                print(json.dumps({"outcomes": outcomes}), flush=True)


def main() -> None:
    faulthandler.enable()  # a hang or crash prints every thread's stack to stderr
    parser = argparse.ArgumentParser()
    parser.add_argument("dsn")
    parser.add_argument("effects", type=Path, nargs="?")
    parser.add_argument("--host", default="fleet")
    parser.add_argument("--lease", type=float, default=300.0)
    parser.add_argument("--migrate", action="store_true")
    options = parser.parse_args()
    if options.migrate:
        print("ready", flush=True)
        sys.stdin.readline()
        print(json.dumps(migrate_postgres(options.dsn)), flush=True)
        return
    serve(options.dsn, options.effects, options.host, options.lease)


if __name__ == "__main__":
    main()
