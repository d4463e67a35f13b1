"""safeact next to its limit (bare sqlite3 at the same durability) and its peers, in one run.

    python -m bench [--quick] [--json PATH]

Every row is measured in this run: the median, over several rounds, of the time per call;
ratios compare rows of the same run, since absolute times on shared machines say little.
Peers (effect-ledger, DBOS, AWS Powertools with Redis) are measured when installed and
skipped with a note otherwise; so are the PostgreSQL rows (bench/postgres.py), when psycopg
is installed and the server at SAFEACT_BENCH_POSTGRES answers. Writes the table to stdout
and every figure to PATH (default bench-results.json).
"""

import argparse
import asyncio
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from itertools import count
from pathlib import Path

from bench.peers import peer_rows
from bench.postgres import postgres_figures
from bench.timing import per_call, repeat
from safeact import Saga, get_store, safe
from safeact._protocol import DoubtReason
from safeact._tables import SCHEMA_VERSION

# What the peers' notes are to be read against.
SAFEACT_DURABILITY = "WAL; ATTEMPTING synced before the action, the result not"


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


def safeact_rows(folder: Path, calls: int) -> dict[str, float]:
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

    def async_new_keys(n: int) -> None:
        async def go() -> None:
            for _ in range(n):
                await act_async(f"a{next(keys)}", 1)

        asyncio.run(go())

    def sagas(n: int) -> None:
        for _ in range(n):
            with Saga(f"saga-{next(keys)}", store) as saga:
                for step in range(3):
                    saga.step(act, step)

    def threads(n: int) -> None:
        per_thread = max(n // 8, 1)

        def worker() -> None:
            for _ in range(per_thread):
                act(f"t{next(keys)}-{threading.get_ident()}", 1)

        workers = [threading.Thread(target=worker) for _ in range(8)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()

    rows = {
        "safeact new key": per_call(new_keys, calls),
        "safeact replay": per_call(repeat(lambda: act("replay-me", 1)), calls),
        "safeact Failed replay": per_call(repeat(lambda: fail("fail-me")), calls),
        "safeact in-doubt key": per_call(repeat(lambda: act("doubt-me", 1)), calls),
        "safeact async new key": per_call(async_new_keys, calls),
        "safeact saga of 3 steps": per_call(sagas, max(calls // 3, 1)),
        "safeact 8 threads, distinct keys (per call)": per_call(threads, calls),
    }
    store.close()
    return rows


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


def import_time(module: str) -> float:
    times = []
    for _ in range(7):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def peer_ratios(rows: dict[str, float]) -> dict[str, float]:
    """How many times slower each measured peer is than safeact, new key and replay."""
    ratios = {}
    for peer, new_key_target in [("effect-ledger", 5), ("DBOS", 10), ("Powertools + Redis", 2)]:
        for call, target in [("new key", new_key_target), ("replay", 5)]:
            if f"{peer} {call}" in rows:
                ratios[f"{peer} / safeact, {call} (target >= {target})"] = (
                    rows[f"{peer} {call}"] / rows[f"safeact {call}"]
                )
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer calls, smaller ledgers")
    parser.add_argument("--json", type=Path, default=Path("bench-results.json"))
    options = parser.parse_args()
    calls = 100 if options.quick else 400
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
        rows |= safeact_rows(folder, calls)
        rows |= growth_rows(folder, calls, sizes)
        measured, notes = peer_rows(folder, calls)
        rows |= measured
    postgres = postgres_figures(calls)
    rows |= postgres.rows
    imports = {
        "import safeact": import_time("safeact"),
        "import attrs, cattrs": import_time("attrs, cattrs"),
    }
    smallest, largest = f"{sizes[0]:,}", f"{sizes[-1]:,}"
    ratios = {
        "new key / bare contract (target <= 1.2)": rows["safeact new key"]
        / rows["bare contract, ATTEMPTING synced"],
        "replay / bare read (target <= 2)": rows["safeact replay"] / rows["bare indexed read"],
        f"new key, {largest} / {smallest} keys (target <= 1.2)": rows[
            f"new key with {largest} keys"
        ]
        / rows[f"new key with {smallest} keys"],
        f"replay, {largest} / {smallest} keys (target <= 1.2)": rows[f"replay with {largest} keys"]
        / rows[f"replay with {smallest} keys"],
        "8 threads / 1 thread, time per call (target <= 1)": rows[
            "safeact 8 threads, distinct keys (per call)"
        ]
        / rows["safeact new key"],
    } | peer_ratios(rows)
    ratios |= postgres.ratios
    extra_import_ms = (imports["import safeact"] - imports["import attrs, cattrs"]) * 1000
    print(f"{'row':55}{'per call':>14}")
    for name, seconds in rows.items():
        print(f"{name:55}{seconds * 1e6:11.1f} µs")
    print()
    for name, ratio in ratios.items():
        print(f"{name:55}{ratio:11.2f}x")
    print(
        f"{'import safeact beyond attrs + cattrs (target <= 30 ms)':55}{extra_import_ms:11.1f} ms"
    )
    if postgres.calls_per_second:
        print()
    for name, rate in postgres.calls_per_second.items():
        print(f"{name:55}{rate:11.0f} calls/s")
    print()
    notes_and_postgres = {"safeact": SAFEACT_DURABILITY} | notes | {"PostgreSQL": postgres.note}
    for name, note in notes_and_postgres.items():
        print(f"{name:24}{note}")
    options.json.write_text(
        json.dumps(
            {
                "seconds_per_call": rows,
                "ratios": ratios,
                "calls_per_second": postgres.calls_per_second,
                "import_seconds": imports,
                "peers": notes,
                "postgres": postgres.note,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
