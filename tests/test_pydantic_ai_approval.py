"""safeact.pydantic_ai: a tool that needs approval, in pydantic-ai's deferred tool approval.

Real runs, offline: the model is pydantic-ai's ``FunctionModel``. The run ends with
``DeferredToolRequests`` carrying the ledger's request; ``SafeTools.approve`` / ``deny``
record who decided in the ledger and give the ``DeferredToolResults`` entries; the run
resumes from its messages. The bank counts what really ran (tests/fake_bank.py).
"""

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import (
    Agent,
    AgentRunResult,
    DeferredToolRequests,
    DeferredToolResults,
    ToolApproved,
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

from safeact import (
    ApprovalState,
    AwaitingApprovalError,
    SafeTool,
    Store,
    each_call,
    run_scope,
    safe,
    template,
)
from safeact.pydantic_ai import SafeTools
from tests.actions import count_effects
from tests.fake_bank import Ledger, pay_refund, refunded

ARGS = {"to": "a@example.com", "amount": 50}
PAID = "refunded 50 to a@example.com"
Output = str | DeferredToolRequests


def gated_refunds(
    ledger: Ledger, payments: Path, *, keep_arguments: bool = False
) -> SafeTool[[str, int], str]:
    """The guarded ``send_refund(key, to, amount) -> str`` that needs a person's approval."""

    @safe(ledger, name="refund", approval=True, keep_arguments=keep_arguments)
    def send_refund(key: str, to: str, amount: int) -> str:
        """Refund ``amount`` to ``to``."""
        pay_refund(payments)
        return refunded(to, amount)

    return send_refund


def asking(args: dict[str, object]) -> Callable[[list[ModelMessage], AgentInfo], ModelResponse]:
    """A model's function: a refund with ``args`` when first asked, then the answer "done"."""

    def respond(messages: list[ModelMessage], _: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("send_refund", args)])
        return ModelResponse(parts=[TextPart("done")])

    return respond


def clerk(tools: SafeTools, args: dict[str, object] = ARGS) -> Agent[None, Output]:
    """An agent whose model asks for one refund with ``args``, then answers "done"."""
    return Agent(
        FunctionModel(asking(args)),
        capabilities=[tools],
        output_type=[str, DeferredToolRequests],
    )


def run(
    agent: Agent[None, Output],
    paused: AgentRunResult[Output] | None = None,
    results: DeferredToolResults | None = None,
) -> AgentRunResult[Output]:
    """Run ``agent`` from the prompt, or resume the ``paused`` run with ``results``."""
    if paused is None:
        return asyncio.run(agent.run("refund a@example.com 50"))
    history = paused.all_messages()
    return asyncio.run(agent.run(message_history=history, deferred_tool_results=results))


def requests_of(result: AgentRunResult[Output]) -> tuple[DeferredToolRequests, str]:
    """The requests a run ended with, and the one call in them that waits for approval."""
    assert isinstance(result.output, DeferredToolRequests)
    [call] = result.output.approvals
    return result.output, call.tool_call_id


