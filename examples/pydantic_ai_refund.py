"""A pydantic-ai agent whose refund tool is guarded: a re-run of the run refunds once.

Offline: the model is pydantic-ai's ``FunctionModel``, which gives each tool call a new id,
as a real model asked again does. Needs ``safeact[pydantic-ai]``; run
``python examples/pydantic_ai_refund.py``. The same run (run key ``order-42``) is run twice,
as a host does after a crash; the refund replays instead of running again. In a durable
run (``DBOSDurability`` inside a DBOS workflow) no run key is needed: the workflow's run id
and the replayed tool call id key the call.
"""

import asyncio
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

from safeact import get_store, run_scope, safe
from safeact.pydantic_ai import SafeTools

paid: list[tuple[str, int]] = []  # the bank's side effect


def clerk(messages: list[ModelMessage], _: AgentInfo) -> ModelResponse:
    """The model: ask for the refund, then say what the tool said."""
    if len(messages) == 1:
        return ModelResponse(
            parts=[ToolCallPart("send_refund", {"to": "ada@example.com", "amount": 50})]
        )
    [returned] = [part for part in messages[-1].parts if isinstance(part, ToolReturnPart)]
    return ModelResponse(parts=[TextPart(str(returned.content))])


def run(ledger: Path) -> str:
    """One run of the agent under the run key ``order-42``."""
    with get_store(ledger) as store:

        @safe(store)
        def send_refund(key: str, to: str, amount: int) -> str:
            """Refund ``amount`` dollars to ``to``."""
            paid.append((to, amount))
            return f"refunded ${amount} to {to} ({key})"

        agent = Agent(FunctionModel(clerk), capabilities=[SafeTools(send_refund)])
        with run_scope("order-42"):  # the run key: the same when the run starts again
            return asyncio.run(agent.run("refund order 42")).output


def main() -> None:
    """Run the same run twice, then count the refunds."""
    with tempfile.TemporaryDirectory() as scratch:
        for attempt in ("first", "again"):
            print(f"{attempt}: {run(Path(scratch) / 'ledger.db')}")
    print(f"bank: {len(paid)} refund(s)")


if __name__ == "__main__":
    main()
