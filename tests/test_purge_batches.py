"""A purge of many keys: bounded transactions, claims between them, a kill survived.

Real processes: the purge runs in one (``tests/operator_child.py purge``), claims in others,
and a SIGKILL stops a purge inside a transaction, half way through.
"""

import json
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from safeact import DoubtReason, Event, Record, Saga, Why, get_store, safe
from safeact._protocol import utc_now
from tests.big_ledger import copy_key
from tests.processes import TIMEOUT, run_python

CHILD = Path(__file__).with_name("operator_child.py")

OLD = "2026-01-01T00:00:00.000000+00:00"
"""When the copied keys a purge takes finished."""


def purge(location: str, before: datetime, *options: str) -> subprocess.CompletedProcess[str]:
    """Run a purge in a process of its own, to its end or its death."""
    return run_python(CHILD, "purge", location, before.isoformat(), *options)


def ledger_with_kept_keys(location: str) -> tuple[list[str], list[str], datetime]:
    """30 keys that finished before a cut-off, and keys a purge must keep; and the cut-off.

    Kept: a key in doubt from before the cut-off, and keys that finished after it.
    """
    with get_store(location) as store:

        @safe(store, name="pay")
        def pay(key: str) -> int:
            return 1

        old = [f"old-{n:02}" for n in range(30)]
        for key in old:
            pay(key)
        digest = pay._digest("doubted", (), {})
        assert store._claim("doubted", pay.name, digest, attempt_id="d", previous=None)
        store._mark_in_doubt("doubted", "d", DoubtReason.INTERRUPTED)
        cutoff = utc_now()
        for key in ("new-1", "new-2"):
            pay(key)
    return old, ["doubted", "new-1", "new-2"], cutoff


def snapshot(location: str, keys: list[str]) -> dict[str, tuple[Record | None, list[Event]]]:
    """Each key's record and whole history."""
    with get_store(location) as store:
        return {key: (store._stored(key), store.history(key)) for key in keys}


def test_a_purge_killed_half_way_and_run_again_keeps_every_key_and_event_once(
    any_ledger: str,
) -> None:
    """A purge SIGKILLed inside its third transaction, then run again: nothing lost or doubled.

    The kill leaves two whole batches removed; the re-run removes the rest. Every kept key
    is as it was, every event is there once, with one ``purged`` event per purged key.
    """
    old, kept, cutoff = ledger_with_kept_keys(any_ledger)
    before = snapshot(any_ledger, old + kept)

    killed = purge(any_ledger, cutoff, "--batch", "10", "--kill-at", "purging", "--nth", "3")

    assert killed.returncode == -signal.SIGKILL, killed.stderr
    halfway = snapshot(any_ledger, old + kept)
    gone = [key for key in old if halfway[key][0] is None]
    assert gone == old[:20]  # two batches, in key order; the third rolled back whole
    rerun = purge(any_ledger, cutoff, "--batch", "10")
    assert rerun.returncode == 0, rerun.stderr
    assert json.loads(rerun.stdout)["keys"] == old[20:]
    after = snapshot(any_ledger, old + kept)
    for key in kept:
        assert after[key] == before[key]
    for key in old:
        record, events = after[key]
        assert record is None
        assert events[:-1] == before[key][1]
        assert events[-1].why is Why.PURGED
        assert events[-1].attempt_id == before[key][1][-1].attempt_id


def count_deletes(location: str) -> None:
    """On PostgreSQL, have the server log each row of ``calls`` deleted, by transaction."""
    if not location.startswith("postgresql://"):
        return  # SQLite: the purging process counts them in SQLite's trace (--count-batches)
    import psycopg

    with psycopg.connect(location) as db:
        db.execute("CREATE TABLE deleted (seq bigserial PRIMARY KEY, txid bigint NOT NULL)")
        db.execute(
            "CREATE FUNCTION log_deleted() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "INSERT INTO deleted (txid) VALUES (txid_current()); RETURN NULL; END $$"
        )
        db.execute(
            "CREATE TRIGGER deleted AFTER DELETE ON calls FOR EACH ROW "
            "EXECUTE FUNCTION log_deleted()"
        )


