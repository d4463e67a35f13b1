"""safeact.langgraph: guarded tools in real LangGraph graphs and LangChain agents, offline.

The model is LangChain's own fake chat model (or an agent node returning ``AIMessage``s);
checkpointers are LangGraph's ``InMemorySaver`` and ``SqliteSaver``. Crash tests SIGKILL a
child process (tests/langgraph_child.py) right after the refund's side effect.
"""

import json
import sqlite3
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import attrs
import pydantic
import pytest
from langchain.agents import create_agent
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

import safeact.langgraph
from safeact import NoRunKeyError, Store, get_store, safe, template
from safeact.langgraph import SafeMiddleware, safe_tool
from tests.actions import bury_attempt, count_effects, unstorable_quotes
from tests.fake_bank import Mode, async_refunds, refunds
from tests.langgraph_child import DEPLOYED, UNNAMED
from tests.processes import ended, report, run_python

CHILD = Path(__file__).with_name("langgraph_child.py")
ARGS = {"to": "a@example.com", "amount": 50}
RESULT_JSON = json.dumps(ARGS)


class Model(GenericFakeChatModel):
    """LangChain's fake chat model, as create_agent takes it: binding tools changes nothing."""

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],  # noqa: ARG002 - the base signature
        *,
        tool_choice: str | None = None,  # noqa: ARG002 - the base class's signature
        **kwargs: Any,  # noqa: ARG002 - the base class's signature
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self


def asks(*calls: tuple[str, dict[str, object], str]) -> AIMessage:
    """The model's message asking for tool calls: (name, arguments, tool call id)."""
    return AIMessage(
        "",
        tool_calls=[{"name": name, "args": args, "id": call_id} for name, args, call_id in calls],
    )


def model(*replies: AIMessage) -> Model:
    return Model(messages=iter(replies))


def refund_call(call_id: str = "call-1") -> AIMessage:
    return asks(("send_refund", ARGS, call_id))


def hand_graph(
    tools: Sequence[BaseTool], chat: Model, saver: BaseCheckpointSaver[Any]
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """The usual hand-built graph: an agent node, a ToolNode, back to the agent."""

    def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [chat.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode(list(tools)))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=saver)


def thread(name: str = "thread-1") -> RunnableConfig:
    return {"configurable": {"thread_id": name}}


USER: Any = {"messages": [("user", "refund 50 to a@example.com")]}


