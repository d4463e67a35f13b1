"""A refund saga with fake back ends: a failing step, the rollback, a crash mid-rollback.

Run it with ``python3 tasks.py refund-demo`` (or ``python examples/refund_agent.py`` where
safeact is installed). The agent refunds a charge, sends a receipt and writes the ledger,
as one saga. The ledger is down, so the saga rolls back, newest first: the receipt is
corrected, then the charge is reversed. The first run dies (SIGKILL) inside the charge
reversal, before the payment service acted. The second run takes the rollback up again:
the correction is replayed, not sent twice, and the reversal is in doubt. The agent asks the
payment service, learns nothing was reversed, releases the key, and a third run reverses
the charge. Every back end prints what it does, so you can count.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from safeact import Saga, SagaFailed, SagaState, get_store

SAGA_ID = "refund-8842"


class Backends:
    """Payments, email and the books, faked: each action is printed and logged to a file."""

    def __init__(self, workdir: Path, *, crash_in_reversal: bool) -> None:
        self.log = workdir / "backends.jsonl"
        self.crash_in_reversal = crash_in_reversal

    def record(self, service: str, action: str, key: str) -> None:
        print(f"    [{service}] {action} (idempotency key {key})")
        with self.log.open("a") as log:
            log.write(json.dumps({"service": service, "action": action, "key": key}) + "\n")
            log.flush()
            os.fsync(log.fileno())

    def actions(self, key: str) -> list[str]:
        if not self.log.exists():
            return []
        entries = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [entry["action"] for entry in entries if entry["key"] == key]

    def charge_refund(self, key: str, cents: int) -> str:
        self.record("payments", f"refund {cents} cents", key)
        return f"re_{cents}"

    def reverse_charge(self, key: str, refund_id: str) -> None:
        if self.crash_in_reversal:
            print("    the agent dies inside the reversal, before the payment service acts")
            os.kill(os.getpid(), signal.SIGKILL)
        self.record("payments", f"reverse {refund_id}", key)

    def send_receipt(self, key: str, to: str) -> str:
        self.record("email", f"receipt to {to}", key)
        return to

    def send_correction(self, key: str, to: str) -> None:
        self.record("email", f"correction to {to}", key)

    def write_ledger(self, key: str, entry: str) -> None:
        print(f"    [books] cannot write {entry!r}: the ledger service is down")
        raise ConnectionError("ledger service unavailable")


def refund(workdir: Path, backends: Backends) -> None:
    """The agent's task: one saga of three steps, two of which can be undone."""
    store = get_store(workdir / "agent.db")
    try:
        with Saga(SAGA_ID, store) as saga:
            refund_id = saga.step(backends.charge_refund, 5000, compensate=backends.reverse_charge)
            saga.step(backends.send_receipt, "a@b.com", compensate=backends.send_correction)
            saga.step(backends.write_ledger, f"refund {refund_id}")
    except SagaFailed as failure:
        print(f"  SagaFailed: {failure}")
        for key in failure.in_doubt:
            reversal = f"{key}:compensate"
            done = [a for a in backends.actions(reversal) if a.startswith("reverse")]
            print(
                f"  the undo of {key} is in doubt; the payment service has {len(done)} "
                "reversal(s) under that key"
            )
            if not done:
                store.resolve(reversal, happened=False)
                print(f"  resolved {reversal} as not happened: the next run reverses it")
    store.close()


def show(workdir: Path) -> None:
    with get_store(workdir / "agent.db") as store:
        stuck = store.list_sagas(SagaState.COMPENSATING)
        saga = store.get_saga(SAGA_ID)
    state = saga.state.value if saga else "not started"
    print(f"  ledger: saga {SAGA_ID} is {state}; stuck mid-rollback: {len(stuck)}")


def main() -> None:
    """Run the agent three times, as an orchestrator restarting it would."""
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        for run, crash in [(1, True), (2, False), (3, False)]:
            print(f"run {run}:")
            command = [sys.executable, "-u", __file__, "--agent", str(workdir)]
            code = subprocess.run(command + (["--crash"] if crash else []), check=False)
            if code.returncode == -signal.SIGKILL:
                print("  the agent was killed (SIGKILL)")
            show(workdir)
        actions = [
            json.loads(line) for line in (workdir / "backends.jsonl").read_text().splitlines()
        ]
        print(
            f"back ends acted {len(actions)} times, once per key: "
            + "; ".join(f"{a['service']} {a['action']}" for a in actions)
        )


def parse(argv: list[str]) -> argparse.Namespace:
    """Read the command line; ``--help`` and mistakes exit here, before anything is made."""
    parser = argparse.ArgumentParser(
        description=(
            "A refund saga whose last step fails: it rolls back, the agent is killed "
            "(SIGKILL) inside the rollback, and two more runs finish it, each back end "
            "acting once per key."
        ),
    )
    parser.add_argument(
        "--agent",
        type=Path,
        metavar="DIR",
        help="run one agent on the ledger in DIR, as the three runs do (for a person "
        "taking the orchestrator's place)",
    )
    parser.add_argument(
        "--crash",
        action="store_true",
        help="with --agent: kill the agent inside the charge's reversal",
    )
    options = parser.parse_args(argv)
    if options.crash and options.agent is None:
        parser.error("--crash goes with --agent DIR")
    return options


if __name__ == "__main__":
    options = parse(sys.argv[1:])
    if options.agent is not None:
        refund(options.agent, Backends(options.agent, crash_in_reversal=options.crash))
    else:
        main()
