"""A key is released only on proof that its owner is finished; suspicion leaves it in doubt.

In-process, on both backends. The real-process versions (a frozen owner, a GIL-holding
owner, a forked child, a cut liveness session) are in test_release.py.
"""

import asyncio
import threading
from pathlib import Path

import pytest

from safeact import (
    DoubtReason,
    Happened,
    InDoubt,
    NotHappened,
    NotProvenError,
    SafeError,
    State,
    Store,
    Succeeded,
    Verdict,
    Why,
    get_store,
    safe,
)
from safeact._cli import main
from safeact._protocol import Refusal
from tests.actions import NO_GROUP, expire_leases


def bury(store: Store, key: str) -> None:
    """Make ``key``'s owner look dead, as after its process was killed (a reused pid)."""
    with store._transaction(sync=False) as db:
        db.execute(
            "UPDATE calls SET owner_started = -2, owner_group = ? WHERE key = ?", (NO_GROUP, key)
        )


def suspect(store: Store, key: str = "k") -> str:
    """Leave ``key`` ATTEMPTING under this live process, its lease run out; return the attempt."""
    record = store._claim(key, "act", "h", attempt_id="a1", previous=None)
    assert record is not None
    expire_leases(store)
    return record.attempt_id


def test_resolve_not_happened_refuses_an_owner_whose_lease_ran_out(store: Store) -> None:
    """A lease that ran out is suspicion: the release is refused, saying how to check and force."""
    suspect(store)
    before = store.get("k")
    with pytest.raises(NotProvenError, match=r"not proven finished.*force=True") as raised:
        store.resolve("k", happened=False)
    assert raised.value.key == "k"
    assert store.get("k") == before
    assert [e.why for e in store.history("k")] == [Why.CLAIMED]


def test_force_releases_and_the_history_keeps_who_asserted_it(store: Store) -> None:
    """With force=True the key is released, and its history says an operator asserted it."""
    suspect(store)
    released = store.resolve("k", happened=False, force=True, note="host was wiped")
    assert released.state is State.RELEASED
    last = store.history("k")[-1]
    assert (last.why, last.by, last.to_state) == (Why.FORCED_RELEASE, "operator", State.RELEASED)
    assert last.note is not None
    assert "operator asserts" in last.note
    assert "lease ran out" in last.note
    assert last.note.endswith("; host was wiped")


def test_an_owner_proven_gone_is_released_without_force(store: Store) -> None:
    """An owner whose process is provably gone is proof: the release goes through, as resolved."""
    suspect(store)
    bury(store, "k")
    assert store.resolve("k", happened=False).state is State.RELEASED
    assert store.history("k")[-1].why is Why.RESOLVED


def test_proof_is_checked_when_the_release_is_decided(store: Store) -> None:
    """Proof is looked up under the row lock, not taken from the record read before."""
    suspect(store)
    bury(store, "k")
    stale = store.get("k")
    assert stale is not None
    with store._transaction(sync=False) as db:  # the owner turns out alive after all
        db.execute("UPDATE calls SET owner_started = 0 WHERE key = 'k'")
    with pytest.raises(NotProvenError):
        store.resolve("k", happened=False)


def test_an_interrupted_owner_is_not_proof_while_its_process_lives(store: Store) -> None:
    """An interruption is the owner's word, not proof: work it started may still run."""
    record = store._claim("k", "act", "h", attempt_id="a1", previous=None)
    assert record is not None
    assert store._mark_in_doubt("k", "a1", DoubtReason.INTERRUPTED)
    with pytest.raises(NotProvenError, match="interrupted"):
        store.resolve("k", happened=False)
    bury(store, "k")
    assert store.resolve("k", happened=False).state is State.RELEASED


def test_a_cancelled_async_action_whose_work_runs_on_is_not_released(store: Store) -> None:
    """A cancelled action's thread may still act: a probe's 'not happened' is withheld."""
    effects: list[str] = []
    started, go = threading.Event(), threading.Event()

    def send(key: str) -> None:
        started.set()
        go.wait(10)
        effects.append(key)

    def probe(key: str, _receipt: InDoubt) -> Verdict[None]:
        return Happened(None) if key in effects else NotHappened()

    @safe(store, name="pay", reconcile=probe)
    async def pay(key: str) -> None:
        await asyncio.to_thread(send, key)

    async def cancel_then_retry() -> object:
        task = asyncio.ensure_future(pay("k"))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await pay("k")

    outcome = asyncio.run(cancel_then_retry())
    go.set()
    assert isinstance(outcome, InDoubt)
    assert outcome.reason is DoubtReason.INTERRUPTED
    assert outcome.note is not None
    assert "not applied" in outcome.note
    record = store.get("k")
    assert record is not None
    assert record.state is State.IN_DOUBT


