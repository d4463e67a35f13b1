"""A tool keeps the description of its results in the ledger, for operators' values to be checked.

Written at the tool's first claim through a store, in the claim's own transaction; never
again by that store, so later calls pay nothing for it; replaced when a deploy changes the
return type (the latest deploy's type is what a replay decodes with).
"""

import asyncio

from safeact import Store, get_store, safe
from safeact._shape import shape_text
from safeact._sqlite import SqliteStore
from tests.actions import Receipt


def written(store: Store, tool: str) -> tuple[str, str] | None:
    """The row of ``tool`` in the ledger's tools table: its description and when it was written."""
    rows = store._read("SELECT result_shape, written_at FROM tools WHERE name = ?", (tool,))
    return None if not rows else (str(rows[0][0]), str(rows[0][1]))


def forget(store: Store, tool: str) -> None:
    """Delete ``tool``'s description by hand, as if it had never been written."""
    with store._transaction(sync=False) as db:
        db.execute("DELETE FROM tools WHERE name = ?", (tool,))


def test_a_tools_first_claim_writes_the_description_of_its_results(store: Store) -> None:
    """After a tool's first call, the ledger holds its return type's description."""

    @safe(store, name="send")
    def send(key: str, to: str) -> Receipt:
        return Receipt(to, 5)

    assert written(store, "send") is None
    send("k-1", "bob")
    row = written(store, "send")
    assert row is not None
    assert row[0] == shape_text(Receipt)
    assert store._result_shape("send") == shape_text(Receipt)


def test_a_replay_writes_nothing(store: Store) -> None:
    """A call that replays claims nothing, so it writes no description either."""

    @safe(store, name="send")
    def send(key: str, to: str) -> Receipt:
        return Receipt(to, 5)

    send("k-1", "bob")
    forget(store, "send")
    send("k-1", "bob")
    assert written(store, "send") is None


def test_a_store_writes_a_tools_description_once(store: Store) -> None:
    """Later claims of the tool through the same store do not write it again, even if it went."""

    @safe(store, name="send")
    def send(key: str, to: str) -> Receipt:
        return Receipt(to, 5)

    send("k-1", "bob")
    forget(store, "send")
    send("k-2", "bob")
    assert written(store, "send") is None


def test_each_tool_of_a_store_writes_its_own_description(store: Store) -> None:
    """A second tool on the same store writes its own description at its own first claim."""

    @safe(store, name="send")
    def send(key: str, to: str) -> Receipt:
        return Receipt(to, 5)

    @safe(store, name="count")
    def count(key: str) -> list[int]:
        return [1]

    send("k-1", "bob")
    count("c-1")
    assert [row and row[0] for row in (written(store, "send"), written(store, "count"))] == [
        shape_text(Receipt),
        shape_text(list[int]),
    ]


def test_another_store_with_the_same_description_leaves_the_row_as_it_was(any_ledger: str) -> None:
    """A process that finds its tool's description unchanged does not rewrite it (nor its time)."""

    def charge(key: str) -> int:
        return 1

    with get_store(any_ledger) as first:
        safe(first, name="charge")(charge)("k-1")
        before = written(first, "charge")
    with get_store(any_ledger) as second:
        safe(second, name="charge")(charge)("k-2")
        assert written(second, "charge") == before


def test_a_changed_return_type_replaces_the_description(any_ledger: str) -> None:
    """A deploy whose tool returns another type replaces the description: replays decode so."""
    with get_store(any_ledger) as old:

        @safe(old, name="charge")
        def charge(key: str) -> int:
            return 1

        charge("k-1")
    with get_store(any_ledger) as new:

        @safe(new, name="charge")
        def charged(key: str) -> str:
            return "one"

        charged("k-2")
        assert new._result_shape("charge") == shape_text(str)


def test_an_async_tools_first_claim_writes_its_description(store: Store) -> None:
    """An async tool claims through the same path, and writes its description too."""

    @safe(store, name="fetch")
    async def fetch(key: str) -> dict[str, int]:
        return {"a": 1}

    asyncio.run(fetch("k-1"))
    assert store._result_shape("fetch") == shape_text(dict[str, int])


def test_only_the_first_claim_runs_a_statement_for_the_description(
    traced: tuple[SqliteStore, list[str]],
) -> None:
    """The first claim adds one statement to its transaction; later claims add none."""
    store, statements = traced

    @safe(store, name="send")
    def send(key: str, to: str) -> Receipt:
        return Receipt(to, 5)

    per_call = []
    for key in ("k-1", "k-2", "k-3"):
        statements.clear()
        send(key, "bob")
        per_call.append([sql for sql in statements if "tools" in sql])
    assert [len(found) for found in per_call] == [1, 0, 0]
    assert per_call[0][0].startswith("INSERT INTO tools")
