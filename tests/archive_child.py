"""A process that archives a ledger's history and prints what it archived, as JSON.

Usage: python tests/archive_child.py LEDGER FILE BEFORE [--batch N] [--kill-at CHECKPOINT]

LEDGER is what ``get_store`` takes: a SQLite file path or a PostgreSQL URL; BEFORE is the
cut-off in ISO 8601 with its offset. --kill-at SIGKILLs this process the first time it
reaches that checkpoint (``archiving``: the batch is in the file, its drop not committed).
"""

import argparse
import json
import os
import signal
import sys
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import attrs

from safeact import get_store
from safeact._protocol import Checkpoint, checkpoint_hook


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ledger")
    parser.add_argument("file", type=Path)
    parser.add_argument("before", type=datetime.fromisoformat)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--kill-at")
    options = parser.parse_args()

    def kill_at(point: Checkpoint) -> None:
        if point == options.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    with get_store(options.ledger) as store, checkpoint_hook(kill_at):
        archived = store.archive_history(options.file, before=options.before, batch=options.batch)
    print(json.dumps(attrs.asdict(archived)), flush=True)


if __name__ == "__main__":
    main()
