"""The state machine of a key, in one place: the states, the pure decisions, the checkpoints.

::

                 claim (INSERT, synced)            action returned
      (no row) ──────────────────────► ATTEMPTING ─────────────────► SUCCEEDED ──┐
          ▲                              │  │  │   action raised                 │ replay
          │                              │  │  └─────────────────► FAILED ─────┤ (nothing
          │      suspicion or proof  │  │                                   │  runs)
          │      (see below)         │  └── owner's own completion ──┐      │
          │                            ▼                              ▼      │
          │                            IN_DOUBT ── resolve(happened=True) ──► SUCCEEDED
          │                              │            or probe: Happened
          │   resolve(happened=False) or │
          │   probe: NotHappened,        ▼
          └── ONLY ON PROOF ───────── RELEASED ◄── (force=True: an operator's assertion)

Two kinds of evidence can put a key in doubt, and they are kept apart:

* **Proof** that the attempt is over: its process is provably gone, seen from where it can be
  seen (``CRASHED``: no such process, a reused pid, a rebooted host). Any process on the
  owner's host may record that proof in the row, for processes on other hosts to use.
* **Suspicion**: the lease ran out (``LEASE_EXPIRED``: the owner may be frozen, swapped out
  or holding the GIL), or its liveness session on the database ended (``SESSION_LOST``: a
  pooler, an admin or an idle timeout may have cut a live owner's session).
* **The owner's own word**, which no caller's suspicion replaces: it was interrupted
  (``INTERRUPTED``) or its failure could not be stored (``FAILURE_NOT_STORED``) — its frame
  unwound, but work it started (a thread, a task it handed off) may still run while its
  process lives, so these are not proof either; or its action ran and only its result
  could not be stored (``RESULT_NOT_STORED``).

Doubt may come from any of them. A release — the one transition after which the action runs
again — needs proof, checked under the row lock at the moment of the decision
(``abandonment`` then ``release_refusal``). Without proof only an operator's ``force=True``
releases, and the history says who asserted it. A key whose owner recorded that the action
ran but its result could not be stored (``RESULT_NOT_STORED``) is never released: the
ledger knows it ran.

"Happened" needs no proof: it closes the key as SUCCEEDED, and from then on its replay
never changes. An owner that wakes afterwards and completes has its word kept beside the
key (``late_completions``), not swapped in. Before that, while the key is ATTEMPTING,
IN_DOUBT or (forced) RELEASED at its attempt, the owner's own completion replaces the row:
the owner knows what happened.

A caller that finds the key ATTEMPTING under a live owner (lease not run out, process not
provably gone, session held) waits for the owner's outcome and replays it; if its wait runs
out first it gets ``InDoubt`` (still in flight) and marks nothing.

A row is written only by the owner of the current attempt (identified by ``attempt_id``;
never by a forked child of the owner), by a caller that finds the attempt abandoned (which
marks it IN_DOUBT, or records proof on a row in doubt on suspicion), or by ``resolve`` and
probes. A new attempt gets a new ``attempt_id``, so a stale owner cannot overwrite it.

A tool that needs a person's approval (``safe(..., approval=True)``) puts a gate before the
claim, kept in a row of its own beside the key's (``Approval``)::

      (no approval) ── request ──► PENDING ── approve ──► APPROVED ── claim ──► CONSUMED
                                      │                      │   (same transaction)  │
                                      └────── deny ──────────┴──► DENIED (final)      │
      a release of the attempt it authorized (RELEASED) ── asks again ──► PENDING ◄───┘

The gate is asked only where the key would be claimed (no row, or RELEASED): a settled or
unsettled key is decided as above, whatever its approval says. An approval is bound to the
key, the tool and the argument digest it was requested for, and consumed by the claim it
authorizes, in the claim's own transaction: one approval authorizes at most one attempt.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import attrs

# The reasons and the JSON type are words the errors and the keys use too: they live
# below them, and the protocol re-exports them with its states.
from safeact._doubt import DoubtReason
from safeact._json import JSON
from safeact._settings import flag, optional_text
from safeact.exceptions import KeyConflictError, SafeError

if TYPE_CHECKING:
    from safeact._owner import Owner

__all__ = [
    "CALL_CHECKPOINTS",
    "DENIED",
    "JSON",
    "NO_RESULT",
    "OWNER_KNOWS",
    "PROOF",
    "SUSPICION",
    "Approval",
    "ApprovalState",
    "AskApproval",
    "Await",
    "Checkpoint",
    "Denial",
    "Doubt",
    "DoubtReason",
    "Gate",
    "Go",
    "Record",
    "Refusal",
    "Replay",
    "Run",
    "SagaRecord",
    "SagaState",
    "State",
    "Step",
    "Wait",
    "abandonment",
    "amend_refusal",
    "approval_step",
    "as_seen",
    "check_decision",
    "check_resolvable",
    "checkpoint",
    "checkpoint_hook",
    "decision_refusal",
    "denial_message",
    "may_mark",
    "next_step",
    "owner_may_write",
    "release_refusal",
    "utc_now",
]


NO_RESULT: Any = object()
"""``resolve``'s default result: none given (``None`` is a result)."""


