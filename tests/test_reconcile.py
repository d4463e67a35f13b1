"""Reconciliation probes: an in-doubt key is closed by what the outside world says happened."""

import asyncio
import signal
import threading
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from safeact import (
    DoubtReason,
    Happened,
    InDoubt,
    NotHappened,
    State,
    Store,
    Succeeded,
    Unknown,
    Verdict,
    Why,
    get_store,
    safe,
)
from safeact._tool import _Guard
from tests.actions import Receipt, bury_owners, count_effects
from tests.processes import report, run_child

KEY = "refund-8842"


def left_in_doubt(store: Store, tool: _Guard[object], key: str, *args: object) -> None:
    """Leave ``key`` as a crashed process leaves it: ATTEMPTING under an owner that is gone."""
    digest = tool._digest(key, args, {})
    store._claim(key, tool.name, digest, attempt_id="crashed", previous=None)
    bury_owners(store)


def whys(store: Store, key: str) -> list[Why]:
    return [event.why for event in store.history(key)]


def test_happened_closes_the_key_and_replays_the_probes_result(store: Store) -> None:
    """Happened(result): the key becomes SUCCEEDED with that result; the action does not run."""
    asked: list[tuple[str, InDoubt]] = []
    runs: list[str] = []

    def probe(key: str, receipt: InDoubt) -> Verdict[Receipt]:
        asked.append((key, receipt))
        return Happened(Receipt("a@b.c", 5), "bank ref 991")

    @safe(store, name="charge", reconcile=probe)
    def charge(key: str, amount: int) -> Receipt:
        runs.append(key)
        return Receipt("a@b.c", amount)

    left_in_doubt(store, charge, "k", 5)
    assert charge("k", 5) == Succeeded("k", Receipt("a@b.c", 5), replayed=True)
    assert charge("k", 5) == Succeeded("k", Receipt("a@b.c", 5), replayed=True)
    assert runs == []
    ((key, receipt),) = asked
    record = store.get("k")
    assert record is not None
    assert (key, receipt.key, receipt.tool, receipt.args_hash, receipt.reason) == (
        "k",
        "k",
        "charge",
        record.args_hash,
        DoubtReason.CRASHED,
    )
    assert (record.state, record.result) == (State.SUCCEEDED, {"to": "a@b.c", "amount": 5})
    assert whys(store, "k") == [Why.CLAIMED, Why.CRASHED, Why.RECONCILED]


def test_not_happened_releases_the_key_and_the_call_runs_the_action_once(store: Store) -> None:
    """NotHappened: the key is released and this very call runs the action, once."""
    runs: list[str] = []

    @safe(store, name="charge", reconcile=lambda _key, _receipt: NotHappened("no such payment"))
    def charge(key: str, amount: int) -> Receipt:
        runs.append(key)
        return Receipt("a@b.c", amount)

    left_in_doubt(store, charge, "k", 5)
    assert charge("k", 5) == Succeeded("k", Receipt("a@b.c", 5))
    assert charge("k", 5) == Succeeded("k", Receipt("a@b.c", 5), replayed=True)
    assert runs == ["k"]
    history = store.history("k")
    assert [(e.from_state, e.to_state, e.why) for e in history[2:]] == [
        (State.IN_DOUBT, State.RELEASED, Why.RECONCILED),
        (State.RELEASED, State.ATTEMPTING, Why.CLAIMED),
        (State.ATTEMPTING, State.SUCCEEDED, Why.RAN),
    ]
    assert history[2].note == "probe: did not happen (no such payment)"


class AskedAgain(BaseException):
    """A probe was asked twice in one call: no `except Exception` may swallow this."""


def raising(key: str, receipt: InDoubt) -> Verdict[int]:
    raise ConnectionError("bank unreachable")


def answering_nonsense(key: str, receipt: InDoubt) -> Verdict[int]:
    return "yes"  # type: ignore[return-value] # the mistake under test


def answering_a_wrong_type(key: str, receipt: InDoubt) -> Verdict[int]:
    return Happened("seven")  # type: ignore[arg-type] # the mistake under test


