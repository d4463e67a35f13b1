"""One guarded call as a sans-IO machine: the call's rules once, for the sync and async drivers.

``guarded_call`` is a generator. It yields a request for each thing it needs from the world
(the key's record, what is known of its owner, a claim, a mark, a probe's verdict, a pause,
the action, the write of the action's outcome) and is sent the answer. It performs no I/O,
reads no clock but the ones it is given, and never awaits: ``SafeTool`` and ``AsyncSafeTool``
are drivers that carry out each request, blocking or awaiting, and send back what came of
it. The decisions themselves are ``_protocol``'s pure functions.

::

    Read ──► (settled) ──────────────────────────────────────► replay          (return)
      │
      ├──► (no row, or RELEASED) ─► Claim ─► Act ─► Finish ─────► Succeeded / Failed
      │      a tool that needs approval first reads its gate (ReadApproval):
      │        none yet, or used by a released attempt ─► RequestApproval, Read again
      │        pending ─► AwaitingApproval; denied ─► Failed (safeact.Denied)
      │        approved ─► Claim, consuming it in the claim's transaction
      │                               └─ lost the race: Read again
      └──► (unsettled) ─► Look ─► owner alive:  Pause, Read again; out of time: InDoubt
                                └► abandoned:   Mark ─► (Ask the probe once) ─► InDoubt

A replay-only call (``safeact.replay_only()``) only reads: where the diagram claims it raises
``ReplayOnlyError``, and where it marks (and asks the probe, which writes its verdict) it
returns ``InDoubt`` as read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, TypeAlias, cast

import attrs

from safeact._codec import ResultNotStorableError
from safeact._outcome import (
    Failed,
    Outcome,
    Succeeded,
    awaiting_from,
    denied_from,
    in_doubt_from,
)
from safeact._protocol import (
    UNSETTLED,
    Approval,
    AskApproval,
    Await,
    Denial,
    Doubt,
    DoubtReason,
    Go,
    Record,
    Replay,
    Run,
    State,
    Step,
    Wait,
    approval_step,
    checkpoint,
    may_mark,
    next_step,
    owner_may_write,
)
from safeact.exceptions import ReplayOnlyError

if TYPE_CHECKING:
    from datetime import datetime

    from safeact._protocol import JSON

__all__ = [
    "Act",
    "Ask",
    "Claim",
    "Finish",
    "Look",
    "Mark",
    "Pause",
    "Raised",
    "Read",
    "ReadApproval",
    "Request",
    "RequestApproval",
    "Returned",
    "Sighting",
    "guarded_call",
]

FIRST_PAUSE, LONGEST_PAUSE = 0.005, 0.1
"""A caller waiting on a live owner reads the key again after these pauses, doubling."""


@attrs.frozen
class Read:
    """Answer with the key's record now: ``Record | None``."""

    key: str


@attrs.frozen
class ReadApproval:
    """Answer with the key's approval now: ``Approval | None``."""

    key: str


@attrs.frozen
class RequestApproval:
    """Record a request for approval of this call (``previous``: a consumed one to ask again).

    Answer with ``None``; another caller's request that came first is as good.
    """

    key: str
    args_hash: str
    previous: Approval | None
    arguments: str | None = None
    """The call's arguments as JSON text for display, when the tool keeps them."""


@attrs.frozen
class Look:
    """Answer with what is known of the unsettled attempt ``record``'s owner: a ``Sighting``."""

    record: Record


@attrs.frozen
class Sighting:
    """``gone``: the owner's process provably no longer runs; ``lost``: its session ended."""

    gone: bool
    lost: bool


@attrs.frozen
class Claim:
    """Claim ``key`` with a new attempt, replacing ``previous``, synced before the answer.

    Answer with the claimed ``Record``, or ``None`` when the row changed first (another
    caller claimed it, or its owner finished). A cancelled async caller whose claim went
    through leaves the key in doubt (interrupted): the action did not run.
    """

    key: str
    args_hash: str
    previous: Record | None
    approval: Approval | None = None
    """The approval this claim consumes, in its transaction; if it cannot, answer ``None``."""
    arguments: str | None = None
    """The call's arguments as JSON text for display, when the tool keeps them."""


@attrs.frozen
class Mark:
    """Mark ``record``'s attempt IN_DOUBT for ``reason``; answer ``False`` if the row moved on."""

    record: Record
    reason: DoubtReason


@attrs.frozen
class Ask:
    """Ask the tool's probe about the in-doubt ``record`` and apply its verdict.

    Answer with the history's note when a release was withheld (the owner is not proven
    finished), else ``None``.
    """

    record: Record
    reason: DoubtReason


