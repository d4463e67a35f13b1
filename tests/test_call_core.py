"""The sans-IO core of a guarded call, driven directly by a world Hypothesis makes up.

``guarded_call`` is sent whatever a ledger, an owner's host, a probe and an action could
answer, in any order the world allows; whatever the answers, the rules hold: the action runs
only right after a claim that went through, at most once, and its outcome is written only by
its owner; a call that did not run the action never says it ran it. A call of a tool that
needs approval is driven too, its approval made up like any other row.
"""

import time
from collections.abc import Callable, Generator
from datetime import UTC, datetime, timedelta

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from safeact import ApprovalState, AwaitingApproval, DoubtReason, Failed, InDoubt, State, Succeeded
from safeact._call import (
    FIRST_PAUSE,
    LONGEST_PAUSE,
    Act,
    Ask,
    Claim,
    Finish,
    Look,
    Mark,
    Pause,
    Raised,
    Read,
    ReadApproval,
    Request,
    RequestApproval,
    Returned,
    Sighting,
    guarded_call,
)
from safeact._outcome import Outcome, failed_from
from safeact._owner import Owner
from safeact._protocol import (
    JSON,
    UNSETTLED,
    Approval,
    Doubt,
    Record,
    checkpoint_hook,
    may_mark,
    next_step,
)

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
HASH = "0123456789abcdef" * 4
OWNER = Owner(host="h", boot_id="boot", pid=7, started=70)
SETTLE_AFTER = 40
"""Requests answered freely; after them the key is found settled, so every call ends."""


def record(state: State, *, lease: int = 25, reason: DoubtReason | None = None) -> Record:
    return Record(
        key="k",
        tool="act",
        state=state,
        args_hash=HASH,
        attempt_id=f"attempt-{state.value}",
        attempted_at=NOW - timedelta(seconds=5),
        owner=OWNER,
        lease_until=NOW + timedelta(seconds=lease),
        result=1 if state is State.SUCCEEDED else None,
        error_type="ValueError" if state is State.FAILED else None,
        error_message="no" if state is State.FAILED else None,
        doubt_reason=reason,
    )


rows = st.one_of(
    st.none(),
    st.builds(
        record,
        st.sampled_from(State),
        lease=st.sampled_from([-5, 25]),
        reason=st.none() | st.sampled_from(DoubtReason),
    ),
)
claims = st.none() | st.builds(record, st.just(State.ATTEMPTING))


def approval(state: ApprovalState) -> Approval:
    """The key's approval in ``state``, for this call's tool and arguments."""
    decided = state is not ApprovalState.PENDING
    return Approval(
        key="k",
        tool="act",
        args_hash=HASH,
        state=state,
        requested_at=NOW - timedelta(seconds=9),
        decided_at=NOW - timedelta(seconds=8) if decided else None,
        decided_by="ada" if decided else None,
        attempt_id="attempt-consumed" if state is ApprovalState.CONSUMED else None,
    )


approvals = st.none() | st.builds(approval, st.sampled_from(ApprovalState))


def replay(stored: Record) -> Outcome[object]:
    if stored.state is State.FAILED:
        return failed_from(stored)
    return Succeeded(stored.key, stored.result, replayed=True)


@attrs.define
class Trace:
    """What the core asked for, and what it was told."""

    requests: list[Request] = attrs.Factory(list)
    claimed: list[Record] = attrs.Factory(list)
    notes: list[str | None] = attrs.Factory(list)
    answers: list[object] = attrs.Factory(list)
    acted: list[Returned | Raised] = attrs.Factory(list)


def stored(value: object) -> JSON:
    """The action's value as the ledger would keep it (the actions here return ints)."""
    return value if isinstance(value, int) else str(value)


def call(
    *,
    wait: float = 0.0,
    probing: bool = False,
    clock: list[float] | None = None,
    gated: bool = False,
) -> Generator[Request, object, Outcome[object]]:
    """A guarded call of key "k"; ``clock[0]``, when given, is its monotonic clock.

    ``gated``: its tool needs a person's approval.
    """
    return guarded_call(
        "k",
        HASH,
        tool="act",
        wait=wait,
        probing=probing,
        replay=replay,
        encode=stored,
        utc_now=lambda: NOW,
        monotonic=time.monotonic if clock is None else lambda: clock[0],
        gated=gated,
    )


