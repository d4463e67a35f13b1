"""A pydantic-ai agent whose refund tool is guarded: killed mid-refund, settled, paid once.

Offline: the model is pydantic-ai's ``FunctionModel``, which gives each tool call a new id,
as a real model asked again does. Needs ``safeact[pydantic-ai]``; run
``python examples/pydantic_ai_refund.py``. Every run is the run ``order-42`` (its run key).
The first run's process is killed (SIGKILL) right after the bank paid, before safeact
recorded it. Run again, the refund is in doubt and the run stops (``on_doubt="stop"``:
``agent.run`` raises the ``InDoubtError``); a person checks the bank and resolves the key;
run again, the refund replays the resolved result. In a durable run (``DBOSDurability``
inside a DBOS workflow) the run is the workflow's: pass ``agent.run(..., run_id=...)`` of
your own so that a workflow started again after the resolve has the same run.
"""

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from safeact import InDoubtError, get_store, run_scope, safe
from safeact.pydantic_ai import SafeTools


def clerk(messages: list[ModelMessage], _: AgentInfo) -> ModelResponse:
    """The model: ask for the refund, then say what the tool said."""
    if len(messages) == 1:
        return ModelResponse(
            parts=[ToolCallPart("send_refund", {"to": "ada@example.com", "amount": 50})]
        )
    [returned] = [part for part in messages[-1].parts if isinstance(part, ToolReturnPart)]
    return ModelResponse(parts=[TextPart(str(returned.content))])


def run(workdir: Path, *, die: bool = False) -> str:
    """One run of the agent under the run key ``order-42``; ``die``: killed after paying."""
    bank = workdir / "bank.jsonl"
    with get_store(workdir / "ledger.db") as store:

        @safe(store, name="send_refund")
        def send_refund(key: str, to: str, amount: int) -> str:
            """Refund ``amount`` dollars to ``to``."""
            with bank.open("a") as payments:  # the bank's side effect, kept on disk
                payments.write(json.dumps({"key": key, "to": to, "amount": amount}) + "\n")
                payments.flush()
                os.fsync(payments.fileno())
            if die:
                os.kill(os.getpid(), signal.SIGKILL)  # paid, not yet recorded
            return f"refunded ${amount} to {to}"

        tools = SafeTools(send_refund, on_doubt="stop")
        agent = Agent(FunctionModel(clerk), capabilities=[tools])
        with run_scope("order-42"):  # the run key: the same whenever the run starts again
            try:
                return asyncio.run(agent.run("refund order 42")).output
            except InDoubtError as doubt:
                return f"stopped, in doubt: {json.dumps([doubt.key, doubt.attempt_id])}"


def main(workdir: Path) -> None:
    """Kill the first run, settle the doubt, run again; count the bank's payments."""
    killed = subprocess.run([sys.executable, __file__, "die", str(workdir)], check=False)
    print(f"first: killed ({killed.returncode})")
    stopped = run(workdir)
    print(f"again: {stopped.split(': ', 1)[0]}")
    key, attempt_id = json.loads(stopped.split(": ", 1)[1])
    paid = [json.loads(line) for line in (workdir / "bank.jsonl").read_text().splitlines()]
    mine = [payment for payment in paid if payment["key"] == key]
    print(f"person: the bank has {len(mine)} payment(s) under the key: it happened")
    with get_store(workdir / "ledger.db") as store:
        store.resolve(
            key, happened=True, result="refunded $50 to ada@example.com", attempt_id=attempt_id
        )
    print(f"once more: {run(workdir)}")
    print(f"bank: {len(paid)} refund(s)")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "die":
        run(Path(sys.argv[2]), die=True)
    else:
        with tempfile.TemporaryDirectory() as scratch:
            main(Path(scratch))
