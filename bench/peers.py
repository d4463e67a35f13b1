# The peers are not safeact's dependencies, so mypy mostly runs without them: their modules
# are then Any, and so are their decorators and what they return.
# mypy: disable-error-code="import-not-found, untyped-decorator, no-any-return"
"""Rows for safeact's peers, each doing what safeact's rows do: one action that returns an int.

Each ``*_rows`` function returns the peer's "new key" and "replay" seconds per call and one
line saying how durable the peer ran; or no rows and a line saying why it was skipped
(package not importable, Redis not reachable). Peers run as they ship: none of them can be
set to safeact's durability, so the line says what each one keeps on disk. Powertools is
measured twice: against the machine's Redis on REDIS_PORT, as it is set up, and against a
``redis-server`` this run starts, which syncs every write before it answers.
"""

import shutil
import socket
import subprocess
import time
import uuid
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from itertools import count
from pathlib import Path

from bench.timing import per_call, repeat

Rows = dict[str, float]
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
REDIS_START_SECONDS = 10
HOW_TO_INSTALL = "python3 tasks.py bench --peers installs the peers"


class NoRedisError(Exception):
    """The Redis server of this run's own could not be started; the message says why."""


def effect_ledger_rows(folder: Path, calls: int) -> tuple[Rows, str]:
    """``EffectExecutor.execute`` on its SQLite store; the operation id is the key."""
    try:
        from effect_ledger import EffectExecutor
    except ImportError:
        return {}, f"skipped: effect_ledger is not installed ({HOW_TO_INSTALL})"
    executor = EffectExecutor(folder / "effect-ledger.db", scope="bench")
    keys = count()

    def action(operation: object) -> int:
        return 1

    executor.execute("replay-me", "bench.act", {"n": 1}, action)
    rows = {
        "effect-ledger new key": per_call(
            repeat(lambda: executor.execute(f"k{next(keys)}", "bench.act", {"n": 1}, action)),
            calls,
        ),
        "effect-ledger replay": per_call(
            repeat(lambda: executor.execute("replay-me", "bench.act", {"n": 1}, action)), calls
        ),
    }
    return rows, "rollback journal, synchronous=FULL on every commit: claim and result synced"


def dbos_rows(folder: Path, calls: int) -> tuple[Rows, str]:
    """A DBOS workflow of one step on a SQLite system database; the workflow id is the key."""
    try:
        from dbos import DBOS, SetWorkflowID
    except ImportError:
        return {}, f"skipped: dbos is not installed ({HOW_TO_INSTALL})"
    DBOS(
        config={
            "name": "safeact-bench",
            "system_database_url": f"sqlite:///{folder / 'dbos.sqlite'}",
            "log_level": "WARNING",
        }
    )

    # DBOS registers workflows and steps as they are decorated, which must precede launch.
    @DBOS.step()
    def act(n: int) -> int:
        return n

    @DBOS.workflow()
    def workflow(n: int) -> int:
        return act(n)

    def run_as(key: str) -> int:
        with SetWorkflowID(key):
            return workflow(1)

    DBOS.launch()
    keys = count()
    try:
        run_as("replay-me")
        rows = {
            "DBOS new key": per_call(repeat(lambda: run_as(f"k{next(keys)}")), calls),
            "DBOS replay": per_call(repeat(lambda: run_as("replay-me")), calls),
        }
    finally:
        DBOS.destroy(destroy_registry=True)
    return rows, "rollback journal, SQLite's default synchronous=FULL: every write synced"


