"""The crash harness through the framework adapters: a LangGraph agent and an MCP host.

Each scenario is what a user of the adapter hands ``assert_crash_safe``: a module-level
``run(ledger)`` that builds the guarded tool on the harness's ledger, puts it behind the
adapter and serves one customer's refund, which the fake bank below pays by appending a
line to a file (named by an environment variable the test sets, which each run inherits).
The harness kills a fresh process at each crash point of the call and at the bank's
``effect_made()``, and the runs after it must not pay again. Unguarded, the same scenario
pays again after a kill at the effect, and the report names that point: the harness sees
through the adapter.

A guarded scenario reaches five crash points; the harness runs it uncrashed, then three or
four times per point: 19 fresh processes, each importing this module and its framework
(the frameworks are imported inside the scenarios, so each run imports only its own:
LangGraph and LangChain about a second, the MCP SDK less). An unguarded one reaches only
the effect: 4 processes.
"""

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest

from safeact import run_scope, safe
from safeact.testing import CrashReport, assert_crash_safe, crash_report, effect_made

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.runnables import RunnableConfig
    from langchain_core.tools import BaseTool
    from mcp.types import CallToolResult

EVERY_POINT = ["before_claim", "after_claim", "effect", "after_call", "after_record"]
PAYMENTS = "SAFEACT_TEST_ADAPTER_PAYMENTS"
"""The file the fake bank appends a line to for each refund it pays (set per test)."""
TO, AMOUNT = "ada@example.com", 50


@attrs.frozen
class Refund:
    """What the bank confirms."""

    to: str
    amount: int


def pay(to: str, amount: int) -> Refund:
    """The fake bank: every call pays (it has no idempotency key of its own)."""
    with Path(os.environ[PAYMENTS]).open("a") as book:
        book.write(f"{to} {amount}\n")
    effect_made()  # paid: the harness may kill the run here, before safeact records it
    return Refund(to, amount)


def send_refund(key: str, to: str, amount: int) -> Refund:
    """Refund ``amount`` dollars to the customer ``to``."""
    return pay(to, amount)


def send_refund_unguarded(to: str, amount: int) -> Refund:
    """Refund ``amount`` dollars to the customer ``to``."""
    return pay(to, amount)


def payments() -> int:
    """How many refunds the bank has paid: the harness's ``effects``."""
    path = Path(os.environ[PAYMENTS])
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture(autouse=True)
def bank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bank of the test's own, for this process and the runs it starts."""
    monkeypatch.setenv(PAYMENTS, str(tmp_path / "payments"))


def failed_points(report: CrashReport) -> list[str]:
    return [str(point.crash) for point in report.points if point.problems]


# LangGraph: an agent made with create_agent, its thread checkpointed next to the ledger.

THREAD: "RunnableConfig" = {"configurable": {"thread_id": "ticket-8842"}}
CUSTOMER: Any = {"messages": [("user", f"Please refund {TO} ${AMOUNT} for order 8842")]}


def clerk() -> "BaseChatModel":
    """A scripted model: it asks for the refund until the tool has answered, then says so.

    Like a real model at temperature 0 it answers the same conversation alike in every
    process; each time it asks, it is under a new ``tool_call_id``, as a real model's.
    """
    from collections.abc import Callable, Sequence

    from langchain_core.callbacks import CallbackManagerForLLMRun
    from langchain_core.language_models import BaseChatModel, LanguageModelInput
    from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.runnables import Runnable
    from langchain_core.tools import BaseTool

    class Clerk(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted-clerk"

        def bind_tools(
            self,
            tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],  # noqa: ARG002 - the base signature
            *,
            tool_choice: str | None = None,  # noqa: ARG002 - the base signature
            **kwargs: Any,  # noqa: ARG002 - the base signature
        ) -> Runnable[LanguageModelInput, AIMessage]:
            return self

        def _generate(
            self,
            messages: list[BaseMessage],
            stop: list[str] | None = None,  # noqa: ARG002 - the base signature
            run_manager: CallbackManagerForLLMRun | None = None,  # noqa: ARG002 - the same
            **kwargs: Any,  # noqa: ARG002 - the base signature
        ) -> ChatResult:
            last = messages[-1]
            if isinstance(last, ToolMessage):
                reply = AIMessage(f"Done: {last.content}")
            else:
                call = {"to": TO, "amount": AMOUNT}
                ask = {"name": "send_refund", "args": call, "id": f"call-{len(messages)}"}
                reply = AIMessage("", tool_calls=[ask])
            return ChatResult(generations=[ChatGeneration(message=reply)])

    return Clerk()


