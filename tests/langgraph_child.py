"""A process that runs a LangGraph graph with a guarded refund tool and prints where it ended.

Usage: python tests/langgraph_child.py CHECKPOINTS LEDGER EFFECTS DURABILITY MODE [VERDICT]
(or python -m tests.langgraph_child ..., from the project's folder)

CHECKPOINTS is the SqliteSaver file, LEDGER the safeact ledger, EFFECTS the fake bank's
payments (tests/fake_bank.py), a synced line each time the refund really runs. DURABILITY
is LangGraph's ("sync", "async"). MODE: ``run`` starts the thread and SIGKILLs this process
right after the refund's side effect; ``resume`` carries the thread on as a restarted host does
(``invoke(None)``, or the user's message again if nothing of the run was saved);
``verdict`` resumes a pause with VERDICT (JSON); ``complete`` starts the thread and lets the
refund pay; ``again`` sends the thread another message, which makes the model ask for the
refund again (for SAFEACT_CHILD_AMOUNT, if set). The checkpointer takes 0.3 s per write, as
a busy remote database does; in ``run`` under ``"async"`` its writes never finish, so the
crash loses the step before the tool every time. A run a replay-only process (under
SAFEACT_REPLAY_ONLY) stops with ``ReplayOnlyError`` prints ``{"refused": key}``.

The model is an agent node that asks for the refund under a tool call id new in each
process (``call-<pid>``) until it sees the tool's answer. The last line printed is JSON:
the pause's receipts and the messages of the thread.
"""

import json
import os
import sqlite3
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.errors import EmptyInputError
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, Durability

from safeact import ReplayOnlyError, safe
from safeact.langgraph import safe_tool
from tests.actions import Receipt
from tests.fake_bank import pay_refund

USER: Any = {"messages": [("user", "refund 50 to a@example.com")]}
UNNAMED = "SAFEACT_CHILD_UNNAMED"
"""Set: the tool takes its default name (module.qualname) instead of ``refund``."""
DEPLOYED = "SAFEACT_CHILD_DEPLOYED"
"""Set: the tool is the deployed version, with a parameter added with a default."""
AMOUNT = "SAFEACT_CHILD_AMOUNT"
"""The amount the model asks to refund (50 if unset)."""
APPROVAL = "SAFEACT_CHILD_APPROVAL"
"""Set: the tool needs a person's approval (``approval=True``, its arguments kept)."""
KILL = "SAFEACT_CHILD_KILL"
"""Set: the refund SIGKILLs this process right after paying in any mode, not only ``run``."""


class SlowSaver(SqliteSaver):
    """A SqliteSaver whose writes take 0.3 s, or (``stuck``) never finish.

    A stuck writer is a busy remote database at its worst, and makes the race of an
    ``"async"`` save with the crash come out one way every time: the save is lost.
    """

    def __init__(self, connection: sqlite3.Connection, *, stuck: bool) -> None:
        super().__init__(connection)
        self.stuck = stuck

    def _wait(self) -> None:
        if self.stuck:
            threading.Event().wait()  # until the process is killed
        time.sleep(0.3)

    def put(self, *args: Any, **kwargs: Any) -> Any:
        self._wait()
        return super().put(*args, **kwargs)

    def put_writes(self, *args: Any, **kwargs: Any) -> None:
        self._wait()
        super().put_writes(*args, **kwargs)


def agent(state: MessagesState) -> dict[str, list[AIMessage]]:
    """Answer once the tool has; until then ask for the refund, with this process's id."""
    if isinstance(state["messages"][-1], ToolMessage):
        return {"messages": [AIMessage("done")]}
    call_id = f"call-{os.getpid()}"
    print("CALL", call_id, flush=True)
    args = {"to": "a@example.com", "amount": int(os.environ.get(AMOUNT, "50"))}
    return {
        "messages": [AIMessage("", tool_calls=[{"name": "refund", "args": args, "id": call_id}])]
    }


def shown(message: AnyMessage) -> list[object]:
    if isinstance(message, ToolMessage):
        return ["tool", message.content, message.tool_call_id, message.status]
    if isinstance(message, AIMessage):
        return ["ai", message.content, [call["id"] for call in message.tool_calls]]
    return [message.type, message.content]


def main() -> None:
    checkpoints, ledger, effects, durability_name, mode = sys.argv[1:6]
    durability: Durability = "sync" if durability_name == "sync" else "async"

    # A function of this module, not fake_bank.refunds: unnamed, the tool takes its name.
    def refund(key: str, to: str, amount: int) -> Receipt:
        """Refund ``amount`` to ``to``."""
        kill = mode == "run" or bool(os.environ.get(KILL))
        pay_refund(Path(effects), "sigkill-after" if kill else "ok")
        return Receipt(to, amount)

    def refund_after_the_deploy(key: str, to: str, amount: int, memo: str = "") -> Receipt:
        """Refund ``amount`` to ``to``, with a note for the bank."""
        return refund(key, to, amount)

    refund_after_the_deploy.__name__ = refund.__name__  # the same tool, as deployed later
    refund_after_the_deploy.__qualname__ = refund.__qualname__
    function = refund_after_the_deploy if os.environ.get(DEPLOYED) else refund
    gated = bool(os.environ.get(APPROVAL))
    name = None if os.environ.get(UNNAMED) else "refund"
    tool = safe(ledger, name=name, approval=gated, keep_arguments=gated)(function)

    stuck = mode == "run" and durability == "async"
    saver = SlowSaver(sqlite3.connect(checkpoints, check_same_thread=False), stuck=stuck)
    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([safe_tool(tool)]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    app = graph.compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "thread-1"}}
    if mode == "verdict":
        result = app.invoke(Command(resume=json.loads(sys.argv[6])), config, durability=durability)
    elif mode == "again":
        again: Any = {"messages": [("user", "and refund it again")]}
        try:
            result = app.invoke(again, config, durability=durability)
        except ReplayOnlyError as refused:  # the tool node raised it: the run stopped
            print(json.dumps({"refused": refused.key}))
            return
    elif mode == "resume":
        try:
            result = app.invoke(None, config, durability=durability)
        except EmptyInputError:  # nothing of the run was saved: send the message again
            print("RESENT", flush=True)
            result = app.invoke(USER, config, durability=durability)
    else:
        result = app.invoke(USER, config, durability=durability)
    pauses = [pause.value for pause in result.get("__interrupt__", [])]
    messages = [shown(message) for message in result["messages"]]
    print(json.dumps({"pauses": pauses, "messages": messages}))


if __name__ == "__main__":
    main()
