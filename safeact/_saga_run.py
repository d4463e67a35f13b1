"""One run of a saga as a sans-IO machine: the saga's rules once, for the sync and async drivers.

A ``SagaRun`` is what one ``with Saga(...)`` block does to its saga. Its generators yield a
request for each thing they need from the world (the saga's row, a step's record, a write of
the saga's progress, the call of a compensation) and are sent the answer. They perform no
I/O and never await: ``Saga`` carries the requests out, blocking in a ``with`` block and
awaiting in an ``async with`` one. The driver also makes tools of the user's functions and
calls each step, between ``begin_step`` and ``settle_step``.

::

    enter     Begin ─► COMPENSATED ─► Read the steps and undos ─► raise SagaFailed
                    └► RUNNING, COMPLETED, or COMPENSATING (ROLLBACK_INCOMPLETE is taken up again)

    step      before enter, or after end ─► SafeError: nothing is asked for, nothing runs
              begin_step: RecordStep ─► the ledger is undoing the saga and the step has no
                          │             outcome to replay (Read) ─► roll back
                          └► the driver calls the step ─► settle_step: Succeeded, stored (Read)
                                                          │            ─► its value
                                                          ├► AwaitingApproval ─► raise
                                                          │  AwaitingApprovalError: the run
                                                          │  stops there, the saga RUNNING
                                                          └► Failed (a denial too) / InDoubt /
                                                             not stored ─► roll back

    end       block ended quietly ─► Move COMPLETED, if it reached every recorded step
                                 │   and no step of this run waits for approval
                                 └► roll back, if the ledger is undoing the saga
              block raised an Exception ─► roll back (not a finished saga, nor step()'s refusal,
                                           nor an AwaitingApprovalError of a running saga)

    roll back Move COMPENSATING ─► ReadSaga ─► newest first, each step completed in this run
              that has a compensation: Compensate ─► Read its record ─► how it went
              ─► Read every step, and the undos not called, for the report
              ─► Move COMPENSATED (all undone) or ROLLBACK_INCOMPLETE ─► raise SagaFailed

A replay-only run (``safeact.replay_only()``: the driver sets ``replay_only``) asks for nothing
that writes. It reads the saga (ReadSaga) instead of beginning it, checks each step against
the steps recorded instead of recording it, and takes up a recorded rollback without its
moves; what would write instead raises ``ReplayOnlyError``: a saga never begun, a step never
recorded, a saga to complete, a rollback to start, or one that would end otherwise than the
ledger says. Its steps and compensations are guarded calls, replay-only themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import Literal, TypeAlias, cast

import attrs

from safeact._call import Read
from safeact._keys import check_key
from safeact._outcome import (
    AwaitingApproval,
    Failed,
    InDoubt,
    Outcome,
    Succeeded,
    awaiting_error,
    failed_from,
    in_doubt_from,
)
from safeact._protocol import (
    DENIED,
    UNSETTLED,
    DoubtReason,
    Record,
    SagaRecord,
    SagaState,
    State,
)
from safeact.exceptions import AwaitingApprovalError, KeyConflictError, ReplayOnlyError, SafeError

__all__ = [
    "Begin",
    "Block",
    "Compensate",
    "Done",
    "Move",
    "Read",
    "ReadSaga",
    "Rebuild",
    "RecordStep",
    "SagaFailed",
    "SagaRequest",
    "SagaRun",
    "Undo",
    "UndoKind",
    "compensation_key",
]


class SagaFailed(SafeError):  # noqa: N818 - the name users asked for
    """A saga aborted; its completed steps were compensated, newest first, as far as possible.

    Attributes:
        saga_id: the saga.
        step: key of the step whose outcome aborted it, or None if the block raised.
        outcome: that step's ``Failed`` (``error_type`` ``"safeact.Denied"`` when a person
            denied it) or ``InDoubt`` (an in-doubt step is not compensated: nobody knows
            whether it happened), or None once an operator resolved it, and in a re-run
            after a denial (the ledger keeps the denial as ``reason``).
        reason: the block's exception as ``Type: message`` when the block aborted it, or
            ``safeact.Denied: denied by <who>[: <note>]`` when a person denied ``step``.
        compensated: keys of the steps whose compensation ran in this run.
        replayed: keys of the steps whose compensation had already run.
        failed: keys of the steps whose compensation failed.
        in_doubt: keys of the steps whose compensation is in doubt.
        awaiting: keys of the steps whose compensation needs a person's approval and has
            none yet: it did not run; a re-run after the approval runs it.
        unreached: keys of completed steps whose compensation could not be called: the
            run that rolled back did not reach them (its block changed or ended early).
        skipped: keys of completed steps that have no compensation.
        unresolved: keys of steps left in doubt that have a compensation: nobody knows
            whether there is anything to undo, so the saga stays ROLLBACK_INCOMPLETE until
            an operator resolves the step and the saga is run again.

    """

    def __init__(  # noqa: PLR0913 - one parameter per part of the report
        self,
        saga_id: str,
        *,
        step: str | None,
        outcome: Failed | InDoubt | None,
        reason: str | None,
        compensated: tuple[str, ...] = (),
        replayed: tuple[str, ...] = (),
        failed: tuple[str, ...] = (),
        in_doubt: tuple[str, ...] = (),
        unreached: tuple[str, ...] = (),
        skipped: tuple[str, ...] = (),
        unresolved: tuple[str, ...] = (),
        awaiting: tuple[str, ...] = (),
    ) -> None:
        """Report how saga ``saga_id`` was aborted and rolled back."""
        self.saga_id = saga_id
        self.step = step
        self.outcome = outcome
        self.reason = reason
        self.compensated = compensated
        self.replayed = replayed
        self.failed = failed
        self.in_doubt = in_doubt
        self.unreached = unreached
        self.skipped = skipped
        self.unresolved = unresolved
        self.awaiting = awaiting
        cause = _cause(step, outcome, reason)
        rollback = "fully rolled back" if self.fully_rolled_back else "NOT fully rolled back"
        parts = [
            f"{label}: {', '.join(keys)}"
            for label, keys in [
                ("compensated", compensated),
                ("compensation replayed", replayed),
                ("compensation FAILED", failed),
                ("compensation IN DOUBT", in_doubt),
                ("compensation AWAITS APPROVAL", awaiting),
                ("compensation NOT REACHED", unreached),
                ("no compensation", skipped),
                ("step IN DOUBT, compensation waits for its resolve", unresolved),
            ]
            if keys
        ]
        super().__init__(f"saga {saga_id!r} aborted: {cause}; {rollback}. " + "; ".join(parts))

    @property
    def fully_rolled_back(self) -> bool:
        """Whether every step that may have happened and has a compensation was compensated."""
        return not (
            self.failed or self.in_doubt or self.unreached or self.unresolved or self.awaiting
        )


def _cause(step: str | None, outcome: Failed | InDoubt | None, reason: str | None) -> str:
    match outcome:
        case Failed(error_type=error_type, message=message):
            return f"step {step!r} failed ({error_type}: {message})"
        case InDoubt():
            return f"step {step!r} is in doubt (not compensated)"
        case None if step is not None and reason is not None and reason.startswith(DENIED):
            return f"step {step!r} failed ({reason})"  # denied: no record but the saga's
        case None if step is not None:
            return f"step {step!r} was in doubt until an operator resolved it"
        case None:
            return f"the saga block raised {reason}"


@attrs.frozen
class Begin:
    """Record saga ``saga_id`` as RUNNING unless it exists; answer with its ``SagaRecord``."""

    saga_id: str


@attrs.frozen
class RecordStep:
    """Record step ``index`` of the saga as ``key``, unless that index is recorded already.

    ``compensation`` names the tool that undoes it (None: nothing does). Answer with the key
    recorded for that index.
    """

    saga_id: str
    index: int
    name: str
    key: str
    compensation: str | None


@attrs.frozen
class Move:
    """Set the saga's ``state``; the abort's step and reason are kept once recorded. Answer None."""

    saga_id: str
    state: SagaState
    aborted_step: str | None = None
    abort_reason: str | None = None


@attrs.frozen
class ReadSaga:
    """Answer with saga ``saga_id``'s ``SagaRecord`` now, or None."""

    saga_id: str