def drive(
    data: st.DataObject, *, probing: bool, wait: float, gated: bool | None = None
) -> tuple[Trace, Outcome[object]]:
    """Answer the core's requests with made-up answers until it returns (or LIMIT is hit).

    ``gated``: whether the tool needs approval; drawn when None.
    """
    clock = [0.0]
    if gated is None:
        gated = data.draw(st.booleans())
    steps = call(wait=wait, probing=probing, clock=clock, gated=gated)
    trace = Trace()
    answer: object = None
    try:
        while True:
            request = steps.send(answer)
            trace.requests.append(request)
            answer = respond(data, request, trace, clock)
            trace.answers.append(answer)
    except StopIteration as done:
        return trace, done.value


def respond(  # noqa: C901, PLR0911 - a case per request
    data: st.DataObject, request: Request, trace: Trace, clock: list[float]
) -> object:
    match request:
        case Read() if len(trace.requests) > SETTLE_AFTER:
            return record(State.SUCCEEDED)
        case Read():
            return data.draw(rows)
        case ReadApproval():
            return data.draw(approvals)
        case RequestApproval():
            return None
        case Look():
            return Sighting(gone=data.draw(st.booleans()), lost=data.draw(st.booleans()))
        case Claim():
            claimed = data.draw(claims)
            if claimed is not None:
                trace.claimed.append(claimed)
            return claimed
        case Mark():
            return data.draw(st.booleans())
        case Ask():
            note = data.draw(st.none() | st.just("withheld"))
            trace.notes.append(note)
            return note
        case Pause(seconds):
            clock[0] += seconds
            return None
        case Act():
            pid = data.draw(st.sampled_from([OWNER.pid, OWNER.pid + 1]))
            choices: list[Returned | Raised] = [Returned(5, pid), Raised(ValueError("no"), pid)]
            acted = data.draw(st.sampled_from(choices))
            trace.acted.append(acted)
            return acted
        case Finish():
            return data.draw(st.booleans())


@given(st.data(), st.booleans(), st.sampled_from([0.0, 0.02]))
def test_the_action_runs_only_after_a_claim_went_through_and_once(
    data: st.DataObject, probing: bool, wait: float
) -> None:
    trace, _ = drive(data, probing=probing, wait=wait)
    acts = [i for i, request in enumerate(trace.requests) if isinstance(request, Act)]
    assert len(acts) <= 1
    for i in acts:
        before = trace.requests[i - 1]
        assert isinstance(before, Claim)
        assert trace.requests[i] == Act(trace.claimed[-1])
    # A claim that went through is always followed by the action: nothing else in between.
    if trace.claimed:
        assert acts


@given(st.data(), st.booleans())
def test_only_the_owner_writes_the_outcome_and_once(data: st.DataObject, probing: bool) -> None:
    trace, outcome = drive(data, probing=probing, wait=0.0)
    finishes = [request for request in trace.requests if isinstance(request, Finish)]
    if not trace.acted:
        assert finishes == []
        return
    [acted] = trace.acted
    if acted.pid != OWNER.pid:  # a child forked inside the action: the attempt is its parent's
        assert finishes == []
        assert not outcome.recorded  # type: ignore[union-attr]
        return
    [finish] = finishes
    assert finish.record == trace.claimed[-1]
    assert finish.state is (State.SUCCEEDED if isinstance(acted, Returned) else State.FAILED)
    assert isinstance(trace.requests[-1], Finish)


@given(st.data())
def test_a_gated_call_claims_only_consuming_the_approval_it_just_read(data: st.DataObject) -> None:
    """Each claim of a gated call follows the read of an approved request, and carries it."""
    trace, _ = drive(data, probing=False, wait=0.0, gated=True)
    for i, request in enumerate(trace.requests):
        if isinstance(request, Claim):
            assert isinstance(trace.requests[i - 1], ReadApproval)
            read = trace.answers[i - 1]
            assert isinstance(read, Approval)
            assert read.state is ApprovalState.APPROVED
            assert request.approval == read