def test_an_owner_marks_its_key_released_by_force_while_it_ran(store: Store) -> None:
    """An owner interrupted after a forced release still keeps its key from running again."""
    suspect(store)
    store.resolve("k", happened=False, force=True)
    assert store._mark_in_doubt("k", "a1", DoubtReason.INTERRUPTED)
    record = store.get("k")
    assert record is not None
    assert (record.state, record.doubt_reason) == (State.IN_DOUBT, DoubtReason.INTERRUPTED)


def test_a_failure_not_stored_is_released_only_on_proof(store: Store) -> None:
    """An action that raised, unrecorded, may be released once its owner is proven gone."""
    store._claim("k", "act", "h", attempt_id="a1", previous=None)
    assert store._mark_in_doubt("k", "a1", DoubtReason.FAILURE_NOT_STORED, detail="disk full")
    with pytest.raises(NotProvenError, match="raised"):
        store.resolve("k", happened=False)
    bury(store, "k")
    assert store.resolve("k", happened=False).state is State.RELEASED


def test_a_settle_on_an_owner_alive_again_is_refused(store: Store) -> None:
    """The owner's liveness is looked at again under the row lock, not taken from a read."""
    suspect(store)
    stale = store.get("k")
    assert stale is not None
    store._renew("k", "a1", "2999-01-01T00:00:00.000000+00:00")  # its heartbeat came back
    refused = store._settle(stale, State.SUCCEEDED, "1", why=Why.RESOLVED, note=None)
    assert isinstance(refused, Refusal)
    assert "running right now" in refused.reason
    current = store.get("k")
    assert current is not None
    assert current.state is State.ATTEMPTING


def test_a_result_not_stored_key_is_never_released(store: Store) -> None:
    """The ledger knows the action ran: happened=False is refused even with force."""
    record = store._claim("k", "act", "h", attempt_id="a1", previous=None)
    assert record is not None
    assert store._mark_in_doubt("k", "a1", DoubtReason.RESULT_NOT_STORED, detail="disk full")
    bury(store, "k")
    for force in (False, True):
        with pytest.raises(SafeError, match="can only be resolved as happened"):
            store.resolve("k", happened=False, force=force)
    assert store.resolve("k", happened=True, result=1).state is State.SUCCEEDED


def test_a_caller_cannot_replace_the_owners_own_word(store: Store) -> None:
    """A crash mark never replaces an owner's own 'result not stored'; proof replaces suspicion."""
    store._claim("k", "act", "h", attempt_id="a1", previous=None)
    assert store._mark_in_doubt("k", "a1", DoubtReason.LEASE_EXPIRED)
    bury(store, "k")
    assert store._mark_in_doubt("k", "a1", DoubtReason.CRASHED)
    assert store._mark_in_doubt("k", "a1", DoubtReason.RESULT_NOT_STORED)
    assert not store._mark_in_doubt("k", "a1", DoubtReason.CRASHED)
    record = store.get("k")
    assert record is not None
    assert record.doubt_reason is DoubtReason.RESULT_NOT_STORED


def test_crashed_is_written_only_with_proof(store: Store) -> None:
    """Marking an attempt CRASHED while its owner runs writes nothing."""
    store._claim("k", "act", "h", attempt_id="a1", previous=None)
    assert not store._mark_in_doubt("k", "a1", DoubtReason.CRASHED)
    record = store.get("k")
    assert record is not None
    assert record.state is State.ATTEMPTING


def test_proof_from_the_owners_host_lets_another_host_release(any_ledger: str) -> None:
    """A host cannot see another host's processes; a process on the owner's host records proof."""
    with (
        get_store(any_ledger, host="owner-host") as there,
        get_store(any_ledger, host="other-host") as here,
    ):
        suspect(there)
        here.reconcile({})
        record = here.get("k")
        assert record is not None
        assert (record.state, record.doubt_reason) == (State.IN_DOUBT, DoubtReason.LEASE_EXPIRED)
        bury(there, "k")
        with pytest.raises(NotProvenError):
            here.resolve("k", happened=False)
        there.reconcile({})
        record = here.get("k")
        assert record is not None
        assert record.doubt_reason is DoubtReason.CRASHED
        assert here.history("k")[-1].host == "owner-host"
        assert here.resolve("k", happened=False).state is State.RELEASED


def probe_answering(verdict: Verdict[int]) -> object:
    def probe(_key: str, _receipt: InDoubt) -> Verdict[int]:
        return verdict

    return probe


