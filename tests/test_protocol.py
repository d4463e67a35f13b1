"""The pure decisions of a key's state machine, and the checkpoints of a call."""

from datetime import UTC, datetime, timedelta

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from safeact import DoubtReason, KeyConflictError, SafeError, State
from safeact._owner import Owner
from safeact._protocol import (
    OWNER_KNOWS,
    PROOF,
    Checkpoint,
    Doubt,
    Record,
    Refusal,
    abandonment,
    check_resolvable,
    checkpoint,
    checkpoint_hook,
    may_mark,
    next_step,
    owner_may_write,
    release_refusal,
)

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
HASH = "0123456789abcdef" * 4
ATTEMPTING = Record(
    key="k",
    tool="act",
    state=State.ATTEMPTING,
    args_hash=HASH,
    attempt_id="attempt-1",
    attempted_at=NOW - timedelta(seconds=5),
    owner=Owner(host="h", boot_id="boot", pid=7, started=70),
    lease_until=NOW + timedelta(seconds=25),
)


def alive(owner: Owner) -> bool:
    return False


def test_attempting_key_whose_lease_ends_now_is_in_doubt() -> None:
    """An ATTEMPTING key whose lease ends at this very moment is in doubt: lease expired."""
    record = attrs.evolve(ATTEMPTING, lease_until=NOW)
    expected = Doubt(record, DoubtReason.LEASE_EXPIRED)
    assert expected == next_step(record, "act", HASH, now=NOW, owner_gone=alive)


def test_key_of_another_tool_conflicts_naming_the_key() -> None:
    """A key recorded for another tool raises KeyConflictError for that key, naming both tools."""
    with pytest.raises(KeyConflictError) as caught:
        next_step(ATTEMPTING, "other", HASH, now=NOW, owner_gone=alive)
    expected = (
        "k",
        (
            "key 'k' is already recorded for tool 'act', not 'other'; nothing ran. "
            "Use a key that identifies this exact action."
        ),
    )
    assert expected == (caught.value.key, str(caught.value))


def test_key_of_other_arguments_conflicts_naming_both_hashes() -> None:
    """A key recorded for other arguments raises for that key, naming both hashes by 12 digits."""
    with pytest.raises(KeyConflictError) as caught:
        next_step(ATTEMPTING, "act", HASH[::-1], now=NOW, owner_gone=alive)
    expected = (
        "k",
        (
            "key 'k' is already recorded for other arguments (args hash 0123456789ab, "
            "not fedcba987654); nothing ran. Use a key that identifies this exact action."
        ),
    )
    assert expected == (caught.value.key, str(caught.value))


def test_settled_key_is_not_resolvable_and_the_error_says_which_keys_are() -> None:
    """Resolving a SUCCEEDED key raises SafeError naming its state and the keys that need one."""
    record = attrs.evolve(ATTEMPTING, state=State.SUCCEEDED)
    expected = (
        r"^cannot resolve key 'k': it is succeeded, not in doubt; "
        r"only ATTEMPTING and IN_DOUBT keys need a decision$"
    )
    with pytest.raises(SafeError, match=expected):
        check_resolvable("k", record)


def test_checkpoint_hook_is_told_each_checkpoint_while_installed() -> None:
    """An installed hook receives the name of each checkpoint reached, and only while installed."""
    reached: list[Checkpoint] = []
    with checkpoint_hook(reached.append):
        checkpoint("before_claim")
        checkpoint("after_call")
    checkpoint("after_record")
    assert reached == ["before_claim", "after_call"]


def in_doubt(reason: DoubtReason | None) -> Record:
    """``ATTEMPTING`` marked IN_DOUBT for ``reason``, its lease still running."""
    return attrs.evolve(ATTEMPTING, state=State.IN_DOUBT, doubt_reason=reason)


LEASE_OUT = attrs.evolve(ATTEMPTING, lease_until=NOW - timedelta(seconds=1))
SUSPICION = [DoubtReason.LEASE_EXPIRED, DoubtReason.SESSION_LOST]
SETTLED = [State.SUCCEEDED, State.FAILED, State.RELEASED]
RECORDS = st.builds(
    lambda state, reason, lease: attrs.evolve(
        ATTEMPTING, state=state, doubt_reason=reason, lease_until=NOW + timedelta(seconds=lease)
    ),
    st.sampled_from(State),
    st.none() | st.sampled_from(DoubtReason),
    st.integers(-60, 60),
)


def gone(owner: Owner) -> bool:
    return True


