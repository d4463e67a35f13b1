"""A process that runs a DBOS workflow with a guarded refund step and prints where it ended.

Usage: python tests/dbos_child.py SYSTEM_DB LEDGER EFFECTS MODE

SYSTEM_DB is DBOS's SQLite system database, LEDGER the safeact ledger, EFFECTS the fake
bank's payments (tests/fake_bank.py), a synced line each time the refund really runs. The
workflow ``wf-1`` refunds through a guarded step; on ``InDoubtError`` it publishes the
receipt (event ``first``), waits for a message on ``verdict`` and settles under the
receipt's key in a new step.

MODE: ``run`` starts ``wf-1`` and SIGKILLs this process right after the refund's side
effect. ``recover`` launches DBOS (which recovers ``wf-1``), prints the ``first`` event and
exits while the workflow waits for its verdict. ``settle`` launches DBOS again, sends the
verdict and prints the workflow's result. ``start [WORKFLOW]`` runs the workflow of that id
(``wf-1``) to its end, its refund step retried as ``safeact.dbos.retryable`` says, and prints
its result, or the error it raised (``{"error": type, "key": ..., "asked": [...]}``, with
what ``should_retry`` was asked about). The last line printed is JSON.
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dbos import DBOS, SetWorkflowID

from safeact import InDoubtError, raise_on_doubt
from safeact.dbos import guarded_step, retryable
from tests.fake_bank import refunds

WORKFLOW = "wf-1"


def main() -> None:
    system_db, ledger, effects, mode = sys.argv[1:5]

    send_refund = refunds(ledger, Path(effects), ["sigkill-after"] if mode == "run" else [])
    asked: list[str] = []

    def should_retry(error: BaseException) -> bool:
        asked.append(type(error).__name__)
        return retryable(error)

    refund = DBOS.step(
        name="refund",
        retries_allowed=mode == "start",
        interval_seconds=0,
        should_retry=should_retry,
    )(guarded_step(send_refund))
    settle = DBOS.step(name="settle_refund")(raise_on_doubt(send_refund))

    @DBOS.workflow(name="refund_order")
    def refund_order(to: str, amount: int) -> list[object]:
        try:
            receipt = refund(to, amount)
        except InDoubtError as doubt:
            DBOS.set_event("first", {"key": doubt.key, "reason": doubt.reason.value})
            DBOS.recv("verdict", timeout_seconds=120)
            receipt = settle(doubt.key, to, amount)
        else:
            DBOS.set_event("first", {"receipt": [receipt.to, receipt.amount]})
        return [receipt.to, receipt.amount]

    DBOS(config={"name": "safeact-test", "system_database_url": f"sqlite:///{system_db}"})
    DBOS.launch()  # recovers wf-1 when an earlier process left it unfinished
    if mode == "run":
        with SetWorkflowID(WORKFLOW):
            DBOS.start_workflow(refund_order, "a@example.com", 50).get_result()
    elif mode == "start":
        with SetWorkflowID(sys.argv[5] if len(sys.argv) > 5 else WORKFLOW):
            ended: object
            try:
                ended = DBOS.start_workflow(refund_order, "a@example.com", 50).get_result()
            except Exception as exc:  # noqa: BLE001 - reported to the test, whatever it is
                key = getattr(exc, "key", None)
                ended = {"error": type(exc).__name__, "key": key, "asked": asked}
        print(json.dumps(ended), flush=True)
        DBOS.destroy()
    elif mode == "recover":
        print(json.dumps(DBOS.get_event(WORKFLOW, "first", timeout_seconds=60)), flush=True)
        os._exit(0)  # the host stops while the workflow waits for its verdict
    else:
        DBOS.send(WORKFLOW, "resolved", topic="verdict")
        result: list[object] = DBOS.retrieve_workflow(WORKFLOW).get_result()
        print(json.dumps(result), flush=True)
        DBOS.destroy()


if __name__ == "__main__":
    main()
