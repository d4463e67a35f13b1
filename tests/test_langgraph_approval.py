"""safeact.langgraph and approvals: a gated tool pauses the graph with its request, offline.

Real graphs (a hand-built ``ToolNode`` graph, and ``create_agent``) with LangChain's fake chat
model and LangGraph's checkpointers. The pause is ``interrupt`` with the request; the resume
value is a person's decision, recorded in the ledger (``Store.approve``/``deny``) bound to
the key and the argument digest. The crash test SIGKILLs tests/langgraph_child.py right
after an approved refund paid.
"""

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command

import safeact.langgraph
from safeact import ApprovalState, AsyncSafeTool, SafeTool, Store, get_store, safe
from safeact.langgraph import OnDoubt, safe_tool
from tests.actions import Receipt, count_effects
from tests.fake_bank import Mode, next_mode, pay_refund
from tests.langgraph_child import APPROVAL, KILL
from tests.processes import ended, report
from tests.test_langgraph import (
    ARGS,
    RESULT_JSON,
    USER,
    child,
    hand_graph,
    model,
    refund_call,
    the_pause,
    thread,
    tool_messages,
)

APPROVE = {"approved": True, "by": "ada", "note": "invoice 7"}
DENY = {"approved": False, "by": "ada", "note": "not this customer"}

Graph = CompiledStateGraph[Any, Any, Any, Any]


def gated(store: Store, payments: Path, modes: list[Mode] | None = None) -> SafeTool[Any, Receipt]:
    """The refund of tests/fake_bank.py, needing a person's approval, its arguments kept."""

    @safe(store, name="refund", approval=True, keep_arguments=True)
    def send_refund(key: str, to: str, amount: int) -> Receipt:
        """Refund ``amount`` to ``to``."""
        pay_refund(payments, next_mode(modes))
        return Receipt(to, amount)

    return send_refund


@pytest.fixture
def store(ledger: Path) -> Iterator[Store]:
    with get_store(ledger) as opened:
        yield opened


@pytest.fixture(autouse=True)
def warn_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the once-per-process durability warning as a new process would."""
    monkeypatch.setattr(safeact.langgraph, "_WARNED", set())


@pytest.fixture(params=["memory", "sqlite"])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseCheckpointSaver[Any]]:
    if request.param == "memory":
        yield InMemorySaver()
        return
    connection = sqlite3.connect(tmp_path / "checkpoints.db", check_same_thread=False)
    try:
        yield SqliteSaver(connection)
    finally:
        connection.close()


def paused(
    store: Store,
    effects: Path,
    saver: BaseCheckpointSaver[Any] | None = None,
    modes: list[Mode] | None = None,
    *replies: AIMessage,
    on_doubt: OnDoubt = "interrupt",
) -> tuple[Graph, dict[str, Any]]:
    """A graph whose model asks for the gated refund, run until it stops; its first result."""
    chat = model(refund_call(), *(replies or (AIMessage("done"),)))
    tool = safe_tool(gated(store, effects, modes), on_doubt=on_doubt)
    graph = hand_graph([tool], chat, saver or InMemorySaver())
    return graph, graph.invoke(USER, thread(), durability="sync")


def resume(graph: Graph, value: object) -> dict[str, Any]:
    result: dict[str, Any] = graph.invoke(Command(resume=value), thread(), durability="sync")
    return result


def test_a_gated_call_pauses_with_the_request(
    store: Store, tmp_path: Path, saver: BaseCheckpointSaver[Any]
) -> None:
    """The call pauses the graph with the request: kind, key, tool, time, digest, arguments."""
    graph, result = paused(store, tmp_path / "e", saver)
    [approval] = store.approvals()
    assert the_pause(result) == {
        "kind": "approval",
        "key": approval.key,
        "tool": "refund",
        "requested_at": approval.requested_at.isoformat(),
        "args_hash": approval.args_hash,
        "arguments": ARGS,
    }
    assert approval.key.startswith("langgraph:thread-1:refund:")
    assert graph.get_state(thread()).next == ("tools",)
    assert count_effects(tmp_path / "e", "refund") == 0


def test_without_kept_arguments_the_request_says_none(store: Store, tmp_path: Path) -> None:
    """A tool that does not keep its arguments pauses with ``"arguments": None``."""

    @safe(store, name="refund", approval=True)
    def send_refund(key: str, to: str, amount: int) -> Receipt:
        """Refund ``amount`` to ``to``."""
        return Receipt(to, amount)

    chat = model(refund_call(), AIMessage("done"))
    graph = hand_graph([safe_tool(send_refund)], chat, InMemorySaver())
    request = the_pause(graph.invoke(USER, thread(), durability="sync"))
    assert request["kind"] == "approval"
    assert request["arguments"] is None


def test_an_approval_runs_the_action_once(
    store: Store, tmp_path: Path, saver: BaseCheckpointSaver[Any]
) -> None:
    """Resumed with an approval, the action runs once and the model gets its result."""
    effects = tmp_path / "e"
    graph, _ = paused(store, effects, saver)
    done = resume(graph, APPROVE)
    assert tool_messages(done) == [(RESULT_JSON, "call-1", "success")]
    assert done["messages"][-1].content == "done"
    assert count_effects(effects, "refund") == 1


def test_the_approval_is_recorded_in_the_ledger(store: Store, tmp_path: Path) -> None:
    """The decision is the ledger's: by whom, the note, consumed by the claim, in the history."""
    graph, _ = paused(store, tmp_path / "e")
    resume(graph, APPROVE)
    [approval] = store.approvals(state=None)
    assert approval.state is ApprovalState.CONSUMED
    assert approval.decided_by == "ada"
    assert approval.note is not None
    assert approval.note.startswith("invoice 7; in LangGraph by a resume (thread thread-1, ")
    assert approval.attempt_id == store.records()[0].attempt_id
    whys = [event.why.value for event in store.history(approval.key)]
    assert whys == ["approval_requested", "approved", "claimed", "ran"]


