"""Rows for safeact on PostgreSQL, next to the same contract written directly with psycopg.

Each run works in a schema of its own on the server at ``SAFEACT_BENCH_POSTGRES`` (default
``postgresql://postgres@127.0.0.1:5432/test``), created, migrated and dropped here. The rows
are skipped with a note when psycopg is not importable or the server cannot be reached.

The bare contract is the least a hand-written ledger needs, on two autocommit connections:
``INSERT`` the key as attempting on one at ``synchronous_commit = on`` (the claim is on the
server's disk before the action runs), act, then ``UPDATE`` it to succeeded on the other at
``synchronous_commit = off``, as safeact commits an outcome: one round trip each.

Round trips per call are counted through a proxy (bench/round_trips.py) in front of the
same server, by a store and a bare contract of their own; every timing is taken on direct
connections.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import socket
import threading
import uuid
from contextlib import ExitStack
from functools import partial
from itertools import count
from typing import TYPE_CHECKING, Any, NamedTuple

from bench.round_trips import Proxy
from bench.timing import per_call, repeat, shares
from safeact import get_store, safe

if TYPE_CHECKING:
    from collections.abc import Callable
    from multiprocessing.connection import Connection

    import psycopg

Rows = dict[str, float]
SERVER = os.environ.get("SAFEACT_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
WORKERS = 8
ROUND_TRIP_CALLS = 20
BARE_TABLE = "CREATE TABLE bare_calls (key TEXT PRIMARY KEY, state TEXT NOT NULL, result TEXT)"


class Figures(NamedTuple):
    """What the PostgreSQL part of the run measured, or only the note saying why not."""

    rows: Rows
    """Seconds per call, as every other row of the benchmark."""
    ratios: Rows
    calls_per_second: Rows
    round_trips: Rows
    """Network round trips per call: safeact's new key and replay, the bare contract's."""
    note: str
    """The server and its durability, or why the rows were skipped."""


def bare_contract(
    claims: psycopg.Connection[Any], outcomes: psycopg.Connection[Any]
) -> Callable[[int], None]:
    """Record-before-execute written directly: INSERT attempting, act, UPDATE succeeded."""
    prefix, keys = uuid.uuid4().hex, count()

    def run(calls: int) -> None:
        for _ in range(calls):
            key = f"{prefix}-{next(keys)}"
            claims.execute("INSERT INTO bare_calls VALUES (%s, 'attempting', NULL)", (key,))
            result = json.dumps(len(key))  # the action
            outcomes.execute(
                "UPDATE bare_calls SET state = 'succeeded', result = %s WHERE key = %s",
                (result, key),
            )

    return run


def bare_read(connection: psycopg.Connection[Any]) -> Callable[[int], None]:
    """An indexed read of one settled key, on an autocommit connection: one round trip."""
    connection.execute("INSERT INTO bare_calls VALUES ('read-me', 'succeeded', '7')")

    def run(calls: int) -> None:
        for _ in range(calls):
            row = connection.execute(
                "SELECT result FROM bare_calls WHERE key = %s", ("read-me",)
            ).fetchone()
            assert row is not None
            json.loads(row[0])

    return run


def bare_connections(dsn: str) -> tuple[psycopg.Connection[Any], psycopg.Connection[Any]]:
    """One autocommit connection that commits synchronously, one that does not."""
    import psycopg  # noqa: PLC0415 - optional, imported once psycopg is known to be there

    claims = psycopg.connect(dsn, autocommit=True)
    outcomes = psycopg.connect(dsn, autocommit=True)
    claims.execute("SET synchronous_commit = on")
    outcomes.execute("SET synchronous_commit = off")
    return claims, outcomes


def in_threads(runs: list[Callable[[int], None]]) -> Callable[[int], None]:
    """``calls`` calls split over as many threads as ``runs``, each running its share."""

    def go(calls: int) -> None:
        workers = [
            threading.Thread(target=run, args=(share,))
            for run, share in zip(runs, shares(calls, len(runs)), strict=True)
        ]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()

    return go


def bare_threads(dsn: str, stack: ExitStack) -> Callable[[int], None]:
    """The bare contract in WORKERS threads, each on a connection pair of its own."""
    runs = []
    for _ in range(WORKERS):
        claims, outcomes = bare_connections(dsn)
        stack.callback(claims.close)
        stack.callback(outcomes.close)
        runs.append(bare_contract(claims, outcomes))
    return in_threads(runs)


def process_worker(dsn: str, commands: Connection) -> None:
    """In a process of its own: open a store, then run new keys as many as told, until None."""
    store = get_store(dsn)
    prefix, keys = uuid.uuid4().hex, count()

    @safe(store, name="bench.processes")
    def act(key: str, n: int) -> int:
        return n

    act(f"{prefix}-warm", 1)  # the first claim opens this process's liveness session
    commands.send("ready")
    while (calls := commands.recv()) is not None:
        for _ in range(calls):
            act(f"{prefix}-{next(keys)}", 1)
        commands.send("done")
    store.close()


def in_processes(dsn: str, stack: ExitStack) -> Callable[[int], None]:
    """``calls`` new keys split over WORKERS processes, each with a store of its own."""
    spawn = multiprocessing.get_context("spawn")
    pipes = []
    for _ in range(WORKERS):
        mine, theirs = spawn.Pipe()
        process = spawn.Process(target=process_worker, args=(dsn, theirs), daemon=True)
        process.start()
        theirs.close()  # so that a worker that died is an EOFError here, not a hang
        pipes.append(mine)
        stack.callback(process.join, 30)
        stack.callback(mine.send, None)
    for pipe in pipes:
        pipe.recv()

    def go(calls: int) -> None:
        for pipe, share in zip(pipes, shares(calls, WORKERS), strict=True):
            pipe.send(share)
        for pipe in pipes:
            pipe.recv()

    return go


def measure(dsn: str, calls: int) -> tuple[Rows, Rows]:
    """The rows in seconds per call, and the throughputs in calls per second."""
    rows: Rows = {}
    with ExitStack() as stack:
        claims, outcomes = bare_connections(dsn)
        stack.callback(claims.close)
        stack.callback(outcomes.close)
        rows["PostgreSQL bare contract, ATTEMPTING synced"] = per_call(
            bare_contract(claims, outcomes), calls
        )
        rows["PostgreSQL bare indexed read"] = per_call(bare_read(claims), calls)
        threads = bare_threads(dsn, stack)
        threads(WORKERS)  # every connection used once before the rounds
        rows[f"PostgreSQL bare contract, {WORKERS} threads (per call)"] = per_call(threads, calls)

    store = get_store(dsn)
    keys = count()

    @safe(store, name="bench.act")
    def act(key: str, n: int) -> int:
        return n

    def new_keys(n: int) -> None:
        for _ in range(n):
            act(f"k{next(keys)}-{threading.get_ident()}", 1)

    try:
        act("replay-me", 1)
        rows["PostgreSQL safeact new key"] = per_call(new_keys, calls)
        rows["PostgreSQL safeact replay"] = per_call(repeat(lambda: act("replay-me", 1)), calls)
        threads = in_threads([new_keys] * WORKERS)
        threads(WORKERS * 4)  # the pool grows to its size before the rounds
        rows[f"PostgreSQL safeact {WORKERS} threads, distinct keys"] = per_call(threads, calls)
    finally:
        store.close()

    with ExitStack() as stack:
        rows[f"PostgreSQL safeact {WORKERS} processes, distinct keys"] = per_call(
            in_processes(dsn, stack), calls
        )

    throughput = {
        "PostgreSQL bare contract, 1 connection pair": 1
        / rows["PostgreSQL bare contract, ATTEMPTING synced"],
        f"PostgreSQL bare contract, {WORKERS} threads": 1
        / rows[f"PostgreSQL bare contract, {WORKERS} threads (per call)"],
        "PostgreSQL safeact, 1 worker": 1 / rows["PostgreSQL safeact new key"],
        f"PostgreSQL safeact, {WORKERS} threads": 1
        / rows[f"PostgreSQL safeact {WORKERS} threads, distinct keys"],
        f"PostgreSQL safeact, {WORKERS} processes": 1
        / rows[f"PostgreSQL safeact {WORKERS} processes, distinct keys"],
    }
    return rows, throughput


def connect_to(host: str, port: int) -> socket.socket:
    """A connection to the server at ``host``: TCP, or libpq's socket when ``host`` is a folder."""
    if not host.startswith("/"):
        return socket.create_connection((host, port))
    unix = socket.socket(socket.AF_UNIX)
    with ExitStack() as on_failure:
        on_failure.callback(unix.close)
        unix.connect(f"{host}/.s.PGSQL.{port}")
        on_failure.pop_all()
    return unix