@attrs.frozen
class Undo:
    """A step's compensation: the ``name`` its tool is recorded under, and what to ``call``."""

    name: str
    call: Callable[..., object]


@attrs.frozen
class Compensate:
    """Call ``undo`` as a guarded call with ``key`` and the ``value`` of step ``step``.

    Answer with its ``Outcome``, or None when the call raised before giving one (the driver
    logs why): the compensation counts as failed.
    """

    step: str
    key: str
    value: object
    undo: Undo


@attrs.frozen
class Rebuild:
    """Rebuild the result ``record`` holds as its step's return type, with ``replay``.

    A request, not a call the machine makes itself: a result that cannot be rebuilt makes
    ``replay`` read the ledger (whose decision stored it), which an async driver does off its
    event loop, and a large result takes time to decode.
    """

    record: Record
    replay: Callable[[Record], object]


SagaRequest: TypeAlias = Begin | RecordStep | Move | ReadSaga | Read | Rebuild | Compensate
"""What a run of a saga asks of its driver."""

UndoKind: TypeAlias = Literal[
    "compensated", "replayed", "failed", "in_doubt", "unreached", "awaiting"
]
"""What became of the compensation of a completed step, as ``SagaFailed`` reports it."""

Block: TypeAlias = Literal["before", "in", "after"]
"""Where a run's block is: not entered yet, running its code, or ended."""


