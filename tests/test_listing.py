"""Listing a ledger's keys: each filter of Store.records, and Store.counts."""

import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from safeact import DoubtReason, Record, Saga, State, Store, safe


def fill(store: Store) -> None:
    """Keys of tools "a" and "b": done, failed, then (later) attempting and in doubt."""
    store._claim("done", "a", "h", attempt_id="1", previous=None)
    assert store._finish("done", "1", state=State.SUCCEEDED, result=1)
    store._claim("failed", "b", "h", attempt_id="2", previous=None)
    assert store._finish("failed", "2", state=State.FAILED, error_type="E", error_message="x")
    time.sleep(0.01)  # the later keys are attempted strictly after the earlier ones
    store._claim("running", "a", "h", attempt_id="3", previous=None)
    store._claim("doubtful", "b", "h", attempt_id="4", previous=None)
    assert store._mark_in_doubt("doubtful", "4", DoubtReason.LEASE_EXPIRED)


def keys(records: list[Record]) -> set[str]:
    """The keys of these records."""
    return {record.key for record in records}


def test_records_without_a_filter_lists_every_key(store: Store) -> None:
    """No filter lists all keys, oldest attempt first."""
    fill(store)
    assert [r.key for r in store.records()] == ["done", "failed", "running", "doubtful"]


def test_records_of_a_state_lists_only_those_keys(store: Store) -> None:
    """state= keeps only the keys in that state."""
    fill(store)
    assert ({"failed"}, {"doubtful"}) == (
        keys(store.records(state=State.FAILED)),
        keys(store.records(state=State.IN_DOUBT)),
    )


def test_records_of_a_tool_lists_only_its_keys(store: Store) -> None:
    """tool= keeps only that tool's keys."""
    fill(store)
    assert ({"done", "running"}, {"failed", "doubtful"}, set()) == (
        keys(store.records(tool="a")),
        keys(store.records(tool="b")),
        keys(store.records(tool="c")),
    )


def test_records_since_lists_only_keys_attempted_then_or_later(store: Store) -> None:
    """since= keeps the keys attempted at or after that moment."""
    fill(store)
    running = store.get("running")
    assert running is not None
    assert {"running", "doubtful"} == keys(store.records(since=running.attempted_at))


def test_unsettled_records_are_the_attempting_and_in_doubt_keys(store: Store) -> None:
    """unsettled=True keeps the ATTEMPTING and IN_DOUBT keys, and combines with tool=."""
    fill(store)
    assert ({"running", "doubtful"}, {"doubtful"}) == (
        keys(store.records(unsettled=True)),
        keys(store.records(unsettled=True, tool="b")),
    )


def test_counts_gives_each_tools_keys_per_state(store: Store) -> None:
    """counts() maps (tool, state) to its number of keys."""
    fill(store)
    store._claim("done-too", "a", "h", attempt_id="5", previous=None)
    assert store._finish("done-too", "5", state=State.SUCCEEDED, result=2)
    store._claim("running-too", "a", "h", attempt_id="6", previous=None)
    assert store.counts() == {
        ("a", State.SUCCEEDED): 2,
        ("a", State.ATTEMPTING): 2,
        ("b", State.FAILED): 1,
        ("b", State.IN_DOUBT): 1,
    }


def test_the_kept_counts_follow_every_change_of_a_key(store: Store) -> None:
    """Settle, fail, a release and its rerun, a resolve, a purge: counts equal the rows read.

    ``counts`` reads the settled keys' counts the ledger's triggers keep; ``records`` reads
    every row, so the two agree only if each change was counted.
    """

    def read_from_rows() -> dict[tuple[str, State], int]:
        return dict(Counter((record.tool, record.state) for record in store.records()))

    plan = {"declined": "fail", "stopped": "stop", "again": "stop"}  # the others pay

    @safe(store, name="t.pay")
    def pay(key: str) -> int:
        if plan.get(key) == "fail":
            raise ValueError(key)
        if plan.get(key) == "stop":
            raise KeyboardInterrupt
        return 1

    @safe(store, name="t.mail")
    def mail(key: str) -> int:
        return 2

    pay("paid")
    pay("declined")
    mail("mailed")
    for key in ("stopped", "again"):
        with pytest.raises(KeyboardInterrupt):
            pay(key)
    assert store.counts() == read_from_rows()
    store.resolve("stopped", happened=True, result=1)
    store.resolve("again", happened=False, force=True)
    assert store.counts() == read_from_rows()
    del plan["again"]
    pay("again")
    assert store.counts() == read_from_rows()
    assert store.counts()[("t.pay", State.SUCCEEDED)] == 3
    store.purge(datetime.now(UTC) + timedelta(seconds=1), states=(State.FAILED,))
    assert store.counts() == read_from_rows()
    store.purge(datetime.now(UTC) + timedelta(seconds=1))
    assert store.counts() == read_from_rows() == {}


