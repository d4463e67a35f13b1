"""Start child interpreters, say how each ended, and read the JSON it reported.

``run_python`` runs a fresh interpreter to its end or its death; ``ended`` says which
(``"SIGKILL"`` for a child killed at its checkpoint); ``report`` reads the JSON value a child
printed on its last line. ``run_child`` runs tests/child.py with them.
"""

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CHILD = Path(__file__).with_name("child.py")
TIMEOUT = 120
"""Seconds a child may take: they start frameworks and servers, or wait on a lock."""


def run_python(
    *arguments: str | Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    own_session: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``python ARGUMENTS`` in a fresh interpreter, to its end or its death.

    Its output is captured as text; ``env`` adds to this process's environment;
    ``own_session`` starts it in a session (so a process group) of its own. Raises
    ``subprocess.TimeoutExpired`` (having killed it) after ``TIMEOUT`` seconds.
    """
    return subprocess.run(
        [sys.executable, *map(str, arguments)],
        capture_output=True,
        text=True,
        check=False,
        timeout=TIMEOUT,
        cwd=cwd,
        env=None if env is None else {**os.environ, **env},
        start_new_session=own_session,
    )


def ended(result: subprocess.CompletedProcess[str]) -> str:
    """How a child ended: ``"exit N"``, or the signal that killed it (``"SIGKILL"``)."""
    if result.returncode < 0:
        return signal.Signals(-result.returncode).name
    return f"exit {result.returncode}"


def report(result: subprocess.CompletedProcess[str]) -> Any:
    """The JSON value a child printed on its last line; fails with its stderr unless it exited 0."""
    assert result.returncode == 0, f"the child ended with {ended(result)}:\n{result.stderr}"
    return json.loads(result.stdout.splitlines()[-1])


def child_command(ledger: str | Path, effects: Path, key: str, *options: str) -> list[str]:
    """The command line of a child on ``ledger``: a SQLite file path or a PostgreSQL URL."""
    return [sys.executable, str(CHILD), str(ledger), str(effects), key, *options]


def run_child(
    ledger: str | Path, effects: Path, key: str, *options: str
) -> subprocess.CompletedProcess[str]:
    """Run one child to the end (or to its death) and return what it printed."""
    return run_python(CHILD, ledger, effects, key, *options)