def utc_now() -> datetime:
    """Return the current time, timezone-aware UTC: the clock every decision is given."""
    return datetime.now(UTC)


class State(enum.Enum):
    """Where a key stands in the ledger."""

    ATTEMPTING = "attempting"
    """Claimed and durably recorded; the action is running, or its caller died."""
    SUCCEEDED = "succeeded"
    """The action returned; its result is stored and replayed."""
    FAILED = "failed"
    """The action raised; the error is stored and replayed, the action never re-run."""
    IN_DOUBT = "in_doubt"
    """Nobody knows whether the action ran; waits for ``Store.resolve``."""
    RELEASED = "released"
    """Resolved as not having happened; the next call runs the action."""


UNSETTLED = frozenset({State.ATTEMPTING, State.IN_DOUBT})
"""States that need a decision before the key can be used again."""


@attrs.frozen(kw_only=True)
class Record:
    """One key's row in the ledger.

    ``result`` is the stored result as JSON (rebuilt as the tool's return type on replay);
    ``error_type`` and ``error_message`` say why the action failed, or, on an IN_DOUBT row
    whose result could not be stored, what went wrong. ``owner`` claimed the current attempt;
    ``lease_until`` is when its lease runs out unless its heartbeat renews it;
    ``doubt_reason`` says why an IN_DOUBT row is in doubt. ``arguments`` are the call's
    arguments as JSON, redacted, for a tool that keeps them for display; else ``None``.
    """

    key: str
    tool: str
    state: State
    args_hash: str
    attempt_id: str
    attempted_at: datetime
    owner: Owner
    lease_until: datetime
    finished_at: datetime | None = None
    result: JSON = None
    error_type: str | None = None
    error_message: str | None = None
    doubt_reason: DoubtReason | None = None
    arguments: JSON = None


PROOF = frozenset({DoubtReason.CRASHED})
"""Doubt reasons that prove the attempt is over: nothing of it is still running."""

SUSPICION = frozenset({DoubtReason.LEASE_EXPIRED, DoubtReason.SESSION_LOST})
"""Doubt reasons a caller infers from signs that an owner stopped; a frozen owner shows them."""

OWNER_KNOWS = frozenset(
    {DoubtReason.INTERRUPTED, DoubtReason.RESULT_NOT_STORED, DoubtReason.FAILURE_NOT_STORED}
)
"""Doubt reasons only the owner itself records: a caller's suspicion never replaces them."""


@attrs.frozen
class Run:
    """Claim the key (``previous`` is the row the claim replaces, if any), then run it."""

    previous: Record | None


@attrs.frozen
class Replay:
    """Return the stored outcome of ``record``; nothing runs."""

    record: Record


@attrs.frozen
class Doubt:
    """Return ``InDoubt`` for ``reason``, marking an ATTEMPTING ``record`` IN_DOUBT first."""

    record: Record
    reason: DoubtReason


@attrs.frozen
class Wait:
    """The owner of ``record`` is alive: wait for its outcome, then decide again."""

    record: Record


Step: TypeAlias = Run | Replay | Doubt | Wait


