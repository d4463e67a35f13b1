"""Sagas: guarded steps that are compensated newest first, once each, when one aborts.

A saga's steps and compensations are ordinary guarded calls with deterministic keys
(``{saga_id}:{index}:{name}`` and ``{step_key}:compensate``), so each runs at most once
ever. The saga's own progress (``SagaState``) is in the ledger: re-running the same code
with the same ``saga_id`` replays the completed steps and finishes a rollback that was cut
short, because the step that aborted it replays its outcome and aborts again.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
from collections.abc import Callable, Coroutine
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Literal,
    Self,
    TypeAlias,
    TypeVar,
    cast,
    overload,
)

import attrs

from safeact._keys import check_key
from safeact._open import get_store
from safeact._outcome import Failed, InDoubt, Outcome, Succeeded, failed_from, in_doubt_from
from safeact._protocol import UNSETTLED, DoubtReason, Record, SagaRecord, SagaState, State
from safeact._store import Store
from safeact._tool import AsyncSafeTool, Compensation, SafeTool, safe
from safeact.exceptions import KeyConflictError, SafeError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType

__all__ = ["Saga", "SagaFailed"]

T = TypeVar("T")

logger = logging.getLogger("safeact")


class SagaFailed(SafeError):  # noqa: N818 - the name users asked for
    """A saga aborted; its completed steps were compensated, newest first, as far as possible.

    Attributes:
        saga_id: the saga.
        step: key of the step whose outcome aborted it, or None if the block raised.
        outcome: that step's ``Failed`` or ``InDoubt`` (an in-doubt step is not
            compensated: nobody knows whether it happened), or None once an operator
            resolved it.
        reason: the block's exception as ``Type: message`` when the block aborted it.
        compensated: keys of the steps whose compensation ran in this run.
        replayed: keys of the steps whose compensation had already run.
        failed: keys of the steps whose compensation failed.
        in_doubt: keys of the steps whose compensation is in doubt.
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
        cause = _cause(step, outcome, reason)
        rollback = "fully rolled back" if self.fully_rolled_back else "NOT fully rolled back"
        parts = [
            f"{label}: {', '.join(keys)}"
            for label, keys in [
                ("compensated", compensated),
                ("compensation replayed", replayed),
                ("compensation FAILED", failed),
                ("compensation IN DOUBT", in_doubt),
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
        return not (self.failed or self.in_doubt or self.unreached or self.unresolved)


def _cause(step: str | None, outcome: Failed | InDoubt | None, reason: str | None) -> str:
    match outcome:
        case Failed(error_type=error_type, message=message):
            return f"step {step!r} failed ({error_type}: {message})"
        case InDoubt():
            return f"step {step!r} is in doubt (not compensated)"
        case None if step is not None:
            return f"step {step!r} was in doubt until an operator resolved it"
        case None:
            return f"the saga block raised {reason}"


@attrs.frozen
class _Completed:
    """A step that succeeded in this run of the saga (ran now or replayed)."""

    key: str
    value: object
    compensate: Compensation | None


@attrs.frozen
class _Pending:
    """A step about to be called: its tool and key, and whether the saga must roll back first."""

    tool: SafeTool[..., object] | AsyncSafeTool[..., object]
    key: str
    compensate: Compensation | None
    resume_rollback: bool


@attrs.frozen
class _Abort:
    """The step's outcome aborts the saga."""

    step: str
    outcome: Failed | InDoubt | None
    cause: BaseException | None


_Tool: TypeAlias = "SafeTool[..., object] | AsyncSafeTool[..., object]"


class Saga:
    """Run several guarded steps; if one aborts, compensate the completed ones in reverse.

    Use as ``with Saga(saga_id, store) as s: value = s.step(fn, *args, compensate=undo)``,
    or, with async steps, ``async with Saga(...) as s: value = await s.step(afn, ...)``.
    A step that returns ``Failed`` or ``InDoubt``, or an ``Exception`` raised in the block,
    aborts the saga: its completed steps that have a compensation are compensated, newest
    first, and ``SagaFailed`` is raised. Re-running a saga whose rollback was incomplete
    takes the rollback up again (a compensation an operator released then runs). An
    interrupt (a ``BaseException`` that is not an ``Exception``) propagates without a
    rollback; the saga stays as it was and a re-run carries on. Run one saga id in one
    process at a time.

    Raises:
        SagaFailed: from ``with`` if the saga was fully rolled back before (nothing runs),
            from ``step`` when a step aborts it, and from the block's end when it raised.
        KeyConflictError: a re-run takes other steps than the ledger recorded; nothing new
            runs and nothing is compensated.
        SafeError: from the block's end, when it ended without reaching every step an
            earlier run recorded; the saga is not completed and stays running.

    """

    def __init__(self, saga_id: str, store: str | os.PathLike[str] | Store) -> None:
        """Open the ledger and name the saga; nothing is recorded until ``with`` starts."""
        self.saga_id = check_key(saga_id, "the saga id")
        self.store = store if isinstance(store, Store) else get_store(store)
        self._state = SagaState.RUNNING
        self._recorded: tuple[str, ...] = ()
        self._next_index = 0
        self._completed: list[_Completed] = []
        self._tools: dict[object, _Tool] = {}
        self._refusal: BaseException | None = None
        self._failure: SagaFailed | None = None

    def __enter__(self) -> Self:
        record = self.store._begin_saga(self.saga_id)
        if record.state is SagaState.COMPENSATED:
            raise _failure_from_ledger(self.store, record)
        # An incomplete rollback is taken up again: compensations an operator has released
        # since then run; those done replay; failed and in-doubt ones stay as they are.
        self._state = (
            SagaState.COMPENSATING
            if record.state is SagaState.ROLLBACK_INCOMPLETE
            else record.state
        )
        self._recorded = record.steps
        return self

    async def __aenter__(self) -> Self:
        import asyncio  # noqa: PLC0415 - only async callers pay for it (~20 ms)

        return await asyncio.to_thread(self.__enter__)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        match self._ending(exc):
            case "complete":
                self._complete()
            case "roll back":
                raise self._roll_back(reason=_reason(exc)) from exc
            case None:
                return

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        import asyncio  # noqa: PLC0415 - only async callers pay for it (~20 ms)

        match self._ending(exc):
            case "complete":
                await asyncio.to_thread(self._complete)
            case "roll back":
                raise await self._roll_back_async(reason=_reason(exc)) from exc
            case None:
                return

    def _ending(self, exc: BaseException | None) -> Literal["complete", "roll back"] | None:
        """Decide what the end of the block does, given the exception that ended it."""
        if exc is None:
            if self._state is SagaState.COMPENSATING:
                return "roll back"  # the ledger says it is being undone: finish that
            return "complete" if self._state is SagaState.RUNNING else None
        if exc is self._refusal or exc is self._failure or not isinstance(exc, Exception):
            return None  # misuse refused by step() undoes nothing; an interrupt is no rollback
        if self._state in (SagaState.COMPLETED, SagaState.COMPENSATED):
            return None  # a finished saga is not undone by what its re-run does afterwards
        return "roll back"

    def _complete(self) -> None:
        """Mark the saga COMPLETED, if this run reached every step the ledger recorded.

        Raises:
            SafeError: an earlier run recorded steps this run did not reach; the saga stays
                RUNNING, with those steps accounted for.

        """
        if self._next_index < len(self._recorded):
            missed = self._recorded[self._next_index :]
            raise SafeError(
                f"saga {self.saga_id!r} is not completed: its block ended after "
                f"{self._next_index} steps, but an earlier run recorded "
                f"{len(self._recorded)}; not reached: {', '.join(missed)}. It stays running: "
                "run code that takes every recorded step, or raise in the block to roll the "
                "saga back"
            )
        self.store._move_saga(self.saga_id, SagaState.COMPLETED)
        self._state = SagaState.COMPLETED

    @overload
    def step(
        self,
        fn: AsyncSafeTool[..., T],
        /,
        *args: object,
        compensate: Callable[[str, T], object] | None = None,
        **kwargs: object,
    ) -> Coroutine[Any, Any, T]: ...

    @overload
    def step(
        self,
        fn: SafeTool[..., T],
        /,
        *args: object,
        compensate: Callable[[str, T], object] | None = None,
        **kwargs: object,
    ) -> T: ...

    @overload
    def step(
        self,
        fn: Callable[Concatenate[str, ...], Coroutine[Any, Any, T]],
        /,
        *args: object,
        compensate: Callable[[str, T], object] | None = None,
        **kwargs: object,
    ) -> Coroutine[Any, Any, T]: ...

    @overload
    def step(
        self,
        fn: Callable[Concatenate[str, ...], T],
        /,
        *args: object,
        compensate: Callable[[str, T], object] | None = None,
        **kwargs: object,
    ) -> T: ...

    def step(
        self,
        fn: Callable[..., object],
        /,
        *args: object,
        compensate: Callable[[str, T], object] | None = None,
        **kwargs: object,
    ) -> object:
        """Run ``fn(step_key, *args, **kwargs)`` as a guarded call and return its value.

        The key is ``{saga_id}:{index}:{name}``; ``fn`` is a plain function taking the key
        first or a tool made with ``safe``, whose own ``compensate`` is used when
        ``compensate`` is None. An ``async def`` function or an async tool gives a
        coroutine to await, in an ``async with`` block. The arguments are not checked by
        type checkers (a keyword named ``compensate`` cannot reach ``fn``); the return type
        is.

        Raises:
            SagaFailed: the step returned ``Failed`` or ``InDoubt``; the saga was rolled back.
            KeyConflictError: an earlier run of this saga took another step here, or the
                step's arguments differ from that run's. Nothing runs or is compensated.
            TypeError, ValueError, StoreError: as for a guarded call, or the compensation
                cannot be a tool; raised before the step runs, and nothing is compensated.

        """
        if isinstance(fn, AsyncSafeTool) or inspect.iscoroutinefunction(fn):
            return self._step_async(fn, args, kwargs, compensate)
        with self._refusing():
            pending = self._begin_step(fn, compensate)
            if pending.resume_rollback:
                raise self._roll_back()
            outcome = _call_sync(pending.tool, pending.key, args, kwargs)
        settled = self._settle_step(pending, outcome)
        if isinstance(settled, _Abort):
            raise self._roll_back(step=settled.step, outcome=settled.outcome) from settled.cause
        return settled

    async def _step_async(
        self,
        fn: Callable[..., object],
        args: tuple[object, ...],
        kwargs: dict[str, object],
        compensate: Compensation | None,
    ) -> object:
        import asyncio  # noqa: PLC0415 - only async callers pay for it (~20 ms)

        with self._refusing():
            pending = await asyncio.to_thread(self._begin_step, fn, compensate)
            if pending.resume_rollback:
                raise await self._roll_back_async()
            outcome = await _call(pending.tool, pending.key, args, kwargs)
        settled = await asyncio.to_thread(self._settle_step, pending, outcome)
        if isinstance(settled, _Abort):
            failure = await self._roll_back_async(step=settled.step, outcome=settled.outcome)
            raise failure from settled.cause
        return settled

    @contextlib.contextmanager
    def _refusing(self) -> Iterator[None]:
        """Mark what step() raises, short of running the action, as a refusal: no rollback."""
        try:
            yield
        except SagaFailed:
            raise
        except Exception as exc:
            self._refusal = exc
            raise

    def _begin_step(self, fn: Callable[..., object], compensate: Compensation | None) -> _Pending:
        """Check the step against the ledger and record it; nothing runs here.

        Raises:
            SagaFailed: the saga was already rolled back in this run.
            KeyConflictError, TypeError, ValueError, StoreError: see ``step``.

        """
        if self._failure is not None:
            raise self._failure  # the saga was rolled back in this run: nothing more runs
        index = self._next_index
        self._next_index += 1
        tool = self._tool(fn)
        name = (
            tool.name
            if isinstance(fn, SafeTool | AsyncSafeTool)
            else getattr(fn, "__name__", tool.name)
        )
        key = check_key(f"{self.saga_id}:{index}:{name}", "the step key")
        undo = compensate if compensate is not None else tool.compensate
        undo_name = None if undo is None else self._tool(undo).name  # refused now, not mid-rollback
        if self._state is SagaState.COMPLETED and index >= len(self._recorded):
            raise KeyConflictError(
                key,
                f"is not a step of saga {self.saga_id!r}, which completed with "
                f"{len(self._recorded)} steps",
            )
        recorded = self.store._record_saga_step(self.saga_id, index, name, key, undo_name)
        if recorded != key:
            raise KeyConflictError(
                key,
                f"is not step {index} of saga {self.saga_id!r}: an earlier run took {recorded!r}",
            )
        # The ledger says this saga is being rolled back: finish that, start nothing new. A
        # step is called only to replay its settled outcome: calling one in doubt could let
        # its probe release it and run the action in a run meant to undo it.
        resume = self._state is SagaState.COMPENSATING and not _settled(self.store, key)
        return _Pending(tool, key, undo, resume_rollback=resume)

    def _settle_step(self, pending: _Pending, outcome: Outcome[object]) -> object:
        """Return the step's value, or the ``_Abort`` its outcome calls for."""
        match outcome:
            case Succeeded(value=value, replayed=replayed):
                stored = self.store.get(pending.key)
                if stored is None or stored.state is not State.SUCCEEDED:
                    # It ran, but its result could not be stored: a replay could not return
                    # it, so the saga cannot go on. The key is in doubt for an operator.
                    return _Abort(pending.key, _stored_outcome(self.store, pending.key), None)
                # Compensations get the value as stored, the same in every run, so their
                # arguments match when a rollback is taken up again.
                kept = value if replayed else pending.tool.replay(stored)
                self._completed.append(_Completed(pending.key, kept, pending.compensate))
                return value
            case Failed(exception=exception):
                return _Abort(pending.key, outcome, exception)
            case InDoubt():
                return _Abort(pending.key, outcome, None)

    def _tool(self, fn: Callable[..., object]) -> _Tool:
        if isinstance(fn, SafeTool | AsyncSafeTool):
            if fn.store is not self.store and fn.store.location != self.store.location:
                raise ValueError(
                    f"{fn.name} keeps its ledger in {fn.store.location}, but saga {self.saga_id!r} "
                    f"keeps its in {self.store.location}: make the tool with safe(saga.store)"
                )
            tool: _Tool = fn
            return tool
        if fn not in self._tools:
            self._tools[fn] = safe(self.store)(fn)
        return self._tools[fn]

    def _roll_back(
        self,
        *,
        step: str | None = None,
        outcome: Failed | InDoubt | None = None,
        reason: str | None = None,
    ) -> SagaFailed:
        """Compensate the completed steps, newest first, and report how it went."""
        saga = self._begin_rollback(step, reason)
        kinds = {done.key: self._compensate(done) for done in self._to_undo(saga)}
        return self._end_rollback(saga, kinds, outcome)

    async def _roll_back_async(
        self,
        *,
        step: str | None = None,
        outcome: Failed | InDoubt | None = None,
        reason: str | None = None,
    ) -> SagaFailed:
        """Like ``_roll_back``, awaiting async compensations and keeping the loop free."""
        import asyncio  # noqa: PLC0415 - only async callers pay for it (~20 ms)

        saga = await asyncio.to_thread(self._begin_rollback, step, reason)
        kinds = {}
        for done in await asyncio.to_thread(self._to_undo, saga):
            kinds[done.key] = await self._compensate_async(done)
        return await asyncio.to_thread(self._end_rollback, saga, kinds, outcome)

    def _begin_rollback(self, step: str | None, reason: str | None) -> SagaRecord:
        self.store._move_saga(
            self.saga_id, SagaState.COMPENSATING, aborted_step=step, abort_reason=reason
        )
        self._state = SagaState.COMPENSATING
        saga = self.store.get_saga(self.saga_id)
        if saga is None:
            raise SafeError(f"saga {self.saga_id!r} vanished from {self.store.location}")
        return saga

    def _to_undo(self, saga: SagaRecord) -> list[_Completed]:
        """The steps of this run to compensate, newest first (by the ledger's order)."""
        runs = {done.key: done for done in self._completed if done.compensate is not None}
        return [runs[key] for key in reversed(saga.steps) if key in runs]

    def _end_rollback(
        self, saga: SagaRecord, kinds: dict[str, str], outcome: Failed | InDoubt | None
    ) -> SagaFailed:
        failure = _report(self.store, saga, kinds.get, outcome=outcome)
        final = (
            SagaState.COMPENSATED if failure.fully_rolled_back else SagaState.ROLLBACK_INCOMPLETE
        )
        self.store._move_saga(self.saga_id, final)
        self._state, self._failure = final, failure
        return failure

    def _compensate(self, done: _Completed) -> str:
        """Run the compensation of a step completed in this run; say how it went."""
        undo_key = f"{done.key}:compensate"
        try:
            tool = self._tool(cast("Callable[..., object]", done.compensate))
            outcome = _call_sync(tool, undo_key, (done.value,), {})
        except Exception:
            logger.exception("saga %r: the compensation of %r raised", self.saga_id, done.key)
            return "failed"
        return _undo_kind(outcome, self.store.get(undo_key))

    async def _compensate_async(self, done: _Completed) -> str:
        import asyncio  # noqa: PLC0415 - only async callers pay for it (~20 ms)

        undo_key = f"{done.key}:compensate"
        try:
            tool = self._tool(cast("Callable[..., object]", done.compensate))
            outcome = await _call(tool, undo_key, (done.value,), {})
        except Exception:
            logger.exception("saga %r: the compensation of %r raised", self.saga_id, done.key)
            return "failed"
        return _undo_kind(outcome, await asyncio.to_thread(self.store.get, undo_key))


def _reason(exc: BaseException | None) -> str:
    return f"{type(exc).__name__}: {exc}"


def _call_sync(
    tool: _Tool, key: str, args: tuple[object, ...], kwargs: dict[str, object]
) -> Outcome[object]:
    """Call a tool from synchronous code; an async one runs in a fresh event loop."""
    import asyncio  # noqa: PLC0415 - only async callers pay for it (~20 ms)

    if isinstance(tool, AsyncSafeTool):
        return asyncio.run(tool(key, *args, **kwargs))
    return tool(key, *args, **kwargs)


async def _call(
    tool: _Tool, key: str, args: tuple[object, ...], kwargs: dict[str, object]
) -> Outcome[object]:
    """Await an async tool; run a sync one in a worker thread."""
    import asyncio  # noqa: PLC0415 - only async callers pay for it (~20 ms)

    if isinstance(tool, AsyncSafeTool):
        return await tool(key, *args, **kwargs)
    return await asyncio.to_thread(tool, key, *args, **kwargs)


def _undo_kind(outcome: Outcome[object], record: Record | None) -> str:
    """Classify how a compensation called in this run went."""
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


def _settled(store: Store, key: str) -> bool:
    """Whether the call with ``key`` has an outcome to replay (it succeeded or failed)."""
    record = store.get(key)
    return record is not None and record.state in (State.SUCCEEDED, State.FAILED)


def _failure_from_ledger(store: Store, saga: SagaRecord) -> SagaFailed:
    """Rebuild the report of a saga that was rolled back, from the records of its calls."""
    return _report(store, saga, lambda _: None)


def _report(
    store: Store,
    saga: SagaRecord,
    compensate: Callable[[str], str | None],
    *,
    outcome: Failed | InDoubt | None = None,
) -> SagaFailed:
    """Walk the saga's completed steps newest first and say what became of each undo.

    ``compensate(step_key)`` runs the step's compensation and says how it went, or returns
    None when it cannot run it, in which case the compensation's record speaks.
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
        )
    }
    for key, undo in reversed(list(zip(saga.steps, saga.compensations, strict=True))):
        step = store.get(key)
        if step is not None and step.state in UNSETTLED and undo is not None:
            # It may have happened: the rollback is not done until someone knows.
            report["unresolved"].append(key)
            continue
        if step is None or step.state is not State.SUCCEEDED:
            continue
        if undo is None:
            report["skipped"].append(key)
            continue
        kind = compensate(key) or _recorded_undo(store.get(f"{key}:compensate"))
        report[kind].append(key)
    return SagaFailed(
        saga.saga_id,
        step=saga.aborted_step,
        outcome=outcome or _stored_outcome(store, saga.aborted_step),
        reason=saga.abort_reason,
        **{kind: tuple(keys) for kind, keys in report.items()},
    )


def _recorded_undo(record: Record | None) -> str:
    """Classify a compensation that this run did not call, by its record."""
    if record is None or record.state is State.RELEASED:
        return "unreached"
    if record.state is State.SUCCEEDED:
        return "replayed"
    if record.state is State.FAILED:
        return "failed"
    return "in_doubt"


def _stored_outcome(store: Store, key: str | None) -> Failed | InDoubt | None:
    record = None if key is None else store.get(key)
    if record is None or record.state in (State.SUCCEEDED, State.RELEASED):
        return None  # never aborted, or an operator has resolved it since
    if record.state is State.FAILED:
        return failed_from(record)
    return in_doubt_from(record, record.doubt_reason or DoubtReason.LEASE_EXPIRED)