def test_a_denial_never_runs_and_tells_the_model(
    store: Store, tmp_path: Path, saver: BaseCheckpointSaver[Any]
) -> None:
    """Resumed with a denial, nothing runs; the model gets an error message with the denial."""
    effects = tmp_path / "e"
    graph, _ = paused(store, effects, saver)
    done = resume(graph, DENY)
    [(content, call_id, status)] = tool_messages(done)
    assert (call_id, status) == ("call-1", "error")
    assert content.startswith(
        "send_refund did not run: denied by ada: not this customer (a person's decision)."
    )
    assert "do not call it again" in content
    assert store.approvals(state=None)[0].state is ApprovalState.DENIED
    assert count_effects(effects, "refund") == 0


def test_a_denied_call_asked_again_replays_the_denial(store: Store, tmp_path: Path) -> None:
    """The model asking again in a later step gets the same denial; nothing runs, no pause."""
    effects = tmp_path / "e"
    graph, _ = paused(store, effects, None, None, refund_call("call-2"), AIMessage("sorry"))
    done = resume(graph, DENY)
    assert "__interrupt__" not in done
    first, second = tool_messages(done)
    assert (first[0], first[2]) == (second[0], second[2])
    assert second[1] == "call-2"
    assert "denied by ada: not this customer" in second[0]
    assert count_effects(effects, "refund") == 0


def test_a_second_resume_with_the_same_approval_runs_nothing(store: Store, tmp_path: Path) -> None:
    """The approval resumed again once the run is over does not run the action again."""
    effects = tmp_path / "e"
    graph, _ = paused(store, effects)
    resume(graph, APPROVE)
    again = resume(graph, APPROVE)
    assert tool_messages(again) == [(RESULT_JSON, "call-1", "success")]
    assert count_effects(effects, "refund") == 1
    assert len(store.approvals(state=None)) == 1


def test_a_verdict_for_other_arguments_is_refused(store: Store, tmp_path: Path) -> None:
    """An approval naming another digest is refused by the ledger; the pause says so."""
    effects = tmp_path / "e"
    graph, first = paused(store, effects)
    stale = {**APPROVE, "args_hash": "0" * 64}
    again = the_pause(resume(graph, stale))
    assert again["args_hash"] == the_pause(first)["args_hash"]
    assert again["error"].startswith("the verdict was not applied: cannot approve key ")
    assert "its request is for args hash" in again["error"]
    assert store.approvals()[0].state is ApprovalState.PENDING
    assert count_effects(effects, "refund") == 0