def tool_messages(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The tool messages of a run's state: (content, tool call id, status)."""
    messages: list[AnyMessage] = result["messages"]
    return [
        (str(m.content), m.tool_call_id, m.status) for m in messages if isinstance(m, ToolMessage)
    ]


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


def test_the_model_is_not_asked_for_the_key(store: Store, tmp_path: Path) -> None:
    """The tool's schema has the function's parameters, name and docstring, not the key."""
    tool = safe_tool(refunds(store, tmp_path / "effects"))
    schema = tool.tool_call_schema.model_json_schema()  # type: ignore[union-attr] # a pydantic model here
    assert (tool.name, tool.description) == ("send_refund", "Refund ``amount`` to ``to``.")
    assert sorted(schema["properties"]) == ["amount", "to"]
    assert sorted(schema["required"]) == ["amount", "to"]


def test_a_step_run_again_after_an_error_replays(store: Store, tmp_path: Path) -> None:
    """A ToolNode step that fails after the refund runs again on resume: the refund replays."""
    effects = tmp_path / "effects"
    failures = ["the network is down"]

    @tool
    def lookup(order: str) -> str:
        """Look an order up."""
        if failures:
            raise ValueError(failures.pop())
        return f"order {order}"

    both = asks(("send_refund", ARGS, "call-1"), ("lookup", {"order": "o-1"}, "call-2"))
    chat = model(both, AIMessage("done"))
    graph = hand_graph([safe_tool(refunds(store, effects)), lookup], chat, InMemorySaver())
    with pytest.raises(ValueError, match="the network is down"):
        graph.invoke(USER, thread(), durability="sync")
    assert count_effects(effects, "refund") == 1
    result = graph.invoke(None, thread(), durability="sync")
    assert tool_messages(result) == [
        (RESULT_JSON, "call-1", "success"),
        ("order o-1", "call-2", "success"),
    ]
    assert count_effects(effects, "refund") == 1


def test_identical_calls_in_one_step_are_one_action(store: Store, tmp_path: Path) -> None:
    """One message asking twice with the same arguments refunds once; both calls get it."""
    effects = tmp_path / "effects"
    twice = asks(("send_refund", ARGS, "call-1"), ("send_refund", ARGS, "call-2"))
    graph = hand_graph(
        [safe_tool(refunds(store, effects))], model(twice, AIMessage("done")), InMemorySaver()
    )
    result = graph.invoke(USER, thread(), durability="sync")
    assert sorted(tool_messages(result)) == [
        (RESULT_JSON, "call-1", "success"),
        (RESULT_JSON, "call-2", "success"),
    ]
    assert count_effects(effects, "refund") == 1


def test_time_travel_to_before_the_tools_step_replays(store: Store, tmp_path: Path) -> None:
    """Running again from a checkpoint before the refund (time travel) replays it: one refund."""
    effects = tmp_path / "effects"
    chat = model(refund_call("call-1"), AIMessage("done"), AIMessage("done again"))
    graph = hand_graph([safe_tool(refunds(store, effects))], chat, InMemorySaver())
    graph.invoke(USER, thread(), durability="sync")
    before_tools = next(s for s in graph.get_state_history(thread()) if s.next == ("tools",))
    forked = graph.invoke(None, before_tools.config, durability="sync")
    assert tool_messages(forked)[-1] == (RESULT_JSON, "call-1", "success")
    assert len(store.records()) == 1
    assert count_effects(effects, "refund") == 1


def test_time_travel_with_the_position_key_runs_anew(store: Store, tmp_path: Path) -> None:
    """Keyed by ``position`` (a deliberate repeat), the fork's later step is a new action."""
    effects = tmp_path / "effects"
    chat = model(refund_call(), AIMessage("done"), AIMessage("done again"))
    tool = safe_tool(refunds(store, effects), key=safeact.langgraph.position)
    graph = hand_graph([tool], chat, InMemorySaver())
    graph.invoke(USER, thread(), durability="sync")
    before_tools = next(s for s in graph.get_state_history(thread()) if s.next == ("tools",))
    graph.invoke(None, before_tools.config, durability="sync")
    steps = sorted(record.key.rsplit(":", 3)[1] for record in store.records())
    assert steps == ["2", "3"]
    assert count_effects(effects, "refund") == 2


def test_a_template_key_runs_once_across_turns(store: Store, tmp_path: Path) -> None:
    """With key=template(...), the same refund asked for in two turns runs once."""
    effects = tmp_path / "effects"
    chat = model(refund_call("call-1"), AIMessage("done"), refund_call("call-2"), AIMessage("ok"))
    tool = safe_tool(refunds(store, effects), key=template("refund:{to}:{amount}"))
    graph = hand_graph([tool], chat, InMemorySaver())
    graph.invoke(USER, thread())  # no durability warning: the key does not depend on it
    second = graph.invoke({"messages": [("user", "again please")]}, thread())
    assert tool_messages(second) == [
        (RESULT_JSON, "call-1", "success"),
        (RESULT_JSON, "call-2", "success"),
    ]
    assert count_effects(effects, "refund") == 1
    assert store.get("refund:a@example.com:50") is not None


def test_the_same_call_in_a_later_turn_replays(store: Store, tmp_path: Path) -> None:
    """The default key is the thread's: the same refund asked for in a second turn replays."""
    effects = tmp_path / "effects"
    chat = model(refund_call("call-1"), AIMessage("done"), refund_call("call-2"), AIMessage("ok"))
    graph = hand_graph([safe_tool(refunds(store, effects))], chat, InMemorySaver())
    graph.invoke(USER, thread(), durability="sync")
    second = graph.invoke({"messages": [("user", "another")]}, thread(), durability="sync")
    assert tool_messages(second)[-1] == (RESULT_JSON, "call-2", "success")
    [record] = store.records()
    assert record.key.startswith("langgraph:thread-1:refund:")
    assert count_effects(effects, "refund") == 1


def test_position_keys_differ_between_turns(store: Store, tmp_path: Path) -> None:
    """Keyed by ``position``, a second turn's identical call is a new action, and runs."""
    effects = tmp_path / "effects"
    chat = model(refund_call("call-1"), AIMessage("done"), refund_call("call-2"), AIMessage("ok"))
    tool = safe_tool(refunds(store, effects), key=safeact.langgraph.position)
    graph = hand_graph([tool], chat, InMemorySaver())
    graph.invoke(USER, thread(), durability="sync")
    graph.invoke({"messages": [("user", "another")]}, thread(), durability="sync")
    keys = sorted(record.key.rsplit(":", 3)[1] for record in store.records())
    assert keys == ["2", "7"]
    assert count_effects(effects, "refund") == 2


def test_another_thread_is_another_run(store: Store, tmp_path: Path) -> None:
    """The same call in another thread is another action: it runs."""
    effects = tmp_path / "effects"
    chat = model(refund_call("call-1"), AIMessage("done"), refund_call("call-2"), AIMessage("ok"))
    graph = hand_graph([safe_tool(refunds(store, effects))], chat, InMemorySaver())
    graph.invoke(USER, thread("thread-1"), durability="sync")
    graph.invoke(USER, thread("thread-2"), durability="sync")
    assert count_effects(effects, "refund") == 2


def test_an_async_tool_under_ainvoke_in_create_agent(store: Store, tmp_path: Path) -> None:
    """An async guarded tool works in create_agent under ainvoke, and replays by its key."""
    import asyncio

    effects = tmp_path / "effects"
    tool = safe_tool(
        async_refunds(store, effects, name="async_refund"), key=template("refund:{to}")
    )
    chat = model(refund_call("call-1"), refund_call("call-2"), AIMessage("done"))
    agent = create_agent(model=chat, tools=[tool], checkpointer=InMemorySaver())
    result = asyncio.run(agent.ainvoke(USER, thread(), durability="sync"))
    assert [m[0] for m in tool_messages(result)] == [RESULT_JSON, RESULT_JSON]
    assert count_effects(effects, "refund") == 1


@attrs.frozen
class Refund:
    to: str
    amount: int
    tags: frozenset[str]


class Payout(pydantic.BaseModel):
    to: str
    amount: int


def test_the_model_sees_results_as_json(store: Store) -> None:
    """An attrs result and a pydantic result reach the model as JSON; a str as it is."""

    @safe(store, name="attrs_refund")
    def refund(key: str, to: str, amount: int) -> Refund:
        """Refund."""
        return Refund(to, amount, frozenset({"b", "a"}))

    @safe(store, name="payout")
    def payout(key: str, to: str, amount: int) -> Payout:
        """Pay out."""
        return Payout(to=to, amount=amount)

    @safe(store, name="note")
    def note(key: str, to: str, amount: int) -> str:
        """Note."""
        return f"noted {amount} for {to}"

    calls = [("refund", ARGS, "c1"), ("payout", ARGS, "c2"), ("note", ARGS, "c3")]
    chat = model(asks(*calls), AIMessage("done"))
    tools = [safe_tool(t) for t in (refund, payout, note)]
    agent = create_agent(model=chat, tools=tools, checkpointer=InMemorySaver())
    result = agent.invoke(USER, thread(), durability="sync")
    contents = {call_id: content for content, call_id, _ in tool_messages(result)}
    assert contents == {
        "c1": '{"to": "a@example.com", "amount": 50, "tags": ["a", "b"]}',
        "c2": RESULT_JSON,
        "c3": "noted 50 for a@example.com",
    }


def test_a_failed_action_is_an_error_message(store: Store, tmp_path: Path) -> None:
    """A raising action gives the model an error tool message; the graph goes on."""
    modes: list[Mode] = ["fail"]
    chat = model(refund_call(), AIMessage("sorry"), AIMessage("sorry again"))
    graph = hand_graph([safe_tool(refunds(store, tmp_path / "e", modes))], chat, InMemorySaver())
    result = graph.invoke(USER, thread(), durability="sync")
    [(content, _, status)] = tool_messages(result)
    assert status == "error"
    assert "RuntimeError: card declined" in content
    assert result["messages"][-1].content == "sorry"
    assert count_effects(tmp_path / "e", "refund") == 0


def interrupted_run(
    store: Store, effects: Path, saver: BaseCheckpointSaver[Any], modes: list[Mode], **options: Any
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """A graph whose first refund was interrupted (KeyboardInterrupt) as ``modes`` says."""
    chat = model(refund_call(), AIMessage("done"))
    graph = hand_graph([safe_tool(refunds(store, effects, modes), **options)], chat, saver)
    with pytest.raises(KeyboardInterrupt):
        graph.invoke(USER, thread(), durability="sync")
    return graph


def the_pause(result: dict[str, Any]) -> dict[str, Any]:
    [pause] = result["__interrupt__"]
    value: dict[str, Any] = pause.value
    return value


def test_in_doubt_pauses_with_the_receipt(
    store: Store, tmp_path: Path, saver: BaseCheckpointSaver[Any]
) -> None:
    """A call found in doubt pauses the graph; the pause carries the receipt."""
    graph = interrupted_run(store, tmp_path / "e", saver, ["interrupt-after"])
    paused = graph.invoke(None, thread(), durability="sync")
    [record] = store.records()
    receipt = the_pause(paused)
    assert receipt == {
        "key": record.key,
        "tool": "refund",
        "attempted_at": record.attempted_at.isoformat(),
        "args_hash": record.args_hash,
        "attempt_id": record.attempt_id,
        "reason": "interrupted",
        "note": None,
    }
    assert record.key.startswith("langgraph:thread-1:refund:")
    assert graph.get_state(thread()).next == ("tools",)


def test_resuming_with_happened_replays_the_result(
    store: Store, tmp_path: Path, saver: BaseCheckpointSaver[Any]
) -> None:
    """Resuming with happened and the result closes the key; the model gets that result."""
    effects = tmp_path / "e"
    graph = interrupted_run(store, effects, saver, ["interrupt-after"])
    graph.invoke(None, thread(), durability="sync")
    verdict = {"happened": True, "result": ARGS}
    done = graph.invoke(Command(resume=verdict), thread(), durability="sync")
    assert tool_messages(done) == [(RESULT_JSON, "call-1", "success")]
    assert done["messages"][-1].content == "done"
    assert count_effects(effects, "refund") == 1
    [event] = [e for e in store.history(store.records()[0].key) if e.why.value == "resolved"]
    assert event.note is not None
    assert event.note.startswith("resolved in LangGraph by a resume")


def test_not_happened_needs_proof_then_runs(
    store: Store, tmp_path: Path, saver: BaseCheckpointSaver[Any]
) -> None:
    """Not happened, for an owner not proven finished, pauses again; once proven, runs."""
    effects = tmp_path / "e"
    graph = interrupted_run(store, effects, saver, ["interrupt-before"])
    first = the_pause(graph.invoke(None, thread(), durability="sync"))
    refused = the_pause(
        graph.invoke(Command(resume={"happened": False}), thread(), durability="sync")
    )
    assert refused["note"] is not None
    assert "not proven finished" in refused["note"]
    bury_attempt(store, first["attempt_id"])  # its process is gone now: proof
    done = graph.invoke(Command(resume={"happened": False}), thread(), durability="sync")
    assert tool_messages(done) == [(RESULT_JSON, "call-1", "success")]
    assert count_effects(effects, "refund") == 1


def test_force_releases_without_proof(store: Store, tmp_path: Path) -> None:
    """Not happened with force: an operator's assertion releases the key; the action runs."""
    effects = tmp_path / "e"
    graph = interrupted_run(store, effects, InMemorySaver(), ["interrupt-before"])
    graph.invoke(None, thread(), durability="sync")
    verdict = {"happened": False, "force": True}
    done = graph.invoke(Command(resume=verdict), thread(), durability="sync")
    assert tool_messages(done) == [(RESULT_JSON, "call-1", "success")]
    assert count_effects(effects, "refund") == 1


@pytest.mark.parametrize(
    "verdict",
    [
        "yes",
        {"happened": "yes"},
        {"happened": True},
        {"happened": True, "result": {"to": "a"}},
        {"happened": False, "result": 1},
        {"happened": False, "please": True},
    ],
)
def test_a_bad_verdict_pauses_again_saying_why(store: Store, tmp_path: Path, verdict: Any) -> None:
    """A resume value that is not a usable verdict changes nothing and pauses again."""
    effects = tmp_path / "e"
    graph = interrupted_run(store, effects, InMemorySaver(), ["interrupt-after"])
    graph.invoke(None, thread(), durability="sync")
    again = the_pause(graph.invoke(Command(resume=verdict), thread(), durability="sync"))
    assert again["error"]
    [record] = store.records()
    assert record.state.value == "in_doubt"
    verdict = {"happened": True, "result": ARGS}
    done = graph.invoke(Command(resume=verdict), thread(), durability="sync")
    assert tool_messages(done) == [(RESULT_JSON, "call-1", "success")]


@pytest.mark.parametrize(
    ("result", "says"),
    [
        (None, "is null, which does not fit refund's return type tests.actions.Receipt"),
        ({"to": "a"}, "as tests.actions.Receipt from {'to': 'a'}: required field missing"),
    ],
    ids=["null", "missing-field"],
)
def test_a_result_that_does_not_fit_pauses_again_naming_the_key(
    store: Store, tmp_path: Path, result: object, says: str
) -> None:
    """A verdict's result that does not fit the return type: the new pause says so, by key."""
    effects = tmp_path / "e"
    graph = interrupted_run(store, effects, InMemorySaver(), ["interrupt-after"])
    key = the_pause(graph.invoke(None, thread(), durability="sync"))["key"]
    verdict = {"happened": True, "result": result}
    error = the_pause(graph.invoke(Command(resume=verdict), thread(), durability="sync"))["error"]
    assert error.startswith('the verdict\'s "result" ')
    assert f"key {key!r}" in error
    assert says in error
    assert "'-'" not in error
    assert "AttributeError" not in error
    assert store.records()[0].state.value == "in_doubt"
    assert count_effects(effects, "refund") == 1


def test_an_empty_attempt_id_is_not_a_verdict(store: Store, tmp_path: Path) -> None:
    """A verdict with an empty "attempt_id" pauses again saying the id must be non-empty."""
    graph = interrupted_run(store, tmp_path / "e", InMemorySaver(), ["interrupt-after"])
    graph.invoke(None, thread(), durability="sync")
    verdict = {"happened": True, "result": ARGS, "attempt_id": ""}
    error = the_pause(graph.invoke(Command(resume=verdict), thread(), durability="sync"))["error"]
    assert '("attempt_id" must be the attempt id from the receipt, a non-empty string)' in error
    assert store.records()[0].state.value == "in_doubt"


def test_a_verdict_is_not_applied_to_a_later_attempt(store: Store, tmp_path: Path) -> None:
    """After a verdict released the key and the rerun was cut off too, the call pauses anew."""
    effects = tmp_path / "e"
    modes: list[Mode] = ["interrupt-before", "interrupt-after"]
    graph = interrupted_run(store, effects, InMemorySaver(), modes)
    first = the_pause(graph.invoke(None, thread(), durability="sync"))
    bury_attempt(store, first["attempt_id"])
    with pytest.raises(KeyboardInterrupt):  # released, ran (one refund), cut off again
        graph.invoke(Command(resume={"happened": False}), thread(), durability="sync")
    [record] = store.records()
    bury_attempt(store, record.attempt_id)  # even with proof, the old verdict is spent
    second = the_pause(graph.invoke(None, thread(), durability="sync"))
    assert second["attempt_id"] == record.attempt_id != first["attempt_id"]
    assert second["reason"] == "crashed"
    assert count_effects(effects, "refund") == 1


def test_a_verdict_for_another_attempt_pauses_again_saying_why(
    store: Store, tmp_path: Path
) -> None:
    """A verdict naming another attempt is refused by the ledger: the next pause says why."""
    effects = tmp_path / "e"
    graph = interrupted_run(store, effects, InMemorySaver(), ["interrupt-after"])
    first = the_pause(graph.invoke(None, thread(), durability="sync"))
    verdict = {"happened": True, "result": ARGS, "attempt_id": "not-this-attempt"}
    again = the_pause(graph.invoke(Command(resume=verdict), thread(), durability="sync"))
    assert again["attempt_id"] == first["attempt_id"]
    assert again["error"].startswith("the verdict was not applied: ")
    assert "not-this-attempt" in again["error"]
    assert count_effects(effects, "refund") == 1


def conflicting(
    store: Store, effects: Path, on_doubt: Literal["interrupt", "message"]
) -> CompiledStateGraph[Any, Any, Any, Any]:
    """A graph whose refund, keyed by ``to``, is asked again for another amount."""
    other = asks(("send_refund", {**ARGS, "amount": 60}, "call-2"))
    chat = model(refund_call("call-1"), other, AIMessage("done"))
    tool = safe_tool(refunds(store, effects), key=template("refund:{to}"), on_doubt=on_doubt)
    return hand_graph([tool], chat, InMemorySaver())


def test_a_key_recorded_for_other_arguments_pauses_with_both_digests(
    store: Store, tmp_path: Path
) -> None:
    """A call whose key holds other arguments pauses with both digests; resumed, nothing runs."""
    effects = tmp_path / "e"
    graph = conflicting(store, effects, "interrupt")
    receipt = the_pause(graph.invoke(USER, thread(), durability="sync"))
    [record] = store.records()
    assert (receipt["key"], receipt["tool"], receipt["recorded_tool"]) == (
        "refund:a@example.com",
        "refund",
        "refund",
    )
    assert receipt["recorded_args_hash"] == record.args_hash != receipt["args_hash"]
    done = graph.invoke(Command(resume="seen"), thread(), durability="sync")
    content, call_id, status = tool_messages(done)[-1]
    assert (call_id, status) == ("call-2", "error")
    assert "was not run" in content
    assert count_effects(effects, "refund") == 1


def test_a_key_conflict_is_a_message_to_the_model(store: Store, tmp_path: Path) -> None:
    """With on_doubt="message", the conflict is an error tool message; the run goes on."""
    effects = tmp_path / "e"
    result = conflicting(store, effects, "message").invoke(USER, thread(), durability="sync")
    content, call_id, status = tool_messages(result)[-1]
    assert (call_id, status) == ("call-2", "error")
    assert '"recorded_args_hash"' in content
    assert count_effects(effects, "refund") == 1


def test_on_doubt_message_tells_the_model(store: Store, tmp_path: Path) -> None:
    """With on_doubt="message", a doubt is an error tool message with the receipt."""
    effects = tmp_path / "e"
    chat = model(refund_call(), AIMessage("I will ask a person"))
    tool = safe_tool(refunds(store, effects, ["interrupt-after"]), on_doubt="message")
    graph = hand_graph([tool], chat, InMemorySaver())
    with pytest.raises(KeyboardInterrupt):
        graph.invoke(USER, thread(), durability="sync")
    result = graph.invoke(None, thread(), durability="sync")
    [(content, _, status)] = tool_messages(result)
    [record] = store.records()
    assert status == "error"
    assert "Do not call send_refund again" in content
    assert record.key in content
    assert "__interrupt__" not in result
    assert count_effects(effects, "refund") == 1


def test_a_model_that_asks_again_after_a_doubt_meets_the_same_doubt(
    store: Store, tmp_path: Path
) -> None:
    """Told of a doubt, a model that asks again (a later step, a new call id) is told again."""
    effects = tmp_path / "e"
    chat = model(refund_call("call-1"), refund_call("call-2"), AIMessage("I will ask a person"))
    tool = safe_tool(refunds(store, effects, ["interrupt-after"]), on_doubt="message")
    graph = hand_graph([tool], chat, InMemorySaver())
    with pytest.raises(KeyboardInterrupt):
        graph.invoke(USER, thread(), durability="sync")
    result = graph.invoke(None, thread(), durability="sync")
    [first, second] = tool_messages(result)
    [record] = store.records()
    assert (first[1:], second[1:]) == (("call-1", "error"), ("call-2", "error"))
    assert record.key in first[0]
    assert record.key in second[0]
    assert count_effects(effects, "refund") == 1


def test_a_result_it_cannot_store_reaches_the_model_and_the_repeat_is_in_doubt(
    store: Store, tmp_path: Path
) -> None:
    """``nan`` under ``-> float``: the model gets "nan", nothing raises; asked again, a doubt."""
    effects = tmp_path / "e"
    quote_fx = unstorable_quotes(store, effects)

    again = asks(("quote_fx", {"pair": "EURUSD"}, "call-2"))
    chat = model(asks(("quote_fx", {"pair": "EURUSD"}, "call-1")), again, AIMessage("done"))
    graph = hand_graph([safe_tool(quote_fx, on_doubt="message")], chat, InMemorySaver())
    result = graph.invoke(USER, thread(), durability="sync")
    [(first, _, first_status), (second, _, second_status)] = tool_messages(result)
    assert (first, first_status) == ("nan", "success")
    assert second_status == "error"
    assert "result_not_stored" in second
    assert count_effects(effects, "quote") == 1


def test_middleware_gives_create_agent_the_guarded_tools(store: Store, tmp_path: Path) -> None:
    """SafeMiddleware's tools reach create_agent, guarded and keyed by the thread."""
    effects = tmp_path / "e"
    chat = model(refund_call(), AIMessage("done"))
    middleware = SafeMiddleware(refunds(store, effects))
    agent = create_agent(model=chat, middleware=[middleware], checkpointer=InMemorySaver())
    result = agent.invoke(USER, thread(), durability="sync")
    assert tool_messages(result) == [(RESULT_JSON, "call-1", "success")]
    [record] = store.records()
    assert record.key.startswith("langgraph:thread-1:refund:")


def test_durability_other_than_sync_warns_once(store: Store, tmp_path: Path) -> None:
    """A graph with a checkpointer run under the default durability warns, once."""
    chat = model(refund_call("c1"), AIMessage("done"), refund_call("c2"), AIMessage("ok"))
    graph = hand_graph([safe_tool(refunds(store, tmp_path / "e"))], chat, InMemorySaver())
    with pytest.warns(RuntimeWarning, match="durability='async'"):
        graph.invoke(USER, thread())
    graph.invoke({"messages": [("user", "more")]}, thread())  # no second warning


def test_outside_a_graph_the_thread_key_refuses(store: Store, tmp_path: Path) -> None:
    """Called outside a graph run, a thread-keyed tool says to pass key=; nothing runs."""
    tool = safe_tool(refunds(store, tmp_path / "e"))
    with pytest.raises(NoRunKeyError, match="key="):
        tool.invoke(ARGS)
    assert store.records() == []


def test_import_safeact_does_not_import_langchain() -> None:
    """`import safeact` loads neither LangChain nor LangGraph."""
    code = "import sys, safeact; print(sorted(m for m in sys.modules if m.startswith('lang')))"
    out = run_python("-c", code)
    assert out.stdout.strip() == "[]", out.stderr


def child(
    tmp_path: Path,
    durability: str,
    mode: str,
    *verdict: str,
    how: Sequence[str] = (str(CHILD),),
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run tests/langgraph_child.py (``how``: as a script, or ``-m tests.langgraph_child``)."""
    files = [tmp_path / name for name in ("checkpoints.db", "ledger.db", "effects")]
    return run_python(*how, *files, durability, mode, *verdict, cwd=CHILD.parent.parent, env=env)


def call_ids(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line.split()[1] for line in result.stdout.splitlines() if line.startswith("CALL ")]


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_sigkill_after_the_refund_then_resume_pauses(tmp_path: Path, durability: str) -> None:
    """Killed right after its side effect, a resumed run pauses with the receipt: one refund."""
    killed = child(tmp_path, durability, "run")
    assert ended(killed) == "SIGKILL", killed.stderr
    resumed = child(tmp_path, durability, "resume")
    assert count_effects(tmp_path / "effects", "refund") == 1
    [receipt] = report(resumed)["pauses"]
    assert receipt["reason"] == "crashed"
    assert receipt["key"].startswith("langgraph:thread-1:refund:")
    if durability == "async":  # the step was lost: the model asked again, under a new id
        assert call_ids(resumed) != []
        assert call_ids(resumed) != call_ids(killed)


def test_killed_as_a_script_then_resumed_with_m_pauses(tmp_path: Path) -> None:
    """A tool named by default, killed under ``python x.py``, resumed under ``-m``: one refund."""
    unnamed = {UNNAMED: "1"}
    killed = child(tmp_path, "sync", "run", env=unnamed)
    assert ended(killed) == "SIGKILL", killed.stderr
    resumed = child(tmp_path, "sync", "resume", how=("-m", "tests.langgraph_child"), env=unnamed)
    [receipt] = report(resumed)["pauses"]
    assert receipt["reason"] == "crashed"
    assert receipt["tool"] == "tests.langgraph_child.main.<locals>.refund"
    assert count_effects(tmp_path / "effects", "refund") == 1


def test_killed_then_resumed_after_a_deploy_that_adds_a_defaulted_parameter(
    tmp_path: Path,
) -> None:
    """A deploy between the crash and the resume adds ``memo: str = ""``: same key, one refund."""
    killed = child(tmp_path, "sync", "run")
    assert ended(killed) == "SIGKILL", killed.stderr
    resumed = child(tmp_path, "sync", "resume", env={DEPLOYED: "1"})
    [receipt] = report(resumed)["pauses"]
    assert receipt["reason"] == "crashed"
    assert count_effects(tmp_path / "effects", "refund") == 1


def test_sigkill_then_resume_with_a_verdict_finishes(tmp_path: Path) -> None:
    """After the kill and the pause, the verdict "happened" finishes the run: one refund."""
    killed = child(tmp_path, "sync", "run")
    assert ended(killed) == "SIGKILL", killed.stderr
    report(child(tmp_path, "sync", "resume"))
    verdict = json.dumps({"happened": True, "result": ARGS})
    done = report(child(tmp_path, "sync", "verdict", verdict))
    assert done["pauses"] == []
    assert done["messages"][-2][1:] == [RESULT_JSON, done["messages"][1][2][0], "success"]
    assert done["messages"][-1] == ["ai", "done", []]
    assert count_effects(tmp_path / "effects", "refund") == 1


def test_an_async_tool_in_doubt_pauses_and_resumes(store: Store, tmp_path: Path) -> None:
    """An async tool found in doubt pauses create_agent under ainvoke; "happened" replays."""
    import asyncio

    effects = tmp_path / "effects"
    send_refund = async_refunds(store, effects, ["interrupt-after"], name="async_refund")
    with pytest.raises(KeyboardInterrupt):  # cut off right after the refund
        asyncio.run(send_refund("refund:a@example.com", **ARGS))  # type: ignore[call-arg] # ARGS holds to and amount
    tool = safe_tool(send_refund, key=template("refund:{to}"))
    agent = create_agent(
        model(refund_call(), AIMessage("done")), [tool], checkpointer=InMemorySaver()
    )

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        paused = await agent.ainvoke(USER, thread(), durability="sync")
        verdict = {"happened": True, "result": ARGS}
        done = await agent.ainvoke(Command(resume=verdict), thread(), durability="sync")
        return paused, done

    paused, done = asyncio.run(run())
    assert the_pause(paused)["key"] == "refund:a@example.com"
    assert tool_messages(done) == [(RESULT_JSON, "call-1", "success")]
    assert count_effects(effects, "refund") == 1
