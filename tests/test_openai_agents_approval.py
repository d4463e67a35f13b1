"""safeact.openai_agents: a tool that needs approval, in the Agents SDK's own approval flow.

Real runs, offline: the model is the SDK's ``agents.testing.ScriptedModel``. The run pauses
with the call in ``result.interruptions``; ``approve`` / ``reject`` record who decided in
the ledger and in the ``RunState``; ``Runner.run(agent, state)`` resumes. The bank counts
what really ran (tests/fake_bank.py).
"""

import asyncio
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, FunctionTool, RunConfig, Runner, RunResult, RunState, ToolApprovalItem
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

from safeact import ApprovalState, SafeTool, Store, each_call, run_scope, safe, template
from safeact.openai_agents import AwaitingApprovalStopError, approve, function_tool, reject
from tests.actions import count_effects
from tests.fake_bank import Ledger, pay_refund, refunded

ARGS = {"to": "a@example.com", "amount": 50}
PAID = "refunded 50 to a@example.com"
CONFIG = RunConfig(tracing_disabled=True)


def gated_refunds(ledger: Ledger, payments: Path) -> SafeTool[[str, int], str]:
    """The guarded ``send_refund(key, to, amount) -> str`` that needs a person's approval."""

    @safe(ledger, name="refund", approval=True)
    def send_refund(key: str, to: str, amount: int) -> str:
        """Refund ``amount`` to ``to``."""
        pay_refund(payments)
        return refunded(to, amount)

    return send_refund


def clerk(tool: FunctionTool, *calls: dict[str, object]) -> Agent[Any]:
    """An agent whose model asks for one refund per ``calls`` (ARGS if none), then is done.

    The model says "done" as often as it is asked after that: a run resumed again asks it.
    """
    steps: list[Any] = [
        [function_call("send_refund", args, call_id=f"call-{n}")]
        for n, args in enumerate(calls or (ARGS,))
    ]
    model = ScriptedModel([*steps, *([[assistant_message("done")]] * 5)])
    return Agent(name="clerk", instructions="Refund.", model=model, tools=[tool])


def run(agent: Agent[Any], start: str | RunState[Any] = "refund a@example.com 50") -> RunResult:
    """Run ``agent`` from a prompt, or resume it from ``start``."""
    return asyncio.run(Runner.run(agent, start, run_config=CONFIG))


def paused(agent: Agent[Any]) -> tuple[RunState[Any], ToolApprovalItem]:
    """Run ``agent`` until it pauses for one approval: its state and the paused call."""
    result = run(agent)
    [item] = result.interruptions
    return result.to_state(), item


def outputs(result: RunResult) -> list[object]:
    """What the tools returned to the model in this run, in order."""
    return [item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)]


def test_a_call_that_needs_approval_pauses_the_run_and_asks_the_ledger(
    store: Store, tmp_path: Path
) -> None:
    """The run pauses on the call, its request is pending in the ledger, and nothing ran."""
    effects = tmp_path / "effects"
    with run_scope("run-1"):
        result = run(clerk(function_tool(gated_refunds(store, effects))))
    [item] = result.interruptions
    [request] = store.approvals()
    assert (item.tool_name, request.tool) == ("send_refund", "refund")
    assert request.key.startswith("run-1:refund:")
    assert result.final_output is None
    assert count_effects(effects, "refund") == 0


def test_approved_it_runs_once_and_the_ledger_says_who(store: Store, tmp_path: Path) -> None:
    """approve() records the person and the note; the resumed run refunds once."""
    effects = tmp_path / "effects"
    agent = clerk(function_tool(gated_refunds(store, effects)))
    with run_scope("run-1"):
        state, item = paused(agent)
        approve(state, item, by="ada", note="invoice 7")
        result = run(agent, state)
    [approval] = store.approvals(state=None)
    assert outputs(result) == [PAID]
    assert (approval.state, approval.decided_by, approval.note) == (
        ApprovalState.CONSUMED,
        "ada",
        "invoice 7",
    )
    assert count_effects(effects, "refund") == 1


def test_an_approved_state_resumed_twice_refunds_once(store: Store, tmp_path: Path) -> None:
    """The saved state, approved, resumed again (a durable retry): the refund replays."""
    effects = tmp_path / "effects"
    agent = clerk(function_tool(gated_refunds(store, effects)))
    with run_scope("run-1"):
        state, item = paused(agent)
        approve(state, item, by="ada")
        saved = state.to_json()
        first = run(agent, asyncio.run(RunState.from_json(agent, saved)))
        again = run(agent, asyncio.run(RunState.from_json(agent, saved)))
    assert outputs(first) == outputs(again) == [PAID]
    assert count_effects(effects, "refund") == 1


