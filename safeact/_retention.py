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

from typing import TYPE_CHECKING

import attrs

from safeact._audit import record_event
from safeact._history import Why
from safeact._ledger import Ledger
from safeact._protocol import UNSETTLED, ApprovalState, SagaState, State
from safeact._rows import time_text

if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import datetime

    from safeact._ledger import Executor

__all__ = ["Purged", "Retention"]


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


@attrs.frozen
class Purged:
    """What a purge removed (or, in a dry run, would remove): keys and saga ids."""

    keys: tuple[str, ...]
    sagas: tuple[str, ...]


class Retention(Ledger):
    """The purge of old settled keys and finished sagas."""

    def purge(
        self,
        older_than: datetime,
        *,
        states: Iterable[State] = (State.SUCCEEDED, State.FAILED),
        dry_run: bool = False,
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

        Raises:
            ValueError: ``states`` includes ATTEMPTING or IN_DOUBT, which are never purged.

        """
        wanted = frozenset(states)
        if wanted & UNSETTLED:
            raise ValueError(
                "ATTEMPTING and IN_DOUBT keys are never purged: resolve them first "
                f"(asked for {', '.join(sorted(s.value for s in wanted & UNSETTLED))})"
            )
        cutoff = time_text(older_than)
        finals = (SagaState.COMPLETED.value, SagaState.COMPENSATED.value)
        with self._errors(), self._transaction(sync=False) as db:
            sagas = [
                (saga_id, SagaState(state))
                for saga_id, state in db.execute(
                    "SELECT saga_id, state FROM sagas WHERE state IN (?, ?) AND updated_at < ? "
                    "ORDER BY saga_id",
                    (*finals, cutoff),
                ).fetchall()
            ]
            marks = ", ".join("?" * len(wanted)) or "NULL"
            keys = [
                (key, attempt_id, State(state))
                for key, attempt_id, state in db.execute(
                    f"{_KEPT_STEPS} SELECT key, attempt_id, state FROM calls WHERE state IN "  # noqa: S608 - placeholders
                    f"({marks}) AND finished_at < ? "
                    "AND key NOT IN (SELECT key FROM in_kept) "
                    # A request waiting for a person (or a yes for a call) keeps its key.
                    "AND key NOT IN (SELECT key FROM approvals WHERE state IN (?, ?) "
                    "OR decided_at >= ?) ORDER BY key",
                    (*finals, cutoff, *(s.value for s in wanted), cutoff, *_WAITING, cutoff),
                ).fetchall()
            ]
            denied = [] if State.FAILED not in wanted else self._denied(db, cutoff)
            if not dry_run:
                self._remove(db, keys, sagas)
                self._remove_denied(db, denied)
        return Purged(
            keys=tuple(sorted([key for key, _, _ in keys] + denied)),
            sagas=tuple(s for s, _ in sagas),
        )

    @staticmethod
    def _denied(db: Executor, cutoff: str | None) -> list[str]:
        """The keys denied before ``cutoff`` with no row in ``calls``, saga steps kept aside."""
        finals = (SagaState.COMPLETED.value, SagaState.COMPENSATED.value)
        return [
            str(key)
            for (key,) in db.execute(
                f"{_KEPT_STEPS} SELECT key FROM approvals WHERE state = ? AND decided_at < ? "  # noqa: S608 - placeholders
                "AND NOT EXISTS (SELECT 1 FROM calls WHERE calls.key = approvals.key) "
                "AND key NOT IN (SELECT key FROM in_kept) ORDER BY key",
                (*finals, cutoff, ApprovalState.DENIED.value, cutoff),
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
