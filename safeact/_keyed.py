"""Guarded tools as frameworks see tools: no key parameter, a value back or an exception.

A framework shows a tool's signature to the model and calls it with the model's arguments;
the key must come from somewhere else: a key policy, asked on every call.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import json
import string
import typing
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Mapping
from typing import Any, ParamSpec, TypeAlias, TypeVar, overload

import attrs

from safeact._codec import ResultNotStorableError, encode, shown
from safeact._json import JSON
from safeact._keys import check_key
from safeact._outcome import AwaitingApproval, InDoubt
from safeact._tool import AsyncSafeTool, SafeTool
from safeact.exceptions import (
    AwaitingApprovalError,
    InDoubtError,
    KeyConflictError,
    ReplayOnlyError,
    SafeError,
)

__all__ = [
    "KeyPolicy",
    "NoRunKeyError",
    "Template",
    "ToolCall",
    "conflict_receipt",
    "conflict_text",
    "doubt_text",
    "each_call",
    "in_run",
    "keyed",
    "model_text",
    "receipt_of",
    "refusal_receipt",
    "run_scope",
    "split_arguments",
    "template",
]

P = ParamSpec("P")
T = TypeVar("T")


@attrs.frozen
class ToolCall:
    """One call of a guarded tool, as a key policy sees it.

    ``tool`` is the tool's name; ``arguments`` its arguments by parameter name (the key
    excluded, defaults applied); ``digest`` their hash, as the ledger records it.
    """

    tool: str
    arguments: Mapping[str, object]
    digest: str


KeyPolicy: TypeAlias = Callable[[ToolCall], str]
"""Make the key of a call: the same key for the same action, however often it is retried."""


class NoRunKeyError(SafeError):
    """A tool keyed by its run was called outside ``run_scope``: there is no key to use."""


_scope: contextvars.ContextVar[tuple[str, Counter[tuple[str, str]]]] = contextvars.ContextVar(
    "safeact_run_scope"
)


@contextlib.contextmanager
def run_scope(run_key: str) -> Iterator[None]:
    """Key the calls made inside by ``run_key``, the identity of one run of the host program.

    By default (``in_run``) a call of a tool with given arguments in the scope gets the
    key ``{run_key}:{tool}:{digest[:16]}``: the same call in the same run is the same
    action, whenever and however often it is made. A run started again with the same
    ``run_key`` (after a crash) gets the same keys and replays what already ran; a model
    that asks again, or a host that retries, gets the first call's outcome (or its doubt).
    Tools that mean to repeat a call use ``each_call``. Concurrent tasks in one scope share
    its count.

    Raises:
        TypeError, ValueError: ``run_key`` is not a non-empty str.

    """
    check_key(run_key, "the run key")
    token = _scope.set((run_key, Counter()))
    try:
        yield
    finally:
        _scope.reset(token)


def in_run(call: ToolCall) -> str:
    """The key of ``call`` in the current ``run_scope`` (the default policy).

    ``{run_key}:{tool}:{digest[:16]}``: one action per tool and arguments in a run. A
    second identical call replays the first (or meets its doubt), whether the model asked
    again, the host retried or the run started over after a crash.

    Raises:
        NoRunKeyError: no ``run_scope`` is active.

    """
    return f"{_run_key(call)}:{call.tool}:{call.digest[:16]}"


def each_call(call: ToolCall) -> str:
    """The key of ``call`` counted in the current ``run_scope``: identical calls repeat.

    The n-th identical call (tool and arguments) in the scope gets
    ``{run_key}:{tool}:{digest[:16]}:{n}``, counting from 0, so a tool keyed so acts again
    each time it is called with the same arguments. For tools whose repeats are wanted
    (two identical messages on purpose), never for one that moves money: a model that
    asks again after a doubt, or a host that retries, makes a new call and acts again. A
    run started again must make the same calls in the same order to find its keys.

    Raises:
        NoRunKeyError: no ``run_scope`` is active.

    """
    run_key = _run_key(call)
    _, seen = _scope.get()
    n = seen[call.tool, call.digest]
    seen[call.tool, call.digest] += 1
    return f"{run_key}:{call.tool}:{call.digest[:16]}:{n}"


def _run_key(call: ToolCall) -> str:
    """The current ``run_scope``'s run key.

    Raises:
        NoRunKeyError: no ``run_scope`` is active.

    """
    try:
        run_key, _ = _scope.get()
    except LookupError:
        raise NoRunKeyError(
            f"{call.tool} was called without a key: call it inside "
            "`with safeact.run_scope(run_id):`, or give keyed(..., key=...) a key policy "
            "(e.g. safeact.template('refund:{order_id}'))"
        ) from None
    return run_key


@attrs.frozen
class Template:
    """A key policy that formats ``pattern`` with the call's arguments (see ``template``)."""

    pattern: str
    fields: frozenset[str]

    def __call__(self, call: ToolCall) -> str:
        """The key of ``call``: ``pattern`` with its arguments filled in."""
        return self.pattern.format_map(call.arguments)


