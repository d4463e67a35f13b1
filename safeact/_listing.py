"""The reads behind the CLI and the operator's API: keys by state, tool and age; counts.

What counts as "in doubt" here is ``_protocol.abandonment``'s answer, the one the call itself
acts on: IN_DOUBT, or ATTEMPTING under an owner that is gone, out of lease or out of session.
Every read reports such a key as IN_DOUBT with its reason (``_protocol.as_seen``), marked in
the ledger or not, so listings, filters and counts agree with ``get`` and with the call.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import TYPE_CHECKING

import attrs

from safeact._ledger import COLUMNS, READ_BATCH, Ledger
from safeact._protocol import UNSETTLED, Record, State, utc_now
from safeact._rows import (
    counted_group,
    each,
    read_record,
    readable,
    time_text,
)
from safeact._tables import UNSETTLED_SQL
from safeact.exceptions import CorruptRecordError

if TYPE_CHECKING:
    from collections.abc import Generator, Mapping
    from datetime import datetime


__all__ = ["Census", "Listing"]


@attrs.frozen
class Census:
    """The keys counted: ``counts`` by tool and state, and what could not be counted.

    ``unsettled``: the ATTEMPTING and IN_DOUBT keys as ``get`` reads them, oldest attempt
    first. ``corrupt``: an error for each unsettled row that cannot be read, and one naming
    a key of each group of settled rows whose tool or state cannot be; ``uncounted``: how
    many keys those errors stand for.
    """

    counts: Mapping[tuple[str, State], int]
    unsettled: tuple[Record, ...]
    corrupt: tuple[CorruptRecordError, ...]
    uncounted: int


def _conditions(
    state: State | None, tool: str | None, since: datetime | None, *, unsettled: bool
) -> tuple[str, tuple[object, ...]]:
    """The ``WHERE`` of a listing of keys (``Listing.scan_records``), and its parameters."""
    # An unsettled state is filtered after reading: which of the two a row reads as
    # depends on its owner, which SQL cannot see.
    stored = None if state is None or state in UNSETTLED else state.value
    where = [
        "coalesce(?, state) = state",
        "coalesce(?, tool) = tool",
        "attempted_at >= coalesce(?, attempted_at)",
    ]
    if unsettled or state in UNSETTLED:
        where.append(f"state IN ({UNSETTLED_SQL})")
    return " AND ".join(where), (stored, tool, time_text(since))


class Listing(Ledger):
    """Keys listed, filtered and counted, each as ``get`` reads it (``as_seen``)."""

    def list_in_doubt(self) -> list[Record]:
        """Return every key that needs a decision, oldest first, each as IN_DOUBT with why.

        That is every IN_DOUBT key, and every ATTEMPTING key whose owner is provably gone,
        whose lease ran out or whose liveness session was lost. Keys whose owner is alive and
        running are not listed.
        """
        return self.records(state=State.IN_DOUBT)

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
        ``unsettled``) ATTEMPTING or IN_DOUBT, when given. A key's state is the one ``get``
        reads: an abandoned attempt is IN_DOUBT, marked or not.

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
        where, parameters = _conditions(state, tool, since, unsettled=unsettled)
        rows = self._read(
            f"SELECT {COLUMNS} FROM calls WHERE {where} ORDER BY attempted_at, key",  # noqa: S608 - constants
            parameters,
        )
        return self._as_seen(rows, state)

    def _record_batches(
        self,
        *,
        state: State | None = None,
        tool: str | None = None,
        since: datetime | None = None,
        batch: int = READ_BATCH,
    ) -> Generator[list[Record | CorruptRecordError], None, None]:
        """``scan_records``' keys, in its order, ``batch`` rows at a time (``_read_stream``).

        For listings printed as they are read: memory holds one batch.
        """
        where, parameters = _conditions(state, tool, since, unsettled=False)
        return self._read_stream(
            f"SELECT {COLUMNS} FROM calls WHERE {where} ORDER BY attempted_at, key",  # noqa: S608 - constants
            parameters,
            batch,
            functools.partial(self._as_seen, state=state),
        )

    def _as_seen(
        self, rows: list[tuple[object, ...]], state: State | None
    ) -> list[Record | CorruptRecordError]:
        """``rows`` read as ``get`` reads them now, those not in ``state`` (if given) left out."""
        now = utc_now()
        return [
            found
            for found in each(rows, self._reader(now))
            if state is None or isinstance(found, CorruptRecordError) or found.state is state
        ]

    def counts(self) -> dict[tuple[str, State], int]:
        """Return how many keys each tool has in each state, as ``get`` reads them.

        Raises:
            CorruptRecordError: a key's tool or state is not one safeact writes, or an
                unsettled key's row cannot be read (one such key is named).

        """
        census = self._census()
        if census.corrupt:
            raise census.corrupt[0]
        return dict(census.counts)

    def _census(self) -> Census:
        """Every key counted by tool and state: the settled ones kept counted, the unsettled read.

        The settled keys are counted by the ledger's triggers as they change
        (``safeact._tables``' ``key_counts``), so the count reads a few rows whatever the size
        of the ledger; their other columns are judged by the reads that show them, and by
        ``check``. An unsettled key is read whole, as ``get`` reads it (only its owner's
        liveness tells ATTEMPTING from in doubt).
        """
        rows = self._read(
            "SELECT tool, state, sum(n) FROM key_counts GROUP BY tool, state HAVING sum(n) <> 0",
            (),
        )
        counted: Counter[tuple[str, State]] = Counter()
        corrupt: list[CorruptRecordError] = []
        uncounted = 0
        for tool, state, count in rows:
            try:
                key_of = functools.partial(self._key_counted, tool, state)
                counted[counted_group(self.location, tool, state, key_of)] += int(count)
            except CorruptRecordError as error:
                corrupt.append(error)
                uncounted += int(count)
        unsettled = []
        for found in self.scan_records(unsettled=True):
            if isinstance(found, CorruptRecordError):
                corrupt.append(found)
                uncounted += 1
            else:
                counted[found.tool, found.state] += 1
                unsettled.append(found)
        return Census(counted, tuple(unsettled), tuple(corrupt), uncounted)

    def _key_counted(self, tool: object, state: object) -> object:
        """A key counted under ``tool`` and ``state``, to name in an error (a scan of calls)."""
        rows = self._read("SELECT min(key) FROM calls WHERE tool = ? AND state = ?", (tool, state))
        return rows[0][0]

    def _result_shape(self, tool: str) -> str | None:
        """The description of ``tool``'s results its processes last wrote (JSON text), if any.

        A tool writes it at its first claim through a store (``safeact._shape``); a tool that
        has not claimed since the ledger reached schema 5 has none.
        """
        rows = self._read("SELECT result_shape FROM tools WHERE name = ?", (tool,))
        return None if not rows else str(rows[0][0])

    def _known_tools(self) -> list[str]:
        """The tools that claimed a key through a store since the ledger reached schema 5.

        Each wrote its results' description at its first claim (``_result_shape``); a row
        whose name is not text (written outside safeact) names no tool.
        """
        rows = self._read("SELECT name FROM tools ORDER BY name", ())
        return [name for (name,) in rows if isinstance(name, str)]

    def _unsettled(self) -> list[Record]:
        """The ATTEMPTING and IN_DOUBT rows as written, oldest first, for the protocol."""
        rows = self._read(
            f"SELECT {COLUMNS} FROM calls WHERE state IN ({UNSETTLED_SQL}) "  # noqa: S608 - constants
            "ORDER BY attempted_at, key",
            (),
        )
        return readable(each(rows, functools.partial(read_record, self.location)))
