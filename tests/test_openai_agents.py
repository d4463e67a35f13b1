"""safeact.openai_agents: guarded function tools in real Agents SDK runs, offline.

The model is the SDK's own ``agents.testing.ScriptedModel``: each step is what the model
says (tool calls, then a final message); no network.
"""

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest
from agents import Agent, FunctionTool, RunConfig, Runner, RunResult, UserError
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

from safeact import (
    InDoubtError,
    KeyConflictError,
    NoRunKeyError,
    Store,
    each_call,
    keyed,
    run_scope,
    template,
)
from safeact.openai_agents import InDoubtStopError, KeyConflictStopError, function_tool
from tests.actions import Receipt, count_effects, unstorable_quotes
from tests.fake_bank import async_text_refunds, refunds
from tests.processes import run_python

ARGS = {"to": "a@example.com", "amount": 50}
RESULT_JSON = json.dumps(ARGS)


def script(*call_ids: str, args: dict[str, object] = ARGS) -> ScriptedModel:
    """The model asks for one refund per call id, one per turn, then says it is done."""
    steps: list[Any] = [[function_call("send_refund", args, call_id=c)] for c in call_ids]
    return ScriptedModel([*steps, [assistant_message("done")]])


def run(tool: FunctionTool, model: ScriptedModel) -> RunResult:
    agent = Agent(name="clerk", instructions="Refund.", model=model, tools=[tool])
    config = RunConfig(tracing_disabled=True)
    return asyncio.run(Runner.run(agent, "refund a@example.com 50", run_config=config))


def outputs(result: RunResult) -> list[object]:
    return [item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)]


def test_the_model_is_not_asked_for_the_key(store: Store, tmp_path: Path) -> None:
    """The schema has the function's parameters, name and docstring, not the key."""
    tool = function_tool(refunds(store, tmp_path / "effects"))
    assert (tool.name, tool.description) == ("send_refund", "Refund ``amount`` to ``to``.")
    assert sorted(tool.params_json_schema["properties"]) == ["amount", "to"]
    assert sorted(tool.params_json_schema["required"]) == ["amount", "to"]


def test_a_run_again_with_its_run_id_replays(store: Store, tmp_path: Path) -> None:
    """The same run id replays the refund, whatever tool_call_id the model gives it now."""
    effects = tmp_path / "effects"
    tool = function_tool(refunds(store, effects))
    with run_scope("run-1"):
        first = run(tool, script("call-1"))
    with run_scope("run-1"):
        again = run(tool, script("call-other"))
    assert outputs(first) == outputs(again) == [RESULT_JSON]
    assert count_effects(effects, "refund") == 1
    with run_scope("run-2"):  # another run is another refund
        run(tool, script("call-1"))
    assert count_effects(effects, "refund") == 2


def test_identical_calls_in_one_run_are_one_action(store: Store, tmp_path: Path) -> None:
    """in_run: the model asking twice in one run (new call ids) refunds once; both get it."""
    effects = tmp_path / "effects"
    tool = function_tool(refunds(store, effects))
    with run_scope("run-1"):
        result = run(tool, script("call-1", "call-2"))
    assert outputs(result) == [RESULT_JSON, RESULT_JSON]
    assert count_effects(effects, "refund") == 1


def test_each_call_makes_identical_calls_two_actions(store: Store, tmp_path: Path) -> None:
    """Keyed by each_call (a deliberate repeat), identical calls act each time, once per run."""
    effects = tmp_path / "effects"
    tool = function_tool(refunds(store, effects), key=each_call)
    with run_scope("run-1"):
        run(tool, script("call-1", "call-2"))
    assert count_effects(effects, "refund") == 2
    with run_scope("run-1"):
        run(tool, script("call-3", "call-4"))
    assert count_effects(effects, "refund") == 2


