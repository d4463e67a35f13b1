"""Real crashes in a saga: SIGKILL in a step, between steps, and in the rollback.

Every test runs on both backends (``any_ledger``): a SQLite file, then a PostgreSQL schema.
"""

import signal
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from safeact import SagaState, get_store
from tests.actions import count_effects
from tests.processes import report

CHILD = Path(__file__).with_name("saga_child.py")
SAGA = "refund-8842"
CHARGE, SEND, LEDGER = f"{SAGA}:0:charge", f"{SAGA}:1:send", f"{SAGA}:2:ledger"
UNDO_CHARGE, UNDO_SEND = f"{CHARGE}:compensate", f"{SEND}:compensate"


@attrs.frozen
class SagaLedger:
    """A ledger (a SQLite file path or a PostgreSQL URL) and the file the effects go to."""

    location: str
    effects_file: Path

    def run(self, *options: str) -> subprocess.CompletedProcess[str]:
        """Run the refund saga in a new process, to its end or its death."""
        return subprocess.run(
            [sys.executable, str(CHILD), self.location, str(self.effects_file), SAGA, *options],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )

    def killed(self, *options: str) -> None:
        """Run the saga in a process that must die of its SIGKILL."""
        result = self.run(*options)
        assert result.returncode == -signal.SIGKILL, result.stderr

    def effects(self) -> dict[str, int]:
        """How many times each step and compensation really ran."""
        keys = [CHARGE, SEND, LEDGER, UNDO_CHARGE, UNDO_SEND]
        return {key: count_effects(self.effects_file, key) for key in keys}

    def saga_state(self) -> SagaState | None:
        with get_store(self.location) as store:
            saga = store.get_saga(SAGA)
            return saga.state if saga else None


@pytest.fixture
def saga_ledger(any_ledger: str, tmp_path: Path) -> SagaLedger:
    """A fresh ledger on each backend, with its effects file."""
    return SagaLedger(any_ledger, tmp_path / "effects")


def failed(step: str, outcome: str, **lists: list[str]) -> dict[str, object]:
    empty: dict[str, list[str]] = {
        name: []
        for name in ("compensated", "replayed", "failed", "in_doubt", "skipped", "unresolved")
    }
    return {"result": "failed", "step": step, "outcome": outcome, **empty, **lists}


def test_kill_inside_a_step_after_its_effect(saga_ledger: SagaLedger) -> None:
    """Killed after send acted: re-runs undo only the charge and leave the rollback incomplete."""
    saga_ledger.killed("--kill-at", "after_call:2")
    assert saga_ledger.saga_state() is SagaState.RUNNING
    expected = failed(SEND, "InDoubt", compensated=[CHARGE], unresolved=[SEND])
    assert report(saga_ledger.run()) == expected
    expected = failed(SEND, "InDoubt", replayed=[CHARGE], unresolved=[SEND])
    assert report(saga_ledger.run()) == expected
    assert saga_ledger.effects() == {CHARGE: 1, SEND: 1, LEDGER: 0, UNDO_CHARGE: 1, UNDO_SEND: 0}
    assert saga_ledger.saga_state() is SagaState.ROLLBACK_INCOMPLETE


def test_step_killed_after_its_effect_is_undone_once_resolved(saga_ledger: SagaLedger) -> None:
    """Send, killed after acting and resolved happened=True, is undone once by the next re-run."""
    saga_ledger.killed("--kill-at", "after_call:2")
    saga_ledger.run()
    with get_store(saga_ledger.location) as store:
        store.resolve(SEND, happened=True, result="a@example.com")
    resolved = "NoneType"  # the report's outcome: the step is no longer in doubt
    expected = failed(SEND, resolved, compensated=[SEND], replayed=[CHARGE])
    assert report(saga_ledger.run()) == expected
    assert report(saga_ledger.run()) == failed(SEND, resolved, replayed=[SEND, CHARGE])
    assert saga_ledger.effects() == {CHARGE: 1, SEND: 1, LEDGER: 0, UNDO_CHARGE: 1, UNDO_SEND: 1}
    assert saga_ledger.saga_state() is SagaState.COMPENSATED


def test_kill_between_steps(saga_ledger: SagaLedger) -> None:
    """Killed after the charge was recorded: the re-run replays it and completes the saga."""
    saga_ledger.killed("--kill-at", "after_record:1")
    completed = {"result": "completed", "values": [50, "a@example.com", None]}
    assert report(saga_ledger.run()) == completed
    assert report(saga_ledger.run()) == completed
    assert saga_ledger.effects() == {CHARGE: 1, SEND: 1, LEDGER: 1, UNDO_CHARGE: 0, UNDO_SEND: 0}
    assert saga_ledger.saga_state() is SagaState.COMPLETED


def test_kill_between_two_compensations(saga_ledger: SagaLedger) -> None:
    """Killed after send was undone: the saga is seen stuck, and the re-run undoes the charge."""
    saga_ledger.killed("--fail", "ledger", "--kill-at", "after_record:4")
    assert saga_ledger.saga_state() is SagaState.COMPENSATING
    expected = failed(LEDGER, "Failed", compensated=[CHARGE], replayed=[SEND])
    assert report(saga_ledger.run("--fail", "ledger")) == expected
    assert report(saga_ledger.run()) == failed(LEDGER, "Failed", replayed=[SEND, CHARGE])
    assert saga_ledger.effects() == {CHARGE: 1, SEND: 1, LEDGER: 1, UNDO_CHARGE: 1, UNDO_SEND: 1}
    assert saga_ledger.saga_state() is SagaState.COMPENSATED


def test_kill_inside_a_compensation_after_its_effect(saga_ledger: SagaLedger) -> None:
    """Killed after the correction was sent: it is reported in doubt; the charge is undone."""
    saga_ledger.killed("--fail", "ledger", "--kill-at", "after_call:4")
    expected = failed(LEDGER, "Failed", compensated=[CHARGE], in_doubt=[SEND])
    assert report(saga_ledger.run("--fail", "ledger")) == expected
    assert report(saga_ledger.run()) == failed(LEDGER, "Failed", replayed=[CHARGE], in_doubt=[SEND])
    assert saga_ledger.effects() == {CHARGE: 1, SEND: 1, LEDGER: 1, UNDO_CHARGE: 1, UNDO_SEND: 1}
    assert saga_ledger.saga_state() is SagaState.ROLLBACK_INCOMPLETE
