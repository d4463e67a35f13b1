"""A key's transitions: claim, the owner's outcome, doubt, and an operator's or a probe's verdict.

Each write decides on the key's row as locked in its own transaction, so the decision and the
change see the same version of the row, and appends its event to the key's history in that
transaction. Which moves are allowed is ``_protocol``'s, in pure functions (``may_mark``,
``release_refusal``, ``amend_refusal``...); this module carries them out:

    (no row) or RELEASED ──_claim──► ATTEMPTING ──_finish──► SUCCEEDED / FAILED / IN_DOUBT
    ATTEMPTING, IN_DOUBT ──_mark_in_doubt──► IN_DOUBT (proof over suspicion, the owner's word
                                                       over a caller's)
    ATTEMPTING, IN_DOUBT ──_settle (resolve, a probe)──► SUCCEEDED, or RELEASED on proof only
    SUCCEEDED (decided by an operator or a probe) ──amend──► SUCCEEDED with a new result
"""

from __future__ import annotations

import contextlib
import json
from datetime import timedelta
from typing import TYPE_CHECKING

import attrs

import safeact._telemetry as telemetry
from safeact._audit import record_claim, record_event
from safeact._codec import encode_untyped
from safeact._history import DECIDED, Event, Why, why_finished, why_in_doubt
from safeact._ledger import Ledger
from safeact._protocol import (
    NO_RESULT,
    UNSETTLED,
    ApprovalState,
    DoubtReason,
    Record,
    Refusal,
    State,
    amend_refusal,
    check_decision,
    check_resolvable,
    checkpoint,
    may_mark,
    release_refusal,
    utc_now,
)
from safeact._rows import time_text
from safeact._settings import optional_text
from safeact._tables import SCHEMA_VERSION
from safeact.exceptions import NotProvenError, SafeError

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime

    from safeact._ledger import Executor
    from safeact._protocol import JSON, Approval

__all__ = ["KeyTransitions"]

_OWNER_WRITES = frozenset({State.ATTEMPTING, State.IN_DOUBT, State.RELEASED})
"""Where an owner's completion replaces its attempt's row: nothing is replayed from them."""


def _check_tool(key: str, record: Record, tool: str | None) -> None:
    """Refuse a tool's decision about another tool's key (its result would not fit).

    Raises:
        SafeError: ``tool`` is given and is not ``record``'s tool.

    """
    if tool is not None and record.tool != tool:
        raise SafeError(
            f"key {key!r} belongs to tool {record.tool}, not {tool}: decide it with that "
            "tool, or with Store.resolve / safeact resolve"
        )


class _Unclaimed(Exception):  # noqa: N818 - not an error: a claim that lost, rolled back
    """An approved claim found the key taken: its transaction, consumption and all, rolls back."""


def _consumed(db: Executor, key: str, tool: str, args_hash: str, attempt_id: str) -> bool:
    """Consume ``key``'s approval for ``attempt_id`` if it is APPROVED for exactly this call.

    In the claim's transaction, and bound to the claim's own tool and argument digest (not
    to the approval as read): the claim and the approval's consumption commit together or
    not at all, so one approval authorizes at most one attempt, and an approval for other
    arguments (or another tool) authorizes none.
    """
    taken = db.execute(
        "UPDATE approvals SET state = ?, attempt_id = ? "
        "WHERE key = ? AND tool = ? AND args_hash = ? AND state = ?",
        (
            ApprovalState.CONSUMED.value,
            attempt_id,
            key,
            tool,
            args_hash,
            ApprovalState.APPROVED.value,
        ),
    )
    return bool(taken.rowcount)


def _describe(db: Executor, tool: str, shape: str, now: datetime) -> None:
    """Keep ``shape`` as ``tool``'s description of its results; an equal one is left alone.

    The latest description is the one a replay decodes with (the latest deploy's return
    type), so a changed one replaces the old; an unchanged one is not written again.
    """
    db.execute(
        "INSERT INTO tools (name, result_shape, written_at, schema_version) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET result_shape = excluded.result_shape, "
        "written_at = excluded.written_at, schema_version = excluded.schema_version "
        "WHERE tools.result_shape <> excluded.result_shape",
        (tool, shape, time_text(now), SCHEMA_VERSION),
    )