@attrs.frozen
class Done:
    """A step that succeeded in this run (ran now or replayed), with its value as stored."""

    key: str
    value: object
    undo: Undo | None


def compensation_key(step: str) -> str:
    """The key of the compensation of the step with key ``step``."""
    return f"{step}:compensate"


@attrs.define
class SagaRun:
    """One run of saga ``saga_id``'s code, against the ledger named ``ledger``.

    ``state`` is the saga's state as this run knows it, ``recorded`` the steps the ledger had
    when the run entered, ``completed`` the steps that succeeded in this run, oldest first,
    ``failure`` the report once this run rolled the saga back, ``waiting`` the error its step
    raised once it waits for a person's approval, and ``block`` where the run's block is: not
    entered yet, running, or ended. ``replay_only``, set by the driver before each of the
    generators, makes it ask for nothing that writes.
    """

    saga_id: str
    ledger: str
    state: SagaState = SagaState.RUNNING
    block: Block = "before"
    recorded: tuple[str, ...] = ()
    next_index: int = 0
    completed: list[Done] = attrs.Factory(list)
    failure: SagaFailed | None = None
    waiting: AwaitingApprovalError | None = None
    replay_only: bool = False

    def enter(self) -> Generator[SagaRequest, object, None]:
        """Take the saga up where the ledger has it.

        Raises:
            SagaFailed: the saga was fully rolled back before; nothing may run.
            ReplayOnlyError: replay-only, and the ledger has no such saga to replay.

        """
        if self.replay_only:
            found = cast("SagaRecord | None", (yield ReadSaga(self.saga_id)))
            if found is None:
                raise ReplayOnlyError(
                    self.saga_id,
                    None,
                    f"saga {self.saga_id!r} would have begun: it is not recorded",
                )
            saga = found
        else:
            saga = cast("SagaRecord", (yield Begin(self.saga_id)))
        if saga.state is SagaState.COMPENSATED:
            raise (yield from self._report(saga, {}))
        # An incomplete rollback is taken up again: compensations an operator has released
        # since then run; those done replay; failed and in-doubt ones stay as they are.
        self.state = (
            SagaState.COMPENSATING if saga.state is SagaState.ROLLBACK_INCOMPLETE else saga.state
        )
        self.recorded = saga.steps
        self.block = "in"

    def check_in_block(self) -> None:
        """Refuse a step taken outside the run's block, where no saga would record it.

        Raises:
            SafeError: the block has not been entered yet, or has ended; nothing ran.

        """
        if self.block == "in":
            return
        when = "before its block began" if self.block == "before" else "after its block ended"
        raise SafeError(
            f"Saga.step of saga {self.saga_id!r} was called {when}; nothing ran. Call step "
            "inside the block: `with saga: saga.step(...)`, or with async steps "
            "`async with saga: await saga.step(...)`"
        )

    def take_index(self) -> int:
        """Number the next step.

        Raises:
            SafeError: the step is taken outside the run's block; nothing ran.
            SagaFailed: this run rolled the saga back: nothing more runs.
            AwaitingApprovalError: a step of this run waits for approval: no later step
                runs before it.

        """
        self.check_in_block()
        if self.failure is not None:
            raise self.failure
        if self.waiting is not None:
            raise self.waiting
        self.next_index += 1
        return self.next_index - 1

    def begin_step(
        self, index: int, name: str, undo: Undo | None
    ) -> Generator[SagaRequest, object, str]:
        """Check step ``index``, of function ``name``, against the ledger and record it.

        Returns the step's key, for the driver to call the step with. Nothing runs here.

        Raises:
            SagaFailed: the ledger says the saga is being rolled back and this step has no
                outcome to replay: the rollback was finished instead.
            KeyConflictError: an earlier run took another step at this index, or the saga
                completed with fewer steps.
            ReplayOnlyError: replay-only, and no step was recorded at this index.
            TypeError, ValueError: ``name`` makes a key that cannot be one.

        """
        key = check_key(f"{self.saga_id}:{index}:{name}", "the step key")
        if self.state is SagaState.COMPLETED and index >= len(self.recorded):
            raise KeyConflictError(
                key,
                f"is not a step of saga {self.saga_id!r}, which completed with "
                f"{len(self.recorded)} steps",
            )
        if self.replay_only:
            if index >= len(self.recorded):
                raise ReplayOnlyError(
                    key,
                    None,
                    f"step {index} of saga {self.saga_id!r} would have been recorded and run "
                    f"under key {key!r}: the saga recorded {len(self.recorded)} steps",
                )
            recorded: object = self.recorded[index]
        else:
            compensation = None if undo is None else undo.name
            recorded = yield RecordStep(self.saga_id, index, name, key, compensation)
        if recorded != key:
            raise KeyConflictError(
                key,
                f"is not step {index} of saga {self.saga_id!r}: an earlier run took {recorded!r}",
            )
        # The ledger says this saga is being rolled back: finish that, start nothing new. A
        # step is called only to replay its settled outcome: calling one in doubt could let
        # its probe release it and run the action in a run meant to undo it.
        if self.state is SagaState.COMPENSATING and not _settled(
            cast("Record | None", (yield Read(key)))
        ):
            raise (yield from self.roll_back())
        return key

    def settle_step(
        self,
        key: str,
        undo: Undo | None,
        outcome: Outcome[object],
        replay: Callable[[Record], object],
    ) -> Generator[SagaRequest, object, object]:
        """Return the value of the step called with ``key``, or roll back if ``outcome`` aborts.

        ``replay`` rebuilds a stored result as the step's return type.

        Raises:
            SagaFailed: the step failed (a denied one too), is in doubt, or ran without its
                result stored; the saga was rolled back (chained from the step's exception,
                if it raised now).
            AwaitingApprovalError: the step waits for a person's approval; it did not run,
                nothing is undone, and the saga stays RUNNING for a re-run to go on.

        """
        match outcome:
            case Succeeded(value=value, replayed=replayed):
                stored = cast("Record | None", (yield Read(key)))
                if stored is None or stored.state is not State.SUCCEEDED:
                    # It ran, but its result could not be stored: a replay could not return
                    # it, so the saga cannot go on. The key is in doubt for an operator.
                    raise (yield from self.roll_back(step=key, outcome=_stored_outcome(stored)))
                # Compensations get the value as stored, the same in every run, so their
                # arguments match when a rollback is taken up again.
                rebuilt = value if replayed else (yield Rebuild(stored, replay))
                self.completed.append(Done(key, rebuilt, undo))
                return value
            case Failed(exception=exception):
                # A denial has no record of its own in the calls: the saga keeps it, so a
                # re-run's report still says who said no.
                reason = _denial(outcome)
                failure = yield from self.roll_back(step=key, outcome=outcome, reason=reason)
                raise failure from exception
            case InDoubt():
                raise (yield from self.roll_back(step=key, outcome=outcome))
            case AwaitingApproval():
                # A person has not said no: nothing to undo, and nothing after it may run
                # first. The saga stays RUNNING; its re-run replays the steps before this
                # one and calls it again, which runs it once approved.
                self.waiting = awaiting_error(outcome)
                raise self.waiting

    def end(
        self, exc: BaseException | None, *, refused: bool
    ) -> Generator[SagaRequest, object, None]:
        """End the run as its block ended: quietly (``exc`` None) or raising ``exc``.

        ``refused``: ``exc`` is an error ``step`` raised before running anything (a conflict,
        arguments that do not fit, a broken ledger), which undoes nothing. Neither does a
        ``ReplayOnlyError``, an interrupt (a ``BaseException`` that is not an
        ``Exception``), nor anything after the saga finished, nor an
        ``AwaitingApprovalError`` while the saga runs: a step waits for a person, who has
        not said no. A block that waits (it raised that error, or caught it and ended
        quietly) leaves the saga RUNNING, not completed.

        Raises:
            SagaFailed: the saga was rolled back (chained from ``exc``).
            SafeError: the block ended quietly without reaching every step an earlier run
                recorded; the saga stays RUNNING.

        """
        self.block = "after"
        if exc is None:
            if self.state is SagaState.COMPENSATING:
                raise (yield from self.roll_back())  # the ledger says it is being undone
            if self.state is SagaState.RUNNING and self.waiting is None:
                yield from self._complete()
            return
        if refused or exc is self.failure or not isinstance(exc, Exception):
            return
        if isinstance(exc, ReplayOnlyError):
            return  # nothing ran or was written: a refusal, which undoes nothing
        if isinstance(exc, AwaitingApprovalError) and self.state is SagaState.RUNNING:
            return  # waiting is not failing: the saga stays RUNNING for a re-run
        if self.state in (SagaState.COMPLETED, SagaState.COMPENSATED):
            return  # a finished saga is not undone by what its re-run does afterwards
        raise (yield from self.roll_back(reason=f"{type(exc).__name__}: {exc}")) from exc

    def _complete(self) -> Generator[SagaRequest, object, None]:
        """Mark the saga COMPLETED, if this run reached every step the ledger recorded.

        Raises:
            SafeError: an earlier run recorded steps this run did not reach; the saga stays
                RUNNING, with those steps accounted for.

        """
        if self.next_index < len(self.recorded):
            missed = self.recorded[self.next_index :]
            raise SafeError(
                f"saga {self.saga_id!r} is not completed: its block ended after "
                f"{self.next_index} steps, but an earlier run recorded "
                f"{len(self.recorded)}; not reached: {', '.join(missed)}. It stays running: "
                "run code that takes every recorded step, or raise in the block to roll the "
                "saga back"
            )
        if self.replay_only:
            raise ReplayOnlyError(
                self.saga_id,
                None,
                f"saga {self.saga_id!r} would have been marked completed: the ledger has it "
                "running still",
            )
        yield Move(self.saga_id, SagaState.COMPLETED)
        self.state = SagaState.COMPLETED

    def roll_back(
        self,
        *,
        step: str | None = None,
        outcome: Failed | InDoubt | None = None,
        reason: str | None = None,
    ) -> Generator[SagaRequest, object, SagaFailed]:
        """Compensate the steps completed in this run, newest first; return the report.

        ``step`` and its ``outcome`` aborted the saga, or the block's exception (``reason``);
        neither when a rollback cut short is taken up again (the ledger keeps the first).

        Replay-only, it only takes up a rollback the ledger records (compensations that
        ran replay, the others are refused by their own calls) and ends it as recorded.

        Raises:
            SafeError: the saga's row vanished from the ledger.
            ReplayOnlyError: replay-only, and the rollback would start now, or end the saga
                otherwise than the ledger records; nothing was written.

        """
        if not self.replay_only:
            yield Move(self.saga_id, SagaState.COMPENSATING, aborted_step=step, abort_reason=reason)
        elif self.state is not SagaState.COMPENSATING:
            raise ReplayOnlyError(
                self.saga_id,
                None,
                f"saga {self.saga_id!r} would have been rolled back (it was {self.state.value})",
            )
        self.state = SagaState.COMPENSATING
        saga = cast("SagaRecord | None", (yield ReadSaga(self.saga_id)))
        if saga is None:
            raise SafeError(f"saga {self.saga_id!r} vanished from {self.ledger}")
        undos = {
            done.key: (done.value, done.undo) for done in self.completed if done.undo is not None
        }
        went: dict[str, UndoKind] = {}
        for key in reversed(saga.steps):  # newest first, in the ledger's order
            if key in undos:
                went[key] = yield from self._compensate(key, *undos[key])
        failure = yield from self._report(saga, went, outcome)
        final = (
            SagaState.COMPENSATED if failure.fully_rolled_back else SagaState.ROLLBACK_INCOMPLETE
        )
        if not self.replay_only:
            yield Move(self.saga_id, final)
        elif final is not saga.state:
            raise ReplayOnlyError(
                self.saga_id,
                None,
                f"saga {self.saga_id!r} would have been moved from {saga.state.value} to "
                f"{final.value}",
            )
        self.state, self.failure = final, failure
        return failure

    def _compensate(
        self, step: str, value: object, undo: Undo
    ) -> Generator[SagaRequest, object, UndoKind]:
        """Call ``undo`` on the ``value`` of a step completed in this run; say how it went."""
        key = compensation_key(step)
        outcome = yield Compensate(step, key, value, undo)
        if outcome is None:
            return "failed"
        record = cast("Record | None", (yield Read(key)))
        return _undo_kind(cast("Outcome[object]", outcome), record)

    def _report(
        self,
        saga: SagaRecord,
        went: Mapping[str, UndoKind],
        outcome: Failed | InDoubt | None = None,
    ) -> Generator[SagaRequest, object, SagaFailed]:
        """Walk the saga's recorded steps newest first and say what became of each undo.

        ``went`` says how the compensations called in this run went; the record of any other
        compensation speaks for it.
        """
        report: dict[str, list[str]] = {
            kind: []
            for kind in (
                "compensated",
                "replayed",
                "failed",
                "in_doubt",
                "unreached",
                "skipped",
                "unresolved",
                "awaiting",
            )
        }
        for key, undo in reversed(list(zip(saga.steps, saga.compensations, strict=True))):
            step = cast("Record | None", (yield Read(key)))
            if step is not None and step.state in UNSETTLED and undo is not None:
                # It may have happened: the rollback is not done until someone knows.
                report["unresolved"].append(key)
                continue
            if step is None or step.state is not State.SUCCEEDED:
                continue
            if undo is None:
                report["skipped"].append(key)
                continue
            kind = went.get(key)
            if kind is None:
                kind = _recorded_undo(cast("Record | None", (yield Read(compensation_key(key)))))
            report[kind].append(key)
        if outcome is None and saga.aborted_step is not None:
            outcome = _stored_outcome(cast("Record | None", (yield Read(saga.aborted_step))))
        return SagaFailed(
            saga.saga_id,
            step=saga.aborted_step,
            outcome=outcome,
            reason=saga.abort_reason,
            **{kind: tuple(keys) for kind, keys in report.items()},
        )