def serve_the_customer(ledger: str, tool: "BaseTool") -> str:
    """The host's turn on the customer's thread, as a process restarted at any time runs it.

    A thread cut off mid-step (or paused in doubt) is carried on from its checkpoint;
    otherwise the customer's message is passed on, again if the customer sent it again.
    Every step is saved before the next (``durability="sync"``, as the docs say).
    """
    from langchain.agents import create_agent
    from langchain_core.messages import ToolMessage
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(str(Path(ledger).with_suffix(".graph.db"))) as saver:
        agent = create_agent(clerk(), tools=[tool], checkpointer=saver)
        pending = agent.get_state(THREAD).next
        out = agent.invoke(None if pending else CUSTOMER, THREAD, durability="sync")
    if "__interrupt__" in out:
        [pause] = out["__interrupt__"]
        return f"paused ({pause.value['reason']}, {pause.value['key']})"
    answers = sum(isinstance(message, ToolMessage) for message in out["messages"])
    return f"{out['messages'][-1].content} ({answers} tool answer(s))"


def refund_agent(ledger: str) -> str:
    """The agent with the refund guarded by ``safe_tool``, keyed by the thread (the default)."""
    from safeact.langgraph import safe_tool

    return serve_the_customer(ledger, safe_tool(safe(ledger, name="send_refund")(send_refund)))


def unguarded_agent(ledger: str) -> str:
    """The same agent with the refund as a plain LangChain tool."""
    from langchain_core.tools import StructuredTool

    tool = StructuredTool.from_function(send_refund_unguarded, name="send_refund")
    return serve_the_customer(ledger, tool)


CONFIRMED = '{"to": "ada@example.com", "amount": 50}'


def test_a_langgraph_agent_keeps_the_promise_at_every_crash_point() -> None:
    """Killed at each point of the refund, the agent resumes, pauses in doubt or replays: one pay.

    The run after a kill carries the thread on from its checkpoint; once the harness has
    resolved the doubt, the paused thread goes on and replays; the last run is the
    customer asking again, a new turn whose call the thread key replays.
    """
    report = assert_crash_safe(refund_agent, effects=payments)
    assert [str(point.crash) for point in report.points] == EVERY_POINT
    [key] = {how.rsplit(": ", 1)[0] for point in report.points for how in point.resolved}
    assert key.startswith("langgraph:ticket-8842:send_refund:")  # the thread's key
    one_turn, two_turns = f"Done: {CONFIRMED} (1 tool answer(s))", "(2 tool answer(s))"
    doubt = f"returned 'paused (crashed, {key})'"
    assert [point.runs[1].outcome for point in report.points] == [
        f"returned {one_turn!r}",  # killed before the claim: nothing ran, it runs now
        doubt,
        doubt,
        doubt,
        f"returned {one_turn!r}",  # killed after the record: it replays
    ]
    assert all(point.runs[-1].outcome.endswith(f"{two_turns}'") for point in report.points)
    assert [point.effects for point in report.points] == [
        (0, 1, 1),
        (0, 0, 1, 1),
        (1, 1, 1, 1),
        (1, 1, 1, 1),
        (1, 1, 1),
    ]
    assert [point.resolved for point in report.points] == [
        (),
        (f"{key}: not happened",),
        (f"{key}: happened",),
        (f"{key}: happened",),
        (),
    ]
    assert payments() == 1 + 5  # uncrashed once, and once per crash point


