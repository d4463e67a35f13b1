"""A Temporal worker for tests/test_temporal_server.py, in this process or a child of its own.

Run as a script (``python tests/temporal_worker.py ADDRESS LEDGER EFFECTS``) it serves the
task queue until the guarded refund kills it (SIGKILL) right after its side effect; with
``--serve QUEUE`` it serves that queue, paying as usual, until it is stopped (SIGTERM), and
prints "serving" once it polls.
"""

import asyncio
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from temporalio import workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from safeact import Store, get_store
from safeact.temporal import guarded_activity
from tests.fake_bank import async_text_refunds

QUEUE = "refunds"


@workflow.defn(name="RefundOrder")
class RefundOrder:
    """Refund once: the activity is tried up to three times, a second after each time-out."""

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


def refund_activity(store: Store, effects: Path, *, die: bool) -> Callable[..., object]:
    """The guarded refund as an activity; ``die`` kills the process right after the payment."""
    return guarded_activity(async_text_refunds(store, effects, ["sigkill-after"] if die else []))


def worker(client: Client, store: Store, effects: Path, *, die: bool, queue: str = QUEUE) -> Worker:
    """A worker of the refund workflow and its guarded activity (no sandbox: plain imports)."""
    return Worker(
        client,
        task_queue=queue,
        workflows=[RefundOrder],
        activities=[refund_activity(store, effects, die=die)],
        workflow_runner=UnsandboxedWorkflowRunner(),
    )


async def serve_until_killed(address: str, ledger: Path, effects: Path) -> None:
    client = await Client.connect(address)
    with get_store(ledger) as store:
        await worker(client, store, effects, die=True).run()


async def serve(address: str, ledger: Path, effects: Path, queue: str) -> None:
    client = await Client.connect(address)
    with get_store(ledger) as store:
        async with worker(client, store, effects, die=False, queue=queue):
            print("serving", flush=True)
            await asyncio.Event().wait()  # until the test stops this process


if __name__ == "__main__":
    address, ledger, effects = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    if sys.argv[4:5] == ["--serve"]:
        asyncio.run(serve(address, ledger, effects, sys.argv[5]))
    else:
        asyncio.run(serve_until_killed(address, ledger, effects))
