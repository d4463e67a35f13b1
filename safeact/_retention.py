"""Retention: forgetting settled keys and finished sagas, by an operator's explicit purge.

A purged key is forgotten, so its next call runs the action again; what is never purged is
an unsettled key (ATTEMPTING, IN_DOUBT), a key of a saga that is not finished, and history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from safeact._audit import record_event
from safeact._history import Why
from safeact._ledger import Ledger
from safeact._protocol import UNSETTLED, SagaState, State
from safeact._rows import time_text

if TYPE_CHECKING:
    from collections.abc import Iterable
    from datetime import datetime

    from safeact._ledger import Executor

__all__ = ["Purged", "Retention"]


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
                    "WITH kept AS (SELECT saga_id FROM sagas WHERE NOT "  # noqa: S608 - placeholders
                    "(state IN (?, ?) AND updated_at < ?)), "
                    "in_kept AS (SELECT key FROM saga_steps WHERE saga_id IN "
                    "(SELECT saga_id FROM kept) UNION SELECT key || ':compensate' "
                    "FROM saga_steps WHERE saga_id IN (SELECT saga_id FROM kept)) "
                    "SELECT key, attempt_id, state FROM calls WHERE state IN "
                    f"({marks}) AND finished_at < ? "
                    "AND key NOT IN (SELECT key FROM in_kept) ORDER BY key",
                    (*finals, cutoff, *(s.value for s in wanted), cutoff),
                ).fetchall()
            ]
            if not dry_run:
                self._remove(db, keys, sagas)
        return Purged(keys=tuple(key for key, _, _ in keys), sagas=tuple(s for s, _ in sagas))

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
        for saga_id, saga_state in sagas:
            event = self._new_event(saga_id, None, Why.PURGED, operator=True, from_state=saga_state)
            record_event(db, "saga", event)
            db.execute("DELETE FROM saga_steps WHERE saga_id = ?", (saga_id,))
            db.execute("DELETE FROM sagas WHERE saga_id = ?", (saga_id,))
