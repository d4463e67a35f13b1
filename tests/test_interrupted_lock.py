"""An interrupt never leaves SQLite's write lock held: a real SIGINT as a claim gets the lock.

A worker that catches KeyboardInterrupt and goes on must not keep the ledger locked, which
would make every other process's claim fail after the busy timeout, and its own at once.
SQLite only: the lock is the ledger file's.
"""

import json
import os
import platform
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest

from safeact import get_store
from tests.actions import count_effects

CHILD = Path(__file__).with_name("interrupt_child.py")

SLEEPS = {"x86_64": {35, 230}, "aarch64": {101, 115}}
"""The numbers of nanosleep and clock_nanosleep, where SQLite's busy handler waits."""


@contextmanager
def started(*args: str | Path) -> Iterator[subprocess.Popen[str]]:
    """A child of interrupt_child.py, talked to by lines; ended (stdin closed) on exit."""
    child = subprocess.Popen(
        [sys.executable, str(CHILD), *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield child
    finally:
        child.communicate(timeout=60)


def say(child: subprocess.Popen[str], line: str) -> None:
    assert child.stdin is not None
    child.stdin.write(f"{line}\n")
    child.stdin.flush()


def heard(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line, child.stderr.read() if child.stderr else "the child ended"
    return line.strip()


def wait_until_sleeping(pid: int) -> None:
    """Return once process ``pid``'s main thread sleeps in (clock_)nanosleep.

    Read from ``/proc/PID/syscall``: the system call the thread is blocked in, by number.
    """
    sleeps = SLEEPS[platform.machine()]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        call = Path(f"/proc/{pid}/syscall").read_text().split()[0]
        if call.isdigit() and int(call) in sleeps:
            return
        time.sleep(0.001)  # a poll's interval: the condition above is the synchronisation
    pytest.fail(f"process {pid} never waited for the write lock")


def lock_is_free(ledger: Path) -> bool:
    """Whether a new connection takes the ledger's write lock at once."""
    with closing(sqlite3.connect(ledger, isolation_level=None, timeout=0.1)) as connection:
        try:
            connection.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError:
            return False
        connection.execute("ROLLBACK")
        return True


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.machine() not in SLEEPS,
    reason="reads a process's system call from Linux's /proc",
)
def test_a_sigint_as_the_claim_gets_the_write_lock_leaves_the_ledger_unlocked(
    ledger: Path, tmp_path: Path
) -> None:
    """SIGINT while a claim waits for the lock, which it then gets: rolled back, not held.

    The holder keeps the lock until the worker sleeps in SQLite's busy handler and has the
    signal; Python raises the KeyboardInterrupt as soon as ``BEGIN IMMEDIATE`` returns with
    the lock, before anything is written.
    """
    effects = tmp_path / "effects"
    get_store(ledger).close()
    with started("worker", ledger, effects) as worker, started("hold", ledger) as holder:
        assert heard(worker) == "ready"
        assert heard(holder) == "locked"
        say(worker, "k")
        wait_until_sleeping(worker.pid)
        os.kill(worker.pid, signal.SIGINT)
        say(holder, "commit")
        assert heard(holder) == "released"
        interrupted = json.loads(heard(worker))
        free = lock_is_free(ledger)
        with get_store(ledger) as store:
            record = store.get("k")
        ran = count_effects(effects, "k")
        say(worker, "k")
        again = json.loads(heard(worker))
    assert interrupted == {"interrupted": True}
    assert free
    assert (record, ran) == (None, 0)
    assert again == {"kind": "Succeeded", "value": 1, "replayed": False}
    assert count_effects(effects, "k") == 1