def next_step(  # noqa: PLR0913 - the record, the call, and what the world says of its owner
    record: Record | None,
    tool: str,
    args_hash: str,
    *,
    now: datetime,
    owner_gone: Callable[[Record], bool],
    owner_lost: Callable[[Owner], bool] = lambda _: False,
    former_hash: Callable[[], str] | None = None,
) -> Step:
    """Decide what a call of ``tool`` with ``args_hash`` does, given the key's record.

    ``now`` is compared with the owner's lease; ``owner_gone`` says whether an owner
    provably no longer runs, ``owner_lost`` whether its liveness session is lost.
    ``former_hash`` gives the call's hash as an older safeact wrote it (defaults
    included), asked only when the record's hash is not ``args_hash``: a key an older
    version recorded for the same call is the same action.

    Raises:
        KeyConflictError: the key is recorded for another tool or other arguments.

    """
    if record is None:
        return Run(None)
    if record.tool != tool:
        raise _conflict(record, tool, args_hash, f"for tool {record.tool!r}, not {tool!r}")
    if record.args_hash != args_hash and (former_hash is None or record.args_hash != former_hash()):
        raise _conflict(
            record,
            tool,
            args_hash,
            f"for other arguments (args hash {record.args_hash[:12]}, not {args_hash[:12]})",
        )
    match record.state:
        case State.RELEASED:
            return Run(record)
        case State.SUCCEEDED | State.FAILED:
            return Replay(record)
        case State.IN_DOUBT | State.ATTEMPTING:
            reason = abandonment(record, now=now, owner_gone=owner_gone, owner_lost=owner_lost)
            return Wait(record) if reason is None else Doubt(record, reason)


def _conflict(record: Record, tool: str, args_hash: str, what: str) -> KeyConflictError:
    """Refuse a call of ``tool`` with ``args_hash`` under a key ``record`` holds ``what`` for."""
    return KeyConflictError(
        record.key,
        f"is already recorded {what}",
        tool=tool,
        args_hash=args_hash,
        recorded_tool=record.tool,
        recorded_args_hash=record.args_hash,
    )


def abandonment(
    record: Record,
    *,
    now: datetime,
    owner_gone: Callable[[Record], bool],
    owner_lost: Callable[[Owner], bool] = lambda _: False,
) -> DoubtReason | None:
    """Why ``record`` needs a decision, or ``None`` if it does not need one (yet).

    An IN_DOUBT key needs one; so does an ATTEMPTING key whose owner is provably gone
    (``owner_gone``: proof), whose lease ran out, or whose liveness session is lost
    (``owner_lost``: suspicion), checked in that order. An IN_DOUBT key whose owner is now
    provably gone reports ``CRASHED``, for the caller to record that proof, unless it is
    known to have run (``RESULT_NOT_STORED``); one marked before reasons were recorded is
    taken as suspect (``LEASE_EXPIRED``) until then. An ATTEMPTING key under a live owner,
    and a settled key, need none.
    """
    match record.state:
        case State.IN_DOUBT:
            reason = record.doubt_reason or DoubtReason.LEASE_EXPIRED
            if reason in (DoubtReason.CRASHED, DoubtReason.RESULT_NOT_STORED):
                return reason
            return DoubtReason.CRASHED if owner_gone(record) else reason
        case State.ATTEMPTING if owner_gone(record):
            return DoubtReason.CRASHED
        case State.ATTEMPTING if record.lease_until <= now:
            return DoubtReason.LEASE_EXPIRED
        case State.ATTEMPTING if owner_lost(record.owner):
            return DoubtReason.SESSION_LOST
        case _:
            return None


def as_seen(record: Record, reason: DoubtReason | None) -> Record:
    """``record`` as every reader reports it, given ``abandonment``'s ``reason`` for it.

    An abandoned attempt is in doubt wherever keys are read, listed, filtered, counted or
    exported, whether or not a caller has marked it in the ledger yet: an ATTEMPTING row
    whose owner is gone (or out of lease, or out of session) reads as IN_DOUBT with that
    reason, and an IN_DOUBT row with the reason as now seen. Anything else reads as stored.
    The protocol itself decides on the stored row, never on this view.
    """
    if reason is None:
        return record
    return attrs.evolve(record, state=State.IN_DOUBT, doubt_reason=reason)


