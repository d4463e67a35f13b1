"""Approvals across real processes: racing callers, approvers and deniers, and SIGKILLs.

Every process is a fresh interpreter running tests/approval_child.py; the action appends and
fsyncs a line per real run to an effects file, which is what the tests count. The races run
on both backends (``any_ledger``); the crashes on a SQLite file (the rules they check are
the ones both backends share, and test_crash runs the key's own crashes on both).
"""

import json
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from safeact import ApprovalState, AwaitingApproval, State, Store, Why, get_store
from tests.actions import count_effects
from tests.approval_child import payments
from tests.processes import TIMEOUT, report, run_python

CHILD = Path(__file__).with_name("approval_child.py")
KEY = "pay-8842"
AWAITING = "AwaitingApproval"
RAN: dict[str, object] = {"kind": "Succeeded", "replayed": False, "amount": 50}
REPLAYED: dict[str, object] = {**RAN, "replayed": True}
IN_DOUBT: dict[str, object] = {"kind": "InDoubt", "reason": "crashed"}
DENIED: dict[str, object] = {
    "kind": "Failed",
    "replayed": True,
    "error": "safeact.Denied: denied by grace: wrong customer",
}


def run(ledger: str, effects: Path, role: str, *keys_and_options: str) -> list[dict[str, object]]:
    """Run one child to its end; return what it printed for each of its keys, in order."""
    done = run_python(CHILD, ledger, effects, role, *keys_and_options)
    report(done)  # it exited 0, or fail with its stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def killed(ledger: str, effects: Path, role: str, *options: str) -> None:
    """Run one child for KEY that must die of its SIGKILL."""
    died = run_python(CHILD, ledger, effects, role, KEY, *options)
    assert died.returncode == -signal.SIGKILL, died.stderr


def kind(outcome: dict[str, object]) -> object:
    return outcome["kind"]


def replayed(outcome: dict[str, object]) -> bool:
    """Sorts the one call that ran before those that replayed it."""
    return bool(outcome["replayed"])


class Round:
    """Processes started together, each taking the same keys in turn, all at once per key."""

    def __init__(self, commands: list[list[str]]) -> None:
        self.children = [
            subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for command in commands
        ]

    def next_key(self) -> list[dict[str, object]]:
        """Wait until every child is ready, let them all go at once; return what each said."""
        for child in self.children:
            assert child.stdout is not None
            assert child.stdout.readline() == "ready\n", self.stderr(child)
        for child in self.children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        said = []
        for child in self.children:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line, self.stderr(child)
            said.append(json.loads(line))
        return said

    def stderr(self, child: subprocess.Popen[str]) -> str:
        """Kill ``child``; return what it wrote to stderr, for a failure's message."""
        child.kill()
        return child.communicate(timeout=TIMEOUT)[1]

    def end(self) -> None:
        """Every child is gone (they end by themselves after their last key)."""
        for child in self.children:
            try:
                child.communicate(timeout=TIMEOUT)
            finally:
                child.kill()


@contextmanager
def together(ledger: str, effects: Path, keys: list[str], **roles: int) -> Iterator[Round]:
    """Start ``roles`` (role name: how many processes), each taking ``keys`` in rounds."""
    commands = [
        [sys.executable, str(CHILD), ledger, str(effects), role, *keys, "--rounds"]
        + (["--until-decided"] if role == "call" else [])
        for role, count in roles.items()
        for _ in range(count)
    ]
    started = Round(commands)
    try:
        yield started
    finally:
        started.end()


def ask(ledger: str, effects: Path, *keys: str) -> None:
    """A caller asks for each key once: a pending request for each."""
    with get_store(ledger) as store:
        pay = payments(store, effects)
        for key in keys:
            assert isinstance(pay(key, "ada@example.com", 50), AwaitingApproval)


def approval_of(store: Store, key: str) -> ApprovalState | None:
    approval = store.approval(key)
    return None if approval is None else approval.state