@pytest.mark.parametrize(
    ("probe", "why", "note"),
    [
        (
            lambda _k, _r: Unknown("bank is down"),
            Why.PROBE_UNKNOWN,
            "probe: cannot tell (bank is down)",
        ),
        (lambda _k, _r: Unknown(), Why.PROBE_UNKNOWN, "probe: cannot tell"),
        (raising, Why.PROBE_FAILED, "the probe raised ConnectionError: bank unreachable"),
        (
            answering_nonsense,
            Why.PROBE_FAILED,
            "the probe answered 'yes', not Happened, NotHappened or Unknown",
        ),
        (answering_a_wrong_type, Why.PROBE_FAILED, "the probe's result cannot be stored"),
    ],
    ids=["unknown", "unknown-unsaid", "raises", "nonsense", "wrong-type"],
)
def test_a_probe_that_cannot_tell_leaves_the_key_in_doubt(
    store: Store, probe: Callable[[str, InDoubt], Verdict[int]], why: Why, note: str
) -> None:
    """Unknown, a raising probe, or a wrong answer: InDoubt as before, and the history says why."""
    runs: list[str] = []
    asked: list[str] = []

    def once(key: str, receipt: InDoubt) -> Verdict[int]:
        asked.append(key)
        if len(asked) > 1:
            raise AskedAgain  # asking again and again would never end the call
        return probe(key, receipt)

    @safe(store, name="act", reconcile=once)
    def act(key: str) -> int:
        runs.append(key)
        return 7

    left_in_doubt(store, act, "k")
    outcome = act("k")
    assert isinstance(outcome, InDoubt)
    assert outcome.reason is DoubtReason.CRASHED
    assert runs == []
    record = store.get("k")
    assert record is not None
    assert record.state is State.IN_DOUBT
    last = store.history("k")[-1]
    assert (last.from_state, last.to_state, last.why) == (State.IN_DOUBT, State.IN_DOUBT, why)
    assert last.note is not None
    assert last.note.startswith(note)
    if why is Why.PROBE_UNKNOWN:
        assert last.note == note  # the probe's own words, if any, and nothing else


def test_the_probe_is_asked_once_per_call(store: Store) -> None:
    """A call asks its probe once; a later call asks again."""
    asked: list[str] = []

    def probe(key: str, receipt: InDoubt) -> Verdict[int]:
        asked.append(key)
        return Unknown() if len(asked) <= 2 else Happened(0)  # a third ask would close it

    @safe(store, name="act", reconcile=probe)
    def act(key: str) -> int:
        return 7

    left_in_doubt(store, act, "k")
    assert isinstance(act("k"), InDoubt)
    assert isinstance(act("k"), InDoubt)
    assert asked == ["k", "k"]


def test_the_probe_is_not_asked_while_the_owner_runs(store: Store) -> None:
    """A key in flight under a live owner is not in doubt: no probe, InDoubt(in_flight)."""
    asked: list[str] = []

    def probe(key: str, receipt: InDoubt) -> Verdict[int]:
        asked.append(key)
        return NotHappened()

    @safe(store, name="act", wait=0, reconcile=probe)
    def act(key: str) -> int:
        return 7

    store._claim("k", "act", act._digest("k", (), {}), attempt_id="live", previous=None)
    outcome = act("k")
    assert isinstance(outcome, InDoubt)
    assert outcome.reason is DoubtReason.IN_FLIGHT
    assert asked == []


def test_two_callers_probing_at_once_run_the_action_once(store: Store) -> None:
    """Both callers hear "not happened" at once: only one release and one run win."""
    runs: list[str] = []
    both_asking = threading.Barrier(2)

    def probe(key: str, receipt: InDoubt) -> Verdict[int]:
        both_asking.wait(timeout=10)
        return NotHappened()

    @safe(store, name="act", wait=30, reconcile=probe)
    def act(key: str) -> int:
        runs.append(key)
        return 7

    left_in_doubt(store, act, "k")
    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(act, ["k", "k"]))
    assert Counter(outcomes) == {Succeeded("k", 7): 1, Succeeded("k", 7, replayed=True): 1}
    assert runs == ["k"]
    assert whys(store, "k").count(Why.RECONCILED) == 1


