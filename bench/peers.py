# The peers are not safeact's dependencies, so mypy mostly runs without them: their modules
# are then Any, and so are their decorators and what they return.
# mypy: disable-error-code="import-not-found, untyped-decorator, no-any-return"
"""Rows for safeact's peers, each doing what safeact's rows do: one action that returns an int.

Each ``*_rows`` function returns the peer's "new key" and "replay" seconds per call and one
line saying how durable the peer ran; or no rows and a line saying why it was skipped
(package not importable, Redis not reachable). Peers run as they ship: none of them can be
set to safeact's durability, so the line says what each one keeps on disk.
"""

import uuid
import warnings
from itertools import count
from pathlib import Path

from bench.timing import per_call, repeat

Rows = dict[str, float]
REDIS_HOST, REDIS_PORT = "127.0.0.1", 6379
HOW_TO_INSTALL = "python3 tasks.py bench --peers installs the peers"


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


def powertools_redis_rows(calls: int) -> tuple[Rows, str]:
    """``idempotent_function`` on the Redis layer; the ``key`` argument is the key."""
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
    client = redis.Redis(
        host=REDIS_HOST, port=REDIS_PORT, decode_responses=True, socket_connect_timeout=1
    )
    try:
        config = client.config_get("appendonly") | client.config_get("appendfsync")
        config |= client.config_get("save")
    except redis.exceptions.ConnectionError:
        return {}, f"skipped: no Redis server at {REDIS_HOST}:{REDIS_PORT}"
    prefix = f"safeact-bench-{uuid.uuid4().hex}"
    with warnings.catch_warnings():
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
        try:
            rows = {
                "Powertools + Redis new key": per_call(
                    repeat(lambda: act(key=f"k{next(keys)}", n=1)), calls
                ),
                "Powertools + Redis replay": per_call(
                    repeat(lambda: act(key="replay-me", n=1)), calls
                ),
            }
        finally:
            # The server is shared: leave none of this run's records behind.
            for written in client.scan_iter(match=f"{prefix}*"):
                client.delete(written)
    return rows, redis_durability(config)


def peer_rows(folder: Path, calls: int) -> tuple[Rows, dict[str, str]]:
    """Every peer's rows, and per peer the line on its durability or why it was skipped."""
    rows: Rows = {}
    notes: dict[str, str] = {}
    for peer, (measured, note) in {
        "effect-ledger": effect_ledger_rows(folder, calls),
        "DBOS Transact": dbos_rows(folder, calls),
        "AWS Powertools + Redis": powertools_redis_rows(calls),
    }.items():
        rows |= measured
        notes[peer] = note
    return rows, notes
