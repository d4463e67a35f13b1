"""On PostgreSQL, an owner whose liveness lock is still held is never proven gone.

The owner (tests/detach_child.py) runs in a process group of its own, and its action forks a
detached child, which keeps the owner's liveness session open. Once the owner is SIGKILLed
and its lease has run out, this machine's process table says it is gone (its pid names no
process, its group is empty), but its advisory lock is still held: neither
``resolve(happened=False)`` nor a probe's ``NotHappened`` may release its key. Once the
detached child is SIGKILLed too, the server ends the session, the lock is free, and the
same proof releases the key. Waits poll, with a deadline; none sleeps to synchronise.
"""

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import attrs
import psycopg
import pytest

from safeact import (
    DoubtReason,
    InDoubt,
    NotHappened,
    NotProvenError,
    State,
    Succeeded,
    Why,
    get_store,
    safe,
)
from safeact._ledger import Ledger
from safeact._postgres import _owner_lock
from tests.detach_child import TOOL
from tests.test_postgres import DEADLINE, Admin, holders_of

CHILD = Path(__file__).with_name("detach_child.py")
KEY = "refund-29"


def until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition()`` until it holds; fail after DEADLINE seconds."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


@attrs.frozen
class Abandoned:
    """A SIGKILLed owner past its lease, whose detached child still holds its liveness lock."""

    detached: int
    lock: int
    admin: Admin

    def free_the_lock(self) -> None:
        """SIGKILL the detached child; return once the server has freed the lock."""
        os.kill(self.detached, signal.SIGKILL)
        until(lambda: holders_of(self.admin, self.lock) == [], "the server to free the lock")


def said(owner: subprocess.Popen[str], count: int) -> dict[str, int]:
    """The first ``count`` JSON lines ``owner`` and its detached child print, merged."""
    lines: queue.Queue[str] = queue.Queue()
    assert owner.stdout is not None
    stdout = owner.stdout

    def read() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    merged: dict[str, int] = {}
    for _ in range(count):
        try:
            merged.update(json.loads(lines.get(timeout=DEADLINE)))
        except queue.Empty:
            pytest.fail(f"the owner said only {merged}")
    return merged


@pytest.fixture
def admin(postgres_ledger: str) -> Iterator[Admin]:
    """A session of the test's own, for looking at the others' locks."""
    with psycopg.connect(postgres_ledger, autocommit=True) as connection:
        yield connection


@pytest.fixture
def abandoned(postgres_ledger: str, admin: Admin) -> Iterator[Abandoned]:
    """KEY claimed by an owner that was SIGKILLed and whose lease ran out, its lock held."""
    owner = subprocess.Popen(
        [sys.executable, str(CHILD), postgres_ledger, KEY],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its process group is its own and its children's
    )
    pids = {}
    try:
        pids = said(owner, 2)
        with get_store(postgres_ledger) as store:
            record = store._stored(KEY)
            assert record is not None
            lock = _owner_lock(record.owner)
            holders = holders_of(admin, lock)
            owner.kill()
            owner.wait(DEADLINE)

            def lease_ran_out() -> bool:
                now = store._stored(KEY)
                return now is not None and now.lease_until <= datetime.now(UTC)

            until(lease_ran_out, "the owner's lease to run out")
            # What this test is about: the machine says gone, the server says held.
            assert Ledger._owner_gone(store, record)
            assert holders_of(admin, lock) == holders != []
        yield Abandoned(pids["detached"], lock, admin)
    finally:
        owner.kill()
        owner.wait(DEADLINE)
        if "detached" in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pids["detached"], signal.SIGKILL)
        for stream in (owner.stdin, owner.stdout):
            if stream is not None:
                stream.close()


def test_resolve_not_happened_waits_for_the_owners_liveness_lock(
    abandoned: Abandoned, postgres_ledger: str
) -> None:
    """While the dead owner's lock is held, resolve(happened=False) raises; then it releases."""
    with get_store(postgres_ledger) as store:
        with pytest.raises(NotProvenError):
            store.resolve(KEY, happened=False, note="no refund")
        held = store._stored(KEY)
        abandoned.free_the_lock()
        released = store.resolve(KEY, happened=False, note="no refund")
        last = store.history(KEY)[-1]
    assert held is not None
    assert held.state in {State.ATTEMPTING, State.IN_DOUBT}
    assert released.state is State.RELEASED
    assert (last.why, last.to_state) == (Why.RESOLVED, State.RELEASED)


def test_a_probe_that_says_not_happened_waits_for_the_owners_liveness_lock(
    abandoned: Abandoned, postgres_ledger: str
) -> None:
    """While the dead owner's lock is held, a call's NotHappened probe is withheld; then it runs."""
    ran: list[str] = []
    with get_store(postgres_ledger) as store:

        @safe(store, name=TOOL, reconcile=lambda _key, _receipt: NotHappened("no refund"))
        def act(key: str) -> int:
            ran.append(key)
            return 2

        withheld = act(KEY)
        whys = [event.why for event in store.history(KEY)]
        abandoned.free_the_lock()
        rerun = act(KEY)
    assert isinstance(withheld, InDoubt)
    assert withheld.reason is DoubtReason.LEASE_EXPIRED
    assert Why.RELEASE_WITHHELD in whys
    assert rerun == Succeeded(KEY, 2)
    assert ran == [KEY]