def may_mark(record: Record, reason: DoubtReason) -> bool:
    """Whether marking ``record`` IN_DOUBT for ``reason`` adds to what the ledger knows.

    An ATTEMPTING row may be marked for any reason. An IN_DOUBT row is marked again only to
    record more than it holds: that the action ran (over anything), proof (over anything
    but that), or the owner's own word over a caller's suspicion. A RELEASED row still at
    the attempt (released by force while its owner ran) takes the owner's own word, so an
    owner that wakes can still keep its key from running twice. Nothing else is marked.
    """
    match record.state:
        case State.ATTEMPTING:
            return True
        case State.IN_DOUBT:
            held = record.doubt_reason or DoubtReason.LEASE_EXPIRED
            if held in (reason, DoubtReason.RESULT_NOT_STORED):
                return False
            if reason in PROOF or reason is DoubtReason.RESULT_NOT_STORED:
                return True
            return reason in OWNER_KNOWS and held in SUSPICION
        case State.RELEASED:
            return reason in OWNER_KNOWS
        case _:
            return False


@attrs.frozen
class Refusal:
    """Why a release was refused; ``forceable`` if an operator may release it all the same."""

    reason: str
    forceable: bool


_NOT_PROOF = {
    DoubtReason.LEASE_EXPIRED: "its lease ran out, as a frozen or cut-off owner's also does",
    DoubtReason.SESSION_LOST: (
        "its database session ended, as a pooler, an administrator or an idle timeout also "
        "makes a live owner's session end"
    ),
    DoubtReason.INTERRUPTED: (
        "it was interrupted, and work it started (a thread, a handed-off task) may still run "
        "while its process lives"
    ),
    DoubtReason.FAILURE_NOT_STORED: (
        "its action raised but the failure could not be stored, and work it started may "
        "still run while its process lives"
    ),
    DoubtReason.IN_FLIGHT: "it is still running",
}


def release_refusal(record: Record, reason: DoubtReason) -> Refusal | None:
    """Why ``record``'s attempt, abandoned for ``reason``, may not be released; None if it may.

    ``reason`` is what ``abandonment`` finds on the row as locked for the release, with the
    owner looked up then. A release lets the action run again, so it needs proof that
    nothing of the attempt still runs: its owner provably gone (``CRASHED``, recorded or
    seen now). Suspicion and the owner's word that it was interrupted are not proof: an
    operator may force them. A key known to have run (``RESULT_NOT_STORED``) is never
    released.
    """
    if reason in PROOF:
        return None
    if reason is DoubtReason.RESULT_NOT_STORED:
        return Refusal(
            "its action ran (its result could not be stored): it can only be resolved as happened",
            forceable=False,
        )
    owner = record.owner
    return Refusal(
        f"its owner, process {owner.pid} on host {owner.host!r}, is not proven finished: "
        f"{_NOT_PROOF[reason]}",
        forceable=True,
    )


def owner_may_write(record: Record, pid: int) -> bool:
    """Whether process ``pid`` may record the end of ``record``'s attempt.

    Only the owner's own process: a child forked inside the action inherits its frames,
    and whatever unwinds there is not the attempt's outcome.
    """
    return record.owner.pid == pid


def check_resolvable(key: str, record: Record | None) -> Record:
    """Return ``record`` if ``resolve`` may close it.

    Raises:
        SafeError: the key is unknown or not in doubt.

    """
    if record is None:
        raise SafeError(f"cannot resolve key {key!r}: the ledger has no such key")
    if record.state not in UNSETTLED:
        raise SafeError(
            f"cannot resolve key {key!r}: it is {record.state.value}, not in doubt; "
            "only ATTEMPTING and IN_DOUBT keys need a decision"
        )
    return record


def check_decision(*, happened: object, force: object, note: object) -> None:
    """Refuse an operator's decision unless its flags are booleans and its note is text.

    Checked before anything is opened or changed: taken by truthiness, ``force="false"``
    would force a release and ``happened="false"`` record a success nobody decided; a note
    of bytes would be a history row no reader can read.

    Raises:
        TypeError: ``happened`` or ``force`` is not a ``bool``, or ``note`` not a ``str``.
        ValueError: ``note`` holds lone surrogates.

    """
    flag("happened", happened)
    flag("force", force)
    optional_text("note", note)