@given(st.data(), st.booleans(), st.sampled_from([0.0, 0.02]))
def test_a_call_that_did_not_act_never_says_it_did(
    data: st.DataObject, probing: bool, wait: float
) -> None:
    trace, outcome = drive(data, probing=probing, wait=wait)
    if trace.acted:
        [acted] = trace.acted
        match acted:
            case Returned(value):
                assert outcome == Succeeded("k", value, recorded=outcome.recorded)  # type: ignore[union-attr]
            case Raised(error):
                assert isinstance(outcome, Failed)
                assert outcome.exception is error
        return
    match outcome:
        case Succeeded(replayed=replayed):
            assert replayed
        case Failed(exception=exception):
            assert exception is None
        case InDoubt() | AwaitingApproval():
            pass


@given(st.data())
def test_marks_only_what_adds_to_the_ledger_and_probes_once(data: st.DataObject) -> None:
    trace, outcome = drive(data, probing=True, wait=0.0)
    asks = [request for request in trace.requests if isinstance(request, Ask)]
    assert len(asks) <= 1
    for request in trace.requests:
        if isinstance(request, Mark):
            assert may_mark(request.record, request.reason)
    if isinstance(outcome, InDoubt) and outcome.reason is not DoubtReason.IN_FLIGHT:
        assert asks


def test_checkpoints_come_in_the_order_of_record_before_execute() -> None:
    """Claim, action, record: the checkpoints a crash test kills at, in the core's order."""
    seen: list[str] = []
    claimed = record(State.ATTEMPTING)
    answers: dict[type, object] = {
        Read: None,
        Claim: claimed,
        Act: Returned(5, OWNER.pid),
        Finish: True,
    }
    with checkpoint_hook(seen.append):
        steps = call()
        requests: list[str] = []
        answer: object = None
        with pytest.raises(StopIteration) as done:
            while True:
                request = steps.send(answer)
                requests.append(f"{type(request).__name__}@{len(seen)}")
                answer = answers[type(request)]
    assert done.value.value == Succeeded("k", 5)
    assert seen == ["before_claim", "after_claim", "after_call", "after_record"]
    # Read before any checkpoint; Claim after before_claim; Act after after_claim; Finish
    # after after_call.
    assert requests == ["Read@0", "Claim@1", "Act@2", "Finish@3"]


LIMIT = 500
"""More requests than any call here needs: a core that would loop for ever fails instead."""


def wait_out_a_live_owner(wait: float) -> tuple[list[float], Outcome[object], float]:
    """Run a call whose key a live owner holds throughout; its pauses, outcome, time waited."""
    clock = [0.0]
    steps = call(wait=wait, clock=clock)
    pauses: list[float] = []
    answer: object = None
    try:
        for _ in range(LIMIT):
            match steps.send(answer):
                case Read():
                    answer = record(State.ATTEMPTING)  # its lease runs for 25 s more
                case Look():
                    answer = Sighting(gone=False, lost=False)
                case Pause(seconds):
                    pauses.append(seconds)
                    clock[0] += seconds
                    answer = None
                case other:
                    raise AssertionError(f"a call on a live owner's key asked for {other}")
    except StopIteration as done:
        return pauses, done.value, clock[0]
    raise AssertionError(f"still waiting after {LIMIT} requests")


@given(st.floats(min_value=0.0, max_value=1.0, allow_subnormal=False))
def test_a_live_owner_is_waited_for_with_doubling_pauses_for_wait_seconds(wait: float) -> None:
    """Pauses start at FIRST_PAUSE, double up to LONGEST_PAUSE, never pass the deadline."""
    pauses, outcome, waited = wait_out_a_live_owner(wait)
    expected: list[float] = []
    clock, pause = 0.0, FIRST_PAUSE
    while wait - clock > 0:
        expected.append(min(pause, wait - clock))
        clock += expected[-1]
        pause = min(2 * pause, LONGEST_PAUSE)
    assert (pauses, waited) == (expected, clock)
    assert isinstance(outcome, InDoubt)
    assert outcome.reason is DoubtReason.IN_FLIGHT