def lost(owner: Owner) -> bool:
    return True


@pytest.mark.parametrize("reason", sorted(PROOF, key=str))
def test_a_release_is_allowed_on_recorded_proof(reason: DoubtReason) -> None:
    """A key in doubt because its owner crashed or was interrupted may be released."""
    assert release_refusal(in_doubt(reason), owner_gone=False) is None


@pytest.mark.parametrize("record", [LEASE_OUT, *map(in_doubt, SUSPICION)], ids=str)
def test_a_release_is_allowed_when_the_owner_is_gone_now(record: Record) -> None:
    """An owner provably gone now is proof, whatever made the key suspect."""
    assert release_refusal(record, owner_gone=True) is None


def test_a_release_on_a_lease_that_ran_out_is_refused_but_forceable() -> None:
    """A lease that ran out is suspicion: the refusal names the owner and may be forced."""
    expected = Refusal(
        "its owner, process 7 on host 'h', is not proven finished: its lease ran out, which a "
        "frozen or cut-off process that may still act also shows",
        forceable=True,
    )
    assert expected == release_refusal(LEASE_OUT, owner_gone=False)


@pytest.mark.parametrize("reason", SUSPICION, ids=str)
def test_a_release_on_suspicion_is_refused_but_forceable(reason: DoubtReason) -> None:
    """A key in doubt on suspicion is refused, saying which suspicion; an operator may force."""
    refusal = release_refusal(in_doubt(reason), owner_gone=False)
    assert refusal is not None
    assert (refusal.forceable, f"in doubt ({reason.value})" in refusal.reason) == (True, True)


def test_a_stale_crash_reason_on_an_attempting_row_is_no_proof() -> None:
    """Only an IN_DOUBT row's doubt reason counts: an ATTEMPTING row is judged by its owner."""
    record = attrs.evolve(LEASE_OUT, doubt_reason=DoubtReason.CRASHED)
    refusal = release_refusal(record, owner_gone=False)
    assert refusal is not None
    assert refusal.forceable


@pytest.mark.parametrize("owner_gone", [False, True])
def test_a_key_whose_result_was_not_stored_is_never_released(owner_gone: bool) -> None:
    """The action is known to have run: the refusal cannot be forced, even if the owner is gone."""
    refusal = release_refusal(in_doubt(DoubtReason.RESULT_NOT_STORED), owner_gone=owner_gone)
    assert refusal is not None
    assert (refusal.forceable, "only be resolved as happened" in refusal.reason) == (False, True)


@given(record=RECORDS, owner_gone=st.booleans())
def test_a_release_is_allowed_exactly_on_proof(record: Record, owner_gone: bool) -> None:
    """Any record may be released iff proven finished and not known to have run (never then)."""
    reason = record.doubt_reason if record.state is State.IN_DOUBT else None
    proof = reason in PROOF or owner_gone
    ran = reason is DoubtReason.RESULT_NOT_STORED
    refusal = release_refusal(record, owner_gone=owner_gone)
    assert (refusal is None, refusal is not None and not refusal.forceable) == (
        proof and not ran,
        ran,
    )


@pytest.mark.parametrize(
    ("owner_gone", "owner_lost", "lease_out", "expected"),
    [
        (True, True, True, DoubtReason.CRASHED),
        (False, True, True, DoubtReason.LEASE_EXPIRED),
        (False, True, False, DoubtReason.SESSION_LOST),
        (False, False, False, None),
    ],
    ids=["gone-first", "then-lease", "then-session", "live"],
)
def test_abandonment_of_an_attempting_key_looks_for_proof_then_suspicion(
    owner_gone: bool, owner_lost: bool, lease_out: bool, expected: DoubtReason | None
) -> None:
    """Owner gone (proof) wins over a lease that ran out, which wins over a lost session."""
    record = LEASE_OUT if lease_out else ATTEMPTING
    actual = abandonment(
        record, now=NOW, owner_gone=lambda _: owner_gone, owner_lost=lambda _: owner_lost
    )
    assert expected == actual


@pytest.mark.parametrize("reason", SUSPICION, ids=str)
def test_a_key_in_doubt_on_suspicion_whose_owner_is_gone_reports_crashed(
    reason: DoubtReason,
) -> None:
    """Suspicion gives way to proof: the caller is told CRASHED, and records it."""
    actual = abandonment(in_doubt(reason), now=NOW, owner_gone=gone)
    assert actual is DoubtReason.CRASHED


