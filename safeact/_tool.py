"""Guarded tools: ``safe`` wires the key's decisions to the ledger around a user's function."""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
import pathlib
import shlex
import sys
import threading
import time
import types
import typing
import uuid
from collections.abc import Callable, Coroutine, Generator, Iterable, Iterator
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Concatenate,
    Generic,
    Literal,
    Never,
    ParamSpec,
    TypeAlias,
    TypeVar,
    cast,
    final,
    overload,
)

import attrs

import safeact._telemetry as telemetry
from safeact._call import (
    Act,
    Ask,
    Claim,
    Finish,
    Look,
    Mark,
    Pause,
    Raised,
    Read,
    ReadApproval,
    Request,
    RequestApproval,
    Returned,
    Sighting,
    guarded_call,
    message_of,
)
from safeact._codec import ResultNotStorableError, check_return_type, decode, encode
from safeact._display import Display, check_redact
from safeact._group_commit import claim_deferred
from safeact._history import Why
from safeact._keys import (
    ArgsHash,
    check_ignore,
    check_key,
    ignored_names,
    marks_key,
)
from safeact._outcome import Outcome, Succeeded, failed_from, in_doubt_from
from safeact._protocol import (
    JSON,
    NO_RESULT,
    DoubtReason,
    Record,
    State,
    check_decision,
    owner_may_write,
    utc_now,
)
from safeact._replay_only import in_force as replay_only_in_force
from safeact._settings import flag, optional_callable, optional_text, seconds
from safeact.exceptions import SafeError, StoreError

if TYPE_CHECKING:
    from safeact._open import StoreHandle
    from safeact._protocol import Approval
    from safeact._reconcile import Probe
    from safeact._store import Store

__all__ = ["AsyncSafeTool", "SafeTool", "raise_on_doubt", "safe"]

P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

logger = logging.getLogger("safeact")

Compensation: TypeAlias = Callable[[str, Never], object]
"""A function that undoes a step: ``compensate(compensation_key, step_value)``."""

WAIT = 5.0
"""Default seconds a caller waits for a live owner of its key to finish."""

_UNRECORDED_RETRIES = (0.0, 0.05, 0.25, 1.0)
"""Pauses before each try to mark an attempt whose outcome could not be written."""


