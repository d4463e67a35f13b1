"""A process that makes one guarded call and prints its outcome as JSON.

Usage: python tests/child.py LEDGER EFFECTS KEY [--kill-at CHECKPOINT] [--fail] [--barrier]
       [--print-default-name]

LEDGER is what ``get_store`` takes: a SQLite file path or a PostgreSQL URL.

--kill-at SIGKILLs this process at that checkpoint of the protocol; --barrier prints
"ready" and waits for a line on stdin before opening the ledger, so several processes start
together; --print-default-name prints the name a tool gets without name=. --hold makes the
action print "acting" after its effect and wait for a line on stdin; --slow makes it take
that many seconds; --lease, --heartbeat and --wait set the store and the tool. --probe gives
the tool a reconciliation probe that answers happened, not_happened or unknown; --resolve
resolves the key as happened or not_happened instead of calling the tool. --host names the
host this process claims as (another host's owner cannot be looked up locally). --awaited
makes the tool an ``async def``, awaited on an event loop of its own. Under
SAFEACT_REPLAY_ONLY, a call refused with ReplayOnlyError is reported as such.
"""

import argparse
import asyncio
import faulthandler
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import attrs

from safeact import (
    AwaitingApproval,
    Failed,
    Happened,
    InDoubt,
    NotHappened,
    Outcome,
    ReplayOnlyError,
    Succeeded,
    Unknown,
    Verdict,
    get_store,
    safe,
)
from safeact._protocol import Checkpoint, checkpoint_hook
from tests.actions import Receipt, record_effect


def main() -> None:  # noqa: C901, PLR0915 - one option after another
    faulthandler.enable()  # a crash prints every thread's stack to stderr, which tests show
    parser = argparse.ArgumentParser()
    parser.add_argument("ledger")
    parser.add_argument("effects", type=Path)
    parser.add_argument("key")
    parser.add_argument("--kill-at")
    parser.add_argument("--fail", action="store_true")
    parser.add_argument("--barrier", action="store_true")
    parser.add_argument("--print-default-name", action="store_true")
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--heartbeat", type=float)
    parser.add_argument("--wait", type=float, default=5.0)
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--slow", type=float, default=0.0)
    parser.add_argument("--probe", choices=["happened", "not_happened", "unknown"])
    parser.add_argument("--resolve", choices=["happened", "not_happened"])
    parser.add_argument("--host")
    parser.add_argument("--awaited", action="store_true")
    options = parser.parse_args()

    if options.barrier:  # before opening: a new ledger is created under contention too
        print("ready", flush=True)
        sys.stdin.readline()
    store = get_store(
        options.ledger, lease=options.lease, heartbeat=options.heartbeat, host=options.host
    )

    if options.print_default_name:

        def probe(key: str) -> None:
            raise AssertionError

        print(safe(store)(probe).name)
        return

    def act(key: str, to: str, amount: int) -> Receipt:
        record_effect(options.effects, key)
        if options.hold:  # the owner acted; it goes on when the test says so
            print("acting", flush=True)
            sys.stdin.readline()
        time.sleep(options.slow)  # a slow action, longer than its lease
        if options.fail:
            raise RuntimeError("card declined")
        return Receipt(to, amount)

    guard = safe(
        store,
        name="tests.charge",
        wait=options.wait,
        reconcile=None if options.probe is None else answering(options.probe),
    )

    @guard
    def charge_now(key: str, to: str, amount: int) -> Receipt:
        return act(key, to, amount)

    @guard
    async def charge_awaited(key: str, to: str, amount: int) -> Receipt:
        return act(key, to, amount)

    def charge(key: str, to: str, amount: int) -> Outcome[Receipt]:
        if options.awaited:  # the ledger's work in the store's thread, fsyncs deferred
            return asyncio.run(charge_awaited(key, to, amount))
        return charge_now(key, to, amount)

    def kill_at(point: Checkpoint) -> None:
        if point == options.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    with checkpoint_hook(kill_at):
        if options.resolve == "happened":
            resolved = store.resolve(
                options.key, happened=True, result=Receipt("a@example.com", 50), note="checked"
            )
        elif options.resolve == "not_happened":
            resolved = store.resolve(options.key, happened=False, note="checked")
        else:
            try:
                outcome = charge(options.key, "a@example.com", 50)
            except ReplayOnlyError as refused:  # SAFEACT_REPLAY_ONLY, and a key to claim
                print(json.dumps({"kind": "ReplayOnlyError", "key": refused.key}), flush=True)
                return
            print(json.dumps(describe(outcome)), flush=True)
            return
    print(json.dumps({"kind": "Resolved", "state": resolved.state.value}), flush=True)


def answering(verdict: str) -> Callable[[str, InDoubt], Verdict[Receipt]]:
    """A reconciliation probe that always gives ``verdict``."""

    def probe(key: str, receipt: InDoubt) -> Verdict[Receipt]:
        match verdict:
            case "happened":
                return Happened(Receipt("a@example.com", 50), "the bank has it")
            case "not_happened":
                return NotHappened("the bank has no such payment")
            case _:
                return Unknown("the bank does not answer")

    return probe


def describe(outcome: Outcome[Receipt]) -> dict[str, object]:
    match outcome:
        case Succeeded(value=value, replayed=replayed):
            return {"kind": "Succeeded", "replayed": replayed, "value": attrs.asdict(value)}
        case InDoubt(key=key, tool=tool, reason=reason):
            return {"kind": "InDoubt", "key": key, "tool": tool, "reason": reason.value}
        case Failed(error_type=error_type, message=message, replayed=replayed):
            return {"kind": "Failed", "replayed": replayed, "error": f"{error_type}: {message}"}
        case AwaitingApproval(key=key, tool=tool):
            return {"kind": "AwaitingApproval", "key": key, "tool": tool}


if __name__ == "__main__":
    main()
