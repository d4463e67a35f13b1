"""Retention: forgetting settled keys and finished sagas, by an operator's explicit purge.

A purged key is forgotten, so its next call runs the action again; what is never purged is
an unsettled key (ATTEMPTING, IN_DOUBT), a key of a saga that is not finished, and history.

A key's approval request (``_approvals``) is part of the key. Its row goes with the key's,
the call's kept arguments with it; a key whose request waits for a person (PENDING), or
whose approval no call has used yet (APPROVED), is not purged at all, nor one decided at
or after the cut-off. A denied request is final for its key, which replays it as a
failure: one with no row in ``calls`` (the action never began) is purged as a FAILED key
is, when FAILED is asked for and it was denied before the cut-off.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

import attrs

from safeact._audit import record_event
from safeact._history import Why
from safeact._ledger import Ledger
from safeact._protocol import UNSETTLED, ApprovalState, SagaState, State, checkpoint
from safeact._rows import time_text

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from datetime import datetime

    from safeact._ledger import Executor

__all__ = ["BATCH", "MOST", "Purged", "Retention"]


_KEPT_STEPS = (
    "WITH kept AS (SELECT saga_id FROM sagas WHERE NOT (state IN (?, ?) AND updated_at < ?)), "
    "in_kept AS (SELECT key FROM saga_steps WHERE saga_id IN (SELECT saga_id FROM kept) "
    "UNION SELECT key || ':compensate' FROM saga_steps WHERE saga_id IN "
    "(SELECT saga_id FROM kept))"
)
"""The keys of steps and compensations of sagas a purge keeps (``in_kept``): they stay.

