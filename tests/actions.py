"""Tools shared by the tests and the subprocesses they start: effects are counted in a file."""

import math
import os
from pathlib import Path

import attrs

from safeact import SafeTool, Store, safe


@attrs.frozen
class Receipt:
    to: str
    amount: int


def record_effect(effects: Path, key: str) -> None:
    """Append one line for a real side effect, synced so a SIGKILL right after cannot lose it."""
    fd = os.open(effects, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, f"{key}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def unstorable_quotes(store: Store, effects: Path) -> SafeTool[[str], float]:
    """A guarded quote whose result the ledger cannot store (``nan`` under ``-> float``)."""

    @safe(store, name="quote")
    def quote_fx(key: str, pair: str) -> float:
        """Quote a currency pair."""
        record_effect(effects, "quote")
        return math.nan

    return quote_fx


def count_effects(effects: Path, key: str) -> int:
    """How many times the action for ``key`` really ran."""
    if not effects.exists():
        return 0
    return effects.read_text().splitlines().count(key)


def bury_owners(store: Store) -> None:
    """Make every running attempt's owner look dead, as after its process was killed.

    In-process crash simulations cannot kill the test process; this gives the records the
    start time of another process, which is what a reused process id looks like, and a
    process group that has no process left, as the group of a killed job.
    """
    with store._transaction(sync=False) as db:
        db.execute(
            "UPDATE calls SET owner_started = -2, owner_group = ? WHERE state = 'attempting'",
            (NO_GROUP,),
        )


def expire_leases(store: Store) -> None:
    """Make every running attempt's lease run out, as when its owner froze or was cut off."""
    with store._transaction(sync=False) as db:
        db.execute(
            "UPDATE calls SET lease_until = '2000-01-01T00:00:00.000000+00:00' "
            "WHERE state = 'attempting'"
        )


def bury_attempt(store: Store, attempt_id: str) -> None:
    """Make the owner of attempt ``attempt_id`` look dead, whatever state its row is in.

    Like ``bury_owners``, for an owner whose key a caller has already marked in doubt (its
    lease ran out) before its process died.
    """
    with store._transaction(sync=False) as db:
        db.execute(
            "UPDATE calls SET owner_started = -2, owner_group = ? WHERE attempt_id = ?",
            (NO_GROUP, attempt_id),
        )


NO_GROUP = 2**31 - 1
"""A process group id that names no group: above any process id Linux gives (2**22 at most)."""
