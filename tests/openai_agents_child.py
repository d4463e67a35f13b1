"""A process that runs an OpenAI Agents SDK agent with a guarded refund tool.

Usage: python tests/openai_agents_child.py LEDGER EFFECTS RUN_ID AMOUNT

LEDGER is the safeact ledger, EFFECTS the fake bank's payments (tests/fake_bank.py), a synced
line each time the refund really runs. The model (the SDK's ``ScriptedModel``) asks for one
refund of AMOUNT to a@example.com, then says it is done; the run is keyed by RUN_ID
(``safeact.run_scope``). The last line printed is JSON: the tool's outputs, or the error
that stopped the run (``{"stopped": type, "key": ..., "cause": type}``).
"""

import asyncio
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents import Agent, RunConfig, Runner
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call

from safeact import run_scope
from safeact.openai_agents import function_tool
from tests.fake_bank import refunds


def main() -> None:
    ledger, effects, run_id, amount = sys.argv[1:5]
    tool = function_tool(refunds(ledger, Path(effects)))
    arguments = {"to": "a@example.com", "amount": int(amount)}
    asks = function_call("send_refund", arguments, call_id=f"call-{os.getpid()}")
    model = ScriptedModel([[asks], [assistant_message("done")]])
    agent = Agent(name="clerk", instructions="Refund.", model=model, tools=[tool])
    config = RunConfig(tracing_disabled=True)
    try:
        with run_scope(run_id):
            result = asyncio.run(Runner.run(agent, "refund a@example.com", run_config=config))
    except Exception as exc:  # noqa: BLE001 - reported to the test, whatever it is
        refused = getattr(exc, "refused", None)
        stopped = {
            "stopped": type(exc).__name__,
            "key": getattr(refused, "key", None),
            "cause": type(exc.__cause__).__name__,
        }
        print(json.dumps(stopped), flush=True)
        return
    outputs = [item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    print(json.dumps(outputs), flush=True)


if __name__ == "__main__":
    main()
