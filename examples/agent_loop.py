"""A scripted agent loop that crashes itself mid-action, restarts, and closes out the doubt.

Run it with ``python3 tasks.py demo`` (or ``python examples/agent_loop.py [DIR]`` where
safeact is installed), which leaves the ledger in ``.demo/agent.db`` for the ``safeact``
command to inspect (given DIR, it is emptied first and kept; without it, a temporary
folder is used and removed). The orchestrator starts the agent in a child process; the
agent refunds three customers through a fake bank. During the second refund it kills
itself (SIGKILL) after the bank paid but before safeact could record it. The orchestrator
restarts the agent, which replays the first refund without paying again, learns the second
is ``InDoubt``, checks the bank with the key as the receipt, resolves the key, and carries
on.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import attrs

from safeact import Failed, InDoubt, Succeeded, get_store, safe

TASKS = [
    ("refund-1001", "ada@example.com", 50),
    ("refund-1002", "bob@example.com", 20),
    ("refund-1003", "cy@example.com", 75),
]


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
            case Failed(error_type=error_type, message=message):
                print(f"  agent: {key}: failed with {error_type}: {message}; not retried")
    store.close()


def orchestrator(keep: Path | None) -> None:
    """Start the agent, watch it die, start it again: what any orchestrator does."""
    if keep is None:
        with tempfile.TemporaryDirectory() as scratch:
            run_agents(Path(scratch))
    else:
        for leftover in ("agent.db", "agent.db-wal", "agent.db-shm", "bank.jsonl"):
            (keep / leftover).unlink(missing_ok=True)
        keep.mkdir(parents=True, exist_ok=True)
        run_agents(keep)


def run_agents(workdir: Path) -> None:
    """Run the agent until it has been through every refund, restarting it once."""
    print(f"ledger: {workdir / 'agent.db'}")
    for attempt, crash_on in enumerate(["refund-1002", None], start=1):
        print(f"orchestrator: starting the agent (run {attempt})")
        command = [sys.executable, "-u", __file__, "--agent", str(workdir)]
        if crash_on:
            command += ["--crash-on", crash_on]
        code = subprocess.run(command, check=False).returncode
        died = " (killed by SIGKILL)" if code == -signal.SIGKILL else ""
        print(f"orchestrator: the agent exited with {code}{died}")
    payments = [json.loads(line) for line in (workdir / "bank.jsonl").read_text().splitlines()]
    print(
        f"bank: {len(payments)} payments for {len({p['key'] for p in payments})} keys: "
        + ", ".join(f"{p['key']} ${p['amount']}" for p in payments)
    )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--agent":
        crash = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--crash-on" else None
        agent(Path(sys.argv[2]), crash_on=crash)
    else:
        orchestrator(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
