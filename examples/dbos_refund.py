"""A DBOS workflow whose refund step is guarded: killed mid-refund, recovered, paid once.

Offline: DBOS runs on SQLite. Needs ``safeact[dbos]``; run ``python examples/dbos_refund.py
[DIR]`` (given DIR, it keeps the databases, emptied of an earlier run's first; without it,
a temporary folder is used). The first
process starts the workflow and kills itself (SIGKILL) right after the bank paid, before
DBOS or safeact recorded it. The second launches DBOS, which recovers the workflow and runs
the step again: safeact finds its key in doubt and does not pay. The workflow waits; a
person checks the bank, resolves the key, and the workflow settles by replaying it.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import attrs
from dbos import DBOS, SetWorkflowID

from safeact import InDoubtError, get_store, raise_on_doubt, safe
from safeact.dbos import guarded_step

ORDER = "order-8842"  # the workflow id: DBOS recovers the workflow under it


@attrs.frozen
class Refund:
    """What the bank confirms."""

    to: str
    amount: int


def run(workdir: Path, step: str) -> None:
    """One process of the story: ``start`` (dies mid-refund) or ``recover``."""
    bank = workdir / "bank.jsonl"

    @safe(workdir / "agent.db", name="bank.send_refund")
    def send_refund(key: str, to: str, amount: int) -> Refund:
        """The real-world action: the fake bank appends one line per payment."""
        print(f"  bank: paying ${amount} to {to} (key {key})")
        with bank.open("a") as payments:
            payments.write(json.dumps({"key": key, "to": to, "amount": amount}) + "\n")
            payments.flush()
            os.fsync(payments.fileno())
        if step == "start":
            os.kill(os.getpid(), signal.SIGKILL)  # paid, not yet recorded
        return Refund(to, amount)

    refund = DBOS.step(name="refund")(guarded_step(send_refund))
    settle = DBOS.step(name="settle_refund")(raise_on_doubt(send_refund))

    @DBOS.workflow(name="refund_order")
    def refund_order(to: str, amount: int) -> Refund:
        try:
            return refund(to, amount)
        except InDoubtError as doubt:  # killed mid-refund on an earlier run
            print(f"  workflow: the refund is in doubt ({doubt.reason.value}); waiting")
            DBOS.set_event("in_doubt", {"key": doubt.key, "attempt_id": doubt.attempt_id})
            DBOS.recv("verdict", timeout_seconds=60)  # a week, in real life
            return settle(doubt.key, to, amount)  # replays the resolved result

    url = f"sqlite:///{workdir / 'dbos.db'}"
    DBOS(config={"name": "refunds", "system_database_url": url, "log_level": "WARNING"})
    DBOS.launch()  # recovers the workflows an earlier process left unfinished
    if step == "start":
        with SetWorkflowID(ORDER):
            refund_order("ada@example.com", 50)
        return
    receipt = DBOS.get_event(ORDER, "in_doubt", timeout_seconds=60)
    paid = [json.loads(line) for line in bank.read_text().splitlines()]
    mine = [p for p in paid if p["key"] == receipt["key"]]
    print(f"  person: the bank has {len(mine)} payment(s) under {receipt['key']}: it happened")
    with get_store(workdir / "agent.db") as ledger:
        result = Refund(mine[0]["to"], mine[0]["amount"])
        ledger.resolve(
            receipt["key"], happened=True, result=result, attempt_id=receipt["attempt_id"]
        )
    DBOS.send(ORDER, "resolved", topic="verdict")
    done: Refund = DBOS.retrieve_workflow(ORDER).get_result()
    print(f"  workflow: done, refunded ${done.amount} to {done.to}")
    DBOS.destroy()


def main(workdir: Path) -> None:
    """Run the two processes, then count the bank's payments."""
    for step in ("start", "recover"):
        command = [sys.executable, "-u", __file__, step, str(workdir)]
        code = subprocess.run(command, check=False).returncode
        died = " (killed by SIGKILL)" if code == -signal.SIGKILL else ""
        print(f"orchestrator: {step} exited with {code}{died}", flush=True)
    payments = (workdir / "bank.jsonl").read_text().splitlines()
    print(f"bank: {len(payments)} payment(s)")


if __name__ == "__main__":
    if len(sys.argv) == 3:
        run(Path(sys.argv[2]), sys.argv[1])
    elif len(sys.argv) == 2:
        keep = Path(sys.argv[1])
        keep.mkdir(parents=True, exist_ok=True)
        for leftover in ("dbos.db", "agent.db", "bank.jsonl"):  # from an earlier run
            for suffix in ("", "-wal", "-shm"):
                (keep / f"{leftover}{suffix}").unlink(missing_ok=True)
        main(keep)
    else:
        with tempfile.TemporaryDirectory() as scratch:
            main(Path(scratch))