def test_eight_callers_and_eight_approvers_run_the_action_once(
    any_ledger: str, tmp_path: Path
) -> None:
    """One request, 8 callers and 8 approvers at once: one yes is recorded, one action runs."""
    ledger, effects = any_ledger, tmp_path / "effects"
    ask(ledger, effects, KEY)
    with together(ledger, effects, [KEY], call=8, approve=8) as started:
        said = started.next_key()
    callers, approvers = said[:8], said[8:]
    assert Counter(map(kind, approvers)) == {"Approval": 1, "Refused": 7}
    assert sorted(callers, key=replayed) == [RAN] + [REPLAYED] * 7
    assert count_effects(effects, KEY) == 1
    with get_store(ledger) as store:
        whys = [event.why for event in store.history(KEY)]
        assert whys.count(Why.APPROVED) == whys.count(Why.CLAIMED) == 1
        approval, record = store.approval(KEY), store.get(KEY)
        assert approval is not None
        assert record is not None
        assert (approval.state, approval.attempt_id) == (ApprovalState.CONSUMED, record.attempt_id)


ROUNDS = [f"pay-{n}" for n in range(6)]
"""The deny races: even rounds approved before they start (the callers race the withdrawal
of a yes not used yet), odd ones pending (the approvers race the deny too)."""
DENIAL_RECORDED: dict[str, object] = {"kind": "Approval", "state": "denied"}


def test_a_denial_racing_approvals_and_callers_is_final_or_refused(
    any_ledger: str, tmp_path: Path
) -> None:
    """Deny, approve and call at once: a deny that commits runs nothing; a refused one ran once."""
    ledger, effects = any_ledger, tmp_path / "effects"
    ask(ledger, effects, *ROUNDS)
    with get_store(ledger) as store:
        for key in ROUNDS[::2]:
            store.approve(key, by="grace")
    with together(ledger, effects, ROUNDS, call=4, approve=2, deny=1) as started:
        rounds = {key: started.next_key() for key in ROUNDS}
    later = dict(zip(ROUNDS, run(ledger, effects, "call", *ROUNDS), strict=True))
    with get_store(ledger) as store:
        for index, (key, said) in enumerate(rounds.items()):
            callers, approvers, denial = said[:4], said[4:6], said[6]
            assert Counter(map(kind, approvers))["Approval"] <= index % 2
            if denial == DENIAL_RECORDED:
                assert (callers, later[key]) == ([DENIED] * 4, DENIED)
                assert count_effects(effects, key) == 0
                assert store.get(key) is None
                assert approval_of(store, key) is ApprovalState.DENIED
            else:  # refused, and only because a claim consumed the approval first
                assert denial == {
                    "kind": "Refused",
                    "message": f"cannot deny key {key!r}: its approval is consumed",
                }
                assert sorted(callers, key=replayed) == [RAN] + [REPLAYED] * 3
                assert later[key] == REPLAYED
                assert count_effects(effects, key) == 1
                assert approval_of(store, key) is ApprovalState.CONSUMED


# For each kill: the approval's and the key's state the kill leaves, how many runs by then,
# what a new process's two calls get, and how many runs in all.
Case = tuple[str, ApprovalState, State | None, int, list[object], int]
KILLS: list[Case] = [
    ("requested", ApprovalState.PENDING, None, 0, [AWAITING, AWAITING], 0),
    ("decided", ApprovalState.APPROVED, None, 0, [RAN, REPLAYED], 1),
    ("before_claim", ApprovalState.APPROVED, None, 0, [RAN, REPLAYED], 1),
    ("after_claim", ApprovalState.CONSUMED, State.ATTEMPTING, 0, [IN_DOUBT, IN_DOUBT], 0),
    ("after_call", ApprovalState.CONSUMED, State.ATTEMPTING, 1, [IN_DOUBT, IN_DOUBT], 1),
    ("after_record", ApprovalState.CONSUMED, State.SUCCEEDED, 1, [REPLAYED, REPLAYED], 1),
]