def returns(result: AgentRunResult[Output]) -> list[object]:
    """What the tools returned to the model in this run, in order."""
    return [
        part.content
        for message in result.new_messages()
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def test_a_call_that_needs_approval_ends_the_run_with_the_request(
    store: Store, tmp_path: Path
) -> None:
    """The run ends deferred; its metadata is the ledger's pending request; nothing ran."""
    effects = tmp_path / "effects"
    with run_scope("run-1"):
        requests, call_id = requests_of(run(clerk(SafeTools(gated_refunds(store, effects)))))
    [pending] = store.approvals()
    asked = requests.metadata[call_id]["safeact"]
    assert (asked["key"], asked["tool"], asked["args_hash"]) == (
        pending.key,
        "refund",
        pending.args_hash,
    )
    assert asked["arguments"] is None  # not kept unless the tool keeps them
    assert count_effects(effects, "refund") == 0


def test_the_request_shows_the_arguments_the_tool_keeps(store: Store, tmp_path: Path) -> None:
    """keep_arguments=True: the person sees the call's arguments in the request."""
    tools = SafeTools(gated_refunds(store, tmp_path / "effects", keep_arguments=True))
    with run_scope("run-1"):
        requests, call_id = requests_of(run(clerk(tools)))
    assert requests.metadata[call_id]["safeact"]["arguments"] == ARGS


def test_approved_it_runs_once_and_the_ledger_says_who(store: Store, tmp_path: Path) -> None:
    """approve() records the person and the note; the resumed run refunds once."""
    effects = tmp_path / "effects"
    tools = SafeTools(gated_refunds(store, effects))
    agent = clerk(tools)
    with run_scope("run-1"):
        paused = run(agent)
        requests, call_id = requests_of(paused)
        verdict = tools.approve(requests, call_id, by="ada", note="invoice 7")
        result = run(agent, paused, DeferredToolResults(approvals={call_id: verdict}))
    [approval] = store.approvals(state=None)
    assert returns(result) == [PAID]
    assert result.output == "done"
    assert (approval.state, approval.decided_by, approval.note) == (
        ApprovalState.CONSUMED,
        "ada",
        "invoice 7",
    )
    assert count_effects(effects, "refund") == 1


def test_a_resumed_run_retried_refunds_once(store: Store, tmp_path: Path) -> None:
    """The same resume run again (a durable retry, pydantic-ai#5536): the refund replays."""
    effects = tmp_path / "effects"
    tools = SafeTools(gated_refunds(store, effects))
    agent = clerk(tools)
    with run_scope("run-1"):
        paused = run(agent)
        requests, call_id = requests_of(paused)
        results = DeferredToolResults(
            approvals={call_id: tools.approve(requests, call_id, by="ada")}
        )
        first = run(agent, paused, results)
        again = run(agent, paused, results)
    assert returns(first) == returns(again) == [PAID]
    assert count_effects(effects, "refund") == 1


def test_a_new_run_in_its_run_scope_replays_without_asking(store: Store, tmp_path: Path) -> None:
    """After the approved refund ran, the run started again under its run key replays it."""
    effects = tmp_path / "effects"
    tools = SafeTools(gated_refunds(store, effects))
    agent = clerk(tools)
    with run_scope("run-1"):
        paused = run(agent)
        requests, call_id = requests_of(paused)
        approved = tools.approve(requests, call_id, by="ada")
        run(agent, paused, DeferredToolResults(approvals={call_id: approved}))
        again = run(clerk(tools))
    assert again.output == "done"
    assert returns(again) == [PAID]
    assert count_effects(effects, "refund") == 1


def test_denied_the_model_is_told_and_nothing_runs(store: Store, tmp_path: Path) -> None:
    """deny() records the denial; the model gets it, with who denied it and why."""
    effects = tmp_path / "effects"
    tools = SafeTools(gated_refunds(store, effects))
    agent = clerk(tools)
    with run_scope("run-1"):
        paused = run(agent)
        requests, call_id = requests_of(paused)
        denied = tools.deny(requests, call_id, by="ada", note="not this one")
        result = run(agent, paused, DeferredToolResults(approvals={call_id: denied}))
    [told] = returns(result)
    assert "denied by ada: not this one" in str(told)
    assert store.approvals(state=ApprovalState.DENIED) != []
    assert count_effects(effects, "refund") == 0


def test_a_denial_replays_to_the_run_started_again(store: Store, tmp_path: Path) -> None:
    """The run started again under its run key gets the same denial, unasked; nothing runs."""
    effects = tmp_path / "effects"
    tools = SafeTools(gated_refunds(store, effects))
    agent = clerk(tools)
    with run_scope("run-1"):
        paused = run(agent)
        requests, call_id = requests_of(paused)
        denied = tools.deny(requests, call_id, by="ada", note="not this one")
        [told] = returns(run(agent, paused, DeferredToolResults(approvals={call_id: denied})))
        again = run(clerk(tools))
    assert again.output == "done"
    assert returns(again) == [told]
    assert count_effects(effects, "refund") == 0


def test_a_plain_true_authorizes_nothing(store: Store, tmp_path: Path) -> None:
    """pydantic-ai's boolean without the ledger's approval ends the run; nothing ran."""
    effects = tmp_path / "effects"
    agent = clerk(SafeTools(gated_refunds(store, effects)))
    with run_scope("run-1"):
        paused = run(agent)
        _, call_id = requests_of(paused)
        with pytest.raises(AwaitingApprovalError, match=r"SafeTools\.approve"):
            run(agent, paused, DeferredToolResults(approvals={call_id: True}))
    assert count_effects(effects, "refund") == 0


def test_override_args_do_not_run_under_the_old_approval(store: Store, tmp_path: Path) -> None:
    """ToolApproved(override_args=...) with another amount: the approval does not cover it."""
    effects = tmp_path / "effects"
    tools = SafeTools(gated_refunds(store, effects))
    agent = clerk(tools)
    with run_scope("run-1"):
        paused = run(agent)
        requests, call_id = requests_of(paused)
        tools.approve(requests, call_id, by="ada")
        other = ToolApproved(override_args={**ARGS, "amount": 5000})
        with pytest.raises(AwaitingApprovalError, match="override_args"):
            run(agent, paused, DeferredToolResults(approvals={call_id: other}))
    assert count_effects(effects, "refund") == 0


def test_other_arguments_under_a_business_key_run_nothing(store: Store, tmp_path: Path) -> None:
    """Under a template key, override_args meet the approval of the call shown: not run."""
    effects = tmp_path / "effects"
    tools = SafeTools(gated_refunds(store, effects), key=template("refund:{to}"))
    agent = clerk(tools)
    paused = run(agent)
    requests, call_id = requests_of(paused)
    tools.approve(requests, call_id, by="ada")
    other = ToolApproved(override_args={**ARGS, "amount": 5000})
    [told] = returns(run(agent, paused, DeferredToolResults(approvals={call_id: other})))
    assert "was not run" in str(told)
    assert count_effects(effects, "refund") == 0


def test_each_call_cannot_key_a_tool_that_needs_approval(store: Store, tmp_path: Path) -> None:
    """each_call would key the deferred call and the resumed call differently."""
    with pytest.raises(ValueError, match="each_call"):
        SafeTools(gated_refunds(store, tmp_path / "effects"), key=each_call)


def test_approve_refuses_a_call_it_did_not_ask_about(store: Store, tmp_path: Path) -> None:
    """A deferred call without safeact's request is pydantic-ai's to decide."""
    tools = SafeTools(gated_refunds(store, tmp_path / "effects"))
    with run_scope("run-1"):
        requests, call_id = requests_of(run(clerk(tools)))
    bare: Any = DeferredToolRequests(approvals=requests.approvals)
    with pytest.raises(ValueError, match="ToolApproved"):
        tools.approve(bare, call_id, by="ada")