def _settled(record: Record | None) -> bool:
    """Whether the call of ``record`` has an outcome to replay (it succeeded or failed)."""
    return record is not None and record.state in (State.SUCCEEDED, State.FAILED)


def _undo_kind(outcome: Outcome[object], record: Record | None) -> UndoKind:
    """Classify how a compensation called in this run went, given its record after the call."""
    match outcome:
        case Succeeded() if record is None or record.state is not State.SUCCEEDED:
            return "in_doubt"  # it ran, but its result was not stored
        case Succeeded(replayed=False):
            return "compensated"
        case Succeeded():
            return "replayed"
        case Failed():
            return "failed"
        case InDoubt():
            return "in_doubt"
        case AwaitingApproval():
            return "awaiting"  # it did not run: a re-run after the approval runs it


def _recorded_undo(record: Record | None) -> UndoKind:
    """Classify a compensation that this run did not call, by its record."""
    if record is None or record.state is State.RELEASED:
        return "unreached"
    if record.state is State.SUCCEEDED:
        return "replayed"
    if record.state is State.FAILED:
        return "failed"
    return "in_doubt"


def _denial(outcome: Failed) -> str | None:
    """A person's denial of a step as the saga keeps it (``safeact.Denied: ...``), else None."""
    if outcome.error_type != DENIED:
        return None
    return f"{outcome.error_type}: {outcome.message}"


def _stored_outcome(record: Record | None) -> Failed | InDoubt | None:
    """The outcome of the step that aborted a saga, as its ``record`` now tells it."""
    if record is None or record.state in (State.SUCCEEDED, State.RELEASED):
        return None  # never aborted, or an operator has resolved it since
    if record.state is State.FAILED:
        return failed_from(record)
    return in_doubt_from(record, record.doubt_reason or DoubtReason.LEASE_EXPIRED)