def test_a_model_that_asks_again_after_a_doubt_is_told_again(store: Store, tmp_path: Path) -> None:
    """A doubt told to the model, then the same call asked again: one refund, two tool errors."""
    effects = tmp_path / "effects"
    guarded = refunds(store, effects, ["interrupt-after"])
    plain: Callable[..., object] = keyed(guarded)
    with run_scope("run-1"), pytest.raises(KeyboardInterrupt):  # cut off, as in a crash
        plain(**ARGS)
    with run_scope("run-1"):
        result = run(function_tool(guarded), script("call-2", "call-3"))
    [first, second] = outputs(result)
    assert "Do not call send_refund again" in str(first)
    assert "Do not call send_refund again" in str(second)
    assert count_effects(effects, "refund") == 1


def test_a_doubt_resolved_then_the_run_again_with_its_run_id_pays_once(
    store: Store, tmp_path: Path
) -> None:
    """The way to finish after a doubt: resolve the key, run again under the run id: it replays."""
    effects = tmp_path / "effects"
    guarded = refunds(store, effects, ["interrupt-after"])
    plain: Callable[..., object] = keyed(guarded)
    with run_scope("run-1"), pytest.raises(KeyboardInterrupt):  # cut off, as in a crash
        plain(**ARGS)
    tool = function_tool(guarded, on_doubt="stop")
    with run_scope("run-1"), pytest.raises(InDoubtStopError) as stopped:
        run(tool, script("call-1"))
    store.resolve(stopped.value.doubt.key, happened=True, result=Receipt("a@example.com", 50))
    with run_scope("run-1"):
        assert outputs(run(tool, script("call-2"))) == [RESULT_JSON]
    assert count_effects(effects, "refund") == 1


def test_a_result_it_cannot_store_reaches_the_model_and_a_retry_is_in_doubt(
    store: Store, tmp_path: Path
) -> None:
    """``nan`` under ``-> float`` reaches the model as "nan"; its retry is told of a doubt."""
    effects = tmp_path / "effects"
    quote_fx = unstorable_quotes(store, effects)

    steps: list[Any] = [[function_call("quote_fx", {"pair": "EURUSD"}, call_id=c)] for c in "ab"]
    model = ScriptedModel([*steps, [assistant_message("done")]])
    with run_scope("run-1"):
        first, second = outputs(run(function_tool(quote_fx), model))
    assert first == "nan"
    assert "result_not_stored" in str(second)
    assert count_effects(effects, "quote") == 1


def test_a_key_recorded_for_other_arguments_is_a_tool_error(store: Store, tmp_path: Path) -> None:
    """Under a template key, a call with other arguments tells the model; the run goes on."""
    effects = tmp_path / "effects"
    tool = function_tool(refunds(store, effects), key=template("refund:{to}"))
    steps: list[Any] = [
        [function_call("send_refund", ARGS, call_id="a")],
        [function_call("send_refund", {**ARGS, "amount": 60}, call_id="b")],
    ]
    first, second = outputs(run(tool, ScriptedModel([*steps, [assistant_message("done")]])))
    assert first == RESULT_JSON
    assert "was not run" in str(second)
    assert '"recorded_args_hash"' in str(second)
    assert count_effects(effects, "refund") == 1


def test_a_key_conflict_stops_the_run_when_asked_to(store: Store, tmp_path: Path) -> None:
    """With on_doubt="stop", the conflict ends the run with its receipt; nothing more runs."""
    effects = tmp_path / "effects"
    tool = function_tool(refunds(store, effects), key=template("refund:{to}"), on_doubt="stop")
    steps: list[Any] = [
        [function_call("send_refund", ARGS, call_id="a")],
        [function_call("send_refund", {**ARGS, "amount": 60}, call_id="b")],
    ]
    with pytest.raises(KeyConflictStopError) as stopped:
        run(tool, ScriptedModel([*steps, [assistant_message("done")]]))
    assert stopped.value.receipt["key"] == "refund:a@example.com"
    assert isinstance(stopped.value.__cause__, KeyConflictError)
    assert count_effects(effects, "refund") == 1


