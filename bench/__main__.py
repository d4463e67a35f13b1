"""safeact next to its limit (bare sqlite3 at the same durability) and its peers, in one run.

    python -m bench [--quick] [--json PATH]

Every row is measured in this run: the median, over several rounds, of the time per call;
ratios compare rows of the same run, since absolute times on shared machines say little.
Peers (effect-ledger, DBOS, AWS Powertools with the shared Redis and with a Redis of this
run's own that syncs every write) are measured when installed and skipped with a note
otherwise; so are the PostgreSQL rows (bench/postgres.py), when psycopg is installed and
the server at SAFEACT_BENCH_POSTGRES answers. Every figure that has a target in
bench/targets.py is printed with it and a verdict. Writes the tables to stdout and every
figure to PATH (default bench-results.json).
"""

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from itertools import count
from pathlib import Path
from typing import Any, NamedTuple

from bench.agents import agent_figures
from bench.cpu import cpu_rows
from bench.inbox import inbox_figures
from bench.loop_lag import lateness_during, p99
from bench.peers import peer_rows
from bench.postgres import postgres_figures
from bench.targets import Judged, judge
from bench.timing import ROUNDS, per_call, repeat, shares
from safeact import Saga, get_store, safe
from safeact._protocol import DoubtReason
from safeact._tables import SCHEMA_VERSION

# What the peers' notes are to be read against.
SAFEACT_DURABILITY = "WAL; ATTEMPTING synced before the action, the result not"
THREADS = 8
TASKS = 100
PEERS = (
    "effect-ledger",
    "DBOS",
    "Powertools + Redis",
    "Powertools + Redis with appendfsync always",
)
IMPORT_FIGURE = "import safeact beyond import attrs, cattrs"
LAG_FIGURE = f"event loop lag under {TASKS} concurrent calls, p99"


class Lag(NamedTuple):
    """How late a 1 ms ticker on the event loop woke, in milliseconds, under some load."""

    p99: float
    worst: float
    ticks: int