class safe:  # noqa: N801 - used as a decorator, so it reads as a function
    """Make functions into tools that run at most once per key.

    ``safe(store)`` takes a ledger's location (a path or a PostgreSQL URL), opened at the
    tool's first use (its first call, or the first use of its ``store``), so making a tool,
    or importing a module that makes one, never opens a file or connects; or a ``Store``,
    used as it is. The tools one ``safe(location)`` makes share one store. ``name`` pins
    the tool's name (by default ``module.qualname``, the same in every process) so a
    rename keeps its keys.
    ``wait`` is how many seconds a caller that finds its key running under a live owner
    waits for that owner's outcome (0: do not wait) before it gets ``InDoubt`` (in flight).
    ``compensate`` undoes the tool's action when it is a step of a ``Saga`` that aborts: it
    is called as ``compensate(compensation_key, value)``, itself a guarded call.
    ``reconcile`` is a probe, ``probe(key, receipt)``, asked once whenever a call finds its
    key in doubt: ``Happened(result)`` closes the key and the call replays ``result``,
    ``NotHappened()`` releases it and the call runs the action, ``Unknown()`` (or a probe
    that raises) leaves it in doubt and the call returns ``InDoubt``. An ``async def``
    function becomes an ``AsyncSafeTool`` (its probe runs in a worker thread).

    ``approval=True`` makes each key wait for a person's yes before its action runs: the
    first call records a request and returns ``AwaitingApproval`` (nothing blocks); once
    ``approve`` is given for that key and those arguments, the next call runs the action,
    consuming the approval in its claim's transaction; after ``deny``, calls return a
    ``Failed`` (``safeact.Denied``) and nothing ever runs under the key.
    ``keep_arguments=True`` keeps each call's arguments in the ledger for people to read
    (``safeact show``, ``doubt``, ``approvals``), never by default; ``redact`` names the
    fields replaced with ``"[redacted]"`` before they are written: parameters
    (``"card"``) or fields inside them (``"payment.card_number"``).

    ``ignore`` names parameters left out of the args hash, such as an injected HTTP client
    or logger: they are still passed to the function, but a retry with another value of
    them replays instead of conflicting. A call refuses (``TypeError``, before anything
    runs) an argument safeact cannot compare by content (an object of a plain class, a
    file, a client, a function): ignore its parameter, or make it an attrs class, a
    dataclass or a pydantic model. The tool's ``ignore`` attribute is the set of names.

    Raises:
        ValueError: ``name`` is empty or ``wait`` negative; ``store`` is a location
            ``get_store`` refuses (``sqlite:///x.db``, ``mysql://``...: the message says what
            to write); or, when a function is guarded, ``ignore`` names its key parameter or
            a parameter it does not have.
        TypeError: ``store`` is neither a ``Store``, nor a path, nor a URL; or ``ignore`` is
            a ``str`` (write ``ignore=("client",)``) or holds a non-str.

    """

    __slots__ = (
        "_approval",
        "_compensate",
        "_ignore",
        "_keep_arguments",
        "_name",
        "_reconcile",
        "_redact",
        "_store",
        "_wait",
    )

    def __init__(  # noqa: PLR0913 - one keyword per setting
        self,
        store: str | os.PathLike[str] | Store,
        *,
        name: str | None = None,
        wait: float = WAIT,
        compensate: Compensation | None = None,
        reconcile: Probe[object] | None = None,
        ignore: Iterable[str] = (),
        approval: bool = False,
        keep_arguments: bool = False,
        redact: Iterable[str] = (),
    ) -> None:
        """Check the settings; a ledger given by its location is opened at first use."""
        names = ignored_names(ignore)
        flag("approval", approval)
        flag("keep_arguments", keep_arguments)
        if isinstance(redact, str):
            raise TypeError(f"redact must be a collection of names: redact=({redact!r},)")
        redact = tuple(redact)
        if redact and not keep_arguments:
            raise ValueError("redact= goes with keep_arguments=True: nothing is kept otherwise")
        if optional_text("name", name) == "":
            raise ValueError("name must be a non-empty string, or None for module.qualname")
        wait = seconds("wait", wait, zero=True)
        optional_callable("compensate", compensate)
        optional_callable("reconcile", reconcile)
        # The ledger's modules load when a tool is first made, not when safeact is imported.
        from safeact._open import StoreHandle  # noqa: PLC0415

        self._store = StoreHandle(store)
        self._name = name
        self._wait = wait
        self._compensate = compensate
        self._reconcile = reconcile
        self._ignore = names
        self._approval = approval
        self._keep_arguments = keep_arguments
        self._redact = redact

    @overload
    def __call__(  # type: ignore[overload-overlap] # a coroutine function is also a callable
        self, fn: Callable[Concatenate[str, P], Coroutine[Any, Any, T]]
    ) -> AsyncSafeTool[P, T]: ...

    @overload
    def __call__(self, fn: Callable[Concatenate[str, P], T]) -> SafeTool[P, T]: ...

    def __call__(
        self, fn: Callable[Concatenate[str, P], T]
    ) -> SafeTool[P, T] | AsyncSafeTool[P, Any]:
        """Guard ``fn``, whose first parameter receives the key.

        Raises:
            TypeError: ``fn`` takes no key parameter, or its return type cannot be stored
                and rebuilt (missing, too loose, awaitable, or unknown to cattrs).

        """
        settings = {
            "name": self._name,
            "wait": self._wait,
            "compensate": self._compensate,
            "reconcile": self._reconcile,
            "ignore": self._ignore,
            "approval": self._approval,
            "keep_arguments": self._keep_arguments,
            "redact": self._redact,
        }
        if inspect.iscoroutinefunction(fn):
            return AsyncSafeTool(fn, self._store, **settings)  # type: ignore[arg-type] # checked just above
        return SafeTool(fn, self._store, **settings)  # type: ignore[arg-type] # forwarded keywords


_Call = TypeVar("_Call", bound=Callable[..., object])


def _key_given(call: _Call) -> _Call:
    """Wrap a tool's ``__call__`` so a missing or keyword key says how to pass it.

    Python's own "missing 1 required positional argument: 'key'" hides that the key goes
    first and positionally, whatever the function calls its first parameter. An async
    ``__call__`` stays a coroutine function (frameworks look), so it raises when awaited.
    """

    def check(self: _Guard[object], args: tuple[object, ...], kwargs: dict[str, object]) -> None:
        if not args:
            named = f" (not as {next(iter(kwargs))}=...)" if kwargs else ""
            raise TypeError(
                f"{self.name}: pass the key first, positionally{named}: tool('order-42', ...)"
            )

    if inspect.iscoroutinefunction(call):

        @functools.wraps(call)
        async def checked_async(self: _Guard[object], /, *args: object, **kwargs: object) -> object:
            check(self, args, kwargs)
            return await call(self, *args, **kwargs)

        return cast("_Call", checked_async)

    @functools.wraps(call)
    def checked(self: _Guard[object], /, *args: object, **kwargs: object) -> object:
        check(self, args, kwargs)
        return call(self, *args, **kwargs)

    return cast("_Call", checked)


_GENERATOR = (
    "{} is an async generator: a tool gives one result to record, so make it an async def "
    "that returns it (a list, say)"
)


