"""An OpenAI Agents SDK agent whose refund tool is guarded: a re-run of the run refunds once.

Offline: the model is the SDK's scripted model. Needs ``safeact[openai-agents]``; run
``python examples/openai_agents_refund.py``. The same run (run key ``order-42``) is run
twice, as a host does after a crash; the model's second tool call has a new call id, and
the refund replays instead of running again.
"""

import asyncio
import tempfile
from pathlib import Path

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from safeact import get_store, run_scope, safe
from safeact.openai_agents import function_tool

paid: list[tuple[str, int]] = []  # the bank's side effect


def run(ledger: Path, call_id: str) -> str:
    """One run of the agent under the run key ``order-42``."""
    with get_store(ledger) as store:

        @safe(store)
        def send_refund(key: str, to: str, amount: int) -> str:
            """Refund ``amount`` dollars to ``to``."""
            paid.append((to, amount))
            return f"refunded ${amount} to {to} ({key})"

        model = ScriptedModel(
            [
                [
                    function_call(
                        "send_refund", {"to": "ada@example.com", "amount": 50}, call_id=call_id
                    )
                ],
                [assistant_message("done")],
            ]
        )
        agent = Agent(name="clerk", model=model, tools=[function_tool(send_refund)])
        with run_scope("order-42"):  # the run key: the same when the run starts again
            return str(asyncio.run(Runner.run(agent, "refund order 42")).final_output)


def main() -> None:
    """Run the same run twice, then count the refunds."""
    set_tracing_disabled(disabled=True)  # offline: nowhere to send traces
    with tempfile.TemporaryDirectory() as scratch:
        for call_id in ("call-1", "call-2"):
            print(f"run with tool call {call_id}: {run(Path(scratch) / 'ledger.db', call_id)}")
    print(f"bank: {len(paid)} refund(s)")


if __name__ == "__main__":
    main()