def round_trips(dsn: str, server: Callable[[], socket.socket]) -> Rows:
    """Network round trips per call: safeact's new key and replay, and the bare contract's.

    Counted by a Proxy in front of ``server``, through which a store and a bare contract of
    their own connect, over ROUND_TRIP_CALLS calls each, after as many that open the
    connections and let psycopg prepare the statements it sees repeated (an extra round
    trip at a statement's fifth use). The store names another host: its liveness lock is
    then not the one this process holds on its direct connections, which a second session
    would wait for.
    """
    from psycopg.conninfo import make_conninfo  # noqa: PLC0415 - psycopg is optional

    with Proxy(server) as proxy, ExitStack() as stack:
        proxied = make_conninfo(dsn, host="127.0.0.1", hostaddr="127.0.0.1", port=proxy.port)
        store = get_store(proxied, host="safeact-bench-through-a-proxy")
        stack.callback(store.close)
        claims, outcomes = bare_connections(proxied)
        stack.callback(claims.close)
        stack.callback(outcomes.close)
        prefix, keys = uuid.uuid4().hex, count()

        @safe(store, name="bench.round_trips")
        def act(key: str, n: int) -> int:
            return n

        trips: Rows = {}
        for name, run in {
            "new key": repeat(lambda: act(f"{prefix}-{next(keys)}", 1)),
            "replay": repeat(lambda: act(f"{prefix}-replay-me", 1)),  # its first is a new key
            "bare contract": bare_contract(claims, outcomes),
        }.items():
            run(ROUND_TRIP_CALLS)
            before = proxy.round_trips
            run(ROUND_TRIP_CALLS)
            trips[name] = (proxy.round_trips - before) / ROUND_TRIP_CALLS
    return trips


