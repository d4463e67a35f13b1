"""Many callers of one key at once: the database picks one winner, the action runs once."""

import subprocess
import threading
from collections import Counter
from pathlib import Path

from safeact import Failed, InDoubt, Outcome, SafeTool, Store, Succeeded, safe
from safeact._keys import args_hash
from tests.actions import Receipt, count_effects, record_effect
from tests.processes import child_command, report

KEY = "refund-8842"


def kind(outcome: Outcome[object]) -> str:
    match outcome:
        case Succeeded(replayed=False):
            return "ran"
        case Succeeded():
            return "replayed"
        case InDoubt():
            return "in doubt"
        case Failed():
            return "failed"


def call_together(tool: SafeTool[[int], Receipt], threads: int) -> list[Outcome[Receipt]]:
    """Call ``tool`` on KEY from ``threads`` threads released at once; fail on any exception."""
    start = threading.Barrier(threads)
    outcomes: list[Outcome[Receipt]] = []
    errors: list[BaseException] = []

    def call() -> None:
        start.wait()
        try:
            outcomes.append(tool(KEY, 50))
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    workers = [threading.Thread(target=call) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    return outcomes


def charge_tool(store: Store, effects: Path) -> SafeTool[[int], Receipt]:
    @safe(store)
    def charge(key: str, amount: int) -> Receipt:
        record_effect(effects, key)
        return Receipt("a@b.c", amount)

    return charge


def test_sixteen_threads_on_one_key_run_it_once(store: Store, tmp_path: Path) -> None:
    """16 threads released together on one key: one runs it, none fails, the rest learn of it."""
    effects = tmp_path / "effects"
    kinds = Counter(kind(o) for o in call_together(charge_tool(store, effects), 16))
    assert kinds["ran"] == 1
    assert kinds["ran"] + kinds["replayed"] + kinds["in doubt"] == 16
    assert count_effects(effects, KEY) == 1


def test_sixteen_threads_on_a_released_key_run_it_once_more(store: Store, tmp_path: Path) -> None:
    """After resolve(happened=False), 16 threads at once take the key over exactly once."""
    effects = tmp_path / "effects"
    charge = charge_tool(store, effects)
    digest = args_hash(charge._signature, (50,), {})
    store.claim(KEY, charge.name, digest, attempt_id="dead", previous=None)
    store.resolve(KEY, happened=False)
    kinds = Counter(kind(o) for o in call_together(charge, 16))
    assert kinds["ran"] == 1
    assert kinds["ran"] + kinds["replayed"] + kinds["in doubt"] == 16
    assert count_effects(effects, KEY) == 1


def released_together(commands: list[list[str]]) -> list[dict[str, object]]:
    """Start every command, wait until each is ready, release them at once, collect reports."""
    children = [
        subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command in commands
    ]
    for child in children:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
    outputs = [child.communicate(timeout=120) for child in children]
    return [
        report(subprocess.CompletedProcess(child.args, child.returncode, *output))
        for child, output in zip(children, outputs, strict=True)
    ]


def test_four_processes_on_one_key_run_it_once(tmp_path: Path) -> None:
    """4 processes released together on one new ledger and key: the action runs once."""
    ledger, effects = tmp_path / "agent.db", tmp_path / "effects"
    results = released_together(
        [child_command(ledger, effects, KEY, "--barrier") for _ in range(4)]
    )
    kinds = Counter(
        "ran" if r == {**r, "kind": "Succeeded", "replayed": False} else str(r["kind"])
        for r in results
    )
    assert kinds["ran"] == 1
    assert sum(kinds.values()) == 4
    assert set(kinds) <= {"ran", "Succeeded", "InDoubt"}
    assert count_effects(effects, KEY) == 1


def test_eight_processes_create_one_new_ledger_at_once(tmp_path: Path) -> None:
    """8 processes released together on a file that does not exist yet: none fails (3 rounds)."""
    for round_ in range(3):
        ledger = tmp_path / f"agent-{round_}.db"
        results = released_together(
            [child_command(ledger, tmp_path / "effects", f"k{n}", "--barrier") for n in range(8)]
        )
        assert [r["kind"] for r in results] == ["Succeeded"] * 8
