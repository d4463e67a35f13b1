"""A process that calls a tool that needs approval, or decides on its requests, key by key.

Usage: python tests/approval_child.py LEDGER EFFECTS ROLE KEY [KEY ...] [options]

LEDGER is what ``get_store`` takes: a SQLite file path or a PostgreSQL URL. ROLE is ``call``
(call ``tests.pay``, a tool made with ``approval=True`` whose action appends and fsyncs a
line to EFFECTS per real run), ``approve`` or ``deny`` (``Store.approve`` / ``Store.deny``,
as a person, by "grace"). For each KEY in turn it prints one line of JSON: the outcome of
the call (``describe``), or the decision as recorded (``{"kind": "Approval", "state": ...}``)
or refused (``{"kind": "Refused", "message": ...}``).

--rounds    before each KEY, print "ready" and wait for a line on stdin, so that several
            processes take each key at the same moment;
--kill-at P SIGKILL this process at checkpoint P of the call (before_claim, after_claim,
            after_call, after_record), or right after its request or its decision was
            recorded (``requested``: the call returned ``AwaitingApproval``; ``decided``);
--amount N  the call's amount (its arguments, so its digest): 50 unless given;
--until-decided
            call again while the answer is ``AwaitingApproval`` (as an agent asks again
            later), until a person has decided, for at most DECIDING seconds.
"""

import argparse
import faulthandler
import json
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from safeact import (
    AwaitingApproval,
    Failed,
    InDoubt,
    KeyConflictError,
    Outcome,
    SafeError,
    SafeTool,
    Store,
    Succeeded,
    get_store,
    safe,
)
from safeact._protocol import Checkpoint, checkpoint_hook
from tests.actions import Receipt, record_effect

TOOL = "tests.pay"
DECIDING = 30.0
"""Seconds a caller asks again for, at most, while a person has not decided."""
ASK_AGAIN = 0.005
"""Seconds between two asks: an agent's retry cadence, not a wait for anything in the test."""


def payments(store: Store, effects: Path) -> SafeTool[[str, int], Receipt]:
    """The tool every process of these tests calls: one payment per key, after approval."""

    @safe(store, name=TOOL, approval=True, wait=30)
    def pay(key: str, to: str, amount: int) -> Receipt:
        record_effect(effects, key)
        return Receipt(to, amount)

    return pay


def describe(outcome: Outcome[Receipt]) -> dict[str, object]:
    """An outcome as JSON: its kind and what the tests compare of it."""
    match outcome:
        case Succeeded(value=value, replayed=replayed):
            return {"kind": "Succeeded", "replayed": replayed, "amount": value.amount}
        case InDoubt(reason=reason):
            return {"kind": "InDoubt", "reason": reason.value}
        case Failed(error_type=error_type, message=message, replayed=replayed):
            return {"kind": "Failed", "replayed": replayed, "error": f"{error_type}: {message}"}
        case AwaitingApproval(args_hash=args_hash):
            return {"kind": "AwaitingApproval", "args_hash": args_hash}


def call(
    pay: SafeTool[[str, int], Receipt], key: str, amount: int, *, until_decided: bool
) -> dict[str, object]:
    """Call ``pay`` for ``key`` (again while it awaits approval, if ``until_decided``)."""
    deadline = time.monotonic() + DECIDING
    try:
        outcome = pay(key, "ada@example.com", amount)
        while (
            until_decided and isinstance(outcome, AwaitingApproval) and time.monotonic() < deadline
        ):
            time.sleep(ASK_AGAIN)
            outcome = pay(key, "ada@example.com", amount)
    except KeyConflictError as conflict:
        return {"kind": "KeyConflictError", "message": str(conflict)}
    return describe(outcome)


def decide(store: Store, key: str, *, approve: bool) -> dict[str, object]:
    """Approve or deny ``key``'s request as a person; say what was recorded, or why not."""
    try:
        if approve:
            decided = store.approve(key, by="grace", note="checked")
        else:
            decided = store.deny(key, by="grace", note="wrong customer")
    except SafeError as refused:
        return {"kind": "Refused", "message": str(refused)}
    return {"kind": "Approval", "state": decided.state.value}


def main() -> None:
    faulthandler.enable()  # a crash prints every thread's stack to stderr, which tests show
    parser = argparse.ArgumentParser()
    parser.add_argument("ledger")
    parser.add_argument("effects", type=Path)
    parser.add_argument("role", choices=["call", "approve", "deny"])
    parser.add_argument("keys", nargs="+")
    parser.add_argument("--rounds", action="store_true")
    parser.add_argument("--kill-at")
    parser.add_argument("--amount", type=int, default=50)
    parser.add_argument("--until-decided", action="store_true")
    options = parser.parse_args()

    store = get_store(options.ledger)
    pay = payments(store, options.effects)

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def kill_at(point: Checkpoint) -> None:
        if point == options.kill_at:
            die()

    with checkpoint_hook(kill_at):
        for key in options.keys:
            if options.rounds:  # every process of the round takes this key together
                print("ready", flush=True)
                sys.stdin.readline()
            if options.role == "call":
                done = call(pay, key, options.amount, until_decided=options.until_decided)
            else:
                done = decide(store, key, approve=options.role == "approve")
            if options.kill_at in ("requested", "decided"):
                die()  # its request or decision is committed; nothing else is written
            print(json.dumps(done), flush=True)


if __name__ == "__main__":
    main()