class KeyTransitions(Ledger):
    """Every change of a key's row, each with its event, each on the row as locked."""

    def resolve(  # noqa: PLR0913 - one keyword per part of the decision
        self,
        key: str,
        *,
        happened: bool,
        result: object = NO_RESULT,
        attempt_id: str | None = None,
        note: str | None = None,
        force: bool = False,
    ) -> Record:
        """Close an in-doubt key after checking what really happened; return its record.

        In doubt means IN_DOUBT, or ATTEMPTING under an owner that is gone, whose lease ran
        out or whose session was lost. ``happened=True`` records it as SUCCEEDED with
        ``result``, given as the tool would have returned it (``None`` for a tool that
        returns ``None``); later calls replay it, rebuilt as the tool's return type.

        ``happened=False`` releases it: the next call runs the action. That needs proof that
        the attempt's owner is finished (it recorded its interruption, or its process is
        provably gone, seen from its host); a lease that ran out or a lost session is only
        suspicion, and ``force=True`` is then your assertion that the owner can no longer
        act, kept in the key's history. ``note`` goes into the history with the decision.

        Pass ``attempt_id`` (from the ``Record`` you checked) so the decision applies only to
        that attempt: if the key was meanwhile released and claimed by a new caller, a
        repeated or stale resolve then fails instead of touching the new attempt.

        Raises:
            NotProvenError: ``happened=False`` without ``force`` and the owner is not proven
                finished (nothing was changed).
            SafeError: the key is unknown, not in doubt, running under a live owner, not at
                ``attempt_id`` any more, or (``happened=False``) known to have run because
                its owner recorded that its outcome could not be stored (nothing changed).
            TypeError: ``happened`` or ``force`` is not a ``bool`` (nothing was changed).
            ValueError: ``result`` is missing with ``happened=True``, given with
                ``happened=False``, or cannot be stored.

        """
        check_decision(happened=happened, force=force, note=note)  # before the span's label
        return self._decide(
            key,
            happened=happened,
            result=result,
            encode=encode_untyped,
            tool=None,
            attempt_id=attempt_id,
            note=note,
            force=force,
        )

    @telemetry.resolving
    def _decide(  # noqa: PLR0913 - resolve's parameters, and how to check the result
        self,
        key: str,
        *,
        happened: bool,
        result: object,
        encode: Callable[[object], JSON],
        tool: str | None,
        attempt_id: str | None,
        note: str | None,
        force: bool,
    ) -> Record:
        """Do ``resolve``, storing the result through ``encode`` (a tool's checks its type).

        ``tool``, if given, must be the key's tool.
        """
        check_decision(happened=happened, force=force, note=note)
        if happened and force:
            raise ValueError("force=True goes with happened=False: happened=True needs no proof")
        if happened and result is NO_RESULT:
            raise ValueError(
                "happened=True needs result=, the value the tool would have returned "
                "(result=None for a tool that returns None)"
            )
        if not happened and result is not NO_RESULT:
            raise ValueError("a result makes sense only with happened=True")
        stored = json.dumps(encode(result)) if happened else None
        record = check_resolvable(key, self._stored(key))
        _check_tool(key, record, tool)
        if attempt_id is not None and record.attempt_id != attempt_id:
            raise SafeError(
                f"cannot resolve key {key!r}: attempt {attempt_id} is over, the key is now at "
                f"attempt {record.attempt_id}; check that attempt, then resolve it"
            )
        to = State.SUCCEEDED if happened else State.RELEASED
        done = self._settle(
            record, to, stored, why=Why.RESOLVED, note=note, operator=True, force=force
        )
        if isinstance(done, Refusal):
            if done.forceable:
                raise NotProvenError(key, done.reason)
            raise SafeError(f"cannot resolve key {key!r}: {done.reason}")
        if done is None:
            raise SafeError(
                f"cannot resolve key {key!r}: it changed while being resolved; look at it again"
            )
        return self._now(key)

    def amend(self, key: str, *, result: object, note: str | None = None) -> Record:
        """Correct the result an operator or a probe recorded for ``key``; return its record.

        For a key closed as happened with a wrong value (one that does not fit the tool's
        return type, say, so that its replay raises ``StoreError``). Later calls replay
        ``result``; the history keeps the value it replaces, with ``note``. A result the
        action itself returned is never amended: it is what happened.

        Raises:
            SafeError: the key is unknown, not SUCCEEDED, or holds its action's own result.
            ValueError: ``result`` cannot be stored.

        """
        optional_text("note", note)
        return self._amend(key, result=result, encode=encode_untyped, tool=None, note=note)

    def _amend(
        self,
        key: str,
        *,
        result: object,
        encode: Callable[[object], JSON],
        tool: str | None,
        note: str | None,
    ) -> Record:
        """Do ``amend``, with ``encode`` and ``tool`` as in ``_decide``."""
        stored = json.dumps(encode(result))
        with self._errors(), self._transaction(sync=True) as db:
            current = self._locked_record(db, key)
            decided = current is not None and self._closed_by(db, current) in DECIDED
            refusal = amend_refusal(key, current, decided=decided)
            if refusal is not None:
                raise SafeError(refusal)
            assert current is not None
            _check_tool(key, current, tool)
            was = f"was {json.dumps(current.result)}"
            event = self._new_event(
                key,
                State.SUCCEEDED,
                Why.AMENDED,
                note=was if note is None else f"{was}; {note}",
                operator=True,
                from_state=State.SUCCEEDED,
                attempt_id=current.attempt_id,
            )
            db.execute(
                "UPDATE calls SET result = ? WHERE key = ? AND attempt_id = ?",
                (stored, key, current.attempt_id),
            )
            record_event(db, "key", event)
        return self._now(key)

    def _decided(self, record: Record) -> bool:
        """Whether ``record``'s result was recorded by an operator or a probe, not its action."""
        with self._errors(), self._transaction(sync=False) as db:
            return self._closed_by(db, record) in DECIDED

    def _closed_by(self, db: Executor, record: Record) -> Why | None:
        """The reason of the latest event that made ``record``'s attempt SUCCEEDED."""
        row = db.execute(
            "SELECT why FROM history WHERE kind = 'key' AND subject = ? AND attempt_id = ? "
            "AND to_state = ? ORDER BY seq DESC LIMIT 1",
            (record.key, record.attempt_id, State.SUCCEEDED.value),
        ).fetchone()
        return None if row is None else Why(row[0])

    def _settle(  # noqa: PLR0913 - one parameter per column of the decision
        self,
        record: Record,
        to: State,
        result: str | None,
        *,
        why: Why,
        note: str | None,
        operator: bool = False,
        force: bool = False,
    ) -> Event | Refusal | None:
        """Close ``record``'s attempt as SUCCEEDED (with ``result``, JSON text) or RELEASED.

        Applies only while the key is still at that attempt and in doubt; returns the event
        appended to its history, or ``None`` if the key had moved on (nothing changed). The
        change and its event are one synced transaction. A release is decided on the row as
        locked here and on whether its owner is gone now (``release_refusal``): without
        proof it is refused (``Refusal``, nothing changed) unless ``force``, which the
        history records as the operator's assertion.
        """
        with self._errors(), self._transaction(sync=True) as db:
            current = self._locked_record(db, record.key)
            if (
                current is None
                or current.attempt_id != record.attempt_id
                or current.state not in UNSETTLED
            ):
                return None
            reason = self._abandonment(current, utc_now())
            if reason is None:
                owner = current.owner
                return Refusal(
                    f"its action is running right now (process {owner.pid} on {owner.host}, "
                    f"lease until {time_text(current.lease_until)}); wait for its outcome",
                    forceable=False,
                )
            if to is State.RELEASED:
                refusal = release_refusal(current, reason)
                if refusal is not None and not (force and refusal.forceable):
                    return refusal
                if refusal is not None:
                    why = Why.FORCED_RELEASE
                    said = f"forced: the operator asserts it is over, though {refusal.reason}"
                    note = said if note is None else f"{said}; {note}"
            event = self._new_event(
                record.key,
                to,
                why,
                note=note,
                operator=operator,
                from_state=current.state,
                attempt_id=record.attempt_id,
            )
            db.execute(
                "UPDATE calls SET state = ?, result = ?, finished_at = ?, doubt_reason = NULL, "
                "error_type = NULL, error_message = NULL WHERE key = ? AND attempt_id = ?",
                (to.value, result, time_text(event.at), record.key, record.attempt_id),
            )
            record_event(db, "key", event)
            checkpoint("settling")
        return event

    def _note(self, record: Record, why: Why, note: str) -> Event | None:
        """Append an event that changes nothing (a probe's answer) to an in-doubt key's history.

        Returns the event, or ``None`` if the key had moved on from ``record``'s attempt.
        """
        event = self._new_event(record.key, None, why, note=note, attempt_id=record.attempt_id)
        with self._errors(), self._transaction(sync=False) as db:
            now = self._locked_row(db, record.key)
            if now is None or now[1] != record.attempt_id or State(now[0]) not in UNSETTLED:
                return None
            # The states are the row's as it is now, read under its lock.
            event = attrs.evolve(event, from_state=State(now[0]), to_state=State(now[0]))
            record_event(db, "key", event)
        return event

    def _claim(  # noqa: PLR0913 - the claim, and the tool's description of its results
        self,
        key: str,
        tool: str,
        args_hash: str,
        *,
        attempt_id: str,
        previous: Record | None,
        shape: str | None = None,
        approval: Approval | None = None,
        arguments: str | None = None,
    ) -> Record | None:
        """Durably record ``key`` as ATTEMPTING for this attempt, if nobody else did first.

        ``previous`` is the record the decision was made on: ``None`` (insert a row; the
        primary key picks one winner) or a RELEASED row (taken over only if still RELEASED).
        Returns the claimed record, or ``None`` if another caller got there first.

        ``shape`` describes the tool's results (``safeact._shape``, as JSON text): the first
        claim of the tool through this store writes it, in the claim's own transaction, and
        the later ones only compare it with what was written (no statement, no write).

        ``approval`` (a tool that needs one): the approval ``approval_step`` found, consumed
        in the claim's own transaction, and only while it is still APPROVED for this tool and
        these arguments; otherwise nothing is claimed and ``None`` returned (it was denied,
        or another caller's claim consumed it). ``arguments``: the call's arguments as JSON
        text, kept for display (``keep_arguments``).
        """
        described = shape if shape is not None and self._shapes.get(tool) != shape else None
        now = utc_now()
        owner = self.owner
        lease_until = now + timedelta(seconds=self.lease)
        attempt = (
            State.ATTEMPTING.value,
            attempt_id,
            time_text(now),
            owner.host,
            owner.boot_id,
            owner.pid,
            owner.started,
            owner.machine_id,
            owner.pid_namespace,
            time_text(lease_until),
            owner.group,
        )
        event = Event(
            subject=key,
            at=now,
            why=Why.CLAIMED,
            by="process",
            host=owner.host,
            pid=owner.pid,
            from_state=None if previous is None else previous.state,
            to_state=State.ATTEMPTING,
            attempt_id=attempt_id,
            note=None if approval is None else f"approved by {approval.decided_by}",
        )
        try:
            with self._errors(), self._transaction(sync=True) as db:
                if approval is not None and not _consumed(db, key, tool, args_hash, attempt_id):
                    return None  # denied meanwhile, or another claim consumed it
                if previous is None:
                    claimed = db.execute(
                        "INSERT INTO calls (key, tool, args_hash, state, attempt_id, "
                        "attempted_at, owner_host, owner_boot, owner_pid, owner_started, "
                        "owner_machine, owner_pidns, lease_until, owner_group, arguments, "
                        "schema_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                        "ON CONFLICT (key) DO NOTHING",
                        (key, tool, args_hash, *attempt, arguments, SCHEMA_VERSION),
                    )
                else:
                    claimed = db.execute(
                        "UPDATE calls SET state = ?, attempt_id = ?, attempted_at = ?, "
                        "owner_host = ?, owner_boot = ?, owner_pid = ?, owner_started = ?, "
                        "owner_machine = ?, owner_pidns = ?, lease_until = ?, owner_group = ?, "
                        "arguments = ?, finished_at = NULL, result = NULL, error_type = NULL, "
                        "error_message = NULL, doubt_reason = NULL "
                        "WHERE key = ? AND state = ? AND attempt_id = ?",
                        (*attempt, arguments, key, State.RELEASED.value, previous.attempt_id),
                    )
                if approval is not None and not claimed.rowcount:
                    raise _Unclaimed  # noqa: TRY301 - rolls the approval's consumption back too
                record_claim(db, event)
                if described is not None:
                    _describe(db, tool, described, now)
        except _Unclaimed:
            return None  # another caller got there first; the approval is still theirs to use
        except BaseException:
            # The claim may have committed and then failed to be made durable (an fsync
            # failed, or an interrupt came while it waited for one) or to answer (the
            # connection dropped). If the row is at this attempt, record that the attempt is
            # over, so that nobody waits on a row its live owner has given up; its action
            # never ran. Asked first, so a claim that never got the write lock does not wait
            # for it again.
            with contextlib.suppress(Exception):
                row = self._stored(key)
                if row is not None and row.attempt_id == attempt_id:
                    self._mark_in_doubt(key, attempt_id, DoubtReason.INTERRUPTED)
            raise
        if described is not None:
            self._shapes[tool] = described
        if not claimed.rowcount:
            return None  # another caller got there first (or the owner finished)
        return Record(
            key=key,
            tool=tool,
            state=State.ATTEMPTING,
            args_hash=args_hash,
            attempt_id=attempt_id,
            attempted_at=now,
            owner=owner,
            lease_until=lease_until,
            arguments=None if arguments is None else json.loads(arguments),
        )

    def _finish(  # noqa: PLR0913 - one parameter per column of an outcome
        self,
        key: str,
        attempt_id: str,
        *,
        state: State,
        result: JSON = None,
        error_type: str | None = None,
        error_message: str | None = None,
        doubt_reason: DoubtReason | None = None,
    ) -> bool:
        """Record how this attempt ended; return whether the key's row has it.

        The owner's word replaces its attempt's row while nothing is replayed from it
        (ATTEMPTING, IN_DOUBT, or RELEASED and not claimed again). Otherwise it is kept in
        ``late_completions``, for an operator to see, and False is returned: the key was
        closed as happened meanwhile (its replay never changes), or released and claimed
        again (the action also ran under the newer attempt).
        """
        stored = None if result is None else json.dumps(result)
        event = self._new_event(
            key,
            state,
            why_finished(state, doubt_reason),
            from_state=State.ATTEMPTING,
            attempt_id=attempt_id,
        )
        finished = time_text(event.at)
        outcome = (state.value, stored, error_type, error_message, finished)
        reason = None if doubt_reason is None else doubt_reason.value
        # The usual case first, written without reading the row: it is still ATTEMPTING at
        # this attempt. The count is read once the transaction has committed.
        with self._errors(), self._transaction(sync=False) as db:
            written = self._finish_attempting(db, (*outcome, reason), event)
        if written.rowcount:
            return True
        with self._errors(), self._transaction(sync=False) as db:
            now = self._locked_row(db, key)
            if now is not None and now[1] == attempt_id and State(now[0]) in _OWNER_WRITES:
                db.execute(
                    "UPDATE calls SET state = ?, result = ?, error_type = ?, error_message = ?, "
                    "finished_at = ?, doubt_reason = ? WHERE key = ? AND attempt_id = ?",
                    (*outcome, reason, key, attempt_id),
                )
                record_event(db, "key", attrs.evolve(event, from_state=State(now[0])))
                return True
            db.execute(
                "INSERT INTO late_completions (key, attempt_id, state, result, "
                "error_type, error_message, finished_at, schema_version) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key, attempt_id) DO UPDATE SET "
                "state = excluded.state, result = excluded.result, "
                "error_type = excluded.error_type, error_message = excluded.error_message, "
                "finished_at = excluded.finished_at",
                (key, attempt_id, *outcome, SCHEMA_VERSION),
            )
            record_event(db, "key", attrs.evolve(event, why=Why.LATE_COMPLETION))
        return False

    def _mark_in_doubt(
        self, key: str, attempt_id: str, reason: DoubtReason, *, detail: str | None = None
    ) -> bool:
        """Mark this attempt IN_DOUBT for ``reason``; return whether the row has that now.

        An ATTEMPTING row is marked; an IN_DOUBT one only to record more than it holds
        (``may_mark``: proof over suspicion, the owner's own word over a caller's). ``CRASHED``
        is proof, so it is written only if the owner is provably gone now, checked under the
        row lock. ``detail`` is kept as the row's error message (what went wrong).
        A row that moved on meanwhile (finished by its owner, resolved, claimed again) is left
        alone, and False returned.
        """
        event = self._new_event(key, State.IN_DOUBT, why_in_doubt(reason))
        with self._errors(), self._transaction(sync=False) as db:
            current = self._locked_record(db, key)
            if current is None or current.attempt_id != attempt_id:
                return False
            if current.state is State.IN_DOUBT and current.doubt_reason is reason:
                return True
            if not may_mark(current, reason):
                return False
            if reason is DoubtReason.CRASHED and not self._owner_gone(current):
                return False
            event = attrs.evolve(event, from_state=current.state, attempt_id=attempt_id)
            record_event(db, "key", event)
            db.execute(
                "UPDATE calls SET state = ?, doubt_reason = ?, "
                "error_type = coalesce(?, error_type), error_message = coalesce(?, error_message) "
                "WHERE key = ? AND attempt_id = ?",
                (
                    State.IN_DOUBT.value,
                    reason.value,
                    None if detail is None else "safeact.OutcomeNotStored",
                    detail,
                    key,
                    attempt_id,
                ),
            )
        return True