def amend_refusal(key: str, record: Record | None, *, decided: bool) -> str | None:
    """Why ``amend`` may not replace ``record``'s result, or None if it may.

    Only a result someone decided (``decided``: an operator's or a probe's, not returned by
    the action) can be corrected: a result the action returned is what happened, and a key
    in any other state has no decided result to correct.
    """
    if record is None:
        return f"cannot amend key {key!r}: the ledger has no such key"
    if record.state is not State.SUCCEEDED:
        return (
            f"cannot amend key {key!r}: it is {record.state.value}; only a result an operator "
            "or a probe recorded (resolve with happened) can be amended"
        )
    if not decided:
        return (
            f"cannot amend key {key!r}: its result is the one its action returned, which is "
            "what happened; only a result an operator or a probe recorded can be amended"
        )
    return None


class SagaState(enum.Enum):
    """Where a saga stands.

    ``RUNNING`` → ``COMPLETED``, or ``RUNNING`` → ``COMPENSATING`` → ``COMPENSATED`` (every
    compensation succeeded) or ``ROLLBACK_INCOMPLETE`` (some failed or are in doubt). A saga
    found COMPENSATING was cut short mid-rollback: re-running its code finishes the rollback.
    Re-running a ROLLBACK_INCOMPLETE saga takes its rollback up again, for compensations an
    operator has released since; a COMPENSATED saga raises ``SagaFailed`` and runs nothing.
    """

    RUNNING = "running"
    COMPLETED = "completed"
    COMPENSATING = "compensating"
    COMPENSATED = "compensated"
    ROLLBACK_INCOMPLETE = "rollback_incomplete"


@attrs.frozen(kw_only=True)
class SagaRecord:
    """A saga's progress in the ledger.

    ``steps`` are the keys of the steps it started, in order, and ``compensations`` the
    names of the tools that undo them (None: nothing does). ``aborted_step`` is the key of
    the step whose outcome aborted it; ``abort_reason`` says why when the ``with`` block
    raised instead.
    """

    saga_id: str
    state: SagaState
    started_at: datetime
    updated_at: datetime
    steps: tuple[str, ...] = ()
    compensations: tuple[str | None, ...] = ()
    aborted_step: str | None = None
    abort_reason: str | None = None


class ApprovalState(enum.Enum):
    """Where a key's approval stands (see the module's second diagram)."""

    PENDING = "pending"
    """Requested; waits for a person. The call returns ``AwaitingApproval``."""
    APPROVED = "approved"
    """A person approved this key, tool and argument digest; the next claim consumes it."""
    DENIED = "denied"
    """A person denied it: final for the key, replayed as a ``Failed`` (``safeact.Denied``)."""
    CONSUMED = "consumed"
    """A claim took it, in the claim's transaction: it authorizes nothing more."""


DENIED = "safeact.Denied"
"""The error type a denied call's ``Failed`` carries."""


@attrs.frozen(kw_only=True)
class Approval:
    """A key's approval request and the decision on it.

    Bound to ``key``, ``tool`` and ``args_hash``: it authorizes that call only. ``decided_by``
    and ``note`` are the person's; ``attempt_id`` is the attempt that consumed it.
    ``arguments`` are the call's arguments as JSON, redacted as the tool declares, when the
    tool keeps them for display (``keep_arguments``); ``None`` otherwise.
    """

    key: str
    tool: str
    args_hash: str
    state: ApprovalState
    requested_at: datetime
    decided_at: datetime | None = None
    decided_by: str | None = None
    note: str | None = None
    attempt_id: str | None = None
    arguments: JSON = None


@attrs.frozen
class AskApproval:
    """Record a request for approval (``previous``: the consumed approval it replaces)."""

    previous: Approval | None


@attrs.frozen
class Await:
    """A person has not decided ``approval`` yet: return ``AwaitingApproval``; nothing runs."""

    approval: Approval


@attrs.frozen
class Denial:
    """A person denied ``approval``: return it as a ``Failed``; nothing runs, ever."""

    approval: Approval


@attrs.frozen
class Go:
    """``approval`` authorizes this call: claim the key, consuming it in the same transaction."""

    approval: Approval


Gate: TypeAlias = AskApproval | Await | Denial | Go