def ratios(rows: Rows, throughput: Rows) -> Rows:
    """The PostgreSQL ratios, named as bench/targets.py names those that have a target."""
    one = throughput["PostgreSQL safeact, 1 worker"]
    bare = (
        throughput[f"PostgreSQL bare contract, {WORKERS} threads"]
        / throughput["PostgreSQL bare contract, 1 connection pair"]
    )
    return {
        "PostgreSQL new key / bare two-statement contract": rows["PostgreSQL safeact new key"]
        / rows["PostgreSQL bare contract, ATTEMPTING synced"],
        "PostgreSQL replay / bare read": rows["PostgreSQL safeact replay"]
        / rows["PostgreSQL bare indexed read"],
        f"PostgreSQL {WORKERS} workers as threads, calls per second / one": throughput[
            f"PostgreSQL safeact, {WORKERS} threads"
        ]
        / one,
        f"PostgreSQL {WORKERS} workers as processes, calls per second / one": throughput[
            f"PostgreSQL safeact, {WORKERS} processes"
        ]
        / one,
        f"PostgreSQL bare, {WORKERS} threads / 1, calls per second": bare,
        # Near the floor: safeact's workers should scale as the server lets the bare
        # contract scale on the same machine, whatever that is.
        f"PostgreSQL {WORKERS} processes' scaling / the bare contract's": throughput[
            f"PostgreSQL safeact, {WORKERS} processes"
        ]
        / one
        / bare,
    }


def show(connection: psycopg.Connection[Any], setting: str) -> str:
    row = connection.execute(f"SHOW {setting}").fetchone()
    return "?" if row is None else str(row[0])


def postgres_figures(calls: int) -> Figures:
    """The PostgreSQL rows, in a schema of this run's own; none, and why, if there is no server."""
    try:
        import psycopg  # noqa: PLC0415 - the rows are optional, as psycopg is

        from safeact.postgres import migrate_postgres  # noqa: PLC0415 - needs psycopg
    except ImportError:
        return Figures({}, {}, {}, {}, "skipped: psycopg is not installed (safeact[postgres])")
    try:
        admin = psycopg.connect(SERVER, autocommit=True, connect_timeout=3)
    except psycopg.Error as exc:
        why = str(exc).strip().splitlines()[:1] or [type(exc).__name__]
        where = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", SERVER)
        return Figures({}, {}, {}, {}, f"skipped: no PostgreSQL server at {where} ({why[0]})")
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with admin:
        version, fsync = show(admin, "server_version"), show(admin, "fsync")
        host, port = admin.info.host, admin.info.port
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            separator = "&" if "?" in SERVER else "?"
            dsn = f"{SERVER}{separator}options=-csearch_path%3D{schema}"
            migrate_postgres(dsn)
            with psycopg.connect(dsn, autocommit=True) as connection:
                connection.execute(BARE_TABLE)
            rows, throughput = measure(dsn, calls)
            trips = round_trips(dsn, partial(connect_to, host, port))
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")
    note = (
        f"PostgreSQL {version.split()[0]} at {host}, fsync={fsync}: "
        "ATTEMPTING committed with synchronous_commit on, the result with it off "
        "(the bare contract too)"
    )
    return Figures(rows, ratios(rows, throughput), throughput, trips, note)
