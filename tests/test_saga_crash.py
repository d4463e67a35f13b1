"""Real crashes in a saga: SIGKILL in a step, between steps, and in the rollback."""

import signal
import subprocess
import sys
from pathlib import Path

from safeact import SagaState, get_store
from tests.actions import count_effects
from tests.processes import report

CHILD = Path(__file__).with_name("saga_child.py")
SAGA = "refund-8842"
CHARGE, SEND, LEDGER = f"{SAGA}:0:charge", f"{SAGA}:1:send", f"{SAGA}:2:ledger"
UNDO_CHARGE, UNDO_SEND = f"{CHARGE}:compensate", f"{SEND}:compensate"


def run(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(CHILD),
            str(tmp_path / "agent.db"),
            str(tmp_path / "effects"),
            SAGA,
            *options,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def killed(tmp_path: Path, *options: str) -> None:
    result = run(tmp_path, *options)
    assert result.returncode == -signal.SIGKILL, result.stderr


def effects(tmp_path: Path) -> dict[str, int]:
    keys = [CHARGE, SEND, LEDGER, UNDO_CHARGE, UNDO_SEND]
    return {key: count_effects(tmp_path / "effects", key) for key in keys}


def saga_state(tmp_path: Path) -> SagaState | None:
    with get_store(tmp_path / "agent.db") as store:
        saga = store.get_saga(SAGA)
        return saga.state if saga else None


def failed(step: str, outcome: str, **lists: list[str]) -> dict[str, object]:
    empty: dict[str, list[str]] = {
        name: [] for name in ("compensated", "replayed", "failed", "in_doubt", "skipped")
    }
    return {"result": "failed", "step": step, "outcome": outcome, **empty, **lists}


def test_kill_inside_a_step_after_its_effect(tmp_path: Path) -> None:
    """Killed after send acted: the re-run finds send in doubt and undoes only the charge."""
    killed(tmp_path, "--kill-at", "after_call:2")
    assert saga_state(tmp_path) is SagaState.RUNNING
    assert report(run(tmp_path)) == failed(SEND, "InDoubt", compensated=[CHARGE])
    assert report(run(tmp_path)) == failed(SEND, "InDoubt", replayed=[CHARGE])
    assert effects(tmp_path) == {CHARGE: 1, SEND: 1, LEDGER: 0, UNDO_CHARGE: 1, UNDO_SEND: 0}
    assert saga_state(tmp_path) is SagaState.COMPENSATED


def test_kill_between_steps(tmp_path: Path) -> None:
    """Killed after the charge was recorded: the re-run replays it and completes the saga."""
    killed(tmp_path, "--kill-at", "after_record:1")
    completed = {"result": "completed", "values": [50, "a@example.com", None]}
    assert report(run(tmp_path)) == completed
    assert report(run(tmp_path)) == completed
    assert effects(tmp_path) == {CHARGE: 1, SEND: 1, LEDGER: 1, UNDO_CHARGE: 0, UNDO_SEND: 0}
    assert saga_state(tmp_path) is SagaState.COMPLETED


def test_kill_between_two_compensations(tmp_path: Path) -> None:
    """Killed after send was undone: the saga is seen stuck, and the re-run undoes the charge."""
    killed(tmp_path, "--fail", "ledger", "--kill-at", "after_record:4")
    assert saga_state(tmp_path) is SagaState.COMPENSATING
    expected = failed(LEDGER, "Failed", compensated=[CHARGE], replayed=[SEND])
    assert report(run(tmp_path, "--fail", "ledger")) == expected
    assert report(run(tmp_path)) == failed(LEDGER, "Failed", replayed=[SEND, CHARGE])
    assert effects(tmp_path) == {CHARGE: 1, SEND: 1, LEDGER: 1, UNDO_CHARGE: 1, UNDO_SEND: 1}
    assert saga_state(tmp_path) is SagaState.COMPENSATED


def test_kill_inside_a_compensation_after_its_effect(tmp_path: Path) -> None:
    """Killed after the correction was sent: it is reported in doubt; the charge is undone."""
    killed(tmp_path, "--fail", "ledger", "--kill-at", "after_call:4")
    expected = failed(LEDGER, "Failed", compensated=[CHARGE], in_doubt=[SEND])
    assert report(run(tmp_path, "--fail", "ledger")) == expected
    assert report(run(tmp_path)) == failed(LEDGER, "Failed", replayed=[CHARGE], in_doubt=[SEND])
    assert effects(tmp_path) == {CHARGE: 1, SEND: 1, LEDGER: 1, UNDO_CHARGE: 1, UNDO_SEND: 1}
    assert saga_state(tmp_path) is SagaState.ROLLBACK_INCOMPLETE