@attrs.frozen
class Pause:
    """Sleep ``seconds``; answer ``None``."""

    seconds: float


@attrs.frozen
class Act:
    """Run the action under ``record``'s attempt, renewing its lease meanwhile.

    Answer with ``Returned`` or ``Raised``. An interruption (a ``BaseException``) is the
    driver's to handle: it marks the attempt in doubt and lets it propagate.
    """

    record: Record


@attrs.frozen
class Returned:
    """The action returned ``value`` in process ``pid``."""

    value: object
    pid: int


@attrs.frozen
class Raised:
    """The action raised ``error`` in process ``pid``."""

    error: Exception
    pid: int


@attrs.frozen(kw_only=True)
class Finish:
    """Record the end of ``record``'s attempt; answer whether the ledger has it.

    Trouble writing it is the driver's to report (logged, the key marked in doubt by
    another route, answer ``False``); it never raises.
    """

    record: Record
    state: State
    result: JSON = None
    error_type: str | None = None
    error_message: str | None = None
    doubt_reason: DoubtReason | None = None


Request: TypeAlias = (
    Read | ReadApproval | RequestApproval | Look | Claim | Mark | Ask | Pause | Act | Finish
)
"""What a guarded call asks of its driver."""

_SEEN_NOTHING = Sighting(gone=False, lost=False)


def guarded_call(  # noqa: PLR0913 - the call, and what of its tool the rules need
    key: str,
    args_hash: str,
    *,
    tool: str,
    wait: float,
    probing: bool,
    replay: Callable[[Record], Outcome[object]],
    encode: Callable[[object], JSON],
    utc_now: Callable[[], datetime],
    monotonic: Callable[[], float] = time.monotonic,
    former_hash: Callable[[], str] | None = None,
    replay_only: bool = False,
    gated: bool = False,
    arguments: str | None = None,
) -> Generator[Request, object, Outcome[object]]:
    """Make one call of ``tool`` with ``args_hash`` under ``key``; return its ``Outcome``.

    ``former_hash`` gives the call's hash as an older safeact wrote it (``next_step``).

    ``wait`` is how long to wait on a live owner; ``probing`` whether the tool has a probe
    to ask once when the key is in doubt; ``replay`` rebuilds a settled record's outcome;
    ``encode`` stores a result (raising ``ResultNotStorableError`` when it cannot).
    ``replay_only``: ask for nothing that writes; a key in doubt is returned as read.
    ``gated``: the tool needs a person's approval before each claim (``approval_step``);
    waiting for it returns ``AwaitingApproval`` at once, never blocking. ``arguments``: the
    call's arguments as JSON text, kept with its claim and its request for display.

    Raises:
        KeyConflictError: the key is recorded for another tool or other arguments.
        ReplayOnlyError: ``replay_only``, and the call would claim the key or ask for an
            approval; nothing was asked that writes.

    """
    deadline, pause, probed = monotonic() + wait, FIRST_PAUSE, False
    withheld: str | None = None
    # Replay-only, a key in doubt is returned as read: a mark and a probe's verdict write.
    marking, probing = not replay_only, probing and not replay_only
    while True:
        match (yield from _decide(key, args_hash, tool, utc_now, former_hash)):
            case Replay(stored):
                return replay(stored)
            case Run(previous):
                outcome = yield from _claimed_run(
                    Claim(key, args_hash, previous, None, arguments),
                    tool,
                    encode,
                    gated=gated,
                    replay_only=replay_only,
                )
                if outcome is not None:
                    return outcome
            case Doubt(unsettled, reason):
                if marking and may_mark(unsettled, reason) and not (yield Mark(unsettled, reason)):
                    continue  # the row moved on before it could be marked: decide again
                if not probing or probed:
                    return in_doubt_from(unsettled, reason, withheld)
                withheld = cast("str | None", (yield Ask(unsettled, reason)))
                probed = True
            case Wait(running):
                left = deadline - monotonic()
                if left <= 0:
                    return in_doubt_from(running, DoubtReason.IN_FLIGHT)
                yield Pause(min(pause, left))
                pause = min(2 * pause, LONGEST_PAUSE)


def _decide(
    key: str,
    args_hash: str,
    tool: str,
    utc_now: Callable[[], datetime],
    former_hash: Callable[[], str] | None,
) -> Generator[Request, object, Step]:
    """Read the key (and, if it is unsettled, what is known of its owner); decide the step."""
    record = cast("Record | None", (yield Read(key)))
    seen = _SEEN_NOTHING
    if record is not None and record.state in UNSETTLED:
        seen = cast("Sighting", (yield Look(record)))
    return next_step(
        record,
        tool,
        args_hash,
        now=utc_now(),
        owner_gone=lambda _: seen.gone,
        owner_lost=lambda _: seen.lost,
        former_hash=former_hash,
    )