def test_record_batches_read_every_key_once_in_order_whatever_the_ties(store: Store) -> None:
    """A listing taken 3 rows at a time is ``scan_records``: every key once, in its order.

    Keys attempted at one same time included, in key order.
    """
    for n in range(10):
        store._claim(f"k{n}", "a" if n % 2 else "b", "h", attempt_id=str(n), previous=None)
    with store._transaction(sync=False) as db:
        db.execute(
            "UPDATE calls SET attempted_at = (SELECT min(attempted_at) FROM calls) "
            "WHERE key IN ('k7', 'k2', 'k5', 'k0', 'k9')"
        )
    for tool in (None, "a"):
        batches = list(store._record_batches(tool=tool, batch=3))
        assert [len(found) for found in batches] == ([3, 3, 3, 1] if tool is None else [3, 2])
        listed = [found for batch in batches for found in batch]
        assert listed == store.scan_records(tool=tool)
        assert len({getattr(r, "key", None) for r in listed}) == len(listed)


def test_saga_batches_read_every_saga_once_stuck_rollbacks_first(store: Store) -> None:
    """Sagas taken 2 at a time are ``scan_sagas``: each once, a COMPENSATING one first.

    Sagas started at one same time included, in id order.
    """

    @safe(store, name="pay")
    def pay(key: str) -> int:
        return 1

    for n in range(5):
        with Saga(f"s{n}", store) as saga:
            saga.step(pay)
    with store._transaction(sync=False) as db:
        db.execute("UPDATE sagas SET state = 'compensating' WHERE saga_id = 's3'")
        db.execute(
            "UPDATE sagas SET started_at = (SELECT min(started_at) FROM sagas) "
            "WHERE saga_id IN ('s4', 's1', 's2')"
        )
    batches = list(store._saga_batches(batch=2))
    listed = [found for batch in batches for found in batch]
    assert [len(found) for found in batches] == [2, 2, 1]
    assert listed == store.scan_sagas()
    assert getattr(listed[0], "saga_id", None) == "s3"
    assert len({getattr(s, "saga_id", None) for s in listed}) == 5


def test_a_listing_asks_about_each_owner_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keys one process holds are one question about its fate, whatever their leases.

    On PostgreSQL, each question is a query.
    """
    for n in range(3):
        store._claim(f"k{n}", "a", "h", attempt_id=str(n), previous=None)
        with store._transaction(sync=False) as db:
            db.execute(
                "UPDATE calls SET lease_until = ? WHERE key = ?",
                (f"2999-01-0{n + 1}T00:00:00.000000+00:00", f"k{n}"),
            )
    asked: list[str] = []
    judge = store._owner_gone

    def counted(record: Record) -> bool:
        asked.append(record.key)
        return judge(record)

    monkeypatch.setattr(store, "_owner_gone", counted)
    assert [r.state for r in store.records()] == [State.ATTEMPTING] * 3
    assert len(asked) == 1


def test_a_listing_judges_an_owner_of_another_boot_by_each_keys_lease(store: Store) -> None:
    """For an owner of another boot the lease is part of the proof: judged per lease.

    A lease that ended before this boot began is a reboot (crashed); one that outlived it
    is a clone's, never proof.
    """
    for key, lease in (("rebooted", "2000-01-01"), ("cloned", "2999-01-01")):
        store._claim(key, "a", "h", attempt_id=key, previous=None)
        with store._transaction(sync=False) as db:
            db.execute(
                "UPDATE calls SET owner_boot = 'boot-a', lease_until = ? WHERE key = ?",
                (f"{lease}T00:00:00.000000+00:00", key),
            )
    reasons = {r.key: r.doubt_reason for r in store.records()}
    assert reasons["rebooted"] is DoubtReason.CRASHED
    assert reasons["cloned"] is not DoubtReason.CRASHED
