"""A process that runs a durable pydantic-ai agent (DBOS) with a guarded refund tool.

Usage: python tests/pydantic_ai_child.py SYSTEM_DB LEDGER EFFECTS MODE

SYSTEM_DB is DBOS's SQLite system database, LEDGER the safeact ledger, EFFECTS the fake
bank's payments (tests/fake_bank.py), a synced line each time the refund really runs. The
workflow ``wf-1`` runs the agent; its model (a ``FunctionModel``, whose tool call ids are
new each time it is asked) asks for one refund, then answers with what the tool returned.

MODE: ``run`` starts ``wf-1`` and SIGKILLs this process right after the refund's side
effect. ``recover`` launches DBOS, which recovers ``wf-1``, and prints the workflow's result
as JSON: the run id, the tool call id the model's (replayed) response gave, and the answer.
``start [WORKFLOW]`` runs the workflow of that id (``wf-1``) to its end and prints its
result as ``recover`` does, or the error it raised (``{"error": type, "key": ...}``).
"""

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dbos import DBOS, SetWorkflowID
from pydantic_ai import Agent
from pydantic_ai.durable_exec.dbos import DBOSDurability
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from safeact.pydantic_ai import SafeTools
from tests.fake_bank import refunds

WORKFLOW = "wf-1"


def clerk(messages: list[ModelMessage], _: AgentInfo) -> ModelResponse:
    """Ask for one refund; then answer with the tool's return."""
    if len(messages) == 1:
        return ModelResponse(
            parts=[ToolCallPart("send_refund", {"to": "a@example.com", "amount": 50})]
        )
    returned = messages[-1].parts[-1]
    return ModelResponse(parts=[TextPart(json.dumps(getattr(returned, "content", None)))])


def main() -> None:
    system_db, ledger, effects, mode = sys.argv[1:5]

    send_refund = refunds(ledger, Path(effects), ["sigkill-after"] if mode == "run" else [])
    agent = Agent(
        FunctionModel(clerk),
        name="clerk",
        capabilities=[DBOSDurability(), SafeTools(send_refund)],
    )

    @DBOS.workflow(name="refund_order")
    async def refund_order() -> dict[str, object]:
        result = await agent.run("refund a@example.com 50")
        calls = [
            part.tool_call_id
            for message in result.all_messages()
            for part in getattr(message, "parts", [])
            if isinstance(part, ToolCallPart)
        ]
        return {"run_id": result.run_id, "calls": calls, "answer": result.output}

    DBOS(config={"name": "safeact-test", "system_database_url": f"sqlite:///{system_db}"})
    DBOS.launch()  # recovers wf-1 when an earlier process left it unfinished
    if mode == "run":
        with SetWorkflowID(WORKFLOW):
            asyncio.run(refund_order())
    elif mode == "start":
        ended: object
        with SetWorkflowID(sys.argv[5] if len(sys.argv) > 5 else WORKFLOW):
            try:
                ended = asyncio.run(refund_order())
            except Exception as exc:  # noqa: BLE001 - reported to the test, whatever it is
                ended = {"error": type(exc).__name__, "key": getattr(exc, "key", None)}
        print(json.dumps(ended), flush=True)
        DBOS.destroy()
    else:
        print(json.dumps(DBOS.retrieve_workflow(WORKFLOW).get_result()), flush=True)
        DBOS.destroy()


if __name__ == "__main__":
    main()