@given(st.data())
def test_the_probe_is_asked_about_the_doubt_and_its_note_is_kept(data: st.DataObject) -> None:
    """The probe hears why the key is in doubt; what it withheld comes back in the receipt."""
    trace, outcome = drive(data, probing=True, wait=0.0)
    asks = [i for i, request in enumerate(trace.requests) if isinstance(request, Ask)]
    for i in asks:
        ask = trace.requests[i]
        assert isinstance(ask, Ask)
        assert ask.reason is not None
        before = trace.requests[i - 1]
        if isinstance(before, Mark):
            assert ask.reason is before.reason
    if asks and isinstance(outcome, InDoubt) and outcome.reason is not DoubtReason.IN_FLIGHT:
        assert outcome.note == trace.notes[-1]


@given(st.sampled_from([Returned(5, OWNER.pid + 1), Raised(ValueError("no"), OWNER.pid + 1)]))
def test_a_child_forked_inside_the_action_reports_without_writing(acted: Returned | Raised) -> None:
    """A child's outcome is its own, not recorded: the attempt is its parent's to write."""
    claimed = record(State.ATTEMPTING)
    steps = call()
    assert steps.send(None) == Read("k")
    assert steps.send(None) == Claim("k", HASH, None)
    assert steps.send(claimed) == Act(claimed)
    with pytest.raises(StopIteration) as done:
        steps.send(acted)
    match acted:
        case Returned(value):
            assert done.value.value == Succeeded("k", value, recorded=False)
        case Raised(error):
            assert done.value.value == Failed(
                "k", "act", "ValueError", "no", recorded=False, exception=error
            )


def always(answer: bool) -> Callable[[object], bool]:
    """What is known of every owner: ``answer``."""
    return lambda _: answer


@given(st.data())
def test_every_doubt_the_ledger_can_learn_from_is_marked(data: st.DataObject) -> None:
    """When the rules find a key in doubt for a reason that adds to its row, the row is marked."""
    trace, _ = drive(data, probing=True, wait=0.0)
    for i, request in enumerate(trace.requests[:-2]):
        found = trace.answers[i]
        if not isinstance(request, Read) or not isinstance(found, Record):
            continue
        if found.state not in UNSETTLED:
            continue
        seen = trace.answers[i + 1]
        assert isinstance(seen, Sighting)
        step = next_step(
            found, "act", HASH, now=NOW, owner_gone=always(seen.gone), owner_lost=always(seen.lost)
        )
        if isinstance(step, Doubt) and may_mark(step.record, step.reason):
            assert trace.requests[i + 2] == Mark(step.record, step.reason)


@pytest.mark.parametrize("marked", [True, False], ids=["marked", "row moved on"])
def test_a_refused_mark_decides_again_and_a_mark_that_went_through_ends_in_doubt(
    marked: bool,
) -> None:
    """A dead owner's key is marked in doubt; if the row moved on first, the key is read again."""
    expired = record(State.ATTEMPTING, lease=-5)
    steps = call()
    assert steps.send(None) == Read("k")
    assert steps.send(expired) == Look(expired)
    mark = steps.send(Sighting(gone=True, lost=False))
    assert isinstance(mark, Mark)
    if marked:
        with pytest.raises(StopIteration) as done:
            steps.send(marked)
        assert isinstance(done.value.value, InDoubt)
        assert done.value.value.reason is mark.reason
        return
    assert steps.send(marked) == Read("k")  # the owner finished meanwhile
    with pytest.raises(StopIteration) as done:
        steps.send(record(State.SUCCEEDED))
    assert done.value.value == Succeeded("k", 1, replayed=True)


def test_a_live_lease_whose_owner_lost_its_session_is_marked_in_doubt() -> None:
    """A lease still running is no proof of a live owner: a lost session makes it suspect."""
    held = record(State.ATTEMPTING)  # its lease runs for 25 s more
    steps = call(wait=1.0)
    assert steps.send(None) == Read("k")
    assert steps.send(held) == Look(held)
    assert steps.send(Sighting(gone=False, lost=True)) == Mark(held, DoubtReason.SESSION_LOST)
