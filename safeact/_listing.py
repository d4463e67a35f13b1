"""The reads behind the CLI and the operator's API: keys by state, tool and age; counts.

What counts as "in doubt" here is ``_protocol.abandonment``'s answer, the one the call itself
acts on: IN_DOUBT, or ATTEMPTING under an owner that is gone, out of lease or out of session.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from safeact._ledger import COLUMNS, Ledger
from safeact._protocol import Record, State, utc_now
from safeact._rows import Reading, each, member, read_record, readable, text_of, time_text
from safeact._tables import UNSETTLED_SQL

if TYPE_CHECKING:
    from datetime import datetime

    from safeact.exceptions import CorruptRecordError

__all__ = ["Listing"]


class Listing(Ledger):
    """Keys listed, filtered and counted."""

    def list_in_doubt(self) -> list[Record]:
        """Return every key that needs a decision, oldest first.

        That is every IN_DOUBT key, and every ATTEMPTING key whose owner is provably gone,
        whose lease ran out or whose liveness session was lost. Keys whose owner is alive and
        running are not listed.
        """
        now = utc_now()
        return [
            record
            for record in self.records(unsettled=True)
            if self._abandonment(record, now) is not None
        ]

    def records(
        self,
        *,
        state: State | None = None,
        tool: str | None = None,
        since: datetime | None = None,
        unsettled: bool = False,
    ) -> list[Record]:
        """Return the keys, oldest attempt first.

        Only those in ``state``, of ``tool``, attempted at or after ``since``, or (with
        ``unsettled``) ATTEMPTING or IN_DOUBT, when given.

        Raises:
            CorruptRecordError: a key's row cannot be read (``scan_records`` reads the rest).

        """
        return readable(self.scan_records(state=state, tool=tool, since=since, unsettled=unsettled))

    def scan_records(
        self,
        *,
        state: State | None = None,
        tool: str | None = None,
        since: datetime | None = None,
        unsettled: bool = False,
    ) -> list[Record | CorruptRecordError]:
        """Return the keys as ``records`` does, with each corrupt row's error in its place.

        For listings that must show every key: a row changed outside safeact is reported,
        and does not hide the others.
        """
        where = [
            "coalesce(?, state) = state",
            "coalesce(?, tool) = tool",
            "attempted_at >= coalesce(?, attempted_at)",
        ]
        if unsettled:
            where.append(f"state IN ({UNSETTLED_SQL})")
        params = (None if state is None else state.value, tool, time_text(since))
        rows = self._read(
            f"SELECT {COLUMNS} FROM calls WHERE {' AND '.join(where)} "  # noqa: S608 - constants
            "ORDER BY attempted_at, key",
            params,
        )
        return each(rows, functools.partial(read_record, self.location))

    def counts(self) -> dict[tuple[str, State], int]:
        """Return how many keys each tool has in each state.

        Raises:
            CorruptRecordError: a key's tool or state is not one safeact writes (one such key
                is named).

        """
        rows = self._read(
            "SELECT tool, state, count(*), min(key) FROM calls GROUP BY tool, state", ()
        )
        counted: dict[tuple[str, State], int] = {}
        for tool, state, count, key in rows:
            with Reading(self.location, "calls", key):
                counted[text_of("tool", tool), member("state", state, State)] = int(count)
        return counted