def test_an_async_tool_asks_its_probe(store: Store) -> None:
    """AsyncSafeTool runs the probe (in a worker thread) and replays what it says happened."""

    @safe(store, name="act", reconcile=lambda _key, _receipt: Happened(3))
    async def act(key: str) -> int:
        raise AssertionError

    left_in_doubt(store, act, "k")
    assert asyncio.run(act("k")) == Succeeded("k", 3, replayed=True)


def test_store_reconcile_asks_each_tools_probe(store: Store) -> None:
    """store.reconcile(probes) closes what the probes know and leaves the rest in doubt."""

    @safe(store, name="pay")
    def pay(key: str) -> int:
        raise AssertionError

    @safe(store, name="mail")
    def mail(key: str) -> None:
        raise AssertionError

    @safe(store, name="ship")
    def ship(key: str) -> None:
        raise AssertionError

    left_in_doubt(store, pay, "p")
    left_in_doubt(store, mail, "m")
    left_in_doubt(store, ship, "s")
    probes: dict[str, Callable[[str, InDoubt], Verdict[object]]] = {
        "pay": lambda _key, _receipt: Happened(12),
        "mail": lambda _key, _receipt: NotHappened(),
    }
    events = store.reconcile(probes)
    assert sorted((e.subject, e.from_state, e.to_state, e.why) for e in events) == [
        ("m", State.IN_DOUBT, State.RELEASED, Why.RECONCILED),
        ("p", State.IN_DOUBT, State.SUCCEEDED, Why.RECONCILED),
    ]
    assert all(event == store.history(event.subject)[-1] for event in events)
    assert pay("p") == Succeeded("p", 12, replayed=True)
    assert [record.key for record in store.list_in_doubt()] == ["s"]
    assert whys(store, "p") == [Why.CLAIMED, Why.CRASHED, Why.RECONCILED]


@pytest.mark.parametrize("point", ["probed", "settling"])
def test_a_crash_while_reconciling_loses_nothing(
    any_ledger: str, tmp_path: Path, point: str
) -> None:
    """Killed after the probe answered, or inside the write that closes the key: still in doubt."""
    ledger, effects = any_ledger, tmp_path / "effects"
    assert run_child(ledger, effects, KEY, "--kill-at", "after_call").returncode == -signal.SIGKILL
    killed = run_child(ledger, effects, KEY, "--probe", "not_happened", "--kill-at", point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with get_store(ledger) as store:
        record = store.get(KEY)
        assert record is not None
        assert record.state is State.IN_DOUBT
        assert Why.RECONCILED not in whys(store, KEY)
    assert report(run_child(ledger, effects, KEY, "--probe", "happened")) == {
        "kind": "Succeeded",
        "replayed": True,
        "value": {"to": "a@example.com", "amount": 50},
    }
    assert count_effects(effects, KEY) == 1


@pytest.mark.parametrize("decision", ["happened", "not_happened"])
def test_a_crash_inside_a_resolve_loses_nothing(
    any_ledger: str, tmp_path: Path, decision: str
) -> None:
    """Killed inside a resolve's write: the key is still in doubt; the resolve can be done again."""
    ledger, effects = any_ledger, tmp_path / "effects"
    assert run_child(ledger, effects, KEY, "--kill-at", "after_call").returncode == -signal.SIGKILL
    killed = run_child(ledger, effects, KEY, "--resolve", decision, "--kill-at", "settling")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with get_store(ledger) as store:
        record = store._stored(KEY)  # the row as written: the killed resolve changed nothing
        assert record is not None
        assert record.state is State.ATTEMPTING
        assert Why.RESOLVED not in whys(store, KEY)
    expected = State.SUCCEEDED if decision == "happened" else State.RELEASED
    assert report(run_child(ledger, effects, KEY, "--resolve", decision)) == {
        "kind": "Resolved",
        "state": expected.value,
    }
    then = report(run_child(ledger, effects, KEY))
    assert (then["kind"], then["replayed"]) == ("Succeeded", decision == "happened")
    assert count_effects(effects, KEY) == (1 if decision == "happened" else 2)
