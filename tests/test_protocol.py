"""The pure decisions of a key's state machine, and the checkpoints of a call."""

from datetime import UTC, datetime, timedelta

import attrs
import pytest

from safeact import DoubtReason, KeyConflictError, SafeError, State
from safeact._owner import Owner
from safeact._protocol import (
    Checkpoint,
    Doubt,
    Record,
    check_resolvable,
    checkpoint,
    checkpoint_hook,
    next_step,
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
