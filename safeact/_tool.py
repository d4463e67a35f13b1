"""Guarded tools: ``safe`` wires the key's decisions to the ledger around a user's function."""

from __future__ import annotations

import functools
import inspect
import logging
import os
import sys
import uuid
from collections.abc import Callable
from typing import Concatenate, Generic, Never, ParamSpec, TypeAlias, TypeVar, cast

from safeact._codec import ResultNotStorableError, check_return_type, decode, encode
from safeact._keys import args_hash, check_key, check_text
from safeact._ledger import Store, get_store
from safeact._outcome import Failed, InDoubt, Outcome, Succeeded
from safeact._protocol import Doubt, Record, Replay, Run, State, checkpoint, next_step

__all__ = ["SafeTool", "raise_on_doubt", "safe"]

P = ParamSpec("P")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

logger = logging.getLogger("safeact")

Compensation: TypeAlias = Callable[[str, Never], object]
"""A function that undoes a step: ``compensate(compensation_key, step_value)``."""


class safe:  # noqa: N801 - used as a decorator, so it reads as a function
    """Make functions into tools that run at most once per key.

    ``safe(store)`` takes a ledger path or a ``Store``; ``name`` pins the tool's name (by
    default ``module.qualname``, the same in every process) so a rename keeps its keys.
    ``compensate`` undoes the tool's action when it is a step of a ``Saga`` that aborts: it
    is called as ``compensate(compensation_key, value)``, itself a guarded call.

    Raises:
        StoreError: the ledger at ``store`` cannot be opened.

    """

    __slots__ = ("_compensate", "_name", "_store")

    def __init__(
        self,
        store: str | os.PathLike[str] | Store,
        *,
        name: str | None = None,
        compensate: Compensation | None = None,
    ) -> None:
        """Open the ledger now, so a bad path fails before any action runs."""
        if name is not None:
            if not name:
                raise ValueError("name must be a non-empty string, or None for module.qualname")
            check_text(name, "the tool name")
        self._store = store if isinstance(store, Store) else get_store(store)
        self._name = name
        self._compensate = compensate

    def __call__(self, fn: Callable[Concatenate[str, P], T]) -> SafeTool[P, T]:
        """Guard ``fn``, whose first parameter receives the key.

        Raises:
            TypeError: ``fn`` takes no key parameter, or its return type cannot be stored
                and rebuilt (missing, too loose, awaitable, or unknown to cattrs).

        """
        return SafeTool(fn, self._store, name=self._name, compensate=self._compensate)