def approval_step(approval: Approval | None, tool: str, args_hash: str) -> Gate:
    """Decide what a call of ``tool`` with ``args_hash`` that would claim its key does.

    Asked only where ``next_step`` said ``Run``: the key has no row, or is RELEASED. No
    approval yet: ask for one. A consumed one authorized an attempt that is now over
    without having run (released, or purged): ask again, since it authorized at most one.

    Raises:
        KeyConflictError: the approval is for another tool or other arguments.

    """
    if approval is None:
        return AskApproval(None)
    if approval.tool != tool or approval.args_hash != args_hash:
        recorded = (
            f"for tool {approval.tool!r}, not {tool!r}"
            if approval.tool != tool
            else f"for other arguments (args hash {approval.args_hash[:12]}, not {args_hash[:12]})"
        )
        raise KeyConflictError(
            approval.key,
            f"has an approval request {recorded}",
            tool=tool,
            args_hash=args_hash,
            recorded_tool=approval.tool,
            recorded_args_hash=approval.args_hash,
        )
    match approval.state:
        case ApprovalState.PENDING:
            return Await(approval)
        case ApprovalState.APPROVED:
            return Go(approval)
        case ApprovalState.DENIED:
            return Denial(approval)
        case ApprovalState.CONSUMED:
            return AskApproval(approval)


def denial_message(approval: Approval) -> str:
    """What a denied call's ``Failed`` says: who denied it, and their note."""
    said = f"denied by {approval.decided_by}"
    return said if approval.note is None else f"{said}: {approval.note}"


def decision_refusal(
    approval: Approval | None,
    key: str,
    *,
    approve: bool,
    args_hash: str | None,
    seen: ApprovalState | None = None,
) -> str | None:
    """Why a person's ``approve`` (or deny) of ``key`` may not be recorded; None if it may.

    Only a pending request can be approved; a pending or an approved (not yet consumed) one
    can be denied. ``args_hash``, when given, is the digest the person saw: a request for
    other arguments is not the one they decided. ``seen``, when given, is the state they
    saw it in: a request decided since is not the one they decided either.
    """
    verb = "approve" if approve else "deny"
    if approval is None:
        return f"cannot {verb} key {key!r}: no approval was requested for it"
    if seen is not None and approval.state is not seen:
        return (
            f"cannot {verb} key {key!r}: its approval is {approval.state.value} now, not "
            f"{seen.value} as when you looked; look at it again"
        )
    if args_hash is not None and approval.args_hash != args_hash:
        return (
            f"cannot {verb} key {key!r}: its request is for args hash "
            f"{approval.args_hash[:12]}, not {args_hash[:12]}; look at it again"
        )
    allowed = (
        {ApprovalState.PENDING} if approve else {ApprovalState.PENDING, ApprovalState.APPROVED}
    )
    if approval.state not in allowed:
        return f"cannot {verb} key {key!r}: its approval is {approval.state.value}"
    return None


Checkpoint: TypeAlias = Literal[
    "before_claim",
    "after_claim",
    "after_call",
    "after_record",
    "probed",
    "settling",
    "archiving",
    "purging",
]
"""The points where a crash leaves a different ledger behind.

The first four are the points of record-before-execute, in a call that runs the action
(``CALL_CHECKPOINTS``); ``probed`` is after a reconciliation probe answered, ``settling``
inside the transaction that closes an in-doubt key, before it commits; ``archiving`` inside
a transaction of ``archive_history``, after its events are synced to the file and deleted,
before it commits; ``purging`` inside a transaction of a purge, after its batch is removed,
before it commits.
"""

CALL_CHECKPOINTS: tuple[Checkpoint, ...] = (
    "before_claim",
    "after_claim",
    "after_call",
    "after_record",
)

_hook: Callable[[Checkpoint], None] | None = None


def checkpoint(name: Checkpoint) -> None:
    """Mark that a call has reached ``name``; a no-op unless a test installed a hook."""
    if _hook is not None:
        _hook(name)


@contextmanager
def checkpoint_hook(hook: Callable[[Checkpoint], None]) -> Iterator[None]:
    """Call ``hook`` at every checkpoint while the block runs. For fault-injection tests only.

    A hook that raises a ``BaseException`` (not an ``Exception``) simulates a crash at that
    point; one that SIGKILLs its own process is a real one.
    """
    global _hook  # noqa: PLW0603 - process-wide on purpose: a crash stops every thread
    previous, _hook = _hook, hook
    try:
        yield
    finally:
        _hook = previous