def redis_durability(config: dict[str, str]) -> str:
    """What a Redis server with this CONFIG keeps on disk, as a note for its rows."""
    if config["appendonly"] == "yes" and config["appendfsync"] == "always":
        return "Redis on loopback, appendfsync always: every write synced"
    if config["appendonly"] == "yes" or config["save"]:
        return "Redis on loopback, saving in the background: no write synced before it returns"
    return "Redis on loopback keeps nothing on disk: nothing survives its restart"


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on, as the system picks one."""
    with socket.create_server((REDIS_HOST, 0)) as probe:
        port: int = probe.getsockname()[1]
        return port


def answers_ping(port: int) -> bool:
    """Whether a Redis server on ``port`` answers PING (no client library needed)."""
    try:
        with socket.create_connection((REDIS_HOST, port), timeout=1) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def synced_redis(folder: Path) -> Iterator[int]:
    """A ``redis-server`` of this run's own, syncing every write; gives its port, then ends it.

    Append-only file in ``folder``, ``appendfsync always``, no snapshots: a write is on
    disk before Redis answers it, as safeact's ATTEMPTING is before the action runs.

    Raises:
        NoRedisError: redis-server is not on PATH, exits, or does not answer PING within
            REDIS_START_SECONDS.

    """
    executable = shutil.which("redis-server")
    if executable is None:
        raise NoRedisError("redis-server is not on PATH")
    port = free_port()
    arguments = ["--port", str(port), "--bind", REDIS_HOST, "--dir", str(folder)]
    arguments += ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
    server = subprocess.Popen(
        [executable, *arguments],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + REDIS_START_SECONDS
        while not answers_ping(port):
            if server.poll() is not None:
                raise NoRedisError(f"redis-server on port {port} exited ({server.returncode})")
            if time.monotonic() > deadline:
                raise NoRedisError(f"redis-server did not answer in {REDIS_START_SECONDS} s")
            time.sleep(0.05)
        yield port
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def powertools_redis_rows(
    calls: int, peer: str, server: AbstractContextManager[int]
) -> tuple[Rows, str]:
    """``idempotent_function`` on the Redis layer; the ``key`` argument is the key.

    The rows are named after ``peer``; ``server`` gives the port of the Redis to use, and
    is entered only once Powertools is known to be importable.
    """
    try:
        import redis
        from aws_lambda_powertools.utilities.idempotency import (
            IdempotencyConfig,
            idempotent_function,
        )
        from aws_lambda_powertools.utilities.idempotency.persistence.cache import (
            CachePersistenceLayer,
        )
    except ImportError:
        return {}, f"skipped: aws_lambda_powertools or redis is not installed ({HOW_TO_INSTALL})"
    with ExitStack() as stack:
        try:
            port = stack.enter_context(server)
        except NoRedisError as exc:
            return {}, f"skipped: {exc}"
        client = redis.Redis(
            host=REDIS_HOST, port=port, decode_responses=True, socket_connect_timeout=1
        )
        stack.callback(client.close)
        try:
            config = client.config_get("appendonly") | client.config_get("appendfsync")
            config |= client.config_get("save")
        except redis.exceptions.ConnectionError:
            return {}, f"skipped: no Redis server at {REDIS_HOST}:{port}"
        prefix = f"safeact-bench-{uuid.uuid4().hex}"

        def forget_this_run() -> None:
            # The server may be shared: leave none of this run's records behind.
            for written in client.scan_iter(match=f"{prefix}*"):
                client.delete(written)

        stack.callback(forget_this_run)
        stack.enter_context(warnings.catch_warnings())
        # The Redis layer is deprecated in name only (CachePersistenceLayer is an alias of
        # it). Outside Lambda there is no remaining time to bound an in-progress record by,
        # so one lasts until the record expires (an hour), which no row here reaches.
        warnings.filterwarnings("ignore", "RedisCachePersistenceLayer", DeprecationWarning)
        warnings.filterwarnings("ignore", "Couldn't determine the remaining time", UserWarning)
        layer = CachePersistenceLayer(client=client)

        # No local cache, so a replay reads Redis as another process would have to.
        @idempotent_function(
            data_keyword_argument="key",
            persistence_store=layer,
            config=IdempotencyConfig(use_local_cache=False),
            key_prefix=prefix,
        )
        def act(key: str, n: int) -> int:
            return n

        keys = count()
        act(key="replay-me", n=1)
        rows = {
            f"{peer} new key": per_call(repeat(lambda: act(key=f"k{next(keys)}", n=1)), calls),
            f"{peer} replay": per_call(repeat(lambda: act(key="replay-me", n=1)), calls),
        }
    return rows, redis_durability(config)


def peer_rows(folder: Path, calls: int) -> tuple[Rows, dict[str, str]]:
    """Every peer's rows, and per peer the line on its durability or why it was skipped."""
    rows: Rows = {}
    notes: dict[str, str] = {}
    for peer, (measured, note) in {
        "effect-ledger": effect_ledger_rows(folder, calls),
        "DBOS Transact": dbos_rows(folder, calls),
        "AWS Powertools + Redis": powertools_redis_rows(
            calls, "Powertools + Redis", nullcontext(REDIS_PORT)
        ),
        "AWS Powertools + Redis, own server": powertools_redis_rows(
            calls, "Powertools + Redis with appendfsync always", synced_redis(folder)
        ),
    }.items():
        rows |= measured
        notes[peer] = note
    return rows, notes