def killed_at(ledger: str, effects: Path, point: str) -> None:
    """Request, approve, call KEY: the process doing the step at ``point`` is killed there."""
    if point == "requested":
        killed(ledger, effects, "call", "--kill-at", point)
        return
    ask(ledger, effects, KEY)
    if point == "decided":
        killed(ledger, effects, "approve", "--kill-at", point)
        return
    with get_store(ledger) as store:
        store.approve(KEY, by="grace")
    killed(ledger, effects, "call", "--kill-at", point)


def brief(outcome: dict[str, object]) -> object:
    """What a case compares: the whole outcome, or only the kind of a wait."""
    return AWAITING if kind(outcome) == AWAITING else outcome


@pytest.mark.parametrize("case", KILLS, ids=[case[0] for case in KILLS])
def test_a_kill_anywhere_from_request_to_record(ledger: Path, tmp_path: Path, case: Case) -> None:
    """Killed at any point, a new process never runs the action twice nor unapproved."""
    point, approval, left, ran, calls, total = case
    location, effects = str(ledger), tmp_path / "effects"
    killed_at(location, effects, point)
    assert count_effects(effects, KEY) == ran
    with get_store(ledger) as store:
        record = store._stored(KEY)  # the row as the kill left it, not yet marked
        assert ((record.state if record else None), approval_of(store, KEY)) == (left, approval)
    assert [brief(outcome) for outcome in run(location, effects, "call", KEY, KEY)] == calls
    assert count_effects(effects, KEY) == total
    with get_store(ledger) as store:  # one request, at most one yes, each run claimed by one
        whys = [event.why for event in store.history(KEY)]
        assert whys.count(Why.APPROVAL_REQUESTED) == 1
        assert total <= whys.count(Why.CLAIMED) <= whys.count(Why.APPROVED) <= 1


def test_a_release_after_a_kill_needs_a_new_approval(ledger: Path, tmp_path: Path) -> None:
    """Killed between claim and action, then released on proof: the old yes authorizes nothing."""
    location, effects = str(ledger), tmp_path / "effects"
    killed_at(location, effects, "after_claim")
    assert run(location, effects, "call", KEY) == [IN_DOUBT]
    with get_store(ledger) as store:
        store.resolve(KEY, happened=False, note="the bank has no such payment")
    assert [kind(outcome) for outcome in run(location, effects, "call", KEY, KEY)] == [
        AWAITING,
        AWAITING,
    ]
    assert count_effects(effects, KEY) == 0
    with get_store(ledger) as store:
        store.approve(KEY, by="grace", note="second try")
    assert run(location, effects, "call", KEY, KEY) == [RAN, REPLAYED]
    assert count_effects(effects, KEY) == 1


def test_an_approval_for_other_arguments_never_authorizes(ledger: Path, tmp_path: Path) -> None:
    """Other arguments under the approved key conflict; under a new key they are asked anew."""
    location, effects = str(ledger), tmp_path / "effects"
    ask(location, effects, KEY)
    with get_store(ledger) as store:
        store.approve(KEY, by="grace")
    other = run(location, effects, "call", KEY, "pay-9", "--amount", "5000")
    assert [kind(outcome) for outcome in other] == ["KeyConflictError", AWAITING]
    assert count_effects(effects, KEY) == count_effects(effects, "pay-9") == 0
    assert run(location, effects, "call", KEY) == [RAN]
    with get_store(ledger) as store:
        assert approval_of(store, "pay-9") is ApprovalState.PENDING
        assert store.get("pay-9") is None


def test_a_denied_key_never_runs(ledger: Path, tmp_path: Path) -> None:
    """A yes withdrawn by a deny in another process: every later call gets the no; none runs."""
    location, effects = str(ledger), tmp_path / "effects"
    ask(location, effects, KEY)
    with get_store(ledger) as store:
        store.approve(KEY, by="grace")
    assert run(location, effects, "deny", KEY) == [DENIAL_RECORDED]
    assert run(location, effects, "call", KEY, KEY) == [DENIED, DENIED]
    assert count_effects(effects, KEY) == 0
    with get_store(ledger) as store:
        assert approval_of(store, KEY) is ApprovalState.DENIED
        assert store.get(KEY) is None
