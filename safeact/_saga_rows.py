"""A saga's rows: its state, its steps in order, and the moves between its states.

``_saga_run`` decides what a saga does; this module only reads and writes what it decided, each
change with its event in the saga's history.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from safeact._audit import record_event
from safeact._history import saga_why
from safeact._ledger import READ_BATCH, Ledger
from safeact._protocol import SagaRecord, SagaState
from safeact._rows import Reading, member, read_saga, readable, time_text
from safeact._tables import SCHEMA_VERSION
from safeact.exceptions import CorruptRecordError, StoreError

if TYPE_CHECKING:
    from collections.abc import Generator

__all__ = ["SagaRows"]


class SagaRows(Ledger):
    """Reading sagas, and the three writes a saga makes: begin, record a step, move."""

    def get_saga(self, saga_id: str) -> SagaRecord | None:
        """Return the progress of saga ``saga_id``, or ``None`` if it never started.

        Raises:
            CorruptRecordError: the saga's row, or one of its steps, cannot be read.

        """
        rows = self._read(
            "SELECT saga_id, state, started_at, updated_at, aborted_step, abort_reason "
            "FROM sagas WHERE saga_id = ?",
            (saga_id,),
        )
        steps = self._read(
            "SELECT key, compensation FROM saga_steps WHERE saga_id = ? ORDER BY step_index",
            (saga_id,),
        )
        return read_saga(self.location, rows[0], steps) if rows else None

    def list_sagas(self, state: SagaState | None = None) -> list[SagaRecord]:
        """Return every saga, or those in ``state``; stuck rollbacks (COMPENSATING) first.

        Raises:
            CorruptRecordError: a saga cannot be read (``scan_sagas`` reads the rest).

        """
        return readable(self.scan_sagas(state))

    def scan_sagas(self, state: SagaState | None = None) -> list[SagaRecord | CorruptRecordError]:
        """Return the sagas as ``list_sagas`` does, with each corrupt saga's error in its place."""
        rows = self._read(
            "SELECT saga_id FROM sagas WHERE coalesce(?, state) = state "
            "ORDER BY state != ?, started_at, saga_id",
            (None if state is None else state.value, SagaState.COMPENSATING.value),
        )
        return self._sagas_named([saga_id for (saga_id,) in rows])

    def _saga_batches(
        self, state: SagaState | None = None, *, batch: int = READ_BATCH
    ) -> Generator[list[SagaRecord | CorruptRecordError], None, None]:
        """``scan_sagas``' sagas, in its order, ``batch`` at a time (``_read_stream``).

        For listings printed as they are read: memory holds one batch. Each saga is read
        while the stream is open: on PostgreSQL that takes a second session of the pool.
        """
        return self._read_stream(
            "SELECT saga_id FROM sagas WHERE coalesce(?, state) = state "
            "ORDER BY state != ?, started_at, saga_id",
            (None if state is None else state.value, SagaState.COMPENSATING.value),
            batch,
            lambda rows: self._sagas_named([saga_id for (saga_id,) in rows]),
        )

    def _sagas_named(self, saga_ids: list[str]) -> list[SagaRecord | CorruptRecordError]:
        """Each of the sagas ``saga_ids``, or its error; those purged meanwhile left out."""
        sagas: list[SagaRecord | CorruptRecordError] = []
        for saga_id in saga_ids:
            try:
                saga = self.get_saga(saga_id)
            except CorruptRecordError as error:
                sagas.append(error)
                continue
            if saga is not None:
                sagas.append(saga)
        return sagas

    def _saga_counts(self) -> tuple[dict[SagaState, int], int]:
        """How many sagas are in each state, counted in SQL; and how many could not be.

        A saga is counted by its state alone (the reads that show it judge the rest, and
        ``check``); one whose stored state is not one safeact writes is not counted.
        """
        rows = self._read("SELECT state, count(*), min(saga_id) FROM sagas GROUP BY state", ())
        counted: dict[SagaState, int] = {}
        uncounted = 0
        for state, count, saga_id in rows:
            try:
                with Reading(self.location, "sagas", saga_id):
                    counted[member("state", state, SagaState)] = int(count)
            except CorruptRecordError:
                uncounted += int(count)
        return counted, uncounted

    def _begin_saga(self, saga_id: str) -> SagaRecord:
        """Record saga ``saga_id`` as RUNNING unless it exists; return its progress."""
        event = self._new_event(saga_id, SagaState.RUNNING, saga_why(SagaState.RUNNING))
        now = time_text(event.at)
        with self._errors(), self._transaction(sync=False) as db:
            if db.execute(
                "INSERT INTO sagas (saga_id, state, started_at, updated_at, schema_version) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (saga_id) DO NOTHING",
                (saga_id, SagaState.RUNNING.value, now, now, SCHEMA_VERSION),
            ).rowcount:
                record_event(db, "saga", event)
        saga = self.get_saga(saga_id)
        if saga is None:
            raise StoreError(f"{self.location}: saga {saga_id!r} vanished while starting")
        return saga

    def _record_saga_step(
        self, saga_id: str, index: int, name: str, key: str, compensation: str | None
    ) -> str:
        """Record that step ``index`` of the saga is ``key``, unless it was recorded already.

        ``compensation`` names the tool that undoes it (None: nothing does).

        Returns the key recorded for that index, which differs from ``key`` if an earlier run
        of the saga took other steps.
        """
        with self._errors(), self._transaction(sync=False) as db:
            db.execute(
                "INSERT INTO saga_steps (saga_id, step_index, name, key, compensation) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (saga_id, step_index) DO NOTHING",
                (saga_id, index, name, key, compensation),
            )
            (recorded,) = db.execute(
                "SELECT key FROM saga_steps WHERE saga_id = ? AND step_index = ?",
                (saga_id, index),
            ).fetchone()
        return str(recorded)

    def _move_saga(
        self,
        saga_id: str,
        state: SagaState,
        *,
        aborted_step: str | None = None,
        abort_reason: str | None = None,
    ) -> None:
        """Set the saga's state; the abort's step and reason are kept once recorded."""
        event = self._new_event(saga_id, state, saga_why(state))
        with self._errors(), self._transaction(sync=False) as db:
            (now,) = db.execute(
                f"SELECT state FROM sagas WHERE saga_id = ?{self._FOR_UPDATE}",  # noqa: S608 - constants
                (saga_id,),
            ).fetchone()
            if now != state.value:
                record_event(db, "saga", attrs.evolve(event, from_state=SagaState(now)))
            db.execute(
                "UPDATE sagas SET state = ?, updated_at = ?, "
                "aborted_step = coalesce(aborted_step, ?), "
                "abort_reason = coalesce(abort_reason, ?) WHERE saga_id = ?",
                (state.value, time_text(event.at), aborted_step, abort_reason, saga_id),
            )
