"""Sagas: guarded steps that are compensated newest first, once each, when one aborts.

A saga's steps and compensations are ordinary guarded calls with deterministic keys
(``{saga_id}:{index}:{name}`` and ``{step_key}:compensate``), so each runs at most once
ever. The saga's own progress (``SagaState``) is in the ledger: re-running the same code
with the same ``saga_id`` replays the completed steps and finishes a rollback that was cut
short, because the step that aborted it replays its outcome and aborts again.

What a saga does is decided once, in ``_saga_run``; ``Saga`` only carries out what a run
asks for, blocking in a ``with`` block and awaiting in an ``async with`` one.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, Concatenate, Self, TypeAlias, TypeVar, cast, overload

import safeact._telemetry as telemetry
from safeact._keys import check_key
from safeact._open import get_store, located
from safeact._outcome import Outcome
from safeact._replay_only import in_force as replay_only_in_force
from safeact._saga_run import (
    Begin,
    Compensate,
    Move,
    Read,
    ReadSaga,
    Rebuild,
    RecordStep,
    SagaFailed,
    SagaRequest,
    SagaRun,
    Undo,
)
from safeact._sqlite import SqliteStore
from safeact._store import Store
from safeact._tool import AsyncSafeTool, Compensation, SafeTool, safe
from safeact.exceptions import ReplayOnlyError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import TracebackType

__all__ = ["Saga", "SagaFailed"]

T = TypeVar("T")
R = TypeVar("R")

logger = logging.getLogger("safeact")

_Tool: TypeAlias = "SafeTool[..., object] | AsyncSafeTool[..., object]"
_LedgerRequest: TypeAlias = Begin | RecordStep | Move | ReadSaga | Read | Rebuild


class Saga:
    """Run several guarded steps; if one aborts, compensate the completed ones in reverse.

    Use as ``with Saga(saga_id, store) as s: value = s.step(fn, *args, compensate=undo)``,
    or, with async steps, ``async with Saga(...) as s: value = await s.step(afn, ...)``.
    A step that returns ``Failed`` or ``InDoubt``, or an ``Exception`` raised in the block,
    aborts the saga: its completed steps that have a compensation are compensated, newest
    first, and ``SagaFailed`` is raised. Re-running a saga whose rollback was incomplete
    takes the rollback up again (a compensation an operator released then runs). An
    interrupt (a ``BaseException`` that is not an ``Exception``) propagates without a
    rollback; the saga stays as it was and a re-run carries on. So does a step whose tool
    needs a person's approval (``safe(..., approval=True)``) and has none yet: it raises
    ``AwaitingApprovalError`` without running or undoing anything, and a re-run after the
    decision goes on from it; a denied step aborts the saga like a failed one. Run one saga
    id in one process at a time.

    Raises:
        SagaFailed: from ``with`` if the saga was fully rolled back before (nothing runs),
            from ``step`` when a step aborts it, and from the block's end when it raised.
        AwaitingApprovalError: from ``step``, when its step (or an earlier one of this run)
            waits for approval; the saga stays running.
        KeyConflictError: a re-run takes other steps than the ledger recorded; nothing new
            runs and nothing is compensated.
        SafeError: from the block's end, when it ended without reaching every step an
            earlier run recorded; the saga is not completed and stays running. From
            ``step`` called outside the block (before it began or after it ended): nothing
            runs.

    """

    def __init__(self, saga_id: str, store: str | os.PathLike[str] | Store) -> None:
        """Open the ledger and name the saga; nothing is recorded until ``with`` starts.

        A location is opened as ``safe`` opens it (a relative path against the working
        directory of now), so the saga and tools made with ``safe(location)`` show it alike.
        """
        self.saga_id = check_key(saga_id, "the saga id")
        self.store = _opened(store)
        self._run = SagaRun(self.saga_id, self.store.location)
        self._tools: dict[object, _Tool] = {}
        self._refusal: BaseException | None = None

    def __enter__(self) -> Self:
        self._drive(self._run.enter())
        return self

    async def __aenter__(self) -> Self:
        await self._drive_async(self._run.enter())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._drive(self._run.end(exc, refused=exc is not None and exc is self._refusal))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._drive_async(
            self._run.end(exc, refused=exc is not None and exc is self._refusal)
        )

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
            SagaFailed: the step returned ``Failed`` (a person denied it: ``error_type``
                ``"safeact.Denied"``) or ``InDoubt``; the saga was rolled back.
            AwaitingApprovalError: the step's tool needs approval and a person has not
                decided, or an earlier step of this run waits so; nothing ran, nothing is
                undone, and the saga stays running. Run the saga's code again once it is
                decided: the steps before replay, and this one runs (or aborts the saga).
            KeyConflictError: an earlier run of this saga took another step here, or the
                step's arguments differ from that run's. Nothing runs or is compensated.
            TypeError, ValueError, StoreError: as for a guarded call, or the compensation
                cannot be a tool; raised before the step runs, and nothing is compensated.
            SafeError: called outside the saga's ``with`` (or ``async with``) block, before
                it began or after it ended; nothing runs or is recorded.

        """
        # Raised here, not in the coroutine of an async step, so it needs no awaiting.
        self._run.check_in_block()
        if isinstance(fn, AsyncSafeTool) or inspect.iscoroutinefunction(fn):
            return self._step_async(fn, args, kwargs, compensate)
        with self._refusing():
            index = self._run.take_index()
            tool, name, undo = self._tools_of(fn, compensate)
            key = self._drive(self._run.begin_step(index, name, undo))
            with telemetry.saga_step(self.saga_id, key, tool.name) as watch:
                outcome = watch.ended(_call_sync(tool, key, args, kwargs))
        return self._drive(self._run.settle_step(key, undo, outcome, tool.replay))

    async def _step_async(
        self,
        fn: Callable[..., object],
        args: tuple[object, ...],
        kwargs: dict[str, object],
        compensate: Compensation | None,
    ) -> object:
        with self._refusing():
            index = self._run.take_index()
            if _unopened(fn, compensate):
                import asyncio  # noqa: PLC0415 - loaded with the first async call

                # Checking the tool's ledger opens it at its first use, which may connect
                # (up to the connect timeout): in a worker thread, never on the event loop.
                tool, name, undo = await asyncio.to_thread(self._tools_of, fn, compensate)
            else:
                tool, name, undo = self._tools_of(fn, compensate)
            key = await self._drive_async(self._run.begin_step(index, name, undo))
            with telemetry.saga_step(self.saga_id, key, tool.name) as watch:
                outcome = watch.ended(await _call(tool, key, args, kwargs))
        return await self._drive_async(self._run.settle_step(key, undo, outcome, tool.replay))

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

    def _tools_of(
        self, fn: Callable[..., object], compensate: Compensation | None
    ) -> tuple[_Tool, str, Undo | None]:
        """The step's tool and name, and its compensation, made a tool now, not mid-rollback.

        Raises:
            TypeError, ValueError: ``fn`` or the compensation cannot be a tool of this ledger.

        """
        tool = self._tool(fn)
        name = (
            tool.name
            if isinstance(fn, SafeTool | AsyncSafeTool)
            else getattr(fn, "__name__", tool.name)
        )
        undo = compensate if compensate is not None else tool.compensate
        if undo is None:
            return tool, name, None
        return tool, name, Undo(self._tool(undo).name, undo)

    def _tool(self, fn: Callable[..., object]) -> _Tool:
        if isinstance(fn, SafeTool | AsyncSafeTool):
            if not _same_ledger(fn.store, self.store):
                raise ValueError(
                    f"{fn.name} keeps its ledger in {fn.store.location}, but saga {self.saga_id!r} "
                    f"keeps its in {self.store.location}: make the tool with safe(saga.store)"
                )
            tool: _Tool = fn
            return tool
        if fn not in self._tools:
            self._tools[fn] = safe(self.store)(fn)
        return self._tools[fn]

    def _drive(self, requests: Generator[SagaRequest, object, R]) -> R:
        """Carry out the run's requests, blocking, until it returns (or raises)."""
        self._run.replay_only = replay_only_in_force()
        answer: object = None
        try:
            while True:
                request = requests.send(answer)
                if isinstance(request, Compensate):
                    answer = self._compensate(request)
                else:
                    answer = self._ledger(request)
        except StopIteration as done:
            return cast("R", done.value)

    async def _drive_async(self, requests: Generator[SagaRequest, object, R]) -> R:
        """Carry out the run's requests, awaiting: the ledger's work runs in worker threads."""
        import asyncio  # noqa: PLC0415 - only async callers pay for it (~20 ms)

        self._run.replay_only = replay_only_in_force()
        answer: object = None
        try:
            while True:
                request = requests.send(answer)
                if isinstance(request, Compensate):
                    answer = await self._compensate_async(request)
                else:
                    answer = await asyncio.to_thread(self._ledger, request)
        except StopIteration as done:
            return cast("R", done.value)

    def _compensate(self, request: Compensate) -> Outcome[object] | None:
        """Call a compensation; None if it raised instead of giving an outcome (logged)."""
        try:
            with telemetry.compensation(
                self.saga_id, request.step, request.key, request.undo.name
            ) as watch:
                tool = self._tool(request.undo.call)
                return watch.ended(_call_sync(tool, request.key, (request.value,), {}))
        except ReplayOnlyError:
            raise  # it would have run: refused, nothing written; not a compensation that failed
        except Exception:
            logger.exception("saga %r: the compensation of %r raised", self.saga_id, request.step)
            return None

    async def _compensate_async(self, request: Compensate) -> Outcome[object] | None:
        """Await a compensation (a sync one in a worker thread); None if it raised (logged)."""
        try:
            with telemetry.compensation(
                self.saga_id, request.step, request.key, request.undo.name
            ) as watch:
                tool = self._tool(request.undo.call)
                return watch.ended(await _call(tool, request.key, (request.value,), {}))
        except ReplayOnlyError:
            raise  # as in _compensate
        except Exception:
            logger.exception("saga %r: the compensation of %r raised", self.saga_id, request.step)
            return None

    def _ledger(self, request: _LedgerRequest) -> object:
        """Carry out one of the run's reads or writes of the ledger, or a rebuild of a result."""
        match request:
            case Begin(saga_id):
                return self.store._begin_saga(saga_id)
            case RecordStep(saga_id, index, name, key, compensation):
                return self.store._record_saga_step(saga_id, index, name, key, compensation)
            case Move(saga_id, state, aborted_step, abort_reason):
                self.store._move_saga(
                    saga_id, state, aborted_step=aborted_step, abort_reason=abort_reason
                )
                return None
            case ReadSaga(saga_id):
                return self.store.get_saga(saga_id)
            case Read(key):
                return self.store._stored(key)  # noqa: SLF001 - the tool and its store are one
            case Rebuild(record, replay):
                return replay(record)


