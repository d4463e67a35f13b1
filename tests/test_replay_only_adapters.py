"""Replay-only runs through each framework adapter, in real processes.

Each test records an effect in a first process, then runs the framework again in processes
started with ``SAFEACT_REPLAY_ONLY=1``: the recorded call replays, a new one is refused in
the framework's own way, the bank pays once, and the ledger's bytes do not change. MCP's
is in tests/test_mcp.py, which runs on both majors of the SDK.
"""

import asyncio
import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from safeact._replay_only import ENVIRONMENT
from tests.actions import count_effects
from tests.processes import report, run_python
from tests.test_replay_only import rows, snapshot

TESTS = Path(__file__).resolve().parent
REPLAYING = {ENVIRONMENT: "1"}


def test_langgraph_a_thread_resumed_replay_only_replays_and_never_acts_anew(
    tmp_path: Path,
) -> None:
    """The model's recorded refund replays; a refund of another amount stops the run unpaid."""
    from tests.langgraph_child import AMOUNT

    files = [tmp_path / name for name in ("checkpoints.db", "ledger.db", "effects")]

    def child(mode: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        command: list[str | Path] = [TESTS / "langgraph_child.py", *files, "sync", mode]
        return run_python(*command, cwd=TESTS.parent, env=env)

    first = report(child("complete"))
    assert first["messages"][2][1] == '{"to": "a@example.com", "amount": 50}'
    before = snapshot(str(files[1]))
    again = report(child("again", REPLAYING))
    replayed = [message for message in again["messages"] if message[0] == "tool"]
    assert [message[1] for message in replayed] == [first["messages"][2][1]] * 2
    refused = report(child("again", {**REPLAYING, AMOUNT: "60"}))
    assert refused["refused"].startswith("langgraph:thread-1:refund:")
    assert count_effects(files[2], "refund") == 1
    assert snapshot(str(files[1])) == before


def test_dbos_a_replay_only_workflow_replays_and_a_new_one_fails_unretried(
    tmp_path: Path,
) -> None:
    """The recorded workflow run again replays its step; a new workflow fails at once, unpaid."""
    ledger, effects = tmp_path / "ledger.db", tmp_path / "effects"

    def child(system: str, workflow: str, env: dict[str, str] | None = None) -> object:
        command: list[str | Path] = [TESTS / "dbos_child.py", tmp_path / system, ledger, effects]
        return report(run_python(*command, "start", workflow, env=env))

    assert child("system-1.db", "wf-1") == ["a@example.com", 50]
    before = snapshot(str(ledger))
    # A fresh system database: DBOS runs the step again, and safeact replays it.
    assert child("system-2.db", "wf-1", REPLAYING) == ["a@example.com", 50]
    refused = child("system-3.db", "wf-2", REPLAYING)
    assert isinstance(refused, dict)
    assert refused["error"] == "ReplayOnlyError"  # not DBOSMaxStepRetriesExceeded
    assert refused["key"].startswith("dbos:wf-2:refund:")
    assert refused["asked"] == ["ReplayOnlyError"]  # asked once, and not retried
    assert count_effects(effects, "refund") == 1
    assert snapshot(str(ledger)) == before


def test_pydantic_ai_a_replay_only_durable_run_replays_and_a_new_run_stops(
    tmp_path: Path,
) -> None:
    """A durable agent run again replays its refund; a new run stops with ReplayOnlyError."""
    ledger, effects = tmp_path / "ledger.db", tmp_path / "effects"

    def child(system: str, workflow: str, env: dict[str, str] | None = None) -> object:
        command: list[str | Path] = [TESTS / "pydantic_ai_child.py", tmp_path / system, ledger]
        return report(run_python(*command, effects, "start", workflow, env=env))

    first = child("system-1.db", "wf-1")
    assert isinstance(first, dict)
    before = snapshot(str(ledger))
    again = child("system-2.db", "wf-1", REPLAYING)
    assert isinstance(again, dict)
    assert again["answer"] == first["answer"]
    refused = child("system-3.db", "wf-2", REPLAYING)
    assert isinstance(refused, dict)
    assert refused["error"] == "ReplayOnlyError"
    assert refused["key"].startswith("pydantic-ai:wf-2:")
    assert count_effects(effects, "refund") == 1
    assert snapshot(str(ledger)) == before


def test_openai_agents_a_replay_only_run_replays_and_a_new_call_stops_the_run(
    tmp_path: Path,
) -> None:
    """The same run replays its refund; one it never made stops the run: ReplayOnlyStopError."""
    ledger, effects = tmp_path / "ledger.db", tmp_path / "effects"

    def child(amount: int, env: dict[str, str] | None = None) -> object:
        command: list[str | Path] = [TESTS / "openai_agents_child.py", ledger, effects, "run-1"]
        return report(run_python(*command, str(amount), env=env))

    first = child(50)
    before = snapshot(str(ledger))
    assert child(50, REPLAYING) == first == ['{"to": "a@example.com", "amount": 50}']
    refused = child(60, REPLAYING)
    assert isinstance(refused, dict)
    assert (refused["stopped"], refused["cause"]) == ("ReplayOnlyStopError", "ReplayOnlyError")
    assert refused["key"].startswith("run-1:refund:")
    assert count_effects(effects, "refund") == 1
    assert snapshot(str(ledger)) == before


@contextlib.asynccontextmanager
async def worker_process(
    address: str, ledger: Path, effects: Path, queue: str, env: dict[str, str]
) -> AsyncIterator[None]:
    """A worker child (tests/temporal_worker.py --serve) on ``queue``, until the block ends."""
    command: list[str | Path] = [TESTS / "temporal_worker.py", address, ledger, effects]
    with subprocess.Popen(  # noqa: ASYNC220 - started once, stopped below, by its handle
        [sys.executable, *command, "--serve", queue],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    ) as serving:
        try:
            assert serving.stdout is not None
            assert (await asyncio.to_thread(serving.stdout.readline)).strip() == "serving"
            yield
        finally:
            serving.terminate()
            try:
                serving.wait(timeout=10)
            except subprocess.TimeoutExpired:
                serving.kill()


async def replay_on_a_replay_only_worker(
    address: str, ledger: Path, effects: Path
) -> tuple[str, str, BaseException]:
    """Run a workflow id on a worker process, then it and a new id on a replay-only one."""
    from temporalio.client import Client, WorkflowFailureError

    from tests.temporal_worker import RefundOrder

    client = await Client.connect(address)
    queue = f"replay-{uuid.uuid4().hex[:8]}"
    recorded = f"wf-replay-{uuid.uuid4().hex[:8]}"
    async with worker_process(address, ledger, effects, queue, {}):
        first = await client.execute_workflow(
            RefundOrder.run, args=["ada", 5], id=recorded, task_queue=queue
        )
    before = snapshot(str(ledger))
    async with worker_process(address, ledger, effects, queue, REPLAYING):
        again = await client.execute_workflow(
            RefundOrder.run, args=["ada", 5], id=recorded, task_queue=queue
        )
        with pytest.raises(WorkflowFailureError) as failed:
            await client.execute_workflow(
                RefundOrder.run, args=["bob", 7], id=f"{recorded}-new", task_queue=queue
            )
    assert snapshot(str(ledger)) == before
    return first, again, failed.value


def test_temporal_a_replay_only_worker_replays_and_refuses_unretried(
    temporal_server: str, tmp_path: Path
) -> None:
    """On a replay-only worker the recorded activity replays; a new one fails, not retried."""
    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import ActivityError, ApplicationError, RetryState

    from safeact.temporal import REPLAY_ONLY

    effects = tmp_path / "effects"
    first, again, failure = asyncio.run(
        replay_on_a_replay_only_worker(temporal_server, tmp_path / "ledger.db", effects)
    )
    assert again == first == "refunded 5 to ada"
    assert isinstance(failure, WorkflowFailureError)
    activity_error = failure.cause
    assert isinstance(activity_error, ActivityError)
    assert activity_error.retry_state is RetryState.NON_RETRYABLE_FAILURE
    refusal = activity_error.cause
    assert isinstance(refusal, ApplicationError)
    assert (refusal.type, refusal.non_retryable) == (REPLAY_ONLY, True)
    assert refusal.details[0]["key"].startswith("temporal:wf-replay-")
    assert count_effects(effects, "refund") == 1


def test_openai_agents_an_async_tool_under_the_scope_replays_and_stops(tmp_path: Path) -> None:
    """In the scope, an async guarded tool replays its run's refund; a new one stops the run."""
    from safeact import ReplayOnlyError, get_store, replay_only, run_scope
    from safeact.openai_agents import ReplayOnlyStopError, function_tool
    from tests.fake_bank import async_refunds
    from tests.test_openai_agents import outputs, run, script

    effects = tmp_path / "effects"
    with get_store(tmp_path / "ledger.db") as store:
        tool = function_tool(async_refunds(store, effects))
        with run_scope("run-1"):
            first = run(tool, script("call-1"))
        with replay_only(), run_scope("run-1"):
            again = run(tool, script("call-2"))
            with pytest.raises(ReplayOnlyStopError) as stopped:
                run(tool, script("call-3", args={"to": "b@example.com", "amount": 7}))
    assert outputs(again) == outputs(first)
    assert isinstance(stopped.value.__cause__, ReplayOnlyError)
    assert stopped.value.receipt["key"] == stopped.value.refused.key
    assert count_effects(effects, "refund") == 1


def test_pydantic_ai_under_temporal_a_refusal_fails_the_activity_unretried(
    temporal_server: str, tmp_path: Path
) -> None:
    """Under TemporalDurability a refused tool call fails its activity at once: REPLAY_ONLY."""
    from temporalio.client import WorkflowFailureError
    from temporalio.exceptions import ActivityError, ApplicationError, RetryState

    from safeact import get_store, replay_only
    from safeact.temporal import REPLAY_ONLY
    from tests.test_pydantic_ai_temporal import durable_agent, run_workflow, workflow_id

    effects, ledger, recorded = tmp_path / "effects", tmp_path / "ledger.db", workflow_id()
    with get_store(ledger) as store:
        agent = durable_agent(store, effects)
        [(_, first)] = asyncio.run(run_workflow(temporal_server, agent, recorded, 1))
    # Rows, not bytes: the connection of an activity thread still alive is the recording
    # store's, and checkpoints its WAL into the file whenever that thread ends.
    before = rows(str(ledger))
    with replay_only(), get_store(ledger) as reading:  # opened read-only
        agent = durable_agent(reading, effects)
        [(_, again)] = asyncio.run(run_workflow(temporal_server, agent, recorded, 1))
        with pytest.raises(WorkflowFailureError) as failed:
            asyncio.run(run_workflow(temporal_server, agent, workflow_id(), 1))
    assert again == first == ["refunded 50 to a@example.com"]
    activity_error = failed.value.cause
    assert isinstance(activity_error, ActivityError)
    assert activity_error.retry_state is RetryState.NON_RETRYABLE_FAILURE
    refusal = activity_error.cause
    assert isinstance(refusal, ApplicationError)
    assert (refusal.type, refusal.non_retryable) == (REPLAY_ONLY, True)
    assert count_effects(effects, "refund") == 1
    assert rows(str(ledger)) == before