def template(pattern: str) -> Template:
    """A policy that formats ``pattern`` with the call's arguments: ``"refund:{order_id}"``.

    For keys that name a business action, the same whichever run asks for it. The fields
    are checked against the tool's parameters when ``keyed`` is given the policy.

    Raises:
        ValueError: ``pattern`` has no field, or is not a valid format string.

    """
    fields = _fields(pattern)
    if not fields:
        raise ValueError(
            f"key template {pattern!r} names no argument: put the arguments that identify "
            "the action in braces, e.g. 'refund:{order_id}'"
        )
    return Template(pattern, fields)


def _fields(pattern: str) -> frozenset[str]:
    """The argument names a format string uses (``{order.id}`` uses ``order``)."""
    try:
        parsed = list(string.Formatter().parse(pattern))
    except ValueError as exc:
        raise ValueError(f"key template {pattern!r} is not a format string: {exc}") from None
    names = set()
    for _, field, _, _ in parsed:
        if field is None:
            continue
        name = field.split(".", 1)[0].split("[", 1)[0]
        if not name or name.isdigit():
            raise ValueError(
                f"key template {pattern!r}: name the argument in each field, e.g. {{order_id}}"
            )
        names.add(name)
    return frozenset(names)


@overload
def keyed(
    tool: AsyncSafeTool[P, T], key: KeyPolicy = ...
) -> Callable[P, Coroutine[Any, Any, T]]: ...
@overload
def keyed(tool: SafeTool[P, T], key: KeyPolicy = ...) -> Callable[P, T]: ...
def keyed(
    tool: SafeTool[P, T] | AsyncSafeTool[P, T], key: KeyPolicy = in_run
) -> Callable[P, T] | Callable[P, Coroutine[Any, Any, T]]:
    """Make ``tool`` a plain function of its arguments, keyed by ``key``, for frameworks.

    The function has the tool's signature, annotations, name and docstring without the key,
    and is a coroutine function exactly when the tool is async. It returns the value
    (ran now or replayed) or raises ``InDoubtError`` (with the receipt) or
    ``FailedCallError``, as ``raise_on_doubt`` does; adapters turn those into what their
    framework expects. ``key`` makes each call's key (default: by ``run_scope``).

    Raises:
        TypeError: ``tool`` is not a guarded tool.
        ValueError: ``key`` is a ``template`` naming an argument the tool does not take.

    """
    if not isinstance(tool, SafeTool | AsyncSafeTool):
        raise TypeError(
            f"keyed() takes a tool made with @safe(ledger), got {type(tool).__name__}: "
            "guard the function first"
        )
    signature = inspect.signature(tool.__wrapped__)
    parameters = list(signature.parameters.values())[1:]
    names = {parameter.name for parameter in parameters}
    unknown = key.fields - names if isinstance(key, Template) else frozenset()
    if unknown:
        raise ValueError(
            f"key template for {tool.name} names {', '.join(sorted(unknown))}, which it does "
            f"not take; its arguments are: {', '.join(sorted(names)) or 'none'}"
        )
    without_key = signature.replace(parameters=parameters)

    def key_of(args: tuple[object, ...], kwargs: dict[str, object]) -> str:
        bound = without_key.bind(*args, **kwargs)
        bound.apply_defaults()
        digest = tool._digest("-", args, kwargs)  # noqa: SLF001 - the ledger's own hash
        return check_key(key(ToolCall(tool.name, dict(bound.arguments), digest)), "the key")

    if isinstance(tool, AsyncSafeTool):
        async_tool = tool

        async def call_async(*args: P.args, **kwargs: P.kwargs) -> T:
            return (await async_tool(key_of(args, kwargs), *args, **kwargs)).unwrap()

        return _dressed(call_async, tool, without_key)
    sync_tool = tool

    def call(*args: P.args, **kwargs: P.kwargs) -> T:
        return sync_tool(key_of(args, kwargs), *args, **kwargs).unwrap()

    return _dressed(call, tool, without_key)