def deletes_per_transaction(location: str, purged: subprocess.CompletedProcess[str]) -> list[int]:
    """How many rows of ``calls`` each transaction of the purge deleted, as the database ran them.

    SQLite's trace of the purging process, or the server's log (``count_deletes``).
    """
    if not location.startswith("postgresql://"):
        batches: list[int] = json.loads(purged.stdout)["batches"]
        return batches
    import psycopg

    with psycopg.connect(location) as db:
        rows = db.execute("SELECT count(*) FROM deleted GROUP BY txid ORDER BY min(seq)")
        return [int(n) for (n,) in rows]


def claiming(location: str, claimers: list[subprocess.Popen[str]]) -> None:
    """Wait until each claimer has claimed a key: claiming, it goes on until the purge ends."""
    with get_store(location) as store:
        for name in ("first", "second"):
            while not store._read("SELECT 1 FROM calls WHERE key = ?", (f"{name}-1",)):
                assert all(c.poll() is None for c in claimers), "a claimer ended before claiming"
                time.sleep(0.01)  # polls a condition: the claimer's first claim ends the wait


def test_claims_go_on_between_the_batches_of_a_large_purge(any_ledger: str) -> None:
    """Two processes claim keys while a third purges 5,000: claims go on between batches.

    Every claim succeeds, some commit between the purge's batches, and no transaction of
    the purge removed more than its batch (counted by the database, not timed).
    """
    with get_store(any_ledger) as store:

        @safe(store, name="pay")
        def pay(key: str) -> int:
            return 1

        pay("settled")
        cutoff = utc_now()
    copy_key(any_ledger, "settled", 5_000, "old", at=OLD)
    count_deletes(any_ledger)
    claimers = [
        subprocess.Popen(
            [sys.executable, str(CHILD), "claim", any_ledger, name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("first", "second")
    ]
    try:
        claiming(any_ledger, claimers)
        traced = () if any_ledger.startswith("postgresql://") else ("--count-batches",)
        purged = purge(any_ledger, cutoff, "--batch", "50", *traced)
        reports = [claimer.communicate(timeout=TIMEOUT) for claimer in claimers]
    finally:
        for claimer in claimers:  # a purge that failed leaves them waiting for it
            claimer.kill()
            claimer.wait()
    assert purged.returncode == 0, purged.stderr
    assert [claimer.returncode for claimer in claimers] == [0, 0], reports
    batches = deletes_per_transaction(any_ledger, purged)
    assert sum(batches) == 5_001  # the copies, and the key they were copied from
    assert max(batches) == 50
    assert len(batches) == 101
    outcomes = [json.loads(out)["outcomes"] for out, _ in reports]
    for made in outcomes:
        assert set(made) == {"Succeeded"}
    with get_store(any_ledger) as store:
        rows = store._read("SELECT seq, subject, why FROM history ORDER BY seq", ())
    purges = [seq for seq, _, why in rows if why == Why.PURGED.value]
    claims = [seq for seq, subject, _ in rows if subject.startswith(("first-", "second-"))]
    assert any(purges[0] < seq < purges[-1] for seq in claims)


def test_a_purge_stopped_between_sagas_and_keys_leaves_steps_that_replay(
    any_ledger: str,
) -> None:
    """A finished saga goes before its steps' keys, so a purge stopped between them is safe.

    Killed between the two, the purge leaves the steps as keys: the saga run again replays
    its step instead of running it.
    """
    runs: list[str] = []

    def charge(key: str, amount: int) -> int:
        runs.append(key)
        return amount

    with get_store(any_ledger) as store:
        with Saga("order", store) as saga:
            saga.step(safe(store, name="pay")(charge), 7)
        found = store.get_saga("order")
        assert found is not None
        (step,) = found.steps
        cutoff = utc_now()

    killed = purge(any_ledger, cutoff, "--kill-at", "purging", "--nth", "2")

    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with get_store(any_ledger) as store:
        assert store.get_saga("order") is None
        assert store.get(step) is not None
        with Saga("order", store) as saga:
            assert saga.step(safe(store, name="pay")(charge), 7) == 7
    assert runs == [step]
