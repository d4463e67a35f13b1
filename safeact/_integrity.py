"""A ledger's full check, for ``safeact check``: every row read as safeact reads it.

Listings read what they show and report the corrupt rows they meet. This reads every row of
every table, a batch at a time in key order (the next batch starts after the last key read,
so memory holds one batch whatever the ledger's size, and each batch is a short read of its
own), and reports each row that cannot be read, as ``PRAGMA integrity_check`` or ``fsck``
do for their layers.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import attrs

from safeact._ledger import COLUMNS, Ledger
from safeact._rows import (
    APPROVAL_COLUMNS,
    each,
    read_approval,
    read_event,
    read_late,
    read_record,
    read_saga,
)
from safeact.exceptions import CorruptRecordError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["TABLES", "Batch", "Integrity"]

TABLES = ("calls", "approvals", "late_completions", "sagas", "history")
"""The tables ``_check_rows`` reads, in its order."""

_EVENT = "at, why, by_kind, by_host, by_pid, from_state, to_state, attempt_id, note"
_LATE = "key, attempt_id, state, result, error_type, error_message, finished_at"
_SAGA = "saga_id, state, started_at, updated_at, aborted_step, abort_reason"


@attrs.frozen
class Batch:
    """One batch of ``table``'s rows: how many were read, and those that cannot be."""

    table: str
    rows: int
    corrupt: tuple[CorruptRecordError, ...]


class Integrity(Ledger):
    """Every row of the ledger, read and judged a batch at a time."""

    def _check_rows(self, batch: int) -> Iterator[Batch]:
        """Every table's rows in batches of at most ``batch``, each with its corrupt rows."""
        yield from self._batches("calls", COLUMNS, "key", batch, self._call)
        yield from self._batches("approvals", APPROVAL_COLUMNS, "key", batch, self._approval)
        # A late completion's key and attempt, as one text: its keyset cursor.
        yield from self._batches(
            "late_completions", _LATE, "key || ' ' || attempt_id", batch, self._late
        )
        yield from self._sagas(batch)
        yield from self._batches("history", f"kind, subject, {_EVENT}", "seq", batch, self._event)

    def _batches(
        self,
        table: str,
        columns: str,
        order: str,
        batch: int,
        read: Callable[[tuple[object, ...]], object],
    ) -> Iterator[Batch]:
        """``table``'s ``columns`` in ``order``, ``batch`` rows a time, each read by ``read``."""
        after: object = None
        while True:
            where = "" if after is None else f" WHERE {order} > ?"
            rows = self._read(
                f"SELECT {columns}, {order} FROM {table}{where} ORDER BY {order} LIMIT ?",  # noqa: S608 - constants
                (*(() if after is None else (after,)), batch),
            )
            if not rows:
                return
            found = each([row[:-1] for row in rows], read)
            corrupt = tuple(f for f in found if isinstance(f, CorruptRecordError))
            yield Batch(table, len(rows), corrupt)
            after = rows[-1][-1]

    def _sagas(self, batch: int) -> Iterator[Batch]:
        """The sagas, each with its steps (read for the batch at once), ``batch`` a time."""
        after: object = None
        while True:
            where = "" if after is None else " WHERE saga_id > ?"
            rows = self._read(
                f"SELECT {_SAGA} FROM sagas{where} ORDER BY saga_id LIMIT ?",  # noqa: S608 - constants
                (*(() if after is None else (after,)), batch),
            )
            if not rows:
                return
            places = ", ".join("?" * len(rows))
            steps: dict[object, list[tuple[object, ...]]] = {row[0]: [] for row in rows}
            for saga_id, key, compensation in self._read(
                "SELECT saga_id, key, compensation FROM saga_steps "  # noqa: S608 - placeholders
                f"WHERE saga_id IN ({places}) ORDER BY saga_id, step_index",
                tuple(row[0] for row in rows),
            ):
                steps[saga_id].append((key, compensation))
            found = each(rows, functools.partial(self._saga, steps))
            corrupt = tuple(f for f in found if isinstance(f, CorruptRecordError))
            yield Batch("sagas", len(rows), corrupt)
            after = rows[-1][0]

    def _saga(
        self, steps: dict[object, list[tuple[object, ...]]], row: tuple[object, ...]
    ) -> object:
        return read_saga(self.location, row, steps[row[0]])

    def _call(self, row: tuple[object, ...]) -> object:
        return read_record(self.location, row)

    def _approval(self, row: tuple[object, ...]) -> object:
        return read_approval(self.location, row)

    def _late(self, row: tuple[object, ...]) -> object:
        """A late completion, read onto its key's record (a corrupt key gives its error)."""
        current = self._stored(str(row[0]))
        return None if current is None else read_late(self.location, current, row)

    def _event(self, row: tuple[object, ...]) -> object:
        kind, subject, *event = row
        return read_event(self.location, str(kind), str(subject), tuple(event))
