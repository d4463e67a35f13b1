"""A LangGraph agent whose refund tool is guarded: killed mid-refund, resumed, paid once.

Offline: the model is LangChain's fake chat model, scripted to ask for one refund. Needs
``safeact[langgraph]`` and ``langgraph-checkpoint-sqlite``; run ``python
examples/langgraph_agent.py``. The orchestrator runs the agent in a child process, which
kills itself (SIGKILL) right after the bank paid, before safeact recorded it. A second
process resumes the thread from its checkpoint: the tool finds its key in doubt and the
graph pauses with the receipt. A person checks the bank and resumes with the verdict; the
agent finishes, and the bank has paid once.
"""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
from langchain.agents import create_agent
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import Runnable
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command

from safeact import get_store, safe
from safeact.langgraph import safe_tool

THREAD = {"configurable": {"thread_id": "ticket-8842"}}


@attrs.frozen
class Refund:
    """What the bank confirms."""

    to: str
    amount: int


class ScriptedModel(GenericFakeChatModel):
    """LangChain's fake chat model, which create_agent may bind tools to."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, Any]:
        return self


ASK = AIMessage(
    "",
    tool_calls=[
        {"name": "send_refund", "args": {"to": "ada@example.com", "amount": 50}, "id": "call-1"}
    ],
)
DONE = AIMessage("Refunded $50 to ada@example.com.")


def model(*replies: AIMessage) -> ScriptedModel:
    """The model's next replies: each process scripts what is still to come."""
    return ScriptedModel(messages=iter(replies))


def agent(workdir: Path, *, crash: bool, replies: Sequence[AIMessage]) -> Any:
    """The agent: one guarded tool, a SQLite checkpointer, every step saved before the next."""
    bank = workdir / "bank.jsonl"

    @safe(get_store(workdir / "agent.db"), name="bank.send_refund")
    def send_refund(key: str, to: str, amount: int) -> Refund:
        """Refund ``amount`` dollars to the customer ``to``."""
        with bank.open("a") as payments:
            payments.write(json.dumps({"key": key, "to": to, "amount": amount}) + "\n")
            payments.flush()
            os.fsync(payments.fileno())
        if crash:
            os.kill(os.getpid(), signal.SIGKILL)  # paid, not yet recorded
        return Refund(to, amount)

    saver = SqliteSaver(sqlite3.connect(workdir / "graph.db", check_same_thread=False))
    return create_agent(model(*replies), tools=[safe_tool(send_refund)], checkpointer=saver)


def run(workdir: Path, step: str) -> None:
    """One process of the story."""
    if step == "start":
        graph = agent(workdir, crash=True, replies=[ASK])
        graph.invoke({"messages": [("user", "refund ticket 8842")]}, THREAD, durability="sync")
        return
    graph = agent(workdir, crash=False, replies=[DONE])
    if step == "resume":
        out = graph.invoke(None, THREAD, durability="sync")
        (pause,) = out["__interrupt__"]
        receipt = pause.value
        print(f"  agent: paused, in doubt ({receipt['reason']}): key {receipt['key']}")
        return
    paid = [json.loads(line) for line in (workdir / "bank.jsonl").read_text().splitlines()]
    print(f"  person: the bank shows {len(paid)} payment(s) for this key; it happened")
    verdict = {"happened": True, "result": {"to": paid[0]["to"], "amount": paid[0]["amount"]}}
    out = graph.invoke(Command(resume=verdict), THREAD, durability="sync")
    print(f"  agent: {out['messages'][-1].content}")


def main() -> None:
    """Run the three processes, then count the bank's payments."""
    with tempfile.TemporaryDirectory() as scratch:
        for step in ("start", "resume", "verdict"):
            code = subprocess.run(
                [sys.executable, "-u", __file__, step, scratch], check=False
            ).returncode
            died = " (killed by SIGKILL)" if code == -signal.SIGKILL else ""
            print(f"orchestrator: {step} exited with {code}{died}")
        payments = (Path(scratch) / "bank.jsonl").read_text().splitlines()
        print(f"bank: {len(payments)} payment(s)")


if __name__ == "__main__":
    if len(sys.argv) == 3:
        run(Path(sys.argv[2]), sys.argv[1])
    else:
        main()
