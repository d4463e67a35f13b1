"""A process that runs one refund saga and prints how it ended, as JSON.

Usage: python tests/saga_child.py LEDGER EFFECTS SAGA_ID [--fail STEP] [--kill-at POINT:N]

LEDGER is what ``get_store`` takes: a SQLite file path or a PostgreSQL URL.

Steps: charge (undone by reverse_charge), send (undone by send_correction), ledger (no undo).
--fail makes that step (or undo) raise; --kill-at SIGKILLs this process the N-th time it
reaches that checkpoint. Every action appends its key to EFFECTS.
"""

import argparse
import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from safeact import Saga, SagaFailed, Store, get_store
from safeact._protocol import Checkpoint, checkpoint_hook
from tests.actions import record_effect


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ledger")
    parser.add_argument("effects", type=Path)
    parser.add_argument("saga_id")
    parser.add_argument("--fail", default="")
    parser.add_argument("--kill-at", default="")
    options = parser.parse_args()
    point, _, nth = options.kill_at.partition(":")
    reached: Counter[str] = Counter()

    def kill_at(name: Checkpoint) -> None:
        reached[name] += 1
        if name == point and reached[name] == int(nth):
            os.kill(os.getpid(), signal.SIGKILL)

    store = get_store(options.ledger)
    try:
        with checkpoint_hook(kill_at):
            values = refund(store, options.saga_id, options.effects, options.fail)
    except SagaFailed as failure:
        print(json.dumps(describe(failure)), flush=True)
    else:
        print(json.dumps({"result": "completed", "values": values}), flush=True)


def refund(store: Store, saga_id: str, effects: Path, fail: str) -> list[object]:
    def effect(key: str, what: str) -> None:
        record_effect(effects, key)
        if what == fail:
            raise RuntimeError(f"{what} is down")

    def charge(key: str, amount: int) -> int:
        effect(key, "charge")
        return amount

    def reverse_charge(key: str, amount: int) -> None:
        effect(key, "reverse_charge")

    def send(key: str, to: str) -> str:
        effect(key, "send")
        return to

    def send_correction(key: str, to: str) -> None:
        effect(key, "send_correction")

    def ledger(key: str, entry: str) -> None:
        effect(key, "ledger")

    with Saga(saga_id, store) as saga:
        return [
            saga.step(charge, 50, compensate=reverse_charge),
            saga.step(send, "a@example.com", compensate=send_correction),
            saga.step(ledger, "refund 50"),
        ]


def describe(failure: SagaFailed) -> dict[str, object]:
    return {
        "result": "failed",
        "step": failure.step,
        "outcome": type(failure.outcome).__name__,
        "compensated": list(failure.compensated),
        "replayed": list(failure.replayed),
        "failed": list(failure.failed),
        "in_doubt": list(failure.in_doubt),
        "skipped": list(failure.skipped),
        "unresolved": list(failure.unresolved),
    }


if __name__ == "__main__":
    main()