def _opened(ledger: str | os.PathLike[str] | Store) -> Store:
    """The saga's ledger: a store as it is, else opened as ``safe`` opens a location.

    ``located``, the rule of ``StoreHandle``: a PostgreSQL location as given, a path made
    absolute against the working directory of now, so the saga's ``location`` reads as its
    tools' do.

    Raises:
        StoreError, ValueError: as ``get_store``.
        TypeError: ``ledger`` is neither a store, nor a path, nor a URL.

    """
    if isinstance(ledger, Store):
        return ledger
    return get_store(located(ledger)[1])


def _same_ledger(one: Store, other: Store) -> bool:
    """Whether ``one`` and ``other`` keep one ledger, however each was named.

    The library's notion of a ledger's identity (DESIGN.md, "One ledger, one identity"): a
    SQLite ledger is its file, device and inode, as the store found it when it opened, so a
    relative or absolute path, ``./x``, a ``PathLike`` or a symbolic link name one ledger. A
    PostgreSQL one is compared by its location as shown (``parse_location`` made it, for a
    tool and a saga alike): its database and its ``search_path``, since two schemas of one
    database are two ledgers; a DSN spelt otherwise is refused, which loses nothing.
    """
    if one is other:
        return True
    if isinstance(one, SqliteStore) and isinstance(other, SqliteStore):
        # The file each opened: a name can be spelt many ways, a file is one.
        return one._id == other._id  # noqa: SLF001 - stores are compared by what they opened
    return one.location == other.location


def _call_sync(
    tool: _Tool, key: str, args: tuple[object, ...], kwargs: dict[str, object]
) -> Outcome[object]:
    """Call a tool from synchronous code; an async one runs in a fresh event loop."""
    import asyncio  # noqa: PLC0415 - only async callers pay for it (~20 ms)

    if isinstance(tool, AsyncSafeTool):
        return asyncio.run(tool(key, *args, **kwargs))
    return tool(key, *args, **kwargs)


def _unopened(*fns: object) -> bool:
    """Whether any of ``fns`` is a tool whose ledger is not open yet."""
    return any(
        isinstance(fn, SafeTool | AsyncSafeTool) and not fn._held.is_open  # noqa: SLF001 - the saga checks its tools' ledgers
        for fn in fns
    )


async def _call(
    tool: _Tool, key: str, args: tuple[object, ...], kwargs: dict[str, object]
) -> Outcome[object]:
    """Await an async tool; run a sync one in a worker thread."""
    import asyncio  # noqa: PLC0415 - only async callers pay for it (~20 ms)

    if isinstance(tool, AsyncSafeTool):
        return await tool(key, *args, **kwargs)
    return await asyncio.to_thread(tool, key, *args, **kwargs)
