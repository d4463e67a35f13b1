"""What waits on a person, a page at a time: keys in doubt and pending approvals.

A page costs what it shows, not what waits: a page of keys in doubt parses the page's rows
and every ATTEMPTING row (an abandoned attempt is in doubt whether or not a caller marked
it, and only its owner's liveness, read here, tells), and counts the marked ones in SQL,
through the unsettled index. ``safeact serve`` draws its inbox from these reads.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import TYPE_CHECKING, Generic, TypeVar

import attrs

from safeact._ledger import ATTEMPTED_AT, COLUMNS, KEY_AT, Ledger
from safeact._protocol import ApprovalState, Record, State, utc_now
from safeact._rows import APPROVAL_COLUMNS, each, read_approval, time_text
from safeact._tables import UNSETTLED_SQL

if TYPE_CHECKING:
    from safeact._protocol import Approval
    from safeact.exceptions import CorruptRecordError

__all__ = ["Inbox", "Page"]

_T = TypeVar("_T")


@attrs.frozen
class Page(Generic[_T]):
    """``items``, the ones from ``offset`` on of ``total``, in order (oldest first)."""

    items: tuple[_T, ...]
    total: int
    offset: int


class Inbox(Ledger):
    """Pages of what waits on a person, each filtered by tool and by age."""

    def _doubt_page(
        self, *, tool: str | None, before: datetime | None, offset: int, limit: int
    ) -> Page[Record | CorruptRecordError]:
        """Keys in doubt (as ``list_in_doubt`` reads them), oldest attempt first.

        Only ``tool``'s, and only those attempted before ``before``, when given; the
        ``limit`` of them from ``offset`` on, and how many there are in all. A row that
        cannot be read is its error, in its place.
        """
        where, parameters = _filters("attempted_at", tool, before)
        read = self._reader(utc_now())  # one reader: each owner asked about once
        attempting = self._read(
            f"SELECT {COLUMNS} FROM calls WHERE state IN ({UNSETTLED_SQL}) "  # noqa: S608 - constants
            f"AND state = '{State.ATTEMPTING.value}'{where}",
            parameters,
        )
        abandoned = [
            row
            for row, seen in zip(attempting, each(attempting, read), strict=True)
            if not isinstance(seen, Record) or seen.state is State.IN_DOUBT
        ]
        marked = f"WHERE state IN ({UNSETTLED_SQL}) AND state = '{State.IN_DOUBT.value}'{where}"
        ((count,),) = self._read(f"SELECT count(*) FROM calls {marked}", parameters)  # noqa: S608 - constants
        rows = self._read(
            f"SELECT {COLUMNS} FROM calls {marked} ORDER BY attempted_at, key LIMIT ?",  # noqa: S608 - constants
            (*parameters, offset + limit),
        )
        # Both lists are in (attempted_at, key) order: the page is a slice of their merge,
        # and only its rows are read as records.
        shown = sorted(
            [*rows, *abandoned], key=lambda row: (str(row[ATTEMPTED_AT]), str(row[KEY_AT]))
        )
        items = each(shown[offset : offset + limit], read)
        return Page(tuple(items), int(count) + len(abandoned), offset)

    def _approval_page(
        self, *, tool: str | None, before: datetime | None, offset: int, limit: int
    ) -> Page[Approval | CorruptRecordError]:
        """Pending approval requests, oldest first, filtered and paged as ``doubt_page``."""
        where, parameters = _filters("requested_at", tool, before)
        pending = f"WHERE state = '{ApprovalState.PENDING.value}'{where}"
        ((count,),) = self._read(f"SELECT count(*) FROM approvals {pending}", parameters)  # noqa: S608 - constants
        rows = self._read(
            f"SELECT {APPROVAL_COLUMNS} FROM approvals {pending} "  # noqa: S608 - constants
            "ORDER BY requested_at, key LIMIT ? OFFSET ?",
            (*parameters, limit, offset),
        )
        items = each(rows, functools.partial(read_approval, self.location))
        return Page(tuple(items), int(count), offset)

    def _waiting_tools(self) -> list[str]:
        """The tools a person may filter the inbox by: each that claimed, or asks for approval.

        A name that is not text (written outside safeact) names no tool.
        """
        rows = self._read(
            "SELECT name FROM tools UNION SELECT tool FROM approvals "  # noqa: S608 - constants
            f"WHERE state = '{ApprovalState.PENDING.value}'",
            (),
        )
        return sorted(name for (name,) in rows if isinstance(name, str))

    def _latest_event(self) -> int:
        """The number of the history's latest event (0: none): it grows with every change."""
        ((seq,),) = self._read("SELECT coalesce(max(seq), 0) FROM history", ())
        return int(seq)


def _filters(
    column: str, tool: str | None, before: datetime | None
) -> tuple[str, tuple[object, ...]]:
    """The conditions (each after an ``AND``) that keep ``tool``'s rows from before ``before``."""
    parameters: tuple[object, ...]
    where, parameters = "", ()
    if tool is not None:
        where, parameters = " AND tool = ?", (tool,)
    if before is not None:
        where, parameters = f"{where} AND {column} < ?", (*parameters, time_text(before))
    return where, parameters