def test_an_unguarded_langgraph_tool_fails_at_the_effect() -> None:
    """Unguarded, the resumed step pays again after a kill at the effect: the report says so."""
    report = crash_report(unguarded_agent, effects=payments)
    assert not report.safe
    assert failed_points(report) == ["effect"]
    [point] = report.points
    assert point.runs[0].killed
    assert point.effects == (1, 2, 3)
    assert point.problems == (
        "the effect happened 3 time(s), 1 in an uncrashed run: it ran again after the crash",
        "the last run made an effect: it did not replay",
    )


# MCP: an MCPServer (mcp 2.x) with the refund, and a host calling it in memory.

HOST_RUN = "host-run-8842"
"""The host run's key, kept with the run: a run started again after a crash reuses it."""


def said(result: "CallToolResult") -> str:
    """What the server answered, in short."""
    from safeact.mcp import REPLAYED

    receipt = result.structured_content or {}
    if result.is_error:
        return f"error: {receipt.get('state')} ({receipt.get('reason')}, {receipt.get('key')})"
    return "replayed" if (result.meta or {}).get(REPLAYED) else "refunded"


async def refund_host(ledger: str) -> str:
    """A host that asks the bank's MCP server for the refund, keyed by its run (``_meta``)."""
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    from safeact.mcp import add_tool, call_tool

    server = MCPServer("bank")
    add_tool(server, safe(ledger, name="send_refund")(send_refund), destructive=True)
    async with Client(server) as client:
        with run_scope(HOST_RUN):  # the key: the run, the tool and a digest of the arguments
            return said(await call_tool(client, "send_refund", {"to": TO, "amount": AMOUNT}))


async def unguarded_host(ledger: str) -> str:
    """The same host and server, with the refund registered as a plain MCP tool."""
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bank")
    server.add_tool(send_refund_unguarded, name="send_refund")
    async with Client(server) as client:
        return said(await client.call_tool("send_refund", {"to": TO, "amount": AMOUNT}))


def test_an_mcp_tool_keeps_the_promise_at_every_crash_point() -> None:
    """Killed at each point of the refund, the host's next run gets the receipt or the replay."""
    report = assert_crash_safe(refund_host, effects=payments)
    assert [str(point.crash) for point in report.points] == EVERY_POINT
    [key] = {how.rsplit(": ", 1)[0] for point in report.points for how in point.resolved}
    assert key.startswith(f"{HOST_RUN}:send_refund:")  # the run's key, sent in _meta
    doubt = f"returned 'error: in_doubt (crashed, {key})'"
    assert [[run.outcome for run in point.runs[1:]] for point in report.points] == [
        ["returned 'refunded'", "returned 'replayed'"],
        [doubt, "returned 'refunded'", "returned 'replayed'"],  # resolved: it did not run
        [doubt, "returned 'replayed'", "returned 'replayed'"],  # resolved: it ran
        [doubt, "returned 'replayed'", "returned 'replayed'"],
        ["returned 'replayed'", "returned 'replayed'"],
    ]
    assert [point.effects for point in report.points] == [
        (0, 1, 1),
        (0, 0, 1, 1),
        (1, 1, 1, 1),
        (1, 1, 1, 1),
        (1, 1, 1),
    ]
    assert payments() == 1 + 5


def test_an_unguarded_mcp_tool_fails_at_the_effect() -> None:
    """Unguarded, the host's next run pays again after a kill at the effect: the report says so."""
    report = crash_report(unguarded_host, effects=payments)
    assert not report.safe
    assert failed_points(report) == ["effect"]
    [point] = report.points
    assert point.runs[0].killed
    assert point.effects == (1, 2, 3)
    assert point.problems == (
        "the effect happened 3 time(s), 1 in an uncrashed run: it ran again after the crash",
        "the last run made an effect: it did not replay",
    )
