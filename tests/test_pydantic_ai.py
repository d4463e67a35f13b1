"""safeact.pydantic_ai: guarded tools in real pydantic-ai runs, offline.

The models are pydantic-ai's own ``FunctionModel`` (each response is what a function says:
tool calls, then a final answer; every tool call gets a new ``tool_call_id``, as from a real
model) and ``TestModel``; no network. Durable runs use ``DBOSDurability`` on SQLite; the crash
test SIGKILLs a child process (tests/pydantic_ai_child.py) right after the refund's side
effect, and a new process recovers the workflow.
"""

import asyncio
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from dbos import DBOS, SetWorkflowID
from pydantic_ai import Agent
from pydantic_ai.durable_exec.dbos import DBOSDurability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from safeact import (
    InDoubtError,
    KeyConflictError,
    NoRunKeyError,
    SafeTool,
    Store,
    each_call,
    get_store,
    keyed,
    run_scope,
    safe,
    template,
)
from safeact.pydantic_ai import SafeTools
from tests.actions import Receipt, count_effects, unstorable_quotes
from tests.fake_bank import async_text_refunds, refunds
from tests.processes import ended, report, run_python

CHILD = Path(__file__).with_name("pydantic_ai_child.py")
ARGS = {"to": "a@example.com", "amount": 50}


@pytest.fixture
def store(ledger: Path) -> Iterator[Store]:
    with get_store(ledger) as opened:
        yield opened


def asking(
    calls: int = 1, args: dict[str, object] = ARGS
) -> Callable[[list[ModelMessage], AgentInfo], ModelResponse]:
    """A model's function: ``calls`` refunds in one response, then the answer "done"."""

    def respond(messages: list[ModelMessage], _: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("send_refund", args) for _ in range(calls)])
        return ModelResponse(parts=[TextPart("done")])

    return respond


def clerk(calls: int = 1) -> FunctionModel:
    """A model that asks for ``calls`` refunds in one response, then answers "done"."""
    return FunctionModel(asking(calls))


