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


def alive(record: Record) -> bool:
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


def gone(record: Record) -> bool:
    return True


def lost(owner: Owner) -> bool:
    return True


NOT_PROOF = {
    DoubtReason.LEASE_EXPIRED: "lease ran out",
    DoubtReason.SESSION_LOST: "session ended",
    DoubtReason.INTERRUPTED: "interrupted",
    DoubtReason.FAILURE_NOT_STORED: "raised",
}


def test_a_release_is_allowed_on_proof() -> None:
    """An owner provably gone (recorded, or seen now) is proof: the release goes through."""
    assert release_refusal(in_doubt(DoubtReason.CRASHED), DoubtReason.CRASHED) is None


@pytest.mark.parametrize(("reason", "said"), NOT_PROOF.items(), ids=str)
def test_a_release_without_proof_is_refused_but_forceable(reason: DoubtReason, said: str) -> None:
    """Suspicion or the owner's word is no proof: the refusal names owner and reason; forceable."""
    refusal = release_refusal(in_doubt(reason), reason)
    assert refusal is not None
    assert refusal.forceable
    assert "process 7 on host 'h', is not proven finished" in refusal.reason
    assert said in refusal.reason


def test_a_key_whose_result_was_not_stored_is_never_released() -> None:
    """The action is known to have run: the refusal cannot be forced."""
    reason = DoubtReason.RESULT_NOT_STORED
    refusal = release_refusal(in_doubt(reason), reason)
    assert refusal is not None
    assert (refusal.forceable, "only be resolved as happened" in refusal.reason) == (False, True)


@given(record=RECORDS, reason=st.sampled_from(DoubtReason))
def test_a_release_is_allowed_exactly_on_proof(record: Record, reason: DoubtReason) -> None:
    """Released iff the owner is proven gone; never, not even by force, once known to have run."""
    refusal = release_refusal(record, reason)
    assert (refusal is None, refusal is not None and not refusal.forceable) == (
        reason in PROOF,
        reason is DoubtReason.RESULT_NOT_STORED,
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


@pytest.mark.parametrize("reason", NOT_PROOF, ids=str)
def test_a_key_in_doubt_without_proof_whose_owner_is_gone_reports_crashed(
    reason: DoubtReason,
) -> None:
    """Suspicion and the owner's word give way to proof: CRASHED, for the caller to record."""
    actual = abandonment(in_doubt(reason), now=NOW, owner_gone=gone)
    assert actual is DoubtReason.CRASHED


@pytest.mark.parametrize("reason", NOT_PROOF, ids=str)
def test_a_key_in_doubt_without_proof_whose_owner_lives_keeps_its_reason(
    reason: DoubtReason,
) -> None:
    """Without proof, a key in doubt reports what it is in doubt for."""
    assert abandonment(in_doubt(reason), now=NOW, owner_gone=alive, owner_lost=lost) is reason


@pytest.mark.parametrize("reason", [DoubtReason.CRASHED, DoubtReason.RESULT_NOT_STORED], ids=str)
def test_a_key_in_doubt_on_proof_or_known_to_have_run_keeps_its_reason(
    reason: DoubtReason,
) -> None:
    """Crashed or result-not-stored is reported as it is, owner gone or not."""
    assert abandonment(in_doubt(reason), now=NOW, owner_gone=gone) is reason


def test_a_key_in_doubt_without_a_reason_is_suspect_until_its_owner_is_gone() -> None:
    """A row marked before doubt reasons were recorded is no proof: suspect, or crashed if gone."""
    assert abandonment(in_doubt(None), now=NOW, owner_gone=alive) is DoubtReason.LEASE_EXPIRED
    assert abandonment(in_doubt(None), now=NOW, owner_gone=gone) is DoubtReason.CRASHED


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
        (DoubtReason.INTERRUPTED, DoubtReason.CRASHED, True),
        (DoubtReason.FAILURE_NOT_STORED, DoubtReason.CRASHED, True),
        (DoubtReason.LEASE_EXPIRED, DoubtReason.INTERRUPTED, True),
        (DoubtReason.SESSION_LOST, DoubtReason.FAILURE_NOT_STORED, True),
        (DoubtReason.CRASHED, DoubtReason.RESULT_NOT_STORED, True),
        (DoubtReason.INTERRUPTED, DoubtReason.RESULT_NOT_STORED, True),
        (DoubtReason.LEASE_EXPIRED, DoubtReason.LEASE_EXPIRED, False),
        (DoubtReason.LEASE_EXPIRED, DoubtReason.SESSION_LOST, False),
        (DoubtReason.CRASHED, DoubtReason.LEASE_EXPIRED, False),
        (DoubtReason.CRASHED, DoubtReason.INTERRUPTED, False),
        (DoubtReason.CRASHED, DoubtReason.CRASHED, False),
        (None, DoubtReason.CRASHED, True),
        (None, DoubtReason.LEASE_EXPIRED, False),
        (DoubtReason.INTERRUPTED, DoubtReason.FAILURE_NOT_STORED, False),
        (DoubtReason.INTERRUPTED, DoubtReason.LEASE_EXPIRED, False),
        (DoubtReason.RESULT_NOT_STORED, DoubtReason.INTERRUPTED, False),
        (DoubtReason.RESULT_NOT_STORED, DoubtReason.CRASHED, False),
    ],
    ids=lambda value: str(getattr(value, "value", value)),
)
def test_a_key_in_doubt_is_marked_again_only_to_learn_more(
    held: DoubtReason | None, reason: DoubtReason, expected: bool
) -> None:
    """'It ran' beats all, proof beats the rest, the owner's word beats suspicion; nothing else."""
    assert expected == may_mark(in_doubt(held), reason)


@given(held=st.sampled_from(DoubtReason), reason=st.sampled_from(DoubtReason))
def test_a_mark_never_replaces_what_is_known_with_less(
    held: DoubtReason, reason: DoubtReason
) -> None:
    """A mark never replaces 'it ran', nor proof with anything but 'it ran', nor with suspicion."""
    if may_mark(in_doubt(held), reason):
        assert held is not DoubtReason.RESULT_NOT_STORED
        assert held not in PROOF or reason is DoubtReason.RESULT_NOT_STORED
        assert reason not in SUSPICION


def test_a_key_released_by_force_takes_only_its_owners_word() -> None:
    """A released row still at its attempt is marked by its owner's own word, by nothing else."""
    released = attrs.evolve(ATTEMPTING, state=State.RELEASED)
    marked = {reason for reason in DoubtReason if may_mark(released, reason)}
    assert marked == set(OWNER_KNOWS)


@pytest.mark.parametrize("state", [State.SUCCEEDED, State.FAILED], ids=str)
def test_a_settled_key_is_never_marked(state: State) -> None:
    """A key with an outcome stays as it is: no mark applies to it."""
    record = attrs.evolve(ATTEMPTING, state=state)
    assert [reason for reason in DoubtReason if may_mark(record, reason)] == []


def test_the_owners_process_may_write_its_attempt() -> None:
    """The process that claimed the attempt records its end."""
    assert owner_may_write(ATTEMPTING, ATTEMPTING.owner.pid)


def test_a_forked_child_may_not_write_its_parents_attempt() -> None:
    """Another process (a child forked inside the action) leaves the attempt's row alone."""
    assert not owner_may_write(ATTEMPTING, ATTEMPTING.owner.pid + 1)
