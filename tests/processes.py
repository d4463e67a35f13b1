"""Start tests/child.py in fresh interpreters and read what each one reports."""

import json
import subprocess
import sys
from pathlib import Path

CHILD = Path(__file__).with_name("child.py")


def child_command(ledger: str | Path, effects: Path, key: str, *options: str) -> list[str]:
    """The command line of a child on ``ledger``: a SQLite file path or a PostgreSQL URL."""
    return [sys.executable, str(CHILD), str(ledger), str(effects), key, *options]


def run_child(
    ledger: str | Path, effects: Path, key: str, *options: str
) -> subprocess.CompletedProcess[str]:
    """Run one child to the end (or to its death) and return what it printed."""
    return subprocess.run(
        child_command(ledger, effects, key, *options),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def report(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """The outcome a child printed; fails with its stderr if it printed none."""
    assert result.returncode == 0, result.stderr
    decoded: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    return decoded
