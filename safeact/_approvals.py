"""Approvals: a person's yes or no on one call of a tool that needs it, kept beside its key.

The rules are ``_protocol``'s (``approval_step``, ``decision_refusal``); this module carries
them out, each decision on the approval's row as locked in its own transaction, with its
event in the key's history. The consumption of an approval is the claim's
(``_transitions._consumed``), in the claim's transaction.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import safeact._telemetry as telemetry
from safeact._audit import record_event
from safeact._history import Why
from safeact._ledger import READ_BATCH, Ledger
from safeact._protocol import ApprovalState, State, decision_refusal, utc_now
from safeact._rows import APPROVAL_COLUMNS, each, read_approval, readable, time_text
from safeact._settings import optional_text
from safeact._tables import SCHEMA_VERSION
from safeact.exceptions import SafeError

if TYPE_CHECKING:
    from collections.abc import Generator

    from safeact._ledger import Executor
    from safeact._protocol import Approval
    from safeact.exceptions import CorruptRecordError

__all__ = ["Approvals"]


def _person(by: object) -> str:
    """Check who decides: a non-empty name, kept in the history.

    Raises:
        TypeError: ``by`` is not a ``str``.
        ValueError: ``by`` is empty or blank.

    """
    if not isinstance(by, str):
        raise TypeError(f"by must be the name of the person deciding, a str, not {by!r}")
    if not by.strip():
        raise ValueError("by must name the person deciding (it goes into the key's history)")
    optional_text("by", by)
    return by


def _conditions(state: ApprovalState | None, tool: str | None) -> tuple[str, tuple[object, ...]]:
    """The ``WHERE`` of a listing of approval requests, and its parameters."""
    # Each condition only when asked for: ``state = ?`` lets the pending index serve.
    where, parameters = ["1 = 1"], []
    if state is not None:
        where.append("state = ?")
        parameters.append(ApprovalState(state).value)
    if tool is not None:
        where.append("tool = ?")
        parameters.append(tool)
    return " AND ".join(where), tuple(parameters)


class Approvals(Ledger):
    """Requests for approval, and a person's decisions on them."""

    def approval(self, key: str) -> Approval | None:
        """Return ``key``'s approval request and the decision on it, or None if none was asked.

        Raises:
            CorruptRecordError: the approval's row holds what safeact never writes.

        """
        rows = self._read(
            f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE key = ?",  # noqa: S608 - constant columns
            (key,),
        )
        return read_approval(self.location, rows[0]) if rows else None

    def approvals(
        self, *, state: ApprovalState | None = ApprovalState.PENDING, tool: str | None = None
    ) -> list[Approval]:
        """Return the approvals in ``state`` (pending by default; None: all), oldest first.

        ``tool`` keeps only that tool's.

        Raises:
            CorruptRecordError: a row holds what safeact never writes (the first one found).

        """
        return readable(self.scan_approvals(state=state, tool=tool))

    def scan_approvals(
        self, *, state: ApprovalState | None = ApprovalState.PENDING, tool: str | None = None
    ) -> list[Approval | CorruptRecordError]:
        """Return the approvals as ``approvals`` does, with each corrupt row's error in its place.

        For ``safeact approvals``: a row changed outside safeact is reported, and does not
        hide the requests waiting for a person.
        """
        where, parameters = _conditions(state, tool)
        rows = self._read(
            f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE {where} "  # noqa: S608 - constants
            "ORDER BY requested_at, key",
            parameters,
        )
        return each(rows, functools.partial(read_approval, self.location))

    def _approval_batches(
        self,
        *,
        state: ApprovalState | None = ApprovalState.PENDING,
        tool: str | None = None,
        batch: int = READ_BATCH,
    ) -> Generator[list[Approval | CorruptRecordError], None, None]:
        """``scan_approvals``' requests, in its order, ``batch`` at a time (``_read_stream``).

        For listings printed as they are read: memory holds one batch.
        """
        where, parameters = _conditions(state, tool)
        return self._read_stream(
            f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE {where} "  # noqa: S608 - constants
            "ORDER BY requested_at, key",
            parameters,
            batch,
            functools.partial(each, read=functools.partial(read_approval, self.location)),
        )

    def approve(
        self, key: str, *, by: str, note: str | None = None, args_hash: str | None = None
    ) -> Approval:
        """Approve ``key``'s pending request; its next call with those arguments runs, once.

        ``by`` names the person deciding and ``note`` says why; both go into the key's
        history. Pass ``args_hash`` (from the request you looked at) so that the approval
        applies only to the arguments you saw. Returns the approval as recorded.

        Raises:
            SafeError: no request for ``key``, it is not pending (approved, denied, or
                consumed by a claim), or it is for another ``args_hash``; nothing changed.
            TypeError, ValueError: ``by`` is not a non-empty ``str``, or ``note`` not text.

        """
        return self._decide_approval(key, approve=True, by=by, note=note, args_hash=args_hash)

    def deny(
        self, key: str, *, by: str, note: str | None = None, args_hash: str | None = None
    ) -> Approval:
        """Deny ``key``'s request: the action never runs under this key, and calls replay the no.

        A pending request, or an approved one no call has used yet, may be denied. ``by``,
        ``note`` and ``args_hash`` are as for ``approve``. Returns the approval as recorded.

        Raises:
            SafeError: no request for ``key``, it is denied already or consumed by a claim
                (its action has begun), or it is for another ``args_hash``; nothing changed.
            TypeError, ValueError: as for ``approve``.

        """
        return self._decide_approval(key, approve=False, by=by, note=note, args_hash=args_hash)

    @telemetry.approving
    def _decide_approval(  # noqa: PLR0913 - approve's parameters, and the state seen
        self,
        key: str,
        *,
        approve: bool,
        by: str,
        note: str | None,
        args_hash: str | None,
        seen: ApprovalState | None = None,
    ) -> Approval:
        """Record a person's decision on ``key``'s request, as ``approve`` and ``deny`` say.

        ``seen`` is the request's state as the person saw it (``decision_refusal``).
        """
        by = _person(by)
        optional_text("note", note)
        optional_text("args_hash", args_hash)
        to = ApprovalState.APPROVED if approve else ApprovalState.DENIED
        verb = "approved" if approve else "denied"
        said = f"{verb} by {by}" if note is None else f"{verb} by {by}: {note}"
        event = self._new_event(
            key, None, Why.APPROVED if approve else Why.DENIED, note=said, operator=True
        )
        with self._errors(), self._transaction(sync=True) as db:
            current = self._locked_approval(db, key)
            refusal = decision_refusal(
                current, key, approve=approve, args_hash=args_hash, seen=seen
            )
            if refusal is not None:
                raise SafeError(refusal)
            db.execute(
                "UPDATE approvals SET state = ?, decided_at = ?, decided_by = ?, note = ? "
                "WHERE key = ?",
                (to.value, time_text(event.at), by, note, key),
            )
            record_event(db, "key", event)
        decided = self.approval(key)
        if decided is None:  # pragma: no cover - approvals are removed only with their key
            raise SafeError(f"the approval of key {key!r} vanished")
        return decided

    def _request_approval(
        self,
        key: str,
        tool: str,
        args_hash: str,
        *,
        arguments: str | None,
        previous: Approval | None,
    ) -> None:
        """Record a request for approval of this call, unless another caller did first.

        ``previous`` is a consumed approval whose attempt is over without having run (its
        key released): it is asked again, only while it is still that consumed one and the
        key is still released at that attempt. A caller that read the key before another's
        claim consumed the approval and ran must not reopen it: that action has its yes.
        """
        now = utc_now()
        event = self._new_event(key, None, Why.APPROVAL_REQUESTED)
        with self._errors(), self._transaction(sync=False) as db:
            if previous is None:
                asked = db.execute(
                    "INSERT INTO approvals (key, tool, args_hash, state, requested_at, "
                    "arguments, schema_version) VALUES (?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (key) DO NOTHING",
                    (
                        key,
                        tool,
                        args_hash,
                        ApprovalState.PENDING.value,
                        time_text(now),
                        arguments,
                        SCHEMA_VERSION,
                    ),
                )
            else:
                asked = db.execute(
                    "UPDATE approvals SET state = ?, requested_at = ?, decided_at = NULL, "
                    "decided_by = NULL, note = NULL, attempt_id = NULL, arguments = ? "
                    "WHERE key = ? AND state = ? AND attempt_id = ? AND EXISTS (SELECT 1 "
                    "FROM calls WHERE calls.key = ? AND calls.state = ? AND calls.attempt_id = ?)",
                    (
                        ApprovalState.PENDING.value,
                        time_text(now),
                        arguments,
                        key,
                        ApprovalState.CONSUMED.value,
                        previous.attempt_id,
                        key,
                        State.RELEASED.value,
                        previous.attempt_id,
                    ),
                )
            if asked.rowcount:
                record_event(db, "key", event)

    def _locked_approval(self, db: Executor, key: str) -> Approval | None:
        """Lock ``key``'s approval row for this transaction; return it."""
        row = db.execute(
            f"SELECT {APPROVAL_COLUMNS} FROM approvals WHERE key = ?{self._FOR_UPDATE}",  # noqa: S608 - constants
            (key,),
        ).fetchone()
        return None if row is None else read_approval(self.location, row)