class SafeTool(Generic[P, T_co]):
    """A function guarded by a ledger: call it with a key first, get an ``Outcome``.

    Attributes ``name``, ``store``, ``return_type`` and ``compensate`` describe it;
    ``__wrapped__`` is the function itself.
    """

    def __init__(
        self,
        fn: Callable[Concatenate[str, P], T_co],
        store: Store,
        *,
        name: str | None = None,
        compensate: Compensation | None = None,
    ) -> None:
        """Check ``fn`` and bind it to ``store``; see ``safe``."""
        self.name = name if name is not None else _default_name(fn)
        self.store = store
        self.compensate = compensate
        self._fn = fn
        self._signature = _key_first_signature(fn, self.name)
        self.return_type = check_return_type(fn, self.name)
        functools.update_wrapper(self, fn)

    def __repr__(self) -> str:
        return f"<SafeTool {self.name} on {self.store!r}>"

    def __call__(self, key: str, /, *args: P.args, **kwargs: P.kwargs) -> Outcome[T_co]:
        """Run the function at most once for ``key`` and say what happened.

        Returns ``Succeeded`` (ran now, or replayed), ``Failed`` (raised now, or replayed) or
        ``InDoubt`` (a caller stopped between the action and its record; nothing runs).

        Raises:
            TypeError, ValueError: ``key`` is not a non-empty str, or the arguments do not
                fit the function. Nothing ran.
            KeyConflictError: ``key`` is recorded for another tool or other arguments.
            StoreError: the ledger cannot be read or the claim cannot be written.
            BaseException: an interrupt raised by the function propagates; the key stays in
                doubt.

        """
        check_key(key)
        try:
            digest = args_hash(self._signature, args, kwargs)
        except TypeError as exc:
            raise TypeError(f"{self.name}: {exc}") from exc
        record = self.store.get(key)
        while True:
            match next_step(record, self.name, digest):
                case Replay(stored):
                    return self._replay(stored)
                case Doubt(unsettled):
                    return self._doubt(unsettled)
                case Run(previous):
                    attempt_id = uuid.uuid4().hex
                    checkpoint("before_claim")
                    claimed = self.store.claim(
                        key, self.name, digest, attempt_id=attempt_id, previous=previous
                    )
                    if claimed is not None:
                        return self._run(claimed, args, kwargs)
                    record = self.store.get(key)  # another caller won: decide again

    def _run(
        self, record: Record, args: tuple[object, ...], kwargs: dict[str, object]
    ) -> Outcome[T_co]:
        checkpoint("after_claim")
        try:
            value = self._fn(record.key, *args, **kwargs)  # type: ignore[arg-type] # P was checked by the caller's signature
        except Exception as exc:  # noqa: BLE001 - any failure of the action is its outcome
            checkpoint("after_call")
            error_type, message = _type_name(type(exc)), _message(exc)
            self._finish(record, State.FAILED, error_type=error_type, error_message=message)
            checkpoint("after_record")
            return Failed(record.key, self.name, error_type, message, exception=exc)
        except BaseException:
            self._interrupted(record)
            raise
        checkpoint("after_call")
        try:
            stored = encode(value, self.return_type)
        except ResultNotStorableError as exc:
            # It ran, so it must never run again; but without a storable result a replay has
            # nothing to return: leave the key for an operator to resolve with the value.
            self._finish(
                record,
                State.IN_DOUBT,
                error_type="safeact.ResultNotStorable",
                error_message=f"the action ran but its result could not be stored: {exc}",
            )
        else:
            self._finish(record, State.SUCCEEDED, result=stored)
        checkpoint("after_record")
        return Succeeded(record.key, value)

    def _finish(self, record: Record, state: State, **outcome: str | object | None) -> None:
        """Record the end of this attempt; trouble doing so leaves the key in doubt, logged."""
        try:
            written = self.store.finish(record.key, record.attempt_id, state=state, **outcome)  # type: ignore[arg-type] # forwarded keywords
        except Exception:
            logger.exception(
                "%s: could not record %s for key %r; the key stays in doubt",
                self.name,
                state.value,
                record.key,
            )
            return
        if not written:
            logger.error(
                "%s: key %r was released and claimed again while this attempt ran; its %s "
                "was not recorded",
                self.name,
                record.key,
                state.value,
            )

    def _interrupted(self, record: Record) -> None:
        try:
            self.store.mark_in_doubt(record.key, record.attempt_id)
        except Exception:
            logger.exception("%s: could not mark key %r in doubt", self.name, record.key)

    def _replay(self, record: Record) -> Outcome[T_co]:
        if record.state is State.FAILED:
            return Failed(
                record.key,
                record.tool,
                record.error_type or "",
                record.error_message or "",
                replayed=True,
            )
        value = decode(record.result, self.return_type, key=record.key, tool=self.name)
        return Succeeded(record.key, cast("T_co", value), replayed=True)

    def _doubt(self, record: Record) -> InDoubt:
        if record.state is State.ATTEMPTING:
            self.store.mark_in_doubt(record.key, record.attempt_id)
        return InDoubt(record.key, record.tool, record.attempted_at, record.args_hash)


def raise_on_doubt(tool: SafeTool[P, T]) -> Callable[Concatenate[str, P], T]:
    """Adapt ``tool`` for exception-style callers: same parameters, returns the value.

    The returned function raises ``InDoubtError`` (with the receipt) or ``FailedCallError``
    (chained from the live exception when the action raised on this call), besides
    everything the tool itself raises.
    """

    @functools.wraps(tool)
    def call(key: str, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return tool(key, *args, **kwargs).unwrap()

    return call


def _default_name(fn: Callable[..., object]) -> str:
    """Return ``module.qualname``, with the real module name of ``python -m module``.

    A plain script's functions live in ``__main__``: the same function imported elsewhere
    gets another name, and its keys conflict. Pass ``name=`` to pin it.
    """
    module = fn.__module__
    if module == "__main__":
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        if spec is not None:
            module = spec.name
    return f"{module}.{fn.__qualname__}"


def _key_first_signature(fn: Callable[..., object], tool: str) -> inspect.Signature:
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
    return signature


def _message(exc: Exception) -> str:
    """Return ``str(exc)`` as storable text, whatever the exception's ``__str__`` does."""
    try:
        text = str(exc)
    except Exception as failure:  # noqa: BLE001 - a broken __str__ must not lose the outcome
        text = f"<str() of the exception raised {type(failure).__name__}>"
    return text.encode("utf-8", "backslashreplace").decode()


def _type_name(cls: type[BaseException]) -> str:
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"