def test_a_verdict_naming_its_own_digest_applies(store: Store, tmp_path: Path) -> None:
    """An approval that repeats the request's ``args_hash`` runs the action once."""
    effects = tmp_path / "e"
    graph, first = paused(store, effects)
    done = resume(graph, {**APPROVE, "args_hash": the_pause(first)["args_hash"]})
    assert tool_messages(done) == [(RESULT_JSON, "call-1", "success")]
    assert count_effects(effects, "refund") == 1


@pytest.mark.parametrize(
    "verdict",
    [
        "yes",
        {"approved": "yes", "by": "ada"},
        {"approved": True},
        {"approved": True, "by": " "},
        {"approved": True, "by": "ada", "note": 7},
        {"approved": True, "by": "ada", "args_hash": ""},
        {"approved": True, "by": "ada", "please": True},
        {"happened": True, "result": ARGS},
    ],
)
def test_a_bad_approval_verdict_pauses_again_saying_why(
    store: Store, tmp_path: Path, verdict: object
) -> None:
    """A resume value that is not an approval verdict changes nothing and pauses again."""
    effects = tmp_path / "e"
    graph, _ = paused(store, effects)
    again = the_pause(resume(graph, verdict))
    assert again["kind"] == "approval"
    assert "is not an approval verdict" in again["error"]
    assert store.approvals()[0].state is ApprovalState.PENDING
    done = resume(graph, APPROVE)
    assert tool_messages(done) == [(RESULT_JSON, "call-1", "success")]
    assert count_effects(effects, "refund") == 1


def test_a_request_decided_meanwhile_is_read_from_the_ledger(store: Store, tmp_path: Path) -> None:
    """Denied through the store while paused, a resume's approval is refused; the denial stands."""
    effects = tmp_path / "e"
    graph, first = paused(store, effects)
    store.deny(the_pause(first)["key"], by="bob", note="fraud")
    done = resume(graph, APPROVE)
    [(content, _, status)] = tool_messages(done)
    assert status == "error"
    assert "denied by bob: fraud" in content
    assert count_effects(effects, "refund") == 0


def test_a_spent_approval_never_authorizes_the_request_after_a_release(
    store: Store, tmp_path: Path
) -> None:
    """Approved, cut off, released: the next request pauses anew; the old yes is not replayed."""
    effects = tmp_path / "e"
    graph, _ = paused(store, effects, None, ["interrupt-before"])
    with pytest.raises(KeyboardInterrupt):  # the claim consumed the approval, then the cut
        resume(graph, APPROVE)
    doubt = the_pause(graph.invoke(None, thread(), durability="sync"))
    assert doubt["reason"] == "interrupted"
    asked = the_pause(resume(graph, {"happened": False, "force": True}))
    assert asked["kind"] == "approval"
    assert "error" not in asked
    assert store.approvals()[0].state is ApprovalState.PENDING
    done = resume(graph, DENY)
    assert "denied by ada: not this customer" in tool_messages(done)[0][0]
    assert count_effects(effects, "refund") == 0


def test_after_a_release_a_new_approval_runs_the_action_once(store: Store, tmp_path: Path) -> None:
    """Approved, cut off before paying, released, approved again: one refund."""
    effects = tmp_path / "e"
    graph, _ = paused(store, effects, None, ["interrupt-before"])
    with pytest.raises(KeyboardInterrupt):
        resume(graph, APPROVE)
    graph.invoke(None, thread(), durability="sync")
    resume(graph, {"happened": False, "force": True})
    done = resume(graph, APPROVE)
    assert tool_messages(done) == [(RESULT_JSON, "call-1", "success")]
    assert count_effects(effects, "refund") == 1


def test_a_run_resumed_after_the_approved_action_was_cut_off_pauses_in_doubt(
    store: Store, tmp_path: Path
) -> None:
    """Cut off after paying, the resumed run pauses with the doubt, not the spent approval."""
    effects = tmp_path / "e"
    graph, _ = paused(store, effects, None, ["interrupt-after"])
    with pytest.raises(KeyboardInterrupt):
        resume(graph, APPROVE)
    doubt = the_pause(graph.invoke(None, thread(), durability="sync"))
    assert doubt["reason"] == "interrupted"
    assert "error" not in doubt
    done = resume(graph, {"happened": True, "result": ARGS})
    assert tool_messages(done) == [(RESULT_JSON, "call-1", "success")]
    assert count_effects(effects, "refund") == 1


