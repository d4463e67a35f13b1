"""What a guarded call costs the ledger: SQLite statements, PostgreSQL round trips.

The owner's outcome is written without reading its row first (DESIGN, "The hot path"):
these pin the statements of a new key and of a replay, so that a read put back in shows
here, and the fallback (a row that moved on) still records where it came from.
"""

import socket

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from safeact import DoubtReason, State, Store, Why, get_store, safe
from safeact._sqlite import SqliteStore
from tests.actions import expire_leases


def test_a_new_key_is_a_read_a_claim_and_an_unread_outcome_on_sqlite(
    traced: tuple[SqliteStore, list[str]],
) -> None:
    """A new key: its read, the claim's transaction, the outcome's; a replay: one read."""
    store, statements = traced

    @safe(store, name="act")
    def act(key: str, n: int) -> int:
        return n

    act("first", 1)  # the tool's first claim also writes its description
    statements.clear()
    act("k", 1)
    new_key = [sql.split()[0] for sql in statements]
    statements.clear()
    act("k", 1)
    replay = [sql.split()[0] for sql in statements]
    assert (new_key, replay) == (
        ["SELECT", "BEGIN", "INSERT", "INSERT", "COMMIT", "BEGIN", "UPDATE", "INSERT", "COMMIT"],
        ["SELECT"],
    )


def test_a_new_key_is_five_round_trips_and_a_replay_one_on_postgres(
    postgres_ledger: str,
) -> None:
    """A read; the claim's BEGIN, then its statements and COMMIT; the outcome's likewise."""
    round_trips = pytest.importorskip(
        "bench.round_trips", reason="bench/ is not in the wheel that the artifact step tests"
    )
    parts = conninfo_to_dict(postgres_ledger)
    server = (str(parts.get("host", "127.0.0.1")), int(str(parts.get("port", 5432))))
    with round_trips.Proxy(lambda: socket.create_connection(server)) as proxy:
        proxied = make_conninfo(postgres_ledger, host="127.0.0.1", port=proxy.port)
        # Another host: its liveness lock is not the one this process's direct sessions hold.
        with get_store(proxied, host="through-a-proxy") as store:

            @safe(store, name="act")
            def act(key: str, n: int) -> int:
                return n

            for warm_up in range(6):  # connections opened, statements prepared
                act(f"warm-{warm_up}", 1)
                act(f"warm-{warm_up}", 1)
            before = proxy.round_trips
            act("k", 1)
            new_key = proxy.round_trips - before
            before = proxy.round_trips
            act("k", 1)
            replay = proxy.round_trips - before
    assert (new_key, replay) == (5, 1)


def test_an_outcome_on_a_row_marked_in_doubt_meanwhile_records_where_it_came_from(
    store: Store,
) -> None:
    """The owner's word replaces a suspicion, and its event says from IN_DOUBT."""
    store._claim("k", "act", "h", attempt_id="a", previous=None)
    expire_leases(store)
    assert store._mark_in_doubt("k", "a", DoubtReason.LEASE_EXPIRED)
    assert store._finish("k", "a", state=State.SUCCEEDED, result=1)
    last = store.history("k")[-1]
    record = store.get("k")
    assert record is not None
    assert (last.from_state, last.to_state, last.why, last.attempt_id, record.state) == (
        State.IN_DOUBT,
        State.SUCCEEDED,
        Why.RAN,
        "a",
        State.SUCCEEDED,
    )
