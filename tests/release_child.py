"""A process that makes one guarded call, for the tests of releasing a key only on proof.

Usage: python tests/release_child.py LEDGER EFFECTS KEY [options]

LEDGER is what ``get_store`` takes: a SQLite file path or a PostgreSQL URL. The action
appends (and fsyncs) a line to EFFECTS, once per real run; ``--probe`` gives the tool a
truthful reconciliation probe: happened when EFFECTS has the key's line, not happened
otherwise. The outcome is printed as one line of JSON.

Where the action waits before its effect, so that the test can freeze it or look at it:

--pause     prints "paused" and waits for a line on stdin (the test SIGSTOPs it there);
--hog S     prints "hogging" and holds the GIL in one C call of about S seconds, so that its
            heartbeat cannot renew the lease;
--fork HOW  forks; the forked child unwinds through the action's frames by ``sys.exit(0)``
            (HOW=exit) or by raising (HOW=raise); the parent waits for it to end, prints
            "forked" and waits for a line on stdin.

--through-child FIFO
            the effect is made by a child process the action starts and waits for: a shell
            that waits until FIFO is opened for writing and closed, then appends the line;
            prints "spawned PID" (the shell's) once it runs.
--pthread-exit
            calls the tool in a thread; the main thread then ends with pthread_exit (the
            process shows as a zombie while that thread runs on).

--unstorable calls a tool annotated ``-> int`` that returns a str (its result cannot be
stored); --armed prints "armed" once the store is open and waits for a line on stdin before
calling, so that the call starts at the moment the test chooses. --lease, --heartbeat,
--wait and --host set the store and the tool.
"""

import argparse
import ctypes
import json
import os
import subprocess
import sys
import threading
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
    Succeeded,
    Verdict,
    get_store,
    safe,
)
from tests.actions import Receipt, count_effects, record_effect


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("ledger")
    parser.add_argument("effects", type=Path)
    parser.add_argument("key")
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--heartbeat", type=float)
    parser.add_argument("--wait", type=float, default=0.0)
    parser.add_argument("--host")
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--pause", action="store_true")
    parser.add_argument("--hog", type=float, default=0.0)
    parser.add_argument("--fork", choices=["exit", "raise"])
    parser.add_argument("--through-child", type=Path)
    parser.add_argument("--pthread-exit", action="store_true")
    parser.add_argument("--unstorable", action="store_true")
    parser.add_argument("--armed", action="store_true")
    return parser.parse_args()


def main() -> None:
    options = arguments()
    store = get_store(
        options.ledger, lease=options.lease, heartbeat=options.heartbeat, host=options.host
    )
    effects: Path = options.effects
    hog = calibrated_hog(options.hog) if options.hog else None
    probe = truthful(effects) if options.probe else None

    @safe(store, name="tests.charge", wait=options.wait, reconcile=probe)
    def charge(key: str, to: str, amount: int) -> Receipt:
        if options.pause:  # the test freezes this process here, before the effect
            print("paused", flush=True)
            sys.stdin.readline()
        if hog is not None:
            print("hogging", flush=True)
            hog()
        if options.fork is not None:
            forked(options.fork)
        effect(options.through_child, effects, key)
        return Receipt(to, amount)

    @safe(store, name="tests.count")
    def count(key: str) -> int:
        record_effect(effects, key)
        return "not an int"  # type: ignore[return-value] # a result that cannot be stored

    if options.armed:
        print("armed", flush=True)
        sys.stdin.readline()
    if options.pthread_exit:
        assert store.owner.started > 0  # known, as to a process that claimed before it ended
        in_a_thread_then_end_main(lambda: charge(options.key, "a@example.com", 50))
    first_pid = os.getpid()
    if options.unstorable:
        outcome: Outcome[object] = count(options.key)
    else:
        outcome = charge(options.key, "a@example.com", 50)
    if os.getpid() != first_pid:
        os._exit(0)  # a forked child that came back out of the tool ends here, silently
    print(json.dumps(describe(outcome)), flush=True)


def in_a_thread_then_end_main(call: Callable[[], Outcome[Receipt]]) -> None:
    """Call in a thread and print its outcome; end the main thread with pthread_exit.

    Without a main thread to finish the interpreter, the thread ends the process itself (the
    heartbeat, a daemon thread, would keep it running).
    """

    def act() -> None:
        print(json.dumps(describe(call())), flush=True)
        os._exit(0)

    threading.Thread(target=act).start()
    ctypes.CDLL(None).pthread_exit(None)  # the GIL is let go for the call: it never returns


def effect(fifo: Path | None, effects: Path, key: str) -> None:
    """Make the effect here, or (``fifo``) in a child shell that waits for it to be written."""
    if fifo is None:
        record_effect(effects, key)
        return
    shell = subprocess.Popen(
        ["sh", "-c", 'cat "$0" > /dev/null && echo "$1" >> "$2"', fifo, key, effects]
    )
    print(f"spawned {shell.pid}", flush=True)
    shell.wait()


def forked(how: str) -> None:
    """Fork; the child unwinds through the caller's frames, the parent waits and holds."""
    pid = os.fork()
    if pid == 0:
        if how == "exit":
            sys.exit(0)
        raise RuntimeError("raised in a child forked by the action")
    os.waitpid(pid, 0)
    print("forked", flush=True)  # the child is gone; the test looks at the ledger now
    sys.stdin.readline()


def calibrated_hog(seconds: float) -> Callable[[], None]:
    """One C call (``sum`` over a ``range``) of about ``seconds``, which never lets go of the GIL.

    No bytecode runs inside it, so no other thread of the process (the heartbeat) runs.
    """
    sample = 2_000_000
    started = time.perf_counter()
    sum(range(sample))
    rate = sample / max(time.perf_counter() - started, 1e-6)
    size = int(rate * seconds)

    def hog() -> None:
        sum(range(size))

    return hog


def truthful(effects: Path) -> Callable[[str, InDoubt], Verdict[Receipt]]:
    """A probe that tells the truth: the effect happened if the effects file has its line."""

    def probe(key: str, receipt: InDoubt) -> Verdict[Receipt]:
        if count_effects(effects, key):
            return Happened(Receipt("a@example.com", 50), "the effects file has it")
        return NotHappened("the effects file has no such line")

    return probe


def describe(outcome: Outcome[object]) -> dict[str, object]:
    match outcome:
        case Succeeded(value=value, replayed=replayed, recorded=recorded):
            shown = attrs.asdict(value) if isinstance(value, Receipt) else value
            return {"kind": "Succeeded", "replayed": replayed, "recorded": recorded, "value": shown}
        case InDoubt(reason=reason, note=note):
            return {"kind": "InDoubt", "reason": reason.value, "note": note}
        case Failed(error_type=error_type, message=message, replayed=replayed):
            return {"kind": "Failed", "replayed": replayed, "error": f"{error_type}: {message}"}
        case AwaitingApproval(key=key, tool=tool):
            return {"kind": "AwaitingApproval", "key": key, "tool": tool}


if __name__ == "__main__":
    main()