def test_a_new_run_with_the_run_id_replays_without_asking(store: Store, tmp_path: Path) -> None:
    """After the approved refund ran, the run started again under its run id replays it."""
    effects = tmp_path / "effects"
    tool = function_tool(gated_refunds(store, effects))
    agent = clerk(tool)
    with run_scope("run-1"):
        state, item = paused(agent)
        approve(state, item, by="ada")
        run(agent, state)
        again = run(clerk(tool))
    assert again.interruptions == []
    assert outputs(again) == [PAID]
    assert count_effects(effects, "refund") == 1


def test_an_approval_given_in_the_ledger_runs_the_next_call(store: Store, tmp_path: Path) -> None:
    """An operator's approval (safeact approve) lets the run started again act, once, unasked."""
    effects = tmp_path / "effects"
    tool = function_tool(gated_refunds(store, effects))
    with run_scope("run-1"):
        paused(clerk(tool))
        [request] = store.approvals()
        store.approve(request.key, by="bob", args_hash=request.args_hash)
        result = run(clerk(tool))
    assert result.interruptions == []
    assert outputs(result) == [PAID]
    assert count_effects(effects, "refund") == 1


def test_rejected_the_model_is_told_and_nothing_runs(store: Store, tmp_path: Path) -> None:
    """reject() records the denial; the model gets it, with who denied it and why."""
    effects = tmp_path / "effects"
    agent = clerk(function_tool(gated_refunds(store, effects)))
    with run_scope("run-1"):
        state, item = paused(agent)
        denial = reject(state, item, by="ada", note="not this one")
        result = run(agent, state)
    [told] = outputs(result)
    assert "denied by ada: not this one" in str(told)
    assert denial.state is ApprovalState.DENIED
    assert count_effects(effects, "refund") == 0


def test_a_denial_replays_to_the_run_started_again(store: Store, tmp_path: Path) -> None:
    """The run started again under its run id gets the same denial, unasked, and runs nothing."""
    effects = tmp_path / "effects"
    tool = function_tool(gated_refunds(store, effects))
    agent = clerk(tool)
    with run_scope("run-1"):
        state, item = paused(agent)
        reject(state, item, by="ada", note="not this one")
        [told] = outputs(run(agent, state))
        again = run(clerk(tool))
    assert again.interruptions == []
    assert outputs(again) == [told]
    assert count_effects(effects, "refund") == 0


def test_an_sdk_approval_alone_authorizes_nothing(store: Store, tmp_path: Path) -> None:
    """state.approve(item) without the ledger's approval: the run stops, nothing ran."""
    effects = tmp_path / "effects"
    agent = clerk(function_tool(gated_refunds(store, effects)))
    with run_scope("run-1"):
        state, item = paused(agent)
        state.approve(item)
        with pytest.raises(AwaitingApprovalStopError) as stopped:
            run(agent, state)
    [request] = store.approvals()
    assert stopped.value.receipt["key"] == request.key
    assert count_effects(effects, "refund") == 0


def test_always_approve_does_not_authorize_other_arguments(store: Store, tmp_path: Path) -> None:
    """The SDK's always_approve lets a call of other arguments through; the ledger stops it."""
    effects = tmp_path / "effects"
    agent = clerk(function_tool(gated_refunds(store, effects)), ARGS, {**ARGS, "amount": 5000})
    with run_scope("run-1"):
        state, item = paused(agent)
        approve(state, item, by="ada")
        state.approve(item, always_approve=True)
        with pytest.raises(AwaitingApprovalStopError) as stopped:
            run(agent, state)
    [other] = store.approvals()
    assert stopped.value.receipt["args_hash"] == other.args_hash
    assert count_effects(effects, "refund") == 1


def test_an_approval_bound_to_other_arguments_runs_nothing(store: Store, tmp_path: Path) -> None:
    """Under a business key, a call with other arguments than those approved is not run."""
    effects = tmp_path / "effects"
    tool = function_tool(gated_refunds(store, effects), key=template("refund:{to}"))
    state, item = paused(clerk(tool))
    approve(state, item, by="ada")
    result = run(clerk(tool, {**ARGS, "amount": 5000}))
    [told] = outputs(result)
    assert "was not run" in str(told)
    assert count_effects(effects, "refund") == 0


def test_each_call_cannot_key_a_tool_that_needs_approval(store: Store, tmp_path: Path) -> None:
    """each_call would key the call it asks about and the call it runs differently."""
    with pytest.raises(ValueError, match="each_call"):
        function_tool(gated_refunds(store, tmp_path / "effects"), key=each_call)


def test_approve_refuses_a_call_of_another_tool(store: Store, tmp_path: Path) -> None:
    """An interruption of a tool that is not safeact's is the SDK's to decide."""
    agent = clerk(function_tool(gated_refunds(store, tmp_path / "effects")))
    with run_scope("run-1"):
        state, item = paused(agent)
    other = ToolApprovalItem(agent=agent, raw_item=item.raw_item, tool_name="wire_money")
    with pytest.raises(ValueError, match=r"state\.approve"):
        approve(state, other, by="ada")