@pytest.mark.parametrize("reason", SUSPICION, ids=str)
def test_a_key_in_doubt_on_suspicion_whose_owner_lives_keeps_its_reason(
    reason: DoubtReason,
) -> None:
    """Without proof, a key in doubt on suspicion reports that suspicion."""
    assert abandonment(in_doubt(reason), now=NOW, owner_gone=alive, owner_lost=lost) is reason


@pytest.mark.parametrize("reason", sorted(OWNER_KNOWS | PROOF, key=str), ids=str)
def test_a_key_in_doubt_on_proof_or_the_owners_word_keeps_its_reason(reason: DoubtReason) -> None:
    """Crashed, interrupted or result-not-stored is reported as it is, owner gone or not."""
    assert abandonment(in_doubt(reason), now=NOW, owner_gone=gone) is reason


def test_a_key_in_doubt_without_a_reason_reports_crashed() -> None:
    """A row marked before doubt reasons were recorded reads as crashed."""
    assert abandonment(in_doubt(None), now=NOW, owner_gone=alive) is DoubtReason.CRASHED


@pytest.mark.parametrize("state", SETTLED, ids=str)
def test_a_settled_key_is_never_abandoned(state: State) -> None:
    """A settled key needs no decision, whatever its owner's state."""
    record = attrs.evolve(LEASE_OUT, state=state)
    assert abandonment(record, now=NOW, owner_gone=gone, owner_lost=lost) is None


@pytest.mark.parametrize("reason", list(DoubtReason), ids=str)
def test_an_attempting_key_may_be_marked_for_any_reason(reason: DoubtReason) -> None:
    """An ATTEMPTING row holds no doubt yet: any mark adds to what the ledger knows."""
    assert may_mark(ATTEMPTING, reason)


@pytest.mark.parametrize(
    ("held", "reason", "expected"),
    [
        (DoubtReason.LEASE_EXPIRED, DoubtReason.CRASHED, True),
        (DoubtReason.SESSION_LOST, DoubtReason.CRASHED, True),
        (DoubtReason.LEASE_EXPIRED, DoubtReason.INTERRUPTED, True),
        (DoubtReason.CRASHED, DoubtReason.RESULT_NOT_STORED, True),
        (DoubtReason.LEASE_EXPIRED, DoubtReason.LEASE_EXPIRED, False),
        (DoubtReason.LEASE_EXPIRED, DoubtReason.SESSION_LOST, False),
        (DoubtReason.CRASHED, DoubtReason.LEASE_EXPIRED, False),
        (DoubtReason.CRASHED, DoubtReason.CRASHED, False),
        (None, DoubtReason.CRASHED, False),
        (DoubtReason.INTERRUPTED, DoubtReason.CRASHED, False),
        (DoubtReason.RESULT_NOT_STORED, DoubtReason.INTERRUPTED, False),
        (DoubtReason.RESULT_NOT_STORED, DoubtReason.CRASHED, False),
    ],
    ids=lambda value: str(getattr(value, "value", value)),
)
def test_a_key_in_doubt_is_marked_again_only_to_learn_more(
    held: DoubtReason | None, reason: DoubtReason, expected: bool
) -> None:
    """Proof replaces suspicion and the owner's word replaces a caller's; nothing else."""
    assert expected == may_mark(in_doubt(held), reason)


@given(held=st.sampled_from(DoubtReason), reason=st.sampled_from(DoubtReason))
def test_a_mark_never_replaces_proof_or_the_owners_word_with_less(
    held: DoubtReason, reason: DoubtReason
) -> None:
    """A mark never replaces the owner's own word, nor proof with mere suspicion."""
    if may_mark(in_doubt(held), reason):
        assert held not in OWNER_KNOWS
        assert held not in PROOF or reason in OWNER_KNOWS


@pytest.mark.parametrize("state", SETTLED, ids=str)
def test_a_settled_key_is_never_marked(state: State) -> None:
    """A settled key stays as it is: no mark applies to it."""
    record = attrs.evolve(ATTEMPTING, state=state)
    assert [reason for reason in DoubtReason if may_mark(record, reason)] == []


def test_the_owners_process_may_write_its_attempt() -> None:
    """The process that claimed the attempt records its end."""
    assert owner_may_write(ATTEMPTING, ATTEMPTING.owner.pid)


def test_a_forked_child_may_not_write_its_parents_attempt() -> None:
    """Another process (a child forked inside the action) leaves the attempt's row alone."""
    assert not owner_may_write(ATTEMPTING, ATTEMPTING.owner.pid + 1)