Its parameters: the two final saga states, then the cut-off.
"""

_WAITING = (ApprovalState.PENDING.value, ApprovalState.APPROVED.value)
"""Approval states that keep a key: a person has not answered, or a call is to use a yes."""

_FINAL_SAGAS = (SagaState.COMPLETED.value, SagaState.COMPENSATED.value)
"""The states of a saga a purge takes: it finished, one way or the other."""

BATCH = 1000
"""Keys (or sagas) per transaction of a purge, unless it is given another batch."""

MOST = 10_000
"""The largest batch: its keys are named one by one in the statements that check them."""


@attrs.frozen
class _Candidates:
    """A read of what a purge may take, in key order.

    ``sql``'s first ``?`` is the key to read after, its last the limit, ``parameters`` the
    ones between.
    """

    sql: str
    parameters: tuple[object, ...]


@attrs.frozen
class Purged:
    """What a purge removed (or, in a dry run, would remove): keys and saga ids."""

    keys: tuple[str, ...]
    sagas: tuple[str, ...]


class Retention(Ledger):
    """The purge of old settled keys and finished sagas, a bounded transaction at a time."""

    def purge(
        self,
        older_than: datetime,
        *,
        states: Iterable[State] = (State.SUCCEEDED, State.FAILED),
        dry_run: bool = False,
        batch: int = BATCH,
    ) -> Purged:
        """Remove keys in ``states`` that finished before ``older_than``, and finished sagas.

        A purged key is forgotten: its next call runs the action again, so purge only keys
        nobody will retry. Keys in a saga go only with their saga, which goes once it
        COMPLETED or was COMPENSATED before ``older_than``. Histories are kept, with a
        ``purged`` event. ``dry_run`` reports what would go and removes nothing.

        A key's approval request goes with it (and the arguments it kept). A key whose
        request is pending or approved and unused, or was decided at or after
        ``older_than``, stays. With FAILED in ``states``, a request denied before
        ``older_than`` whose key has no other row goes too (its next call asks again).

        At most ``batch`` keys (or sagas) go in each transaction, so other callers claim
        keys between them; each key goes with its ``purged`` event, in one transaction. An
        interrupted purge (a crash, a kill) has removed whole batches and nothing else: run
        it again to remove the rest (``_purging`` yields each batch as it commits).

        Raises:
            ValueError: ``states`` includes ATTEMPTING or IN_DOUBT, which are never purged;
                ``batch`` is not between 1 and 10,000.

        """
        keys: list[str] = []
        sagas: list[str] = []
        for done in self._purging(older_than, states=states, dry_run=dry_run, batch=batch):
            keys.extend(done.keys)
            sagas.extend(done.sagas)
        return Purged(keys=tuple(sorted(keys)), sagas=tuple(sorted(sagas)))

    def _purging(
        self,
        older_than: datetime,
        *,
        states: Iterable[State] = (State.SUCCEEDED, State.FAILED),
        dry_run: bool = False,
        batch: int = BATCH,
    ) -> Iterator[Purged]:
        """``purge``, one batch at a time: each is yielded once its transaction committed.

        Each batch's candidates are read first, outside any write (a read never stops a
        claim), then checked again, and removed, in a transaction of their own: the write
        lock is held for what ``batch`` rows cost, not for what the ledger holds.
        """
        wanted = frozenset(states)
        if wanted & UNSETTLED:
            raise ValueError(
                "ATTEMPTING and IN_DOUBT keys are never purged: resolve them first "
                f"(asked for {', '.join(sorted(s.value for s in wanted & UNSETTLED))})"
            )
        if not 1 <= batch <= MOST:
            raise ValueError(f"batch must be between 1 and {MOST}, got {batch}")
        cutoff = time_text(older_than)
        marks = ", ".join("?" * len(wanted)) or "NULL"
        values = tuple(s.value for s in wanted)
        keys = _Candidates(
            f"SELECT key FROM calls WHERE key > ? AND state IN ({marks}) "  # noqa: S608 - placeholders
            "AND finished_at < ? ORDER BY key LIMIT ?",
            (*values, cutoff),
        )
        sagas = _Candidates(
            "SELECT saga_id FROM sagas WHERE saga_id > ? AND state IN (?, ?) "
            "AND updated_at < ? ORDER BY saga_id LIMIT ?",
            (*_FINAL_SAGAS, cutoff),
        )
        denied = _Candidates(
            "SELECT key FROM approvals WHERE key > ? AND state = ? AND decided_at < ? "
            "ORDER BY key LIMIT ?",
            (ApprovalState.DENIED.value, cutoff),
        )
        # Sagas first: a purge stopped between the two leaves a finished saga's steps as
        # plain keys, which replay; never a saga whose steps' keys are gone.
        for candidates in self._candidates(sagas, batch):
            with self._batch(dry_run=dry_run) as db:
                finished = self._purgeable_sagas(db, candidates, cutoff)
                if not dry_run:
                    self._remove(db, [], finished)
                    checkpoint("purging")
            yield Purged(keys=(), sagas=tuple(saga for saga, _ in finished))
        for candidates in self._candidates(keys, batch):
            with self._batch(dry_run=dry_run) as db:
                found = self._purgeable_keys(db, candidates, values, cutoff)
                if not dry_run:
                    self._remove(db, found, [])
                    checkpoint("purging")
            yield Purged(keys=tuple(key for key, _, _ in found), sagas=())
        if State.FAILED not in wanted:
            return
        for candidates in self._candidates(denied, batch):
            with self._batch(dry_run=dry_run) as db:
                gone = self._denied(db, candidates, cutoff)
                if not dry_run:
                    self._remove_denied(db, gone)
                    checkpoint("purging")
            yield Purged(keys=tuple(gone), sagas=())

    @contextlib.contextmanager
    def _batch(self, *, dry_run: bool) -> Iterator[Executor]:
        """One batch's transaction; then, unless a dry run, a pause as long as it took.

        SQLite hands its write lock to no one in particular: a purge that began its next
        batch at once would take the lock again before a waiting claim's busy handler woke
        (it sleeps up to 100 ms between tries), batch after batch, and claims would wait for
        the whole purge, or fail after the busy timeout. Pausing as long as each batch held
        the lock leaves it free half the time, so each waiting claim soon finds it free.
        """
        started = time.monotonic()
        with self._errors(), self._transaction(sync=False) as db:
            yield db
        if not dry_run:
            time.sleep(time.monotonic() - started)

    def _candidates(self, query: _Candidates, batch: int) -> Iterator[list[str]]:
        """``query``'s rows, ``batch`` at a time in key order, each batch read on its own."""
        after: object = ""  # keys and saga ids are never empty
        while True:
            with self._errors():
                rows = self._read(query.sql, (after, *query.parameters, batch))
            # A key that is not text was written outside safeact: never purged (check names it).
            named = [key for (key,) in rows if isinstance(key, str)]
            if named:
                yield named
            if len(rows) < batch:
                return
            after = rows[-1][0]

    @staticmethod
    def _purgeable_keys(
        db: Executor, candidates: list[str], states: tuple[str, ...], cutoff: str | None
    ) -> list[tuple[str, str, State]]:
        """Those of ``candidates`` a purge of ``states`` takes, as the ledger stands in ``db``."""
        marks = ", ".join("?" * len(states))
        named = ", ".join("?" * len(candidates))
        return [
            (key, attempt_id, State(state))
            for key, attempt_id, state in db.execute(
                f"{_KEPT_STEPS} SELECT key, attempt_id, state FROM calls WHERE key IN ({named}) "  # noqa: S608 - placeholders
                f"AND state IN ({marks}) AND finished_at < ? "
                "AND key NOT IN (SELECT key FROM in_kept) "
                # A request waiting for a person (or a yes for a call) keeps its key.
                "AND key NOT IN (SELECT key FROM approvals WHERE state IN (?, ?) "
                "OR decided_at >= ?) ORDER BY key",
                (*_FINAL_SAGAS, cutoff, *candidates, *states, cutoff, *_WAITING, cutoff),
            ).fetchall()
        ]

    @staticmethod
    def _purgeable_sagas(
        db: Executor, candidates: list[str], cutoff: str | None
    ) -> list[tuple[str, SagaState]]:
        """Those of ``candidates`` finished before ``cutoff``, as the ledger stands in ``db``."""
        named = ", ".join("?" * len(candidates))
        return [
            (saga_id, SagaState(state))
            for saga_id, state in db.execute(
                f"SELECT saga_id, state FROM sagas WHERE saga_id IN ({named}) "  # noqa: S608 - placeholders
                "AND state IN (?, ?) AND updated_at < ? ORDER BY saga_id",
                (*candidates, *_FINAL_SAGAS, cutoff),
            ).fetchall()
        ]

    @staticmethod
    def _denied(db: Executor, candidates: list[str], cutoff: str | None) -> list[str]:
        """Those of ``candidates`` denied before ``cutoff``, as the ledger stands in ``db``.

        Only those with no row in ``calls``, and not a step of a saga a purge keeps.
        """
        named = ", ".join("?" * len(candidates))
        return [
            str(key)
            for (key,) in db.execute(
                f"{_KEPT_STEPS} SELECT key FROM approvals WHERE key IN ({named}) "  # noqa: S608 - placeholders
                "AND state = ? AND decided_at < ? "
                "AND NOT EXISTS (SELECT 1 FROM calls WHERE calls.key = approvals.key) "
                "AND key NOT IN (SELECT key FROM in_kept) ORDER BY key",
                (*_FINAL_SAGAS, cutoff, *candidates, ApprovalState.DENIED.value, cutoff),
            ).fetchall()
        ]

    def _remove_denied(self, db: Executor, keys: list[str]) -> None:
        for key in keys:
            event = self._new_event(key, None, Why.PURGED, operator=True, note="denied approval")
            record_event(db, "key", event)
            db.execute(
                "DELETE FROM approvals WHERE key = ? AND state = ?",
                (key, ApprovalState.DENIED.value),
            )

    def _remove(
        self,
        db: Executor,
        keys: list[tuple[str, str, State]],
        sagas: list[tuple[str, SagaState]],
    ) -> None:
        for key, attempt_id, state in keys:
            event = self._new_event(
                key, None, Why.PURGED, operator=True, from_state=state, attempt_id=attempt_id
            )
            record_event(db, "key", event)
            db.execute(
                "DELETE FROM calls WHERE key = ? AND attempt_id = ? AND state = ?",
                (key, attempt_id, state.value),
            )
            db.execute("DELETE FROM late_completions WHERE key = ?", (key,))
            # Only a decided approval: a request a concurrent call has just made again (its
            # consumed approval asked anew) stays for a person to answer.
            db.execute(
                "DELETE FROM approvals WHERE key = ? AND state IN (?, ?)",
                (key, ApprovalState.CONSUMED.value, ApprovalState.DENIED.value),
            )
        for saga_id, saga_state in sagas:
            event = self._new_event(saga_id, None, Why.PURGED, operator=True, from_state=saga_state)
            record_event(db, "saga", event)
            db.execute("DELETE FROM saga_steps WHERE saga_id = ?", (saga_id,))
            db.execute("DELETE FROM sagas WHERE saga_id = ?", (saga_id,))