def _claimed_run(
    claim: Claim,
    tool: str,
    encode: Callable[[object], JSON],
    *,
    gated: bool,
    replay_only: bool,
) -> Generator[Request, object, Outcome[object] | None]:
    """Pass the gate (if ``gated``), claim, run: the outcome, or None to decide again.

    None when the call asked for an approval, or lost the claim to another caller.
    """
    if gated:
        gate = yield from _gate(
            claim.key, claim.args_hash, tool, claim.arguments, replay_only=replay_only
        )
        if gate is None:
            return None
        if not isinstance(gate, Approval):
            return gate
        claim = attrs.evolve(claim, approval=gate)
    claimed = yield from _claim(claim, tool, replay_only=replay_only)
    if claimed is None:
        return None
    return (yield from _run(claimed, tool, encode))


def _gate(
    key: str, args_hash: str, tool: str, arguments: str | None, *, replay_only: bool
) -> Generator[Request, object, Approval | Outcome[object] | None]:
    """Pass the key's approval gate: the approval to consume, the outcome, or None (asked).

    Raises:
        KeyConflictError: the approval is for another tool or other arguments.
        ReplayOnlyError: ``replay_only``, and the call would ask for an approval.

    """
    match approval_step(cast("Approval | None", (yield ReadApproval(key))), tool, args_hash):
        case Go(approval):
            return approval
        case Await(pending):
            return awaiting_from(pending)
        case Denial(denied):
            return denied_from(denied)
        case AskApproval(previous):
            if replay_only:
                raise ReplayOnlyError(key, tool)
            yield RequestApproval(key, args_hash, previous, arguments)
            return None


def _claim(
    claim: Claim, tool: str, *, replay_only: bool
) -> Generator[Request, object, Record | None]:
    """Make ``claim``; None if the row (or the approval it consumes) changed first.

    Raises:
        ReplayOnlyError: ``replay_only``: a claim is the first write of an action.

    """
    if replay_only:
        raise ReplayOnlyError(claim.key, tool)
    checkpoint("before_claim")
    return cast("Record | None", (yield claim))


def _run(
    record: Record, tool: str, encode: Callable[[object], JSON]
) -> Generator[Request, object, Outcome[object]]:
    """Run the claimed attempt's action and record its outcome."""
    checkpoint("after_claim")
    acted = yield Act(record)
    match acted:
        case Raised(error, pid):
            error_type, message = type_name(type(error)), message_of(error)
            if not owner_may_write(record, pid):
                # A child forked inside the action: the attempt is its parent's.
                return Failed(
                    record.key, tool, error_type, message, recorded=False, exception=error
                )
            checkpoint("after_call")
            recorded = yield Finish(
                record=record, state=State.FAILED, error_type=error_type, error_message=message
            )
            checkpoint("after_record")
            return Failed(
                record.key, tool, error_type, message, recorded=bool(recorded), exception=error
            )
        case Returned(value, pid):
            if not owner_may_write(record, pid):
                return Succeeded(record.key, value, recorded=False)
            checkpoint("after_call")
            try:
                stored = encode(value)
            except ResultNotStorableError as exc:
                # It ran, so it must never run again; but without a storable result a replay
                # has nothing to return: leave the key for an operator to resolve with it.
                yield Finish(
                    record=record,
                    state=State.IN_DOUBT,
                    error_type="safeact.ResultNotStorable",
                    error_message=(
                        f"the action ran but its result could not be stored: {message_of(exc)}"
                    ),
                    doubt_reason=DoubtReason.RESULT_NOT_STORED,
                )
                recorded = False
            else:
                recorded = bool((yield Finish(record=record, state=State.SUCCEEDED, result=stored)))
            checkpoint("after_record")
            return Succeeded(record.key, value, recorded=recorded)
        case _:
            raise TypeError(f"Act is answered with Returned or Raised, not {acted!r}")


def message_of(exc: Exception) -> str:
    """Return ``str(exc)`` as storable text, whatever the exception's ``__str__`` does."""
    try:
        text = str(exc)
    except Exception as failure:  # noqa: BLE001 - a broken __str__ must not lose the outcome
        text = f"<str() of the exception raised {type(failure).__name__}>"
    # Lone surrogates do not encode, and PostgreSQL text holds no NUL: escape both.
    return text.encode("utf-8", "backslashreplace").decode().replace("\x00", "\\x00")


def type_name(cls: type[BaseException]) -> str:
    """The name an exception's type is recorded under: ``module.qualname``, builtins bare."""
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"
