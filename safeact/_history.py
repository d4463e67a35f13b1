"""The audit trail: one ``Event`` for every change of a key's or a saga's state."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Literal

import attrs

from safeact._protocol import DoubtReason, SagaState, State

__all__ = ["DECIDED", "Event", "Why", "saga_why", "why_finished", "why_in_doubt"]


class Why(enum.Enum):
    """Why a key or a saga changed state."""

    CLAIMED = "claimed"
    """A caller recorded the key ATTEMPTING, about to run the action."""
    RAN = "ran"
    """The action returned and its result was recorded."""
    RAISED = "raised"
    """The action raised and its error was recorded."""
    CRASHED = "crashed"
    """A caller found the owner's process gone and marked the key IN_DOUBT."""
    LEASE_EXPIRED = "lease_expired"
    """A caller found the owner's lease run out and marked the key IN_DOUBT."""
    INTERRUPTED = "interrupted"
    """The action was interrupted; its own process marked the key IN_DOUBT."""
    RESULT_NOT_STORED = "result_not_stored"
    """The action returned, but its result could not be stored."""
    SESSION_LOST = "session_lost"
    """A caller found the owner's liveness session ended and marked the key IN_DOUBT."""
    FAILURE_NOT_STORED = "failure_not_stored"
    """The action raised, but its failure could not be stored."""
    LATE_COMPLETION = "late_completion"
    """An attempt finished after its key had moved on to a newer attempt."""
    RESOLVED = "resolved"
    """An operator closed the key (``Store.resolve`` or ``safeact resolve``)."""
    RECONCILED = "reconciled"
    """A reconciliation probe answered happened or not happened, and the key was closed."""
    AMENDED = "amended"
    """An operator corrected the result an operator or a probe had recorded (``amend``)."""
    FORCED_RELEASE = "forced_release"
    """An operator released a key whose owner was not proven finished, asserting it is."""
    RELEASE_WITHHELD = "release_withheld"
    """A probe answered "did not happen", but the owner is not proven finished: the key
    stays IN_DOUBT (releasing it could let the action run twice)."""
    PROBE_UNKNOWN = "probe_unknown"
    """A reconciliation probe could not tell; the key stays IN_DOUBT."""
    PROBE_FAILED = "probe_failed"
    """A reconciliation probe raised or answered wrongly; the key stays IN_DOUBT."""
    APPROVAL_REQUESTED = "approval_requested"
    """A call of a tool that needs approval asked a person for it; nothing ran."""
    APPROVED = "approved"
    """A person approved the key's request: its next claim may run the action, once."""
    DENIED = "denied"
    """A person denied the key's request: the action never runs under this key."""
    PURGED = "purged"
    """Retention removed the key's or the saga's record; its history stays."""
    STARTED = "started"
    """A saga began."""
    COMPLETED = "completed"
    """Every step of a saga succeeded."""
    ABORTED = "aborted"
    """A saga aborted and began rolling back (again, if its rollback was incomplete)."""
    ROLLED_BACK = "rolled_back"
    """Every compensation of an aborted saga succeeded."""
    ROLLBACK_INCOMPLETE = "rollback_incomplete"
    """Some compensation of an aborted saga failed or is in doubt."""


DECIDED = frozenset({Why.RESOLVED, Why.RECONCILED, Why.AMENDED})
"""Why a SUCCEEDED attempt may hold a result its action never returned: an operator's or a
probe's decision, which an operator may amend."""


@attrs.frozen(kw_only=True)
class Event:
    """One change of state, as the history keeps it.

    ``subject`` is the key (or the saga id for a saga's events); ``from_state`` is ``None``
    when the subject was new, ``to_state`` when it was purged. An event that changed
    nothing (a probe that could not tell, a late completion) has the state the key stayed
    in, or, for a late completion, the late attempt's own outcome. ``by`` is ``"process"``
    (a caller of a tool or a saga) or ``"operator"`` (``resolve``, ``purge``), run on
    ``host`` as process ``pid``. ``note`` is the operator's or the probe's.
    """

    subject: str
    at: datetime
    why: Why
    by: Literal["process", "operator"]
    host: str
    pid: int
    from_state: State | SagaState | None = None
    to_state: State | SagaState | None = None
    attempt_id: str | None = None
    note: str | None = None


def why_finished(state: State, doubt_reason: DoubtReason | None) -> Why:
    """The history's reason for an owner recording its attempt's end as ``state``."""
    match state:
        case State.SUCCEEDED:
            return Why.RAN
        case State.FAILED:
            return Why.RAISED
        case _:
            return why_in_doubt(doubt_reason or DoubtReason.CRASHED)


def why_in_doubt(reason: DoubtReason) -> Why:
    """The history's reason for marking a key IN_DOUBT for ``reason``."""
    return Why(reason.value)


def saga_why(to_state: SagaState) -> Why:
    """The history's reason for a saga moving to ``to_state``."""
    match to_state:
        case SagaState.RUNNING:
            return Why.STARTED
        case SagaState.COMPLETED:
            return Why.COMPLETED
        case SagaState.COMPENSATING:
            return Why.ABORTED
        case SagaState.COMPENSATED:
            return Why.ROLLED_BACK
        case SagaState.ROLLBACK_INCOMPLETE:
            return Why.ROLLBACK_INCOMPLETE