class _Guard(Generic[T_co]):
    """What a sync and an async tool share: checks, the call (``_call``), the ledger's work."""

    __wrapped__: Callable[..., object]
    """The guarded function (set by ``functools.update_wrapper``)."""

    _awaits: ClassVar[bool]
    """Whether the function is a coroutine function: awaited, or called."""

    def __init__(  # noqa: PLR0913 - one keyword per setting of safe()
        self,
        fn: Callable[..., object],
        store: Store | StoreHandle,
        *,
        name: str | None = None,
        wait: float = WAIT,
        compensate: Compensation | None = None,
        reconcile: Probe[object] | None = None,
        ignore: Iterable[str] = (),
        approval: bool = False,
        keep_arguments: bool = False,
        redact: Iterable[str] = (),
    ) -> None:
        _check_function(fn)
        if inspect.isasyncgenfunction(fn):
            raise TypeError(_GENERATOR.format(fn.__qualname__))
        if inspect.iscoroutinefunction(fn) is not self._awaits:
            # An async tool awaiting a plain function's result would fail after the action ran.
            kind = "not async" if self._awaits else "async"
            raise TypeError(f"{fn.__qualname__} is {kind}: make it a tool with safe(store)")
        from safeact._open import StoreHandle  # noqa: PLC0415 - loaded with the first tool

        self.name = name if name is not None else _default_name(fn)
        self._held = store if isinstance(store, StoreHandle) else StoreHandle(store)
        self.wait = wait
        self.compensate = compensate
        self.reconcile = reconcile
        self._signature = _key_first_signature(fn, self.name)
        self.ignore = check_ignore(self._signature, ignore, self.name)
        self._args_hash = ArgsHash(self._signature, self.ignore)
        self.approval = approval
        self.keep_arguments = keep_arguments
        self.redact = check_redact(self._signature, redact, self.name)
        self._display = Display(self._signature, self.ignore, self.redact)
        self.return_type = check_return_type(fn, self.name)
        self._shape: str | None = None

    @property
    def store(self) -> Store:
        """The tool's ledger; one given by its location is opened here, at its first use.

        Raises:
            StoreError: the ledger cannot be opened (the next use tries again).

        """
        return self._held.open()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} on {self._held!r}>"

    def _digest(self, key: str, args: tuple[object, ...], kwargs: dict[str, object]) -> str:
        check_key(key)
        try:
            return self._args_hash(args, kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}: {exc}") from exc

    def replay(self, record: Record) -> T_co:
        """Rebuild the stored result of a SUCCEEDED ``record`` as the return type.

        Raises:
            StoreError: the stored result does not rebuild exactly as the return type; for a
                result an operator or a probe recorded, the message says how to amend it.

        """
        key, tool = record.key, self.name
        try:
            return cast("T_co", decode(record.result, self.return_type, key=key, tool=tool))
        except StoreError:
            if not self.store._decided(record):
                raise
        fix = (
            f"An operator or a probe recorded this value; correct it with {tool}.amend("
            f"{key!r}, value) or `safeact amend LEDGER {shlex.quote(key)} --result JSON`"
        )
        return cast("T_co", decode(record.result, self.return_type, key=key, tool=tool, fix=fix))

    def _replay(self, record: Record) -> Outcome[T_co]:
        telemetry.attempt(record.attempt_id)
        if record.state is State.FAILED:
            return failed_from(record)
        return Succeeded(record.key, self.replay(record), replayed=True)

    def _probe(self, record: Record, reason: DoubtReason) -> str | None:
        """Ask the probe about the in-doubt ``record`` and apply its answer.

        Returns the history's note when the answer could not be applied (a release withheld
        from an owner not proven finished), for the caller's ``InDoubt``.
        """
        if self.reconcile is None:
            return None
        receipt = in_doubt_from(record, reason)
        event = self.store._ask_probe(  # noqa: SLF001 - the tool and its store are one
            record, receipt, self.reconcile, self._encode
        )
        if event is not None and event.why is Why.RELEASE_WITHHELD:
            return event.note
        return None

    def _encode(self, value: object) -> JSON:
        return encode(value, self.return_type)

    def _checked(self, value: object) -> JSON:
        """Encode a result an operator gives, refusing one that does not fit the return type.

        Raises:
            TypeError: ``value`` would not replay as itself under the return type.

        """
        try:
            return encode(value, self.return_type)
        except ResultNotStorableError as exc:
            raise TypeError(f"{self.name}: the result given does not fit: {exc}") from exc

    @overload
    def resolve(
        self,
        key: str,
        *,
        happened: Literal[True],
        result: T_co,  # type: ignore[misc] # covariant T_co as a parameter: checked at run time
        attempt_id: str | None = None,
        note: str | None = None,
    ) -> Record: ...
    @overload
    def resolve(
        self,
        key: str,
        *,
        happened: Literal[False],
        attempt_id: str | None = None,
        note: str | None = None,
        force: bool = False,
    ) -> Record: ...
    def resolve(  # noqa: PLR0913 - Store.resolve's parameters
        self,
        key: str,
        *,
        happened: bool,
        result: object = NO_RESULT,
        attempt_id: str | None = None,
        note: str | None = None,
        force: bool = False,
    ) -> Record:
        """Close this tool's in-doubt ``key``, as ``Store.resolve`` does, with a typed result.

        ``result`` (with ``happened=True``) must be what the function would have returned:
        it is checked against the return type, so later calls replay exactly it.

        Raises:
            TypeError: ``happened`` or ``force`` is not a ``bool``, or ``result`` does not
                fit the return type (nothing was opened or changed).
            SafeError: the key belongs to another tool, or as ``Store.resolve`` says.
            NotProvenError, ValueError: as ``Store.resolve`` says.

        """
        # Before the store: a tool given a location opens (or creates) its ledger there.
        check_decision(happened=happened, force=force, note=note)
        return self.store._decide(  # noqa: SLF001 - the tool and its store are one
            key,
            happened=happened,
            result=result,
            encode=self._checked,
            tool=self.name,
            attempt_id=attempt_id,
            note=note,
            force=force,
        )

    def amend(self, key: str, result: T_co, *, note: str | None = None) -> Record:  # type: ignore[misc] # a covariant T_co as a parameter: checked at run time too
        """Correct the result an operator or a probe recorded for this tool's ``key``.

        As ``Store.amend``, with ``result`` checked against the return type.

        Raises:
            TypeError: ``result`` does not fit the return type (nothing was changed).
            SafeError: the key belongs to another tool, or as ``Store.amend`` says.

        """
        optional_text("note", note)  # before the store: a location is opened at first use
        return self.store._amend(  # noqa: SLF001 - the tool and its store are one
            key, result=result, encode=self._checked, tool=self.name, note=note
        )

    def approve(
        self, key: str, *, by: str, note: str | None = None, args_hash: str | None = None
    ) -> Approval:
        """Approve this tool's pending ``key``, as ``Store.approve`` does.

        Raises:
            SafeError: the request is another tool's, or as ``Store.approve`` says.
            TypeError, ValueError: as ``Store.approve`` says.

        """
        self._check_approval_of(key)
        return self.store.approve(key, by=by, note=note, args_hash=args_hash)

    def deny(
        self, key: str, *, by: str, note: str | None = None, args_hash: str | None = None
    ) -> Approval:
        """Deny this tool's ``key``, as ``Store.deny`` does.

        Raises:
            SafeError: the request is another tool's, or as ``Store.deny`` says.
            TypeError, ValueError: as ``Store.deny`` says.

        """
        self._check_approval_of(key)
        return self.store.deny(key, by=by, note=note, args_hash=args_hash)

    def _check_approval_of(self, key: str) -> None:
        """Refuse to decide another tool's request through this tool.

        Raises:
            SafeError: ``key``'s request is another tool's.

        """
        asked = self.store.approval(key)
        if asked is not None and asked.tool != self.name:
            raise SafeError(
                f"key {key!r} waits for the approval of tool {asked.tool}, not {self.name}: "
                "decide it with that tool, or with Store.approve / safeact approve"
            )

    def _steps(
        self, key: str, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> Generator[Request, object, Outcome[T_co]]:
        """The call's requests for a driver to carry out (see ``_call``)."""
        return cast(
            "Generator[Request, object, Outcome[T_co]]",
            guarded_call(
                key,
                self._digest(key, args, kwargs),
                tool=self.name,
                wait=self.wait,
                probing=self.reconcile is not None,
                replay=self._replay,
                encode=self._encode,
                utc_now=utc_now,
                former_hash=lambda: self._args_hash.former(args, kwargs),
                replay_only=replay_only_in_force(),
                gated=self.approval,
                arguments=self._display(key, args, kwargs) if self.keep_arguments else None,
            ),
        )

    def _ledger(self, request: Request) -> object:  # noqa: PLR0911 - an answer per request
        """Carry out one of the call's requests that the ledger (or the probe) answers, blocking."""
        match request:
            case Read(key):
                return self.store._stored(key)  # noqa: SLF001 - the tool and its store are one
            case ReadApproval(key):
                return self.store.approval(key)
            case RequestApproval(key, args_hash, previous, arguments):
                self.store._request_approval(  # noqa: SLF001 - the tool and its store are one
                    key, self.name, args_hash, arguments=arguments, previous=previous
                )
                return None
            case Look(record):
                return self._look(record)
            case Claim():
                return self._claim(request)
            case Mark():
                return self._mark(request)
            case Ask(record, reason):
                return self._probe(record, reason)
            case Finish():
                return self._finish(request)
            case Pause() | Act():
                raise TypeError(f"{request!r} is the driver's to carry out, not the ledger's")

    def _look(self, record: Record) -> Sighting:
        return Sighting(
            gone=self.store._owner_gone(record), lost=self.store._owner_lost(record.owner)
        )

    def _claim(self, claim: Claim) -> Record | None:
        started = time.perf_counter()
        shape = self._result_shape()
        # An async tool's claim, made by a store's ledger thread, leaves its fsync to the
        # thread's batch (``claim_deferred``); nothing else is deferred, not even a sync
        # tool called in that thread, whose action follows its claim at once.
        with claim_deferred() if self._awaits else contextlib.nullcontext():
            claimed = self.store._claim(
                claim.key,
                self.name,
                claim.args_hash,
                attempt_id=uuid.uuid4().hex,
                previous=claim.previous,
                shape=shape,
                approval=claim.approval,
                arguments=claim.arguments,
            )
        telemetry.claimed(self.name, claimed, time.perf_counter() - started)
        return claimed

    def _result_shape(self) -> str:
        """What the results look like as stored JSON (``safeact._shape``), described once.

        The store keeps it with the ledger at the tool's first claim, for ``safeact resolve``
        and ``safeact amend`` to check an operator's result without importing this tool.
        """
        if self._shape is None:
            from safeact._shape import shape_text  # noqa: PLC0415 - loaded at the first claim

            self._shape = shape_text(self.return_type)
        return self._shape

    def _mark(self, mark: Mark) -> bool:
        return self.store._mark_in_doubt(mark.record.key, mark.record.attempt_id, mark.reason)

    @contextlib.contextmanager
    def _acting(self, record: Record) -> Iterator[_Ran]:
        """The one body of both drivers' ``Act``: the action runs inside, lease renewed.

        The driver only runs the function inside the block, calling or awaiting it, and
        hands what it returned to ``ran.returned``; ``ran.answer`` is then the call's answer.
        An ``Exception`` the action raised is its outcome (``Raised``), not propagated. An
        interruption (``KeyboardInterrupt``, a task's cancellation) marks the attempt in
        doubt and propagates: blocking for that one short write, as an await there could
        itself be cancelled.
        """
        ran = _Ran()
        with self.store._hold(record):
            try:
                yield ran
            except Exception as exc:  # noqa: BLE001 - any failure of the action is its outcome
                ran.answer = Raised(exc, os.getpid())
            except BaseException:
                self._ended_by_interrupt(record)
                raise

    def _ended_by_interrupt(self, record: Record) -> None:
        """The action was interrupted: mark the attempt, unless in a child forked inside it."""
        if owner_may_write(record, os.getpid()):
            self._interrupted(record)

    def _finish(self, finish: Finish) -> bool:
        """Record the end of this attempt; return whether the ledger has it.

        Trouble recording it (a lost connection, a lock timeout, a full disk) is logged, the
        key is marked in doubt (result not stored) at once by another route, and the
        caller's outcome says ``recorded=False``.
        """
        record, state = finish.record, finish.state
        if finish.doubt_reason is DoubtReason.RESULT_NOT_STORED:
            # The caller's Succeeded(recorded=False) has no room for why: say it here.
            logger.warning(
                "%s: key %r: %s; the key is left in doubt: resolve it with the value the "
                "caller got (safeact resolve --happened --result)",
                self.name,
                record.key,
                finish.error_message,
            )
        try:
            written = self.store._finish(
                record.key,
                record.attempt_id,
                state=state,
                result=finish.result,
                error_type=finish.error_type,
                error_message=finish.error_message,
                doubt_reason=finish.doubt_reason,
            )
        except Exception as exc:
            logger.exception(
                "%s: could not record %s for key %r; marking it in doubt",
                self.name,
                state.value,
                record.key,
            )
            self._unrecorded(record, state, exc)
            return False
        if not written:
            logger.error(
                "%s: key %r moved on while this attempt ran (closed as happened by an "
                "operator or a probe, or released and claimed again); its %s is kept in the "
                "ledger's late completions",
                self.name,
                record.key,
                state.value,
            )
        return True

    def _unrecorded(self, record: Record, state: State, failure: Exception) -> None:
        """Mark an attempt whose outcome could not be written IN_DOUBT (not stored).

        Otherwise the key would look busy until its lease ran out, and then only suspect.
        A few short tries, each on a fresh connection; never raise.
        """
        did = "raised" if state is State.FAILED else "ran"
        detail = f"the action {did}, but its outcome could not be stored: {message_of(failure)}"
        reason = (
            DoubtReason.FAILURE_NOT_STORED
            if state is State.FAILED
            else DoubtReason.RESULT_NOT_STORED
        )
        for pause in _UNRECORDED_RETRIES:
            time.sleep(pause)
            try:
                self.store._reset_connection()  # noqa: SLF001 - the tool and its store are one
                self.store._mark_in_doubt(record.key, record.attempt_id, reason, detail=detail)
            except Exception:  # noqa: BLE001, S112 - logged once below if every try fails
                continue
            return
        logger.error(
            "%s: could not mark key %r in doubt either; it looks busy until its lease runs out",
            self.name,
            record.key,
        )

    def _interrupted(self, record: Record) -> None:
        """Mark this attempt IN_DOUBT (interrupted), so nobody waits on it; never raise."""
        try:
            self.store._mark_in_doubt(record.key, record.attempt_id, DoubtReason.INTERRUPTED)
        except Exception:
            logger.exception("%s: could not mark key %r in doubt", self.name, record.key)


class SafeTool(_Guard[T_co], Generic[P, T_co]):
    """A function guarded by a ledger: call it with a key first, get an ``Outcome``.

    Attributes ``name``, ``store``, ``wait``, ``return_type``, ``compensate`` and ``ignore``
    describe it; ``__wrapped__`` is the function itself. ``resolve`` and ``amend`` take an
    operator's decisions about its keys, with results checked against ``return_type``.
    """

    _awaits = False

    def __init__(  # noqa: PLR0913 - one keyword per setting of safe()
        self,
        fn: Callable[Concatenate[str, P], T_co],
        store: Store | StoreHandle,
        *,
        name: str | None = None,
        wait: float = WAIT,
        compensate: Compensation | None = None,
        reconcile: Probe[object] | None = None,
        ignore: Iterable[str] = (),
        approval: bool = False,
        keep_arguments: bool = False,
        redact: Iterable[str] = (),
    ) -> None:
        """Check ``fn`` and bind it to ``store``; see ``safe``."""
        super().__init__(
            fn,
            store,
            name=name,
            wait=wait,
            compensate=compensate,
            reconcile=reconcile,
            ignore=ignore,
            approval=approval,
            keep_arguments=keep_arguments,
            redact=redact,
        )
        self._fn = fn
        functools.update_wrapper(self, fn)

    @_key_given
    def __call__(self, key: str, /, *args: P.args, **kwargs: P.kwargs) -> Outcome[T_co]:
        """Run the function at most once for ``key`` and say what happened.

        Returns ``Succeeded`` (ran now, or replayed), ``Failed`` (raised now, or replayed) or
        ``InDoubt`` (its ``reason`` says why: the owner crashed, its lease ran out, it was
        interrupted, or it is still running after ``wait`` seconds). Nothing runs twice.

        Raises:
            TypeError, ValueError: ``key`` is not a non-empty str, or the arguments do not
                fit the function. Nothing ran.
            KeyConflictError: ``key`` is recorded for another tool or other arguments.
            StoreError: the ledger cannot be read or the claim cannot be written.
            BaseException: an interrupt raised by the function propagates; the key is left
                IN_DOUBT (interrupted).

        """
        steps = self._steps(key, args, kwargs)
        answer: object = None
        with telemetry.call(self.name, key) as watch:
            try:
                while True:
                    answer = self._perform(steps.send(answer), args, kwargs)
            except StopIteration as done:
                return watch.ended(cast("Outcome[T_co]", done.value))

    def _perform(
        self, request: Request, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> object:
        """Carry out one request of the call, blocking."""
        match request:
            case Pause(seconds):
                time.sleep(seconds)
                return None
            case Act(record):
                with self._acting(record) as ran:
                    ran.returned(self._fn(record.key, *args, **kwargs))  # type: ignore[arg-type] # P was checked by the caller's signature
                return ran.answer
            case _:
                return self._ledger(request)


class AsyncSafeTool(_Guard[T_co], Generic[P, T_co]):
    """An ``async def`` function guarded by a ledger: ``await tool(key, ...)`` gives an ``Outcome``.

    The same guarantees as ``SafeTool``. The ledger's blocking work runs in a ledger thread,
    one hop for each stretch of it (two for a new key, one for a replay), so it does not
    stall the event loop; the action and the waits for a live owner run on the loop. A
    cancelled task is an interruption: the key is left IN_DOUBT (interrupted) and the
    ``CancelledError`` propagates.
    """

    _awaits = True

    def __init__(  # noqa: PLR0913 - one keyword per setting of safe()
        self,
        fn: Callable[Concatenate[str, P], Coroutine[Any, Any, T_co]],
        store: Store | StoreHandle,
        *,
        name: str | None = None,
        wait: float = WAIT,
        compensate: Compensation | None = None,
        reconcile: Probe[object] | None = None,
        ignore: Iterable[str] = (),
        approval: bool = False,
        keep_arguments: bool = False,
        redact: Iterable[str] = (),
    ) -> None:
        """Check ``fn`` and bind it to ``store``; see ``safe``."""
        super().__init__(
            fn,
            store,
            name=name,
            wait=wait,
            compensate=compensate,
            reconcile=reconcile,
            ignore=ignore,
            approval=approval,
            keep_arguments=keep_arguments,
            redact=redact,
        )
        self._fn = fn
        functools.update_wrapper(self, fn)

    @_key_given
    async def __call__(self, key: str, /, *args: P.args, **kwargs: P.kwargs) -> Outcome[T_co]:
        """Run the coroutine function at most once for ``key``; see ``SafeTool.__call__``."""
        import asyncio  # noqa: PLC0415 - only async callers pay for it (~20 ms)

        steps = self._steps(key, args, kwargs)
        answer: object = None
        with telemetry.call(self.name, key) as watch:
            while True:
                match await self._in_thread(steps, answer):
                    case _Ended(outcome):
                        return watch.ended(cast("Outcome[T_co]", outcome))
                    case Pause(seconds):
                        await asyncio.sleep(seconds)
                        answer = None
                    case Act(record):
                        answer = await self._act(record, args, kwargs)
                    case Ask(record, reason):
                        answer = await asyncio.to_thread(self._probe, record, reason)

    async def _in_thread(
        self, steps: Generator[Request, object, Outcome[T_co]], answer: object
    ) -> Pause | Act | Ask | _Ended:
        """Send ``answer`` and carry out the ledger's requests in one ledger thread (``_advance``).

        The thread's work is finished even if the awaiting task is cancelled meanwhile: a
        claim or a write of an outcome cut off half way would leave the key ATTEMPTING under
        a live process that no longer holds it. A cancelled caller stops the thread before it
        claims, marks a claim already made in doubt (interrupted: the action never ran) and
        re-raises the cancellation.
        """
        import asyncio  # noqa: PLC0415 - only async callers pay for it (~20 ms)

        from safeact._ledger_work import LedgerWork, thread_of  # noqa: PLC0415 - loads asyncio

        cancelled = threading.Event()
        # Until the store is open (the first hop opens it) its backend is not known.
        store = self._held.open() if self._held.is_open else None
        work = LedgerWork(
            lambda: self._advance(steps, answer, cancelled),
            self._abandoned,
            thread=thread_of(store) if store is not None and store._ONE_WRITER else None,  # noqa: SLF001 - the tool and its store are one
        )
        try:
            # A Claim comes back only when the caller was cancelled, which raises below.
            return cast("Pause | Act | Ask | _Ended", await work.result())
        except asyncio.CancelledError:
            cancelled.set()
            while True:  # a second cancellation must not lose the claim either
                with contextlib.suppress(asyncio.CancelledError):
                    step = await work.result()
                    break
            if isinstance(step, Act):
                self._interrupted(step.record)
            raise

    def _abandoned(self, step: Pause | Act | Ask | Claim | _Ended, why: Exception) -> Exception:
        """Nobody will act on ``step``: undo what it would have allowed; the caller's error.

        ``why``: the claim it came after is not on disk (the fsync's ``OSError``), or its
        caller's loop is gone. An action it would have started never runs: its attempt is
        marked in doubt (interrupted), as a claim whose own fsync failed is (``_claim``).
        """
        if isinstance(step, Act):
            self._interrupted(step.record)
        if isinstance(why, OSError):
            return self.store._not_on_disk(why)  # noqa: SLF001 - the tool and its store are one
        return why

    def _advance(
        self,
        steps: Generator[Request, object, Outcome[T_co]],
        answer: object,
        cancelled: threading.Event,
    ) -> Pause | Act | Ask | Claim | _Ended:
        """Send ``answer``, and carry out the ledger's requests, until the loop's turn.

        Returns the first request that is the event loop's (a pause, the action, a probe),
        a claim not made because the caller was cancelled, or the call's end: so a new key
        costs two hops to a ledger thread (up to the action, then its outcome), a replay one.
        """
        try:
            while True:
                request = steps.send(answer)
                if isinstance(request, Pause | Act | Ask) or (
                    isinstance(request, Claim) and cancelled.is_set()
                ):
                    return request
                answer = self._ledger(request)
        except StopIteration as done:
            return _Ended(cast("Outcome[object]", done.value))

    async def _act(
        self, record: Record, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> Returned | Raised:
        """Await the action under ``record``'s attempt (``_acting``)."""
        with self._acting(record) as ran:
            ran.returned(await self._fn(record.key, *args, **kwargs))  # type: ignore[arg-type] # P was checked by the caller's signature
        return ran.answer


@final
class _Ran:
    """What came of one run of the action (``_Guard._acting``): ``Returned`` or ``Raised``."""

    __slots__ = ("answer",)

    answer: Returned | Raised

    def returned(self, value: object) -> None:
        """The action returned ``value``, in this process (a child forked in it has its pid)."""
        self.answer = Returned(value, os.getpid())


@attrs.frozen
class _Ended:
    """The call's ``outcome``: the machine has nothing more to ask."""

    outcome: Outcome[object]


@overload
def raise_on_doubt(
    tool: AsyncSafeTool[P, T],
) -> Callable[Concatenate[str, P], Coroutine[Any, Any, T]]: ...
@overload
def raise_on_doubt(tool: SafeTool[P, T]) -> Callable[Concatenate[str, P], T]: ...
def raise_on_doubt(
    tool: SafeTool[P, T] | AsyncSafeTool[P, T],
) -> Callable[Concatenate[str, P], T] | Callable[Concatenate[str, P], Coroutine[Any, Any, T]]:
    """Adapt ``tool`` for exception-style callers: same parameters, returns the value.

    The returned function raises ``InDoubtError`` (with the receipt) or ``FailedCallError``
    (chained from the live exception when the action raised on this call), besides
    everything the tool itself raises. For an ``AsyncSafeTool`` it is an async function.
    """
    if isinstance(tool, AsyncSafeTool):
        async_tool = tool

        @functools.wraps(async_tool)
        async def call_async(key: str, /, *args: P.args, **kwargs: P.kwargs) -> T:
            return (await async_tool(key, *args, **kwargs)).unwrap()

        return call_async
    sync_tool = tool

    @functools.wraps(sync_tool)
    def call(key: str, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return sync_tool(key, *args, **kwargs).unwrap()

    return call


def _check_function(fn: Callable[..., object]) -> None:
    """Refuse what is not a function: a tool's name and annotations are its function's.

    Raises:
        TypeError: ``fn`` is a ``functools.partial`` or a callable object, say.

    """
    if not inspect.isroutine(fn):
        raise TypeError(
            f"{fn!r} is not a function (a functools.partial or a callable object, say): "
            "safeact reads a tool's name and annotations from its function, so wrap it in one, "
            "e.g. 'def send(key: str, to: str) -> Receipt: return mailer(key, to)'"
        )


def _default_name(fn: Callable[..., object]) -> str:
    """Return ``module.qualname``, the module named as an import would name it.

    A script's functions live in ``__main__``, which would name the same tool differently
    when its file runs as ``python agent.py``, as ``python -m agent`` or is imported, and
    a key that names the tool would move between a crash and its recovery. So a script
    is named as its file would be imported: ``python -m`` gives the name; ``python
    agent.py`` gives its file's name, with the packages (folders with ``__init__.py``)
    above it. A script without a file (``python -c``, a notebook) stays ``__main__``;
    pass ``name=`` to pin any tool's name.
    """
    module = fn.__module__
    if module == "__main__":
        main = sys.modules["__main__"]
        spec = getattr(main, "__spec__", None)
        path = getattr(main, "__file__", None)
        if spec is not None:
            module = spec.name
        elif isinstance(path, str):
            module = _module_of(pathlib.Path(path))
    return f"{module}.{fn.__qualname__}"


def _module_of(path: pathlib.Path) -> str:
    """The dotted name ``path`` is imported under: its stem, below the packages that hold it."""
    parts = [path.stem]
    folder = path.resolve().parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)


def _key_first_signature(fn: Callable[..., object], tool: str) -> inspect.Signature:
    """Check that ``fn`` takes the key first, as a ``str`` (or unannotated); return its signature.

    Raises:
        TypeError: no positional first parameter, or one annotated as another type.

    """
    signature = inspect.signature(fn)
    parameters = list(signature.parameters.values())
    if not parameters or parameters[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise TypeError(
            f"{tool} must take the key as its first positional parameter, "
            "e.g. 'def send_receipt(key: str, to: str) -> Receipt'"
        )
    first = parameters[0]
    in_class = fn.__qualname__.rpartition(".")[0].rpartition(".")[2] not in ("", "<locals>")
    if first.name in ("self", "cls") or (in_class and first.annotation is first.empty):
        # Bound, it would take the key for self; unbound, self would be hashed and replayed.
        raise TypeError(
            f"{tool} looks like a method (its first parameter is {first.name!r}, not "
            "'key: str'); safeact guards "
            "plain functions: make it a module-level function that takes the key first and "
            "what it needs of the object as arguments, or a @staticmethod taking the key first"
        )
    annotation = _first_annotation(fn, first)
    if first.name != "key" and not marks_key(annotation):
        # Whatever it is called, the first parameter gets the key: def send(to, body) would
        # key every email by its address, and later emails to that person would replay.
        raise TypeError(
            f"{tool}: its first parameter, {first.name!r}, would receive the key; name it "
            "'key' and put the arguments after it, e.g. 'def send_receipt(key: str, to: str) "
            "-> Receipt', or mark it as the key: "
            f"'def {fn.__name__}({first.name}: safeact.Key, ...)'"
        )
    if not _takes_str(annotation):
        shown = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
        raise TypeError(
            f"{tool}: its first parameter receives the key, a str, but is annotated "
            f"'{first.name}: {shown}'; make it 'key: str' and the arguments follow, "
            "e.g. 'def send_receipt(key: str, to: str) -> Receipt'"
        )
    return signature


def _first_annotation(fn: Callable[..., object], first: inspect.Parameter) -> object:
    """The first parameter's annotation, resolved if it can be (else as written)."""
    if first.annotation is inspect.Parameter.empty:
        return first.annotation
    try:
        return typing.get_type_hints(fn, include_extras=True).get(first.name, first.annotation)
    except (NameError, TypeError):  # another annotation cannot be resolved: judge as written
        return first.annotation


def _takes_str(annotation: object) -> bool:
    """Whether a parameter annotated so accepts the key, a plain ``str``."""
    if annotation in (inspect.Parameter.empty, str, object, Any, "str", "builtins.str"):
        return True
    if isinstance(annotation, str):
        return True  # unresolvable: check_return_type refuses the function for that
    if typing.get_origin(annotation) is typing.Annotated:
        return _takes_str(typing.get_args(annotation)[0])
    supertype = getattr(annotation, "__supertype__", None)  # typing.NewType
    if supertype is not None:
        return _takes_str(supertype)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_takes_str(member) for member in typing.get_args(annotation))
    return False