def test_on_doubt_message_tells_the_model_it_waits(store: Store, tmp_path: Path) -> None:
    """With ``on_doubt="message"`` the model is told nothing ran and a person must approve."""
    effects = tmp_path / "e"
    _, result = paused(store, effects, on_doubt="message")
    assert "__interrupt__" not in result
    [(content, _, status)] = tool_messages(result)
    assert status == "error"
    assert content.startswith("send_refund waits for a person's approval; nothing ran.")
    assert f"safeact approve {store.location} " in content
    assert count_effects(effects, "refund") == 0


def test_approved_outside_the_graph_the_model_asking_again_runs_once(
    store: Store, tmp_path: Path
) -> None:
    """Told it waits, then approved with the store, the same call asked again runs once."""
    effects = tmp_path / "e"
    replies = (refund_call("call-2"), AIMessage("done"))
    tool = safe_tool(gated(store, effects), on_doubt="message")
    graph = hand_graph([tool], model(refund_call(), AIMessage("asked"), *replies), InMemorySaver())
    graph.invoke(USER, thread(), durability="sync")
    store.approve(store.approvals()[0].key, by="ada")
    again = graph.invoke({"messages": [("user", "approved now")]}, thread(), durability="sync")
    assert tool_messages(again)[-1] == (RESULT_JSON, "call-2", "success")
    assert count_effects(effects, "refund") == 1


def test_an_async_gated_tool_in_create_agent(store: Store, tmp_path: Path) -> None:
    """An async gated tool pauses create_agent under ainvoke; the approval runs it once."""
    effects = tmp_path / "e"

    @safe(store, name="refund", approval=True, keep_arguments=True)
    async def send_refund(key: str, to: str, amount: int) -> Receipt:
        """Refund ``amount`` to ``to``."""
        pay_refund(effects)
        await asyncio.sleep(0)
        return Receipt(to, amount)

    tool: AsyncSafeTool[Any, Receipt] = send_refund
    agent = create_agent(
        model(refund_call(), AIMessage("done")), [safe_tool(tool)], checkpointer=InMemorySaver()
    )

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        first = await agent.ainvoke(USER, thread(), durability="sync")
        done = await agent.ainvoke(Command(resume=APPROVE), thread(), durability="sync")
        return first, done

    first, done = asyncio.run(run())
    assert the_pause(first)["arguments"] == ARGS
    assert tool_messages(done) == [(RESULT_JSON, "call-1", "success")]
    assert count_effects(effects, "refund") == 1


GATE = {APPROVAL: "1"}
"""The child's tool needs approval."""


def killed_after_an_approved_refund(tmp_path: Path) -> dict[str, Any]:
    """Ask, approve in a child SIGKILLed right after the refund paid, resume: the doubt pause."""
    asked = report(child(tmp_path, "sync", "run", env=GATE))
    [request] = asked["pauses"]
    assert (request["kind"], request["arguments"]) == ("approval", ARGS)
    killed = child(tmp_path, "sync", "verdict", json.dumps(APPROVE), env={**GATE, KILL: "1"})
    assert ended(killed) == "SIGKILL", killed.stderr
    [doubt] = report(child(tmp_path, "sync", "resume", env=GATE))["pauses"]
    assert (doubt["reason"], doubt["key"]) == ("crashed", request["key"])
    doubt_receipt: dict[str, Any] = doubt
    return doubt_receipt


def test_sigkill_after_an_approved_refund_then_a_verdict_finishes(tmp_path: Path) -> None:
    """Killed after the approved refund paid, a verdict on the resumed run's doubt finishes it."""
    killed_after_an_approved_refund(tmp_path)
    happened = json.dumps({"happened": True, "result": ARGS})
    done = report(child(tmp_path, "sync", "verdict", happened, env=GATE))
    assert done["pauses"] == []
    assert done["messages"][-1] == ["ai", "done", []]
    assert count_effects(tmp_path / "effects", "refund") == 1


def test_sigkill_after_an_approved_refund_then_the_approval_again_runs_nothing(
    tmp_path: Path,
) -> None:
    """Killed after the approved refund paid, resumed with the approval again: still in doubt."""
    doubt = killed_after_an_approved_refund(tmp_path)
    again = report(child(tmp_path, "sync", "verdict", json.dumps(APPROVE), env=GATE))
    [still] = again["pauses"]
    assert (still["reason"], still["attempt_id"]) == ("crashed", doubt["attempt_id"])
    assert count_effects(tmp_path / "effects", "refund") == 1
