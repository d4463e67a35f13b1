"""Real crashes: a child process SIGKILLs itself at each checkpoint; a new process carries on.

Every test runs on both backends (``any_ledger``): a SQLite file, then a PostgreSQL schema.
"""

import signal
from pathlib import Path

import pytest

from safeact import State, get_store
from safeact._protocol import Checkpoint
from tests.actions import count_effects
from tests.processes import report, run_child

KEY = "refund-8842"
SUCCEEDED_NOW: dict[str, object] = {
    "kind": "Succeeded",
    "replayed": False,
    "value": {"to": "a@example.com", "amount": 50},
}
SUCCEEDED_REPLAY: dict[str, object] = {**SUCCEEDED_NOW, "replayed": True}
IN_DOUBT: dict[str, object] = {
    "kind": "InDoubt",
    "key": KEY,
    "tool": "tests.charge",
    "reason": "crashed",
}
FAILED_REPLAY: dict[str, object] = {
    "kind": "Failed",
    "replayed": True,
    "error": "RuntimeError: card declined",
}

# For each checkpoint: the state the kill leaves, how many times the action had run by then,
# what the next process sees, what the one after it sees, and how many runs there are in all.
Case = tuple[Checkpoint, State | None, int, dict[str, object], dict[str, object], int]
SUCCESS_PATH: list[Case] = [
    ("before_claim", None, 0, SUCCEEDED_NOW, SUCCEEDED_REPLAY, 1),
    ("after_claim", State.ATTEMPTING, 0, IN_DOUBT, IN_DOUBT, 0),
    ("after_call", State.ATTEMPTING, 1, IN_DOUBT, IN_DOUBT, 1),
    ("after_record", State.SUCCEEDED, 1, SUCCEEDED_REPLAY, SUCCEEDED_REPLAY, 1),
]
FAILURE_PATH: list[Case] = [
    ("after_claim", State.ATTEMPTING, 0, IN_DOUBT, IN_DOUBT, 0),
    ("after_call", State.ATTEMPTING, 1, IN_DOUBT, IN_DOUBT, 1),
    ("after_record", State.FAILED, 1, FAILED_REPLAY, FAILED_REPLAY, 1),
]


def crash_then_continue(ledger: str, effects: Path, case: Case, *options: str) -> None:
    point, left, ran, next_outcome, then, total = case
    killed = run_child(ledger, effects, KEY, "--kill-at", point, *options)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert count_effects(effects, KEY) == ran
    with get_store(ledger) as store:
        record = store._stored(KEY)  # the row as the crash left it, not yet marked
        assert (record.state if record else None) is left
    assert report(run_child(ledger, effects, KEY, *options)) == next_outcome
    assert report(run_child(ledger, effects, KEY, *options)) == then
    assert count_effects(effects, KEY) == total


@pytest.mark.parametrize("case", SUCCESS_PATH, ids=[case[0] for case in SUCCESS_PATH])
def test_kill_during_successful_action(any_ledger: str, tmp_path: Path, case: Case) -> None:
    """Killed at each checkpoint of a successful call, later processes see the contract hold."""
    crash_then_continue(any_ledger, tmp_path / "effects", case)


@pytest.mark.parametrize("case", FAILURE_PATH, ids=[case[0] for case in FAILURE_PATH])
def test_kill_during_failing_action(any_ledger: str, tmp_path: Path, case: Case) -> None:
    """Killed at each checkpoint of a failing call, later processes see InDoubt or the Failed."""
    crash_then_continue(any_ledger, tmp_path / "effects", case, "--fail")


AWAITED_PATH = [case for case in SUCCESS_PATH if case[0] in ("after_claim", "after_call")]


@pytest.mark.parametrize("case", AWAITED_PATH, ids=[case[0] for case in AWAITED_PATH])
def test_kill_during_an_awaited_action(any_ledger: str, tmp_path: Path, case: Case) -> None:
    """An async tool: killed with its claim committed, fsync pending, or after acting; the same."""
    crash_then_continue(any_ledger, tmp_path / "effects", case, "--awaited")


def test_resolve_after_kill_lets_the_action_run_exactly_once_more(
    any_ledger: str, tmp_path: Path
) -> None:
    """After a kill after the action, resolve(happened=False) is the only way it runs again."""
    ledger, effects = any_ledger, tmp_path / "effects"
    assert run_child(ledger, effects, KEY, "--kill-at", "after_call").returncode == -signal.SIGKILL
    assert report(run_child(ledger, effects, KEY)) == IN_DOUBT
    with get_store(ledger) as store:
        store.resolve(KEY, happened=False)
    assert report(run_child(ledger, effects, KEY)) == SUCCEEDED_NOW
    assert report(run_child(ledger, effects, KEY)) == SUCCEEDED_REPLAY
    assert count_effects(effects, KEY) == 2


def test_many_sequential_processes_run_the_action_once(any_ledger: str, tmp_path: Path) -> None:
    """N processes calling one key one after another run the action once; the rest replay."""
    ledger, effects = any_ledger, tmp_path / "effects"
    outcomes = [report(run_child(ledger, effects, KEY)) for _ in range(5)]
    assert outcomes == [SUCCEEDED_NOW] + [SUCCEEDED_REPLAY] * 4
    assert count_effects(effects, KEY) == 1
