"""Live or dead: real owners killed, frozen past their lease, or slow; callers wait or doubt.

Every test runs on both backends (``any_ledger``), except those about an owner on another
host, whose death only PostgreSQL can see (its session, and the lock it held, end).
"""

import os
import signal
import subprocess
from pathlib import Path

from safeact import DoubtReason, State, get_store
from tests.actions import count_effects
from tests.processes import child_command, report, run_child

KEY = "refund-8842"
RECEIPT = {"to": "a@example.com", "amount": 50}


def start_owner(ledger: str, effects: Path, *options: str) -> subprocess.Popen[str]:
    """Start a child that claims KEY, acts, prints "acting" and holds until told to go on."""
    owner = subprocess.Popen(
        child_command(ledger, effects, KEY, "--hold", *options),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    assert owner.stdout.readline() == "acting\n", owner.stderr
    return owner


def test_killed_owner_is_in_doubt_at_once_as_crashed(any_ledger: str, tmp_path: Path) -> None:
    """An owner SIGKILLed mid-action: the next caller learns InDoubt (crashed) without waiting."""
    effects = tmp_path / "effects"
    owner = start_owner(any_ledger, effects)
    owner.kill()
    owner.communicate()
    # A live owner would have kept this caller waiting 60 s and given "in_flight".
    outcome = report(run_child(any_ledger, effects, KEY, "--wait", "60"))
    assert (outcome["kind"], outcome["reason"]) == ("InDoubt", DoubtReason.CRASHED.value)
    with get_store(any_ledger) as store:
        record = store.get(KEY)
        assert record is not None
        assert (record.state, record.doubt_reason) == (State.IN_DOUBT, DoubtReason.CRASHED)
    assert count_effects(effects, KEY) == 1


def test_killed_owner_on_another_host_is_in_doubt_at_once_on_postgres(
    postgres_ledger: str, tmp_path: Path
) -> None:
    """An owner of another host SIGKILLed: its session lock is gone, so a caller doubts at once.

    PostgreSQL only: no process of this host can look the owner up, only its advisory lock
    tells; on SQLite such an owner's lease decides.
    """
    effects = tmp_path / "effects"
    owner = start_owner(postgres_ledger, effects, "--host", "elsewhere")
    owner.kill()
    owner.communicate()
    # A live owner would have kept this caller waiting 60 s and given "in_flight".
    outcome = report(run_child(postgres_ledger, effects, KEY, "--wait", "60"))
    assert (outcome["kind"], outcome["reason"]) == ("InDoubt", DoubtReason.SESSION_LOST.value)
    assert count_effects(effects, KEY) == 1


def test_live_owner_on_another_host_is_waited_for_on_postgres(
    postgres_ledger: str, tmp_path: Path
) -> None:
    """An owner of another host that lives holds its session lock: a caller sees it in flight.

    PostgreSQL only: the counterpart of the test above, so that a lock that always looks free
    cannot pass for liveness.
    """
    effects = tmp_path / "effects"
    owner = start_owner(postgres_ledger, effects, "--host", "elsewhere")
    try:
        outcome = report(run_child(postgres_ledger, effects, KEY, "--wait", "0"))
        assert (outcome["kind"], outcome["reason"]) == ("InDoubt", "in_flight")
    finally:
        stdout, stderr = owner.communicate("go\n", timeout=60)
    owner_report = report(subprocess.CompletedProcess(owner.args, owner.returncode, stdout, stderr))
    assert owner_report == {"kind": "Succeeded", "replayed": False, "value": RECEIPT}
    assert count_effects(effects, KEY) == 1


def test_frozen_owner_past_its_lease_is_in_doubt_and_its_late_success_still_lands(
    any_ledger: str, tmp_path: Path
) -> None:
    """A frozen owner's lease runs out (InDoubt, lease expired); thawed, its success lands."""
    effects = tmp_path / "effects"
    owner = start_owner(any_ledger, effects, "--lease", "1", "--heartbeat", "0.2")
    try:
        os.kill(owner.pid, signal.SIGSTOP)
        waiter = run_child(any_ledger, effects, KEY, "--wait", "60")
        outcome = report(waiter)
        assert (outcome["kind"], outcome["reason"]) == ("InDoubt", "lease_expired")
    finally:
        os.kill(owner.pid, signal.SIGCONT)
    stdout, stderr = owner.communicate("go\n", timeout=60)
    owner_report = report(subprocess.CompletedProcess(owner.args, owner.returncode, stdout, stderr))
    assert owner_report == {"kind": "Succeeded", "replayed": False, "value": RECEIPT}
    again = report(run_child(any_ledger, effects, KEY))
    assert again == {"kind": "Succeeded", "replayed": True, "value": RECEIPT}
    assert count_effects(effects, KEY) == 1


def test_slow_live_owner_is_waited_for_past_its_lease(any_ledger: str, tmp_path: Path) -> None:
    """An owner slower than three leases keeps its lease by heartbeat; a caller waits, replays."""
    ledger, effects = any_ledger, tmp_path / "effects"
    owner = subprocess.Popen(
        child_command(
            ledger, effects, KEY, "--lease", "0.5", "--heartbeat", "0.1", "--slow", "1.5"
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with get_store(ledger) as store:
            while (record := store.get(KEY)) is None or record.state is not State.ATTEMPTING:
                assert owner.poll() is None, owner.communicate()
        waiter = report(run_child(ledger, effects, KEY, "--wait", "60"))
    finally:
        stdout, stderr = owner.communicate(timeout=60)
    assert waiter == {"kind": "Succeeded", "replayed": True, "value": RECEIPT}
    assert report(subprocess.CompletedProcess(owner.args, owner.returncode, stdout, stderr)) == {
        "kind": "Succeeded",
        "replayed": False,
        "value": RECEIPT,
    }
    assert count_effects(effects, KEY) == 1


def test_waiting_caller_gets_in_flight_and_marks_nothing(any_ledger: str, tmp_path: Path) -> None:
    """A caller whose wait runs out while the owner lives gets InDoubt (in flight), unmarked."""
    effects = tmp_path / "effects"
    owner = start_owner(any_ledger, effects)
    try:
        outcome = report(run_child(any_ledger, effects, KEY, "--wait", "0"))
        assert (outcome["kind"], outcome["reason"]) == ("InDoubt", "in_flight")
        with get_store(any_ledger) as store:
            record = store.get(KEY)
            assert record is not None
            assert record.state is State.ATTEMPTING
            assert store.list_in_doubt() == []
    finally:
        owner.communicate("go\n", timeout=60)
    assert count_effects(effects, KEY) == 1