_F = TypeVar("_F", bound=Callable[..., object])


def _dressed(
    function: _F, tool: SafeTool[Any, Any] | AsyncSafeTool[Any, Any], signature: inspect.Signature
) -> _F:
    """Give ``function`` the tool's name, docstring and signature without the key."""
    functools.update_wrapper(function, tool.__wrapped__, updated=())
    del function.__wrapped__  # type: ignore[attr-defined] # unwrapped, the key shows again
    hints = typing.get_type_hints(tool.__wrapped__)
    first = next(iter(inspect.signature(tool.__wrapped__).parameters))
    function.__annotations__ = {name: hint for name, hint in hints.items() if name != first}
    function.__signature__ = signature.replace(  # type: ignore[attr-defined] # inspect reads it
        parameters=[
            parameter.replace(annotation=hints.get(parameter.name, parameter.annotation))
            for parameter in signature.parameters.values()
        ],
        return_annotation=hints.get("return", signature.return_annotation),
    )
    return function


def receipt_of(doubt: InDoubt | InDoubtError) -> dict[str, str | None]:
    """The receipt of an in-doubt call as JSON, as adapters hand it to a person or a model."""
    return {
        "key": doubt.key,
        "tool": doubt.tool,
        "attempted_at": doubt.attempted_at.isoformat(),
        "args_hash": doubt.args_hash,
        "attempt_id": doubt.attempt_id,
        "reason": doubt.reason.value,
        "note": doubt.note,
    }


def request_of(waiting: AwaitingApproval | AwaitingApprovalError) -> dict[str, JSON]:
    """A call's pending approval request as JSON, as adapters hand it to a person or a model.

    ``arguments`` as the tool keeps them (redacted as it declares), else ``None``.
    """
    return {
        "key": waiting.key,
        "tool": waiting.tool,
        "requested_at": waiting.requested_at.isoformat(),
        "args_hash": waiting.args_hash,
        "arguments": waiting.arguments,
    }


def doubt_text(doubt: InDoubtError, name: str) -> str:
    """What a model is told of an in-doubt call of the tool it knows as ``name``."""
    return (
        f"{doubt}. Do not call {name} again for this: a person must check and resolve it. "
        f"Receipt: {json.dumps(receipt_of(doubt))}"
    )


def conflict_receipt(conflict: KeyConflictError) -> dict[str, str | None]:
    """A key conflict as JSON: the key, both tools and both argument digests, and why."""
    return {
        "key": conflict.key,
        "tool": conflict.tool,
        "args_hash": conflict.args_hash,
        "recorded_tool": conflict.recorded_tool,
        "recorded_args_hash": conflict.recorded_args_hash,
        "conflict": str(conflict),
    }


def conflict_text(conflict: KeyConflictError, name: str) -> str:
    """What a model is told of a call of ``name`` whose key names another action."""
    return (
        f"{conflict} {name} was not run: its key names an action already recorded with "
        "other arguments. If you meant that action, call it with the arguments it was made "
        "with; if this is another action, a person must decide how to key it. "
        f"Receipt: {json.dumps(conflict_receipt(conflict))}"
    )


def refusal_receipt(refused: ReplayOnlyError) -> dict[str, str | None]:
    """A call refused under replay-only as JSON: the key, the tool, and the refusal."""
    return {"key": refused.key, "tool": refused.tool, "refused": str(refused)}


def model_text(value: object, return_type: object) -> str:
    """A result as a model reads it: a ``str`` as it is, else the JSON safeact stores.

    A value the ledger cannot store (``nan`` under ``-> float``, say: the action ran, and
    its key is left in doubt saying why) is given as its text, so that it still reaches the
    model, and nothing raises out of the framework after the action ran.
    """
    if isinstance(value, str):
        return value
    try:
        return json.dumps(encode(value, return_type), allow_nan=False)
    except ResultNotStorableError:
        return shown(value)


def split_arguments(
    signature: inspect.Signature, arguments: Mapping[str, object]
) -> tuple[list[object], dict[str, object]]:
    """Bind arguments given by name, as frameworks pass them, to ``signature``.

    Positional-only parameters get theirs by position, the rest by name; those not given
    are left to their defaults.
    """
    args: list[object] = []
    kwargs: dict[str, object] = {}
    for parameter in signature.parameters.values():
        if parameter.name not in arguments:
            continue
        if parameter.kind is parameter.POSITIONAL_ONLY:
            args.append(arguments[parameter.name])
        else:
            kwargs[parameter.name] = arguments[parameter.name]
    return args, kwargs
