"""A scripted agent loop that crashes itself mid-action, restarts, and closes out the doubt.

Run it with ``python3 tasks.py demo`` (or ``python examples/agent_loop.py [DIR]`` where
safeact is installed), which leaves the ledger in ``.demo/agent.db`` for the ``safeact``
command to inspect (given DIR, it is emptied first and kept; without it, a temporary
folder is used and removed). The orchestrator starts the agent in a child process; the
agent refunds four customers through a fake bank. During the second refund it kills
itself (SIGKILL) after the bank paid but before safeact could record it. The orchestrator
restarts the agent, which replays the first refund without paying again, learns the second
is ``InDoubt``, checks the bank with the key as the receipt, resolves the key, and carries
on, until it is killed the same way during the fourth refund. The orchestrator gives up
there: that key is left in doubt for an operator (``safeact doubt DIR/agent.db``).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import attrs

from safeact import AwaitingApproval, Failed, InDoubt, Succeeded, get_store, safe

TASKS = [
    ("refund-1001", "ada@example.com", 50),
    ("refund-1002", "bob@example.com", 20),
    ("refund-1003", "cy@example.com", 75),
    ("refund-1004", "dee@example.com", 30),
]

CRASHES = ["refund-1002", "refund-1004"]
"""Where each run of the agent is killed; the orchestrator restarts it once, then gives up."""


@attrs.frozen
class Refund:
    """What the bank confirms."""

    to: str
    amount: int


def bank_pay(bank: Path, key: str, to: str, amount: int) -> None:
    """The real-world action: the fake bank appends one payment line per transfer."""
    with bank.open("a") as ledger:
        ledger.write(json.dumps({"key": key, "to": to, "amount": amount}) + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())


def bank_lookup(bank: Path, key: str) -> list[dict[str, object]]:
    """What a person does with an InDoubt receipt: ask the downstream system."""
    if not bank.exists():
        return []
    payments = [json.loads(line) for line in bank.read_text().splitlines()]
    return [payment for payment in payments if payment["key"] == key]


def agent(workdir: Path, *, crash_on: str | None) -> None:
    """Work through the refunds; every refund is a guarded call."""
    store = get_store(workdir / "agent.db")
    bank = workdir / "bank.jsonl"

    @safe(store, name="demo.send_refund")
    def send_refund(key: str, to: str, amount: int) -> Refund:
        bank_pay(bank, key, to, amount)
        if key == crash_on:
            print(f"  agent: paid {key}, and the process dies before safeact records it")
            os.kill(os.getpid(), signal.SIGKILL)
        return Refund(to, amount)

    for key, to, amount in TASKS:
        match send_refund(key, to, amount):
            case Succeeded(value=refund, replayed=False):
                print(f"  agent: {key}: refunded ${refund.amount} to {refund.to} (ran now)")
            case Succeeded(value=refund):
                print(
                    f"  agent: {key}: already refunded ${refund.amount}; replayed, not paid again"
                )
            case InDoubt(key=k, tool=tool, attempted_at=when, args_hash=digest, reason=why):
                print(
                    f"  agent: {k}: IN DOUBT ({why.value}): {tool} was attempted at "
                    f"{when:%H:%M:%S} UTC (args {digest[:8]}) and nobody knows if it ran"
                )
                payments = bank_lookup(bank, k)
                print(f"  agent: asked the bank about {k}: {len(payments)} payment(s) found")
                if payments:
                    store.resolve(
                        k, happened=True, result=Refund(to, amount), note="the bank has it"
                    )
                    print(f"  agent: resolved {k} as happened; it will never be paid again")
                else:
                    store.resolve(k, happened=False, note="the bank has no such payment")
                    print(f"  agent: resolved {k} as not happened; it may run again")
                print(f"  agent: {k}: retried, got {send_refund(k, to, amount)}")
            case AwaitingApproval(key=k, requested_at=asked):
                # Only a tool made with approval=True answers this (send_refund is not):
                # nothing ran and nothing blocks. An agent tells its model the call waits
                # for a person and goes on; the same call runs once someone approves it.
                print(
                    f"  agent: {k}: waits for a person's approval (asked {asked:%H:%M:%S} UTC);"
                    " told the model so, and moved on"
                )
            case Failed(error_type=error_type, message=message):
                print(f"  agent: {key}: failed with {error_type}: {message}; not retried")
    store.close()


def orchestrator(keep: Path | None) -> None:
    """Start the agent, watch it die, start it again, give up: what any orchestrator does."""
    if keep is None:
        with tempfile.TemporaryDirectory() as scratch:
            run_agents(Path(scratch))
        print(f"left in doubt: {CRASHES[-1]}, in a ledger now removed (give DIR to keep it)")
    else:
        for leftover in ("agent.db", "agent.db-wal", "agent.db-shm", "bank.jsonl"):
            (keep / leftover).unlink(missing_ok=True)
        keep.mkdir(parents=True, exist_ok=True)
        run_agents(keep)
        print(f"left in doubt for you: safeact doubt {shown(keep / 'agent.db')}")


def run_agents(workdir: Path) -> None:
    """Run the agent, and once it is killed, run it again; killed again, it is left so."""
    print(f"ledger: {shown(workdir / 'agent.db')}")
    for attempt, crash_on in enumerate(CRASHES, start=1):
        print(f"orchestrator: starting the agent (run {attempt})")
        command = [sys.executable, "-u", __file__, "--agent", str(workdir), "--crash-on", crash_on]
        code = subprocess.run(command, check=False).returncode
        died = " (killed by SIGKILL)" if code == -signal.SIGKILL else ""
        print(f"orchestrator: the agent exited with {code}{died}")
    payments = [json.loads(line) for line in (workdir / "bank.jsonl").read_text().splitlines()]
    print(
        f"bank: {len(payments)} payments for {len({p['key'] for p in payments})} keys: "
        + ", ".join(f"{p['key']} ${p['amount']}" for p in payments)
    )


def shown(path: Path) -> str:
    """``path`` as an operator here would type it: relative to this folder if inside it."""
    full, here = path.resolve(), Path.cwd().resolve()
    return str(full.relative_to(here)) if full.is_relative_to(here) else str(path)


def parse(argv: list[str]) -> argparse.Namespace:
    """Read the command line; ``--help`` and mistakes exit here, before anything is made."""
    parser = argparse.ArgumentParser(
        description=(
            "A scripted agent refunds four customers through a fake bank, is killed "
            "(SIGKILL) after a payment and before safeact records it, is restarted, replays "
            "what it did, resolves the payment in doubt, and is killed again: the last "
            "refund is left in doubt for `safeact doubt DIR/agent.db`."
        ),
    )
    parser.add_argument(
        "dir",
        nargs="?",
        type=Path,
        metavar="DIR",
        help="keep the ledger (DIR/agent.db) and the fake bank here, replacing a previous "
        "run's (default: a temporary folder, removed at the end)",
    )
    parser.add_argument(
        "--agent",
        type=Path,
        metavar="DIR",
        help="run one agent on the ledger in DIR, as the orchestrator does (for a person "
        "taking the orchestrator's place)",
    )
    parser.add_argument(
        "--crash-on",
        metavar="KEY",
        help="with --agent: kill the agent after the bank pays KEY, before safeact records it",
    )
    options = parser.parse_args(argv)
    if options.agent is not None and options.dir is not None:
        parser.error("give DIR or --agent DIR, not both")
    if options.crash_on is not None and options.agent is None:
        parser.error("--crash-on KEY goes with --agent DIR")
    return options


def main(argv: list[str]) -> None:
    """Run the orchestrator, or with ``--agent`` one agent."""
    options = parse(argv)
    if options.agent is not None:
        agent(options.agent, crash_on=options.crash_on)
    else:
        orchestrator(options.dir)


if __name__ == "__main__":
    main(sys.argv[1:])
