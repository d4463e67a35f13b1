"""Many callers of one key at once: the database picks one winner, the action runs once."""

import subprocess
import threading
from collections import Counter
from pathlib import Path

from safeact import AwaitingApproval, Failed, InDoubt, Outcome, SafeTool, Store, Succeeded, safe
from safeact._keys import args_hash
from tests.actions import Receipt, bury_owners, count_effects, record_effect
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
        case AwaitingApproval():
            return "awaiting approval"


def call_together(
    tool: SafeTool[[int], Receipt], threads: int, keys: list[str]
) -> list[tuple[str, Outcome[Receipt]]]:
    """Release ``threads`` threads at once, each calling every key (in its own order)."""
    start = threading.Barrier(threads)
    outcomes: list[tuple[str, Outcome[Receipt]]] = []
    errors: list[BaseException] = []

    def call(offset: int) -> None:
        start.wait()
        try:
            for index in range(len(keys)):
                key = keys[(index + offset) % len(keys)]
                outcomes.append((key, tool(key, 50)))
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    workers = [threading.Thread(target=call, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []  # no "database is locked", nor anything else
    return outcomes


def charge_tool(store: Store, effects: Path) -> SafeTool[[int], Receipt]:
    @safe(store, wait=60)
    def charge(key: str, amount: int) -> Receipt:
        record_effect(effects, key)
        return Receipt("a@b.c", amount)

    return charge


def test_thirty_two_threads_on_one_key_run_it_once_and_all_get_its_result(
    store: Store, tmp_path: Path
) -> None:
    """32 threads at once on one key: one runs it, the 31 others wait and replay its result."""
    effects = tmp_path / "effects"
    outcomes = call_together(charge_tool(store, effects), 32, [KEY])
    assert Counter(kind(outcome) for _, outcome in outcomes) == {"ran": 1, "replayed": 31}
    assert {outcome.unwrap() for _, outcome in outcomes} == {Receipt("a@b.c", 50)}
    assert count_effects(effects, KEY) == 1


def test_thirty_two_threads_on_eight_keys_run_each_once(store: Store, tmp_path: Path) -> None:
    """32 threads at once over 8 keys: each key runs once; every other call replays it."""
    effects = tmp_path / "effects"
    keys = [f"key-{n}" for n in range(8)]
    outcomes = call_together(charge_tool(store, effects), 32, keys)
    for key in keys:
        kinds = Counter(kind(outcome) for called, outcome in outcomes if called == key)
        assert kinds == {"ran": 1, "replayed": 31}
        assert count_effects(effects, key) == 1


def test_sixteen_threads_on_a_released_key_run_it_once_more(store: Store, tmp_path: Path) -> None:
    """After resolve(happened=False), 16 threads at once take the key over exactly once."""
    effects = tmp_path / "effects"
    charge = charge_tool(store, effects)
    digest = args_hash(charge._signature, (50,), {})
    store._claim(KEY, charge.name, digest, attempt_id="dead", previous=None)
    bury_owners(store)
    store.resolve(KEY, happened=False)
    outcomes = call_together(charge, 16, [KEY])
    assert Counter(kind(outcome) for _, outcome in outcomes) == {"ran": 1, "replayed": 15}
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


def test_eight_processes_on_one_key_run_it_once_and_all_get_its_result(
    any_ledger: str, tmp_path: Path
) -> None:
    """8 processes at once on one new ledger and key: one runs it, 7 wait and replay it."""
    ledger, effects = any_ledger, tmp_path / "effects"
    results = released_together(
        [child_command(ledger, effects, KEY, "--barrier", "--wait", "60") for _ in range(8)]
    )
    assert count_effects(effects, KEY) == 1
    assert Counter((r["kind"], r["replayed"]) for r in results) == {
        ("Succeeded", False): 1,
        ("Succeeded", True): 7,
    }
    assert count_effects(effects, KEY) == 1


def test_eight_processes_on_four_keys_run_each_once(any_ledger: str, tmp_path: Path) -> None:
    """8 processes at once, two per key: each key runs once, its twin replays it."""
    ledger, effects = any_ledger, tmp_path / "effects"
    keys = [f"key-{n % 4}" for n in range(8)]
    results = released_together(
        [child_command(ledger, effects, key, "--barrier", "--wait", "60") for key in keys]
    )
    assert [count_effects(effects, f"key-{n}") for n in range(4)] == [1, 1, 1, 1]
    assert Counter(bool(r["replayed"]) for r in results) == {False: 4, True: 4}
    assert [count_effects(effects, f"key-{n}") for n in range(4)] == [1, 1, 1, 1]


def test_eight_processes_create_one_new_sqlite_ledger_at_once(tmp_path: Path) -> None:
    """8 processes released together on a file that does not exist yet: none fails (3 rounds).

    SQLite only: opening creates its file; a PostgreSQL schema is made by ``migrate`` alone.
    """
    for round_ in range(3):
        ledger = tmp_path / f"agent-{round_}.db"
        results = released_together(
            [child_command(ledger, tmp_path / "effects", f"k{n}", "--barrier") for n in range(8)]
        )
        assert [r["kind"] for r in results] == ["Succeeded"] * 8