def test_a_template_key_needs_no_run_scope(store: Store, tmp_path: Path) -> None:
    """A business key makes calls of any run, with any call id, one action."""
    effects = tmp_path / "effects"
    tool = function_tool(refunds(store, effects), key=template("refund:{to}"))
    result = run(tool, script("call-1", "call-2"))
    assert outputs(result) == [RESULT_JSON, RESULT_JSON]
    assert count_effects(effects, "refund") == 1
    assert store.get("refund:a@example.com") is not None


def test_no_run_scope_ends_the_run(store: Store, tmp_path: Path) -> None:
    """The default key needs run_scope: without one the run stops, nothing is refunded."""
    effects = tmp_path / "effects"
    tool = function_tool(refunds(store, effects))
    with pytest.raises(UserError, match="run_scope") as raised:  # how the SDK ends a run
        run(tool, script("call-1"))
    assert isinstance(raised.value.__cause__, NoRunKeyError)
    assert count_effects(effects, "refund") == 0


def in_doubt(store: Store, effects: Path, on_doubt: Literal["error", "stop"]) -> FunctionTool:
    """A refund cut off after its side effect (by calling the guarded tool directly)."""
    guarded = refunds(store, effects, ["interrupt-after"])
    with pytest.raises(KeyboardInterrupt):
        guarded("refund:a@example.com", **ARGS)  # type: ignore[call-arg] # ARGS holds to and amount
    assert count_effects(effects, "refund") == 1
    return function_tool(guarded, key=template("refund:{to}"), on_doubt=on_doubt)


def test_in_doubt_is_a_tool_error_the_model_must_not_retry(store: Store, tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    result = run(in_doubt(store, effects, "error"), script("call-1"))
    [message] = outputs(result)
    assert isinstance(message, str)
    assert "Do not call send_refund again" in message
    receipt = json.loads(message.split("Receipt: ", 1)[1])
    assert (receipt["key"], receipt["tool"]) == ("refund:a@example.com", "refund")
    assert receipt["attempt_id"]
    assert count_effects(effects, "refund") == 1


def test_in_doubt_stops_the_run_with_the_receipt(store: Store, tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    tool = in_doubt(store, effects, "stop")
    model = script("call-1")
    with pytest.raises(InDoubtStopError) as raised:
        run(tool, model)
    receipt = raised.value.receipt
    assert (receipt["key"], receipt["tool"]) == ("refund:a@example.com", "refund")
    assert receipt["attempt_id"]
    assert isinstance(raised.value.doubt, InDoubtError)
    assert raised.value.__cause__ is raised.value.doubt
    assert model.remaining_steps == 1  # the model was not asked again
    assert count_effects(effects, "refund") == 1


def test_a_failed_call_is_a_tool_error(store: Store, tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    tool = function_tool(refunds(store, effects, ["fail"]))
    with run_scope("run-1"):
        first = run(tool, script("call-1"))
    with run_scope("run-1"):  # the failure replays: the action is not tried again
        again = run(tool, script("call-2"))
    [message] = outputs(first)
    assert isinstance(message, str)
    assert "card declined" in message
    assert outputs(again) == [message]
    assert count_effects(effects, "refund") == 0


def test_an_async_tool_runs_once_per_run_id(store: Store, tmp_path: Path) -> None:
    effects = tmp_path / "effects"
    tool = function_tool(async_text_refunds(store, effects))
    for call_id in ("call-1", "call-2"):
        with run_scope("run-1"):
            result = run(tool, script(call_id))
        assert outputs(result) == ["refunded 50 to a@example.com"]
    assert count_effects(effects, "refund") == 1


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="on_doubt"):
        function_tool(None, on_doubt="interrupt")  # type: ignore[arg-type]


def test_import_safeact_does_not_import_the_sdk() -> None:
    code = "import sys, safeact; sys.exit('agents' in sys.modules)"
    out = run_python("-c", code)
    assert out.returncode == 0, out.stderr