def test_a_probes_not_happened_is_withheld_from_an_unproven_owner(store: Store) -> None:
    """A probe's 'did not happen' leaves the key in doubt, noted; the caller's InDoubt says so."""
    runs: list[str] = []

    @safe(store, name="act", wait=0, reconcile=lambda _k, _r: NotHappened("no charge yet"))
    def act(key: str) -> int:
        runs.append(key)
        return 1

    suspect(store)
    with store._transaction(sync=False) as db:  # the suspect is an attempt of this tool
        db.execute("UPDATE calls SET tool = 'act', args_hash = ? WHERE key = 'k'", (act_hash(act),))
    outcome = act("k")
    assert isinstance(outcome, InDoubt)
    assert outcome.reason is DoubtReason.LEASE_EXPIRED
    assert outcome.note is not None
    assert "did not happen (no charge yet); not applied" in outcome.note
    assert runs == []
    record = store.get("k")
    assert record is not None
    assert record.state is State.IN_DOUBT
    assert store.history("k")[-1].why is Why.RELEASE_WITHHELD


def test_a_probes_not_happened_releases_a_proven_gone_owner(store: Store) -> None:
    """With its owner provably gone, a probe's 'did not happen' releases and the call runs."""
    runs: list[str] = []

    @safe(store, name="act", wait=0, reconcile=lambda _k, _r: NotHappened())
    def act(key: str) -> int:
        runs.append(key)
        return 1

    suspect(store)
    with store._transaction(sync=False) as db:
        db.execute("UPDATE calls SET tool = 'act', args_hash = ? WHERE key = 'k'", (act_hash(act),))
    bury(store, "k")
    assert act("k") == Succeeded("k", 1)
    assert runs == ["k"]


def test_store_reconcile_withholds_a_release_from_an_unproven_owner(store: Store) -> None:
    """Store.reconcile with a not-happened probe leaves an unproven key in doubt, noted."""
    suspect(store)
    (event,) = store.reconcile({"act": probe_answering(NotHappened())})  # type: ignore[dict-item]
    assert event.why is Why.RELEASE_WITHHELD
    record = store.get("k")
    assert record is not None
    assert record.state is State.IN_DOUBT


def test_a_happened_settle_is_never_replaced_by_the_owners_later_word(store: Store) -> None:
    """An owner that completes after a probe said 'happened' is kept beside the key."""

    @safe(store, name="act", wait=0, reconcile=lambda _k, _r: Happened(5))
    def act(key: str) -> int:
        outcome = act(key)  # another caller, while this owner looks frozen past its lease
        assert outcome == Succeeded(key, 5, replayed=True)
        return 7

    original = store.lease
    store.lease = -1.0  # every claim is born with its lease run out
    try:
        assert act("k") == Succeeded("k", 7)
    finally:
        store.lease = original
    assert act("k") == Succeeded("k", 5, replayed=True)
    (late,) = store.late_completions("k")
    assert (late.state, late.result) == (State.SUCCEEDED, 7)


def test_an_owners_word_replaces_a_row_in_doubt_on_suspicion(store: Store) -> None:
    """Before anything closed it, the owner's own completion replaces its in-doubt row."""
    store._claim("k", "act", "h", attempt_id="a1", previous=None)
    assert store._mark_in_doubt("k", "a1", DoubtReason.LEASE_EXPIRED)
    assert store._finish("k", "a1", state=State.SUCCEEDED, result=3)
    record = store.get("k")
    assert record is not None
    assert (record.state, record.result) == (State.SUCCEEDED, 3)
    assert store.late_completions("k") == []


def test_cli_not_happened_needs_force_for_an_unproven_owner(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`resolve --not-happened` refuses an unproven owner and names --force, which releases it."""
    with get_store(ledger) as store:
        suspect(store)
    assert main(["resolve", str(ledger), "k", "--not-happened"]) != 0
    assert "--force" in capsys.readouterr().err
    assert main(["resolve", str(ledger), "k", "--not-happened", "--force"]) == 0
    with get_store(ledger) as store:
        record = store.get("k")
        assert record is not None
        assert record.state is State.RELEASED
        assert store.history("k")[-1].why is Why.FORCED_RELEASE


def act_hash(tool: object) -> str:
    """The args hash a call of ``tool`` with the key alone has."""
    return tool._digest("k", (), {})  # type: ignore[attr-defined, no-any-return]


def test_cli_reconcile_without_probes_records_proof_of_this_hosts_dead_owners(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`safeact reconcile LEDGER` (no probes) turns a dead local owner's suspicion into proof."""
    with get_store(ledger) as store:
        suspect(store)
        assert store._mark_in_doubt("k", "a1", DoubtReason.LEASE_EXPIRED)
        bury(store, "k")
    assert main(["reconcile", str(ledger)]) == 1
    assert "no probes given" in capsys.readouterr().out
    with get_store(ledger) as store:
        record = store.get("k")
        assert record is not None
        assert record.doubt_reason is DoubtReason.CRASHED
        assert store.resolve("k", happened=False).state is State.RELEASED
