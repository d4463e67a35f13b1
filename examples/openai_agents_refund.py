"""An OpenAI Agents SDK agent whose refund tool is guarded: killed mid-refund, settled, paid once.

Offline: the model is the SDK's scripted model. Needs ``safeact[openai-agents]``; run
``python examples/openai_agents_refund.py``. Every run is the run ``order-42`` (its run
key), and the model's tool call has a new call id each time. The first run's process is
killed (SIGKILL) right after the bank paid, before safeact recorded it. Run again, the
refund is in doubt and the run stops (``on_doubt="stop"``) with the receipt; a person checks
the bank and resolves the key; run again, the refund replays the resolved result.
"""

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from agents import Agent, Runner, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from safeact import get_store, run_scope, safe
from safeact.openai_agents import InDoubtStopError, function_tool


def run(workdir: Path, call_id: str, *, die: bool = False) -> str:
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

        refund = {"to": "ada@example.com", "amount": 50}
        model = ScriptedModel(
            [[function_call("send_refund", refund, call_id=call_id)], [assistant_message("done")]]
        )
        tool = function_tool(send_refund, on_doubt="stop")
        agent = Agent(name="clerk", model=model, tools=[tool])
        with run_scope("order-42"):  # the run key: the same whenever the run starts again
            try:
                return str(asyncio.run(Runner.run(agent, "refund order 42")).final_output)
            except InDoubtStopError as stopped:
                return f"stopped, in doubt: {json.dumps(stopped.receipt)}"


def main(workdir: Path) -> None:
    """Kill the first run, settle the doubt, run again; count the bank's payments."""
    killed = subprocess.run([sys.executable, __file__, "die", str(workdir)], check=False)
    print(f"run with tool call call-1: killed ({killed.returncode})")
    stopped = run(workdir, "call-2")
    print(f"run with tool call call-2: {stopped.split(': ', 1)[0]}")
    receipt = json.loads(stopped.split(": ", 1)[1])
    paid = [json.loads(line) for line in (workdir / "bank.jsonl").read_text().splitlines()]
    mine = [payment for payment in paid if payment["key"] == receipt["key"]]
    print(f"person: the bank has {len(mine)} payment(s) under the key: it happened")
    with get_store(workdir / "ledger.db") as store:
        store.resolve(
            receipt["key"],
            happened=True,
            result="refunded $50 to ada@example.com",
            attempt_id=receipt["attempt_id"],
        )
    print(f"run with tool call call-3: {run(workdir, 'call-3')}")
    print(f"bank: {len(paid)} refund(s)")


if __name__ == "__main__":
    set_tracing_disabled(disabled=True)  # offline: nowhere to send traces
    if len(sys.argv) == 3 and sys.argv[1] == "die":
        run(Path(sys.argv[2]), "call-1", die=True)
    else:
        with tempfile.TemporaryDirectory() as scratch:
            main(Path(scratch))