def returns(messages: list[ModelMessage]) -> list[object]:
    """What the tools returned to the model, in order."""
    return [
        part.content
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def run(tools: SafeTools, model: FunctionModel | TestModel) -> list[object]:
    """Run an agent with ``tools`` and ``model``; what the tools returned."""
    agent = Agent(model, capabilities=[tools])
    return returns(asyncio.run(agent.run("refund a@example.com 50")).all_messages())


def test_the_model_is_not_asked_for_the_key(store: Store, tmp_path: Path) -> None:
    """The schema has the function's parameters, name and docstring, not the key."""
    seen: list[Any] = []

    def respond(_: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.extend(info.function_tools)
        return ModelResponse(parts=[TextPart("nothing to do")])

    run(SafeTools(refunds(store, tmp_path / "effects")), FunctionModel(respond))
    [tool] = seen
    assert (tool.name, tool.description) == ("send_refund", "Refund ``amount`` to ``to``.")
    assert sorted(tool.parameters_json_schema["properties"]) == ["amount", "to"]
    assert sorted(tool.parameters_json_schema["required"]) == ["amount", "to"]


def test_a_run_again_in_its_run_scope_replays(store: Store, tmp_path: Path) -> None:
    """Outside a durable run the run key keys the calls: the same one replays.

    Whatever run_id and tool_call_id pydantic-ai gives the run this time.
    """
    effects = tmp_path / "effects"
    tools = SafeTools(refunds(store, effects))
    with run_scope("run-1"):
        first = run(tools, clerk())
    with run_scope("run-1"):
        again = run(tools, clerk())
    assert first == again == [ARGS]
    assert count_effects(effects, "refund") == 1
    with run_scope("run-2"):  # another run is another refund
        run(tools, clerk())
    assert count_effects(effects, "refund") == 2


def test_identical_calls_in_one_response_are_one_action(store: Store, tmp_path: Path) -> None:
    """in_run: the model asking twice with the same arguments refunds once; both calls get it."""
    effects = tmp_path / "effects"
    tools = SafeTools(refunds(store, effects))
    with run_scope("run-1"):
        assert run(tools, clerk(calls=2)) == [ARGS, ARGS]
    assert count_effects(effects, "refund") == 1


def test_each_call_counts_identical_calls(store: Store, tmp_path: Path) -> None:
    """Keyed by each_call (a deliberate repeat), identical calls act each time, once per run."""
    effects = tmp_path / "effects"
    tools = SafeTools(refunds(store, effects), key=each_call)
    with run_scope("run-1"):
        assert run(tools, clerk(calls=2)) == [ARGS, ARGS]
    assert count_effects(effects, "refund") == 2
    with run_scope("run-1"):
        run(tools, clerk(calls=2))
    assert count_effects(effects, "refund") == 2


def test_a_model_that_asks_again_after_a_doubt_is_told_again(store: Store, tmp_path: Path) -> None:
    """Told of a doubt, a model that asks again (a later response, a new call id) is told again."""
    effects = tmp_path / "effects"
    guarded = refunds(store, effects, ["interrupt-after"])
    plain: Callable[..., object] = keyed(guarded)
    with run_scope("run-1"), pytest.raises(KeyboardInterrupt):  # cut off, as in a crash
        plain(**ARGS)

    def insisting(messages: list[ModelMessage], _: AgentInfo) -> ModelResponse:
        if len(messages) < 4:
            return ModelResponse(parts=[ToolCallPart("send_refund", ARGS)])
        return ModelResponse(parts=[TextPart("done")])

    with run_scope("run-1"):
        told = run(SafeTools(guarded), FunctionModel(insisting))
    assert len(told) == 2
    assert all("Do not call send_refund again" in str(message) for message in told)
    assert count_effects(effects, "refund") == 1


def test_a_result_it_cannot_store_reaches_the_model_and_a_retry_is_in_doubt(
    store: Store, tmp_path: Path
) -> None:
    """``nan`` under ``-> float`` reaches the model as "nan", nothing raises; a retry: doubt."""
    effects = tmp_path / "effects"
    quote_fx = unstorable_quotes(store, effects)

    def twice(messages: list[ModelMessage], _: AgentInfo) -> ModelResponse:
        if len(messages) < 4:
            return ModelResponse(parts=[ToolCallPart("quote_fx", {"pair": "EURUSD"})])
        return ModelResponse(parts=[TextPart("done")])

    with run_scope("run-1"):
        first, second = run(SafeTools(quote_fx), FunctionModel(twice))
    assert first == "nan"
    assert "result_not_stored" in str(second)
    assert count_effects(effects, "quote") == 1


def reasked(amount: int) -> FunctionModel:
    """A model that asks for the refund, then for it again with ``amount``, then is done."""

    def respond(messages: list[ModelMessage], _: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("send_refund", ARGS)])
        if len(messages) == 3:
            return ModelResponse(parts=[ToolCallPart("send_refund", {**ARGS, "amount": amount})])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


@pytest.mark.parametrize("on_doubt", ["error", "stop"])
def test_a_key_recorded_for_other_arguments_runs_nothing(
    store: Store, tmp_path: Path, on_doubt: Literal["error", "stop"]
) -> None:
    """Under a template key, other arguments are a tool error, or end the run when asked to."""
    effects = tmp_path / "effects"
    tools = SafeTools(refunds(store, effects), key=template("refund:{to}"), on_doubt=on_doubt)
    if on_doubt == "error":
        first, second = run(tools, reasked(60))
        assert first == ARGS
        assert "was not run" in str(second)
    else:
        with pytest.raises(KeyConflictError):
            run(tools, reasked(60))
    assert count_effects(effects, "refund") == 1


def test_pydantic_ais_test_model_calls_the_tool(store: Store, tmp_path: Path) -> None:
    """TestModel calls every tool with arguments it makes up from the schema."""
    effects = tmp_path / "effects"
    tools = SafeTools(refunds(store, effects))
    with run_scope("run-1"):
        [first] = run(tools, TestModel())
    with run_scope("run-1"):
        assert run(tools, TestModel()) == [first]
    assert count_effects(effects, "refund") == 1


def test_no_run_key_ends_the_run(store: Store, tmp_path: Path) -> None:
    """Neither durable nor in a run_scope: the run stops before anything is refunded."""
    effects = tmp_path / "effects"
    with pytest.raises(NoRunKeyError, match="run_scope"):
        run(SafeTools(refunds(store, effects)), clerk())
    assert count_effects(effects, "refund") == 0


def test_a_template_key_needs_no_run_scope(store: Store, tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    tools = SafeTools(refunds(store, effects), key=template("refund:{to}"))
    assert run(tools, clerk(calls=2)) == [ARGS, ARGS]
    assert count_effects(effects, "refund") == 1
    assert store.get("refund:a@example.com") is not None


def in_doubt(store: Store, effects: Path, on_doubt: Literal["error", "stop"]) -> SafeTools:
    """A refund cut off after its side effect (by calling the guarded tool directly)."""
    guarded = refunds(store, effects, ["interrupt-after"])
    with pytest.raises(KeyboardInterrupt):
        guarded("refund:a@example.com", **ARGS)  # type: ignore[call-arg] # ARGS holds to and amount
    assert count_effects(effects, "refund") == 1
    return SafeTools(guarded, key=template("refund:{to}"), on_doubt=on_doubt)


def test_in_doubt_is_a_tool_error_the_model_must_not_retry(store: Store, tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    [message] = run(in_doubt(store, effects, "error"), clerk())
    assert isinstance(message, str)
    assert message.startswith("Error: ")
    assert "Do not call send_refund again" in message
    receipt = json.loads(message.split("Receipt: ", 1)[1])
    assert (receipt["key"], receipt["tool"]) == ("refund:a@example.com", "refund")
    assert receipt["attempt_id"]
    assert count_effects(effects, "refund") == 1


def test_in_doubt_stops_the_run_with_the_receipt(store: Store, tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    asked: list[int] = []
    respond = asking()

    def counting(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        asked.append(len(messages))
        return respond(messages, info)

    with pytest.raises(InDoubtError) as raised:
        run(in_doubt(store, effects, "stop"), FunctionModel(counting))
    assert (raised.value.key, raised.value.tool) == ("refund:a@example.com", "refund")
    assert raised.value.attempt_id
    assert asked == [1]  # the model was not asked again
    assert count_effects(effects, "refund") == 1


def test_a_failed_call_is_a_tool_error(store: Store, tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    tools = SafeTools(refunds(store, effects, ["fail"]))
    with run_scope("run-1"):
        [first] = run(tools, clerk())
    with run_scope("run-1"):  # the failure replays: the action is not tried again
        [again] = run(tools, clerk())
    assert isinstance(first, str)
    assert first.startswith("Error: ")
    assert "card declined" in first
    assert again == first
    assert count_effects(effects, "refund") == 0


def test_an_async_tool_runs_once_per_run_key(store: Store, tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    send_refund = async_text_refunds(store, effects)
    for _ in range(2):
        with run_scope("run-1"):
            assert run(SafeTools(send_refund), clerk()) == ["refunded 50 to a@example.com"]
    assert count_effects(effects, "refund") == 1


@pytest.fixture
def dbos(tmp_path: Path) -> Iterator[None]:
    DBOS(config={"name": "safeact-test", "system_database_url": f"sqlite:///{tmp_path / 'sys'}"})
    DBOS.launch()
    yield
    DBOS.destroy(destroy_registry=True)


def test_a_durable_run_is_keyed_by_run_id_and_the_call(
    dbos: None, store: Store, tmp_path: Path
) -> None:
    """Inside a DBOS workflow the key needs no run_scope: the run id, tool and arguments."""
    del dbos
    effects = tmp_path / "effects"
    agent = Agent(
        clerk(), name="clerk", capabilities=[DBOSDurability(), SafeTools(refunds(store, effects))]
    )

    @DBOS.workflow(name="refund_order")
    async def refund_order() -> list[str]:
        result = await agent.run("refund a@example.com 50")
        [call] = [
            part
            for message in result.all_messages()
            for part in getattr(message, "parts", [])
            if isinstance(part, ToolCallPart)
        ]
        return [result.run_id, call.tool_call_id]

    with SetWorkflowID("wf-1"):
        run_id, _ = asyncio.run(refund_order())
    assert run_id.startswith("wf-1:")
    [record] = store.records()
    assert record.key == f"pydantic-ai:{run_id}:refund:{record.args_hash[:16]}"
    assert record.state.value == "succeeded"
    assert count_effects(effects, "refund") == 1


def test_a_stopped_durable_run_finishes_after_resolve_paying_once(
    dbos: None, store: Store, tmp_path: Path
) -> None:
    """on_doubt="stop" ends the workflow; resolved, a new workflow with the run's run_id replays.

    The workflow passes ``run_id`` (its order) to ``agent.run``: a workflow started anew for
    the order after the resolve (DBOS replays the recorded error under the old id) has the
    same run id, so its refund has the same key and replays the resolved result.
    """
    del dbos
    effects = tmp_path / "effects"
    guarded = refunds(store, effects, ["interrupt-after"])
    agent = Agent(
        clerk(),
        name="clerk",
        capabilities=[DBOSDurability(), SafeTools(guarded, on_doubt="stop")],
    )

    @DBOS.workflow(name="refund_order")
    async def refund_order(order: str) -> list[object]:
        result = await agent.run("refund a@example.com 50", run_id=f"order-{order}")
        return returns(result.all_messages())

    key = f"pydantic-ai:order-42:refund:{guarded._digest('-', (), ARGS)[:16]}"
    with pytest.raises(KeyboardInterrupt):  # the first run was cut off right after the refund
        guarded(key, **ARGS)  # type: ignore[call-arg] # ARGS holds to and amount
    with SetWorkflowID("wf-1"), pytest.raises(InDoubtError) as stopped:
        asyncio.run(refund_order("42"))
    assert stopped.value.key == key
    store.resolve(key, happened=True, result=Receipt("a@example.com", 50))
    with SetWorkflowID("wf-1-after-resolve"):
        assert asyncio.run(refund_order("42")) == [ARGS]
    assert count_effects(effects, "refund") == 1


def test_durability_outside_its_workflow_is_not_durable(store: Store, tmp_path: Path) -> None:
    """DBOSDurability outside a workflow is a plain run: the call needs a run_scope.

    Its run id is new each time, so it cannot key the call.
    """
    effects = tmp_path / "effects"
    agent = Agent(
        clerk(), name="clerk", capabilities=[DBOSDurability(), SafeTools(refunds(store, effects))]
    )
    with pytest.raises(NoRunKeyError):
        asyncio.run(agent.run("refund a@example.com 50"))
    assert count_effects(effects, "refund") == 0


def child(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    """Run tests/pydantic_ai_child.py in ``mode`` on its system database, ledger and bank."""
    files = [tmp_path / name for name in ("system.db", "ledger.db", "effects")]
    return run_python(CHILD, *files, mode)


def test_sigkill_in_a_durable_tool_then_recovery_is_in_doubt(tmp_path: Path) -> None:
    """Killed right after its side effect, the tool re-run by recovery is in doubt: one refund.

    The key is the same: DBOS derives the same run id, and replays the model's response.
    """
    killed = child(tmp_path, "run")
    assert ended(killed) == "SIGKILL", killed.stderr
    result = report(child(tmp_path, "recover"))
    answer = json.loads(result["answer"])
    assert answer.startswith("Error: ")
    receipt = json.loads(answer.split("Receipt: ", 1)[1])
    assert receipt["key"] == f"pydantic-ai:{result['run_id']}:refund:{receipt['args_hash'][:16]}"
    assert receipt["reason"] == "crashed"
    assert count_effects(tmp_path / "effects", "refund") == 1


def test_bad_arguments(store: Store, tmp_path: Path) -> None:
    refund = refunds(store, tmp_path / "effects")
    with pytest.raises(ValueError, match="on_doubt"):
        SafeTools(refund, on_doubt="interrupt")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one tool"):
        SafeTools()
    with pytest.raises(ValueError, match="two tools are named send_refund"):
        SafeTools(refund, refunds(store, tmp_path / "effects"))
    with pytest.raises(TypeError, match="@safe"):
        SafeTools(print)  # type: ignore[arg-type]

    @safe(store)
    def undocumented(key: str) -> int:
        return 1

    with pytest.raises(ValueError, match="docstring"):
        SafeTools(undocumented)


def test_a_guarded_tool_is_typed(store: Store, tmp_path: Path) -> None:
    """SafeTools takes guarded tools of any signature (the typings/ cases pin the rest)."""
    tool: SafeTool[[str, int], Receipt] = refunds(store, tmp_path / "effects")
    assert SafeTools(tool).get_toolset().tools.keys() == {"send_refund"}


def test_import_safeact_does_not_import_pydantic_ai() -> None:
    code = "import sys, safeact; sys.exit('pydantic_ai' in sys.modules)"
    out = run_python("-c", code)
    assert out.returncode == 0, out.stderr


EXAMPLE = Path(__file__).parent.parent / "examples" / "pydantic_ai_refund.py"


def test_the_example_stops_in_doubt_then_settles_paying_once() -> None:
    """Killed after paying, the run stops in doubt; resolved, the run again replays: one refund."""
    result = run_python(EXAMPLE)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "first: killed (-9)",
        "again: stopped, in doubt",
        "person: the bank has 1 payment(s) under the key: it happened",
        "once more: refunded $50 to ada@example.com",
        "bank: 1 refund(s)",
    ]
    assert result.stderr == ""