def bare_connection(path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA synchronous = NORMAL")
    connection.execute(
        "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, state TEXT, result TEXT) "
        "WITHOUT ROWID"
    )
    return connection


def bare_contract(
    connection: sqlite3.Connection, *, sync_claim: bool, sync_finish: bool
) -> Callable[[int], None]:
    """Record-before-execute written directly: INSERT ATTEMPTING, act, UPDATE SUCCEEDED."""
    prefix, keys = uuid.uuid4().hex, count()
    claim_sync = "FULL" if sync_claim else "NORMAL"
    finish_sync = "FULL" if sync_finish else "NORMAL"

    def run(calls: int) -> None:
        for _ in range(calls):
            key = f"{prefix}-{next(keys)}"
            connection.execute(f"PRAGMA synchronous = {claim_sync}")
            connection.execute("INSERT INTO calls VALUES (?, 'attempting', NULL)", (key,))
            result = json.dumps(len(key))  # the action
            connection.execute(f"PRAGMA synchronous = {finish_sync}")
            connection.execute(
                "UPDATE calls SET state = 'succeeded', result = ? WHERE key = ?", (result, key)
            )

    return run


def bare_read(connection: sqlite3.Connection) -> Callable[[int], None]:
    connection.execute("INSERT OR REPLACE INTO calls VALUES ('read-me', 'succeeded', '7')")

    def run(calls: int) -> None:
        for _ in range(calls):
            json.loads(
                connection.execute(
                    "SELECT result FROM calls WHERE key = ?", ("read-me",)
                ).fetchone()[0]
            )

    return run


def fill(path: Path, keys: int) -> None:
    """Put ``keys`` settled keys into the ledger at ``path``, as safeact would have."""
    store = get_store(path)
    store.close()
    connection = sqlite3.connect(path, isolation_level=None)
    now = "2026-01-01T00:00:00.000000+00:00"
    rows = (
        (
            f"old-{n}",
            "bench.old",
            "h",
            "succeeded",
            uuid.uuid4().hex,
            now,
            "host",
            "",
            1,
            1,
            now,
            "1",
            SCHEMA_VERSION,
        )
        for n in range(keys)
    )
    connection.execute("BEGIN")
    connection.executemany(
        "INSERT INTO calls (key, tool, args_hash, state, attempt_id, attempted_at, owner_host, "
        "owner_boot, owner_pid, owner_started, lease_until, result, schema_version) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    connection.execute("COMMIT")
    connection.close()


def safeact_rows(folder: Path, calls: int) -> tuple[dict[str, float], Lag]:
    """The rows of safeact on SQLite, and the event loop's lag under TASKS concurrent calls."""
    store = get_store(folder / "safeact.db")
    keys = count()

    @safe(store, name="bench.act")
    def act(key: str, n: int) -> int:
        return n

    @safe(store, name="bench.fail")
    def fail(key: str) -> int:
        raise ValueError("declined")

    @safe(store, name="bench.async")
    async def act_async(key: str, n: int) -> int:
        return n

    act("replay-me", 1)
    fail("fail-me")
    claimed = store._claim(
        "doubt-me", act.name, act._digest("doubt-me", (1,), {}), attempt_id="x", previous=None
    )
    assert claimed is not None
    store._mark_in_doubt("doubt-me", "x", DoubtReason.CRASHED)

    def new_keys(n: int) -> None:
        for _ in range(n):
            act(f"k{next(keys)}", 1)

    async def one_task(n: int) -> None:
        for _ in range(n):
            await act_async(f"a{next(keys)}", 1)

    async def many_tasks(n: int) -> None:
        await asyncio.gather(*(one_task(share) for share in shares(n, TASKS)))

    def sagas(n: int) -> None:
        for _ in range(n):
            with Saga(f"saga-{next(keys)}", store) as saga:
                for step in range(3):
                    saga.step(act, step)

    def threads(n: int) -> None:
        workers = [threading.Thread(target=new_keys, args=(share,)) for share in shares(n, THREADS)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()

    rows = {
        "safeact new key": per_call(new_keys, calls),
        "safeact replay": per_call(repeat(lambda: act("replay-me", 1)), calls),
        "safeact Failed replay": per_call(repeat(lambda: fail("fail-me")), calls),
        "safeact in-doubt key": per_call(repeat(lambda: act("doubt-me", 1)), calls),
        "safeact async new key": per_call(on_a_loop(one_task), calls),
        "safeact saga of 3 steps": per_call(sagas, max(calls // 3, 1)),
        f"safeact {THREADS} threads, distinct keys (per call)": per_call(threads, calls),
        f"safeact {TASKS} asyncio tasks, distinct keys (per call)": per_call(
            on_a_loop(many_tasks), calls
        ),
    }
    lag = lag_during(many_tasks, calls)
    store.close()
    return rows, lag


def on_a_loop(run: Callable[[int], Coroutine[Any, Any, None]]) -> Callable[[int], None]:
    """``run(calls)`` on an event loop of its own, as an application's ``asyncio.run``."""
    return lambda calls: asyncio.run(run(calls))


def lag_during(run: Callable[[int], Coroutine[Any, Any, None]], calls: int) -> Lag:
    """The lateness of a 1 ms ticker (bench/loop_lag.py) over ROUNDS runs of ``run(calls)``.

    Apart from the rounds that time ``run``: the ticker takes its share of the loop.
    """
    late: list[float] = []
    for _ in range(ROUNDS):
        late += asyncio.run(lateness_during(lambda: run(calls)))
    return Lag(p99(late), max(late), len(late))


def growth_rows(folder: Path, calls: int, sizes: list[int]) -> dict[str, float]:
    rows: dict[str, float] = {}
    for size in sizes:
        rows |= grown(folder / f"grown-{size}.db", calls, size)
    return rows


def grown(path: Path, calls: int, size: int) -> dict[str, float]:
    """New-key and replay calls on a ledger that already holds ``size`` keys."""
    fill(path, size)
    store = get_store(path)
    keys = count()

    @safe(store, name="bench.grown")
    def act(key: str, n: int) -> int:
        return n

    act("replay-me", 1)
    rows = {
        f"new key with {size:,} keys": per_call(repeat(lambda: act(f"g{next(keys)}", 1)), calls),
        f"replay with {size:,} keys": per_call(repeat(lambda: act("replay-me", 1)), calls),
    }
    store.close()
    return rows


def import_time(module: str, bytecode: Path) -> float:
    """Median wall time of a fresh interpreter that imports ``module``, bytecode cached.

    An installed package has its ``.pyc`` files (pip compiles them); a checkout run with
    ``PYTHONDONTWRITEBYTECODE`` would compile every module anew in each interpreter. So
    the children keep their bytecode under ``bytecode``, and a first, untimed run fills it.
    """
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(bytecode)
    command = [sys.executable, "-c", f"import {module}"]
    subprocess.run(command, check=True, env=env)
    times = []
    for _ in range(7):
        started = time.perf_counter()
        subprocess.run(command, check=True, env=env)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def ratios(rows: dict[str, float], sizes: list[int]) -> dict[str, float]:
    """The SQLite ratios, named as bench/targets.py names those that have a target.

    Calls per second of N workers over one's is one's time per call over theirs.
    """
    smallest, largest = f"{sizes[0]:,}", f"{sizes[-1]:,}"
    return {
        "SQLite new key / bare contract with ATTEMPTING synced": rows["safeact new key"]
        / rows["bare contract, ATTEMPTING synced"],
        "replay / bare indexed read": rows["safeact replay"] / rows["bare indexed read"],
        "async new key / sync new key": rows["safeact async new key"] / rows["safeact new key"],
        f"{THREADS} threads on distinct keys, calls per second / one thread": rows[
            "safeact new key"
        ]
        / rows[f"safeact {THREADS} threads, distinct keys (per call)"],
        f"{TASKS} asyncio tasks on distinct keys, calls per second / one task": rows[
            "safeact async new key"
        ]
        / rows[f"safeact {TASKS} asyncio tasks, distinct keys (per call)"],
        "new key, largest / smallest ledger": rows[f"new key with {largest} keys"]
        / rows[f"new key with {smallest} keys"],
        "replay, largest / smallest ledger": rows[f"replay with {largest} keys"]
        / rows[f"replay with {smallest} keys"],
    }


def peer_ratios(rows: dict[str, float]) -> dict[str, float]:
    """How many times slower each measured peer is than safeact, new key and replay."""
    return {
        f"{peer} / safeact, {call}": rows[f"{peer} {call}"] / rows[f"safeact {call}"]
        for peer in PEERS
        for call in ("new key", "replay")
        if f"{peer} {call}" in rows
    }


def print_figures(
    figures: dict[str, float], judged: list[Judged], lag: Lag, sizes: list[int]
) -> None:
    """Every target with what was measured and the verdict, then the ratios without one."""
    print(f"{'figure':66}{'measured':>10}{'target':>10}  verdict")
    for figure, target, measured, verdict in judged:
        shown = "-" if measured is None else target.show(measured)
        print(f"{figure:66}{shown:>10}{target!s:>10}  {verdict}")
    print(
        f"(event loop lag: the verdict is on the p99 of {lag.ticks} ticks of 1 ms, "
        f"the worst was {lag.worst:.1f} ms; ledgers of {sizes[-1]:,} and {sizes[0]:,} keys)"
    )
    print()
    targeted = {figure for figure, *_ in judged}
    for name, ratio in figures.items():
        if name not in targeted:
            print(f"{name:66}{ratio:9.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer calls, smaller ledgers")
    parser.add_argument("--json", type=Path, default=Path("bench-results.json"))
    options = parser.parse_args()
    calls = 100 if options.quick else 400
    scale = 0.1 if options.quick else 1.0
    sizes = [1_000, 10_000] if options.quick else [1_000, 100_000, 1_000_000]
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        bare = bare_connection(folder / "bare.db")
        rows = {
            "bare contract, ATTEMPTING synced": per_call(
                bare_contract(bare, sync_claim=True, sync_finish=False), calls
            ),
            "bare contract, all synced": per_call(
                bare_contract(bare, sync_claim=True, sync_finish=True), calls
            ),
            "bare contract, nothing synced": per_call(
                bare_contract(bare, sync_claim=False, sync_finish=False), calls
            ),
            "bare indexed read": per_call(bare_read(bare), calls),
        }
        bare.close()
        # First, on a quiet machine: CPU time counts every thread, the benchmark's own too.
        cpu = cpu_rows(scale)
        measured, lag = safeact_rows(folder, calls)
        rows |= measured
        rows |= growth_rows(folder, calls, sizes)
        measured, notes = peer_rows(folder, calls)
        rows |= measured
        inbox = inbox_figures(folder)
    postgres = postgres_figures(calls)
    rows |= postgres.rows
    with tempfile.TemporaryDirectory() as bytecode:
        imports = {
            "import safeact": import_time("safeact", Path(bytecode)),
            "import attrs, cattrs": import_time("attrs, cattrs", Path(bytecode)),
        }
    agent_ratio, agent_added = agent_figures(scale)
    figures = ratios(rows, sizes) | peer_ratios(rows) | postgres.ratios | agent_ratio
    milliseconds = (
        {
            IMPORT_FIGURE: (imports["import safeact"] - imports["import attrs, cattrs"]) * 1000,
            LAG_FIGURE: lag.p99,
        }
        | agent_added
        | inbox
    )
    microseconds = {name: seconds * 1e6 for name, seconds in cpu.items()}
    judged = judge(figures | milliseconds | microseconds)
    print(f"{'row':66}{'per call':>10}")
    for name, seconds in rows.items():
        print(f"{name:66}{seconds * 1e6:7.1f} µs")
    for name, seconds in cpu.items():
        print(f"{name:66}{seconds * 1e6:7.1f} µs CPU")
    for name, added in (agent_added | inbox).items():
        print(f"{name:66}{added:7.1f} ms")
    print()
    print_figures(figures, judged, lag, sizes)
    if postgres.round_trips:
        trips = postgres.round_trips
        print(
            f"PostgreSQL round trips per call: new key {trips['new key']:.1f}, "
            f"replay {trips['replay']:.1f}, bare contract {trips['bare contract']:.1f}"
        )
        print()
    for name, rate in postgres.calls_per_second.items():
        print(f"{name:66}{rate:6.0f} calls/s")
    print()
    notes = {"safeact": SAFEACT_DURABILITY} | notes | {"PostgreSQL": postgres.note}
    width = max(map(len, notes)) + 2
    for name, note in notes.items():
        print(f"{name:{width}}{note}")
    options.json.write_text(
        json.dumps(
            {
                "seconds_per_call": rows,
                "cpu_seconds_per_call": cpu,
                "agents_p99_added_ms": agent_added,
                "inbox_ms": inbox,
                "ratios": figures,
                "targets": [
                    {
                        "figure": figure,
                        "comparison": target.comparison,
                        "bound": target.bound,
                        "unit": target.unit,
                        "measured": measured,
                        "verdict": verdict,
                    }
                    for figure, target, measured, verdict in judged
                ],
                "ledger_sizes": sizes,
                "event_loop_lag_ms": lag._asdict(),
                "calls_per_second": postgres.calls_per_second,
                "postgres_round_trips_per_call": postgres.round_trips,
                "import_seconds": imports,
                "peers": notes,
                "postgres": postgres.note,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
