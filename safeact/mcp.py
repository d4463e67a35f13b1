"""Guarded tools for MCP servers: ``add_tool`` makes a ``@safe`` tool an MCP tool, once per key.

One API for both majors of the MCP python SDK: a ``FastMCP`` server of mcp 1.x
(``mcp.server.fastmcp``) or an ``MCPServer`` of mcp 2.x (``mcp.server.mcpserver``). The
client never sees the key as an argument of the tool; it comes, for each call, from:

* the request's ``_meta``, under ``"io.safeact/key"`` (the default): the client sends
  ``call_tool(name, arguments, meta={"io.safeact/key": "..."})``, or uses ``call_tool``
  below. A retried call (a timeout, a reconnect, a restarted host) sends the same key;
* an argument of the tool's own (``key_argument="idempotency_key"``): a required string in
  its input schema, for clients that cannot set ``_meta``, the model choosing the key;
* a key policy over the arguments (``key=safeact.template("ticket:{order_id}")``): the same
  key for the same business action, whoever asks for it.

The JSON-RPC request id is never the key: it starts again at 1 or 2 in every session, so
unrelated calls of two sessions would share it.

What the client gets back: the tool's value as its normal result (text and structured
content), with ``_meta["io.safeact/replayed"]`` true when it was read back from the ledger
and nothing ran; or an error result (``isError``) when the action failed (the stored error),
when it is in doubt (the receipt, and a text telling the model not to call again and a
person to check), or when the call was refused (no key, a key recorded for another call,
arguments safeact cannot hash, a key it cannot store, or a server that only replays, under
``safeact.replay_only()`` or ``SAFEACT_REPLAY_ONLY=1``, asked for an action it has no
record of): nothing ran then, and the text says why. A tool made with ``approval=True``
answers a call that waits for a person's approval with an error result naming the request
(``"state": "awaiting_approval"``) and saying how a person decides it; the same call made
again once it is approved runs once, and once denied gets the denial, for good.

Importing this module imports the MCP SDK (about a second); ``import safeact`` does not.
Install it with the ``safeact[mcp]`` extra.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import json
import shlex
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol, TypeAlias, TypeVar

import anyio.to_thread
import attrs
from mcp.types import CallToolResult, ToolAnnotations

from safeact._codec import ResultNotStorableError, encode, shown
from safeact._keyed import (
    KeyPolicy,
    NoRunKeyError,
    ToolCall,
    conflict_receipt,
    in_run,
    keyed,
    receipt_of,
    refusal_receipt,
    request_of,
    split_arguments,
)
from safeact._keys import check_key
from safeact._outcome import AwaitingApproval, Failed, InDoubt, Outcome, Succeeded
from safeact._protocol import DENIED, DoubtReason
from safeact._tool import AsyncSafeTool, SafeTool
from safeact.exceptions import KeyConflictError, ReplayOnlyError

__all__ = ["KEY", "REPLAYED", "Server", "Session", "add_tool", "call_tool", "key_for"]

KEY: Final = "io.safeact/key"
"""The ``_meta`` entry of a ``tools/call`` request that carries the key."""

REPLAYED: Final = "io.safeact/replayed"
"""The ``_meta`` entry of a result: true when it was read from the ledger and nothing ran."""

_CONTEXT: Final = "_safeact_context"
"""The hidden parameter the SDK fills with its request ``Context`` (in annotations only)."""

_Guarded: TypeAlias = SafeTool[Any, Any] | AsyncSafeTool[Any, Any]
R_co = TypeVar("R_co", covariant=True)


class Server(Protocol):
    """What ``add_tool`` takes: a ``FastMCP`` (mcp 1.x) or an ``MCPServer`` (mcp 2.x)."""

    def add_tool(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        annotations: Any = None,  # ToolAnnotations: another class on each major
    ) -> None:
        """Register ``fn`` as a tool."""


class Session(Protocol[R_co]):
    """What ``call_tool`` takes: an MCP client session (``ClientSession``, or 2.x ``Client``)."""

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        meta: Any = None,  # a dict on 1.x, the TypedDict RequestParamsMeta on 2.x
    ) -> R_co:
        """Call the tool ``name``."""
        ...


@attrs.frozen
class _Sdk:
    """The classes of the installed major that differ by module between 1.x and 2.x."""

    server: type[Any]
    context: type[Any]


@functools.cache
def _sdk() -> _Sdk:
    """Find the installed major by what imports: ``mcp.server.mcpserver`` exists from 2.0 on."""
    try:
        module = importlib.import_module("mcp.server.mcpserver")
    except ModuleNotFoundError:
        module = importlib.import_module("mcp.server.fastmcp")
        return _Sdk(module.FastMCP, module.Context)
    return _Sdk(module.MCPServer, module.Context)


def add_tool(  # noqa: PLR0913 - one keyword per choice, all optional
    server: Server,
    tool: _Guarded,
    *,
    key: KeyPolicy | None = None,
    key_argument: str | None = None,
    destructive: bool | None = None,
    name: str | None = None,
    title: str | None = None,
    description: str | None = None,
) -> None:
    """Register the guarded ``tool`` on ``server``: an MCP tool whose action runs once per key.

    The tool's input schema is the function's parameters without the key; its name is the
    function's name (or ``name``), its description the docstring (or ``description``). Its
    annotations say ``idempotentHint: true`` and, when ``destructive`` is given,
    ``destructiveHint``. A sync tool runs in a worker thread, on both majors.

    The key of each call is, by default, the one the client sends in the request's
    ``_meta`` under ``KEY`` (``"io.safeact/key"``). With ``key_argument``, the tool takes a
    required string argument of that name instead, which is the key and is not passed to
    the function. With ``key``, a key policy makes it from the arguments (e.g.
    ``safeact.template("ticket:{order_id}")``), and what the client sends is not used. A
    call without a key (or with one that is not a non-empty string) is refused with an
    error result that says how to send one; it never runs unkeyed. So is a call whose key
    the ledger cannot store (lone surrogates) or whose arguments safeact cannot hash (an
    object with no content to compare, a value nested too deeply), and the error result
    carries the reason: the ``TypeError`` or ``ValueError`` safeact raised.

    Results: the value, as text (a ``str`` as it is, anything else as the JSON safeact
    stores) and as structured content (that JSON when it is an object, else
    ``{"result": ...}``), with ``_meta[REPLAYED]``. No output schema is declared: FastMCP
    1.x would check the receipt of an in-doubt call against it and send a validation error
    instead, and the SDK's schema of a return type need not match the JSON safeact stores
    and replays (aliases of pydantic fields; attrs classes it cannot describe). Failed and
    in-doubt calls, and refused ones, are error results (``isError``); failed and in-doubt
    ones carry structured content with ``"state"`` ``"failed"`` or ``"in_doubt"`` and the
    receipt, a key conflict ``"conflict"``, and a call refused under replay-only
    ``"replay_only"`` with ``key``, ``tool`` and ``refused`` (the reason).

    A tool made with ``approval=True``: a call that waits for a person's approval is an
    error result with ``"state": "awaiting_approval"``, ``key``, ``tool``,
    ``requested_at``, ``args_hash`` and ``arguments`` (as the tool keeps them, redacted;
    ``None`` unless ``keep_arguments=True``), and a text telling the client that nothing
    ran and a person decides (``safeact approve LEDGER KEY --by NAME``, or
    ``Store.approve``). The same call made again (same key and arguments) then runs once,
    or, denied, gets a failed result with ``error_type`` ``"safeact.Denied"`` and the
    denial (who, and their note) as ``message``, on every call under that key.

    Raises:
        TypeError: ``server`` is not a ``FastMCP``/``MCPServer`` of the installed SDK,
            ``tool`` is not a guarded tool, or it takes ``*args`` or ``**kwargs``.
        ValueError: both ``key`` and ``key_argument`` are given; ``key_argument`` is not
            an identifier or names a parameter of the tool; or ``key`` is a template naming
            an argument the tool does not take.

    """
    sdk = _sdk()
    if not isinstance(server, sdk.server):
        raise TypeError(
            f"add_tool() takes the server to register on, a {sdk.server.__qualname__} of the "
            f"installed mcp SDK, got {type(server).__name__}"
        )
    if key is not None and key_argument is not None:
        raise ValueError(
            "give add_tool() either key= (a key policy over the arguments) or key_argument= "
            "(the client passes the key as an argument), not both"
        )
    plain: Callable[..., object] = keyed(tool) if key is None else keyed(tool, key)
    signature = inspect.signature(plain)
    parameters = list(signature.parameters.values())
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            stars = "*" if parameter.kind is parameter.VAR_POSITIONAL else "**"
            raise TypeError(
                f"{tool.name} takes {stars}{parameter.name}: MCP calls tools with named "
                "arguments only; give it named parameters"
            )
    annotations = {n: h for n, h in plain.__annotations__.items() if n != "return"}
    if key_argument is not None:
        _check_key_argument(key_argument, signature, tool.name)
        parameters.append(
            inspect.Parameter(key_argument, inspect.Parameter.KEYWORD_ONLY, annotation=str)
        )
        annotations[key_argument] = str
    tool_name = name if name is not None else plain.__name__
    guard = _Guard(tool, tool_name, signature, key, key_argument)

    async def call(**arguments: Any) -> CallToolResult:
        return await guard.run(arguments)

    call.__name__ = tool_name
    call.__doc__ = plain.__doc__
    # The SDK builds the input schema from __signature__, and finds the parameter to give
    # its Context to in the annotations only: the client never sees it.
    call.__signature__ = signature.replace(  # type: ignore[attr-defined] # inspect reads it
        parameters=parameters, return_annotation=CallToolResult
    )
    call.__annotations__ = {**annotations, _CONTEXT: sdk.context, "return": CallToolResult}
    hints: dict[str, bool] = {"idempotentHint": True}  # camelCase: 1.x drops snake_case
    if destructive is not None:
        hints["destructiveHint"] = destructive
    server.add_tool(
        call,
        name=tool_name,
        title=title,
        description=description,
        annotations=ToolAnnotations.model_validate(hints),
    )


def _check_key_argument(key_argument: str, signature: inspect.Signature, tool: str) -> None:
    if not key_argument.isidentifier() or key_argument.startswith("_"):
        raise ValueError(
            f"key_argument={key_argument!r} is not a name the client can pass: use an "
            "identifier not starting with '_', e.g. 'idempotency_key'"
        )
    if key_argument in signature.parameters:
        raise ValueError(
            f"key_argument={key_argument!r} is a parameter of {tool} already: pick "
            "another name for the key"
        )


class _Guard:
    """The body of one registered tool: its key, the guarded call, and the result."""

    def __init__(
        self,
        tool: _Guarded,
        name: str,
        signature: inspect.Signature,
        policy: KeyPolicy | None,
        key_argument: str | None,
    ) -> None:
        self.tool = tool
        self.name = name
        self.signature = signature
        self.policy = policy
        self.key_argument = key_argument

    async def run(self, arguments: dict[str, Any]) -> CallToolResult:
        """Key the call, run it at most once, say what happened."""
        context = arguments.pop(_CONTEXT)
        sent = arguments.pop(self.key_argument) if self.key_argument else _sent_key(context)
        args, kwargs = split_arguments(self.signature, arguments)
        tool = self.tool
        try:
            key = self._key(sent, args, kwargs)
            if key is None:
                return _error(self._no_key(sent))
            if isinstance(tool, AsyncSafeTool):
                outcome: Outcome[object] = await tool(key, *args, **kwargs)
            else:
                # Off the event loop: FastMCP 1.x runs sync tools on it, and a guarded call
                # waits on the ledger (up to its `wait` for a running owner).
                outcome = await anyio.to_thread.run_sync(
                    functools.partial(tool, key, *args, **kwargs)
                )
        except KeyConflictError as exc:
            return _error(f"{self.name}: {exc}", {"state": "conflict", **conflict_receipt(exc)})
        except ReplayOnlyError as exc:  # this server replays only: a new call acts on nothing
            return _error(f"{self.name}: {exc}", {"state": "replay_only", **refusal_receipt(exc)})
        except (TypeError, ValueError, NoRunKeyError) as exc:
            # Raised before the action runs: arguments the ledger cannot hash, or a key
            # policy that made no usable key. The SDK would send only "Error executing
            # tool" (2.x); the client needs the reason.
            return _error(
                f"{self.name} refused this call; nothing ran. {type(exc).__name__}: {exc}"
            )
        return self._result(outcome)

    def _key(self, sent: object, args: list[object], kwargs: dict[str, object]) -> str | None:
        """The call's key: from the policy, or as sent if it is a non-empty str (else None).

        Raises:
            TypeError: the arguments cannot be hashed (for the policy's digest).
            ValueError: the key holds text the ledger cannot store (lone surrogates).
            NoRunKeyError, TypeError, ValueError: the policy made no usable key.

        """
        if self.policy is not None:
            bound = self.signature.bind(*args, **kwargs)
            bound.apply_defaults()
            digest = self.tool._digest("-", tuple(args), kwargs)  # noqa: SLF001 - the ledger's own hash, as keyed() uses
            made = self.policy(ToolCall(self.tool.name, dict(bound.arguments), digest))
            return check_key(made, "the key")
        if not isinstance(sent, str) or not sent:
            return None
        return check_key(sent, "the key")

    def _no_key(self, sent: object) -> str:
        what = "none" if sent is None else f"{sent!r}, not a non-empty string"
        if self.key_argument is not None:
            return (
                f"{self.name} needs an idempotency key in its argument {self.key_argument!r}, "
                f"and this call has {what}; nothing ran. Pass a string that names this "
                "action, and the same one when you retry it."
            )
        return (
            f"{self.name} needs an idempotency key, and this call has {what}; nothing ran. "
            f"Send it in the request's _meta: call_tool({self.name!r}, arguments, "
            f"meta={{{KEY!r}: '<a key that names this action>'}}), and the same key when "
            "retrying, which then gets the first call's result."
        )

    def _result(self, outcome: Outcome[object]) -> CallToolResult:
        match outcome:
            case Succeeded(value=value, replayed=replayed):
                return self._value(value, replayed=replayed)
            case InDoubt() as doubt:
                return self._doubt(doubt)
            case AwaitingApproval() as waiting:
                return self._waiting(waiting)
            case Failed() as failure:
                return _error(
                    self._failed_text(failure),
                    {
                        "state": "failed",
                        "key": failure.key,
                        "tool": failure.tool,
                        "error_type": failure.error_type,
                        "message": failure.message,
                    },
                    {REPLAYED: failure.replayed},
                )

    def _failed_text(self, failure: Failed) -> str:
        """What the client is told of a failed action, or of a person's denial of it."""
        if failure.error_type == DENIED:
            return (
                f"{self.name} did not run: {failure.message} (a person's decision). It will "
                f"not run under the key {failure.key!r}; do not call it again for this."
            )
        return (
            f"{self.name} failed: {failure.error_type}: {failure.message}. It is not "
            f"run again under the key {failure.key!r}."
        )

    def _waiting(self, waiting: AwaitingApproval) -> CallToolResult:
        """The error result of a call that waits for a person's approval: nothing ran."""
        request = {"state": "awaiting_approval", **request_of(waiting)}
        ledger = shlex.quote(self.tool.store.location)
        text = (
            f"{self.name} waits for a person's approval (key {waiting.key!r}); nothing ran. "
            f"A person approves or denies it (safeact approve {ledger} "
            f"{shlex.quote(waiting.key)} --by NAME, or safeact deny); then call it again "
            "with the same key and arguments: approved, it runs once; denied, you get the "
            "denial. Do not call it with other arguments for this."
        )
        return _error(f"{text} Request: {json.dumps(request)}", request)

    def _value(self, value: object, *, replayed: bool) -> CallToolResult:
        try:
            stored = encode(value, self.tool.return_type)
        except ResultNotStorableError:
            # The action ran, but its value does not fit its return type (the ledger could
            # not record it either, and says so to later calls): send it as text, which a
            # repr that raises cannot stop.
            return _result(shown(value), None, {REPLAYED: replayed})
        text = value if isinstance(value, str) else json.dumps(stored, allow_nan=False)
        structured = stored if isinstance(stored, dict) else {"result": stored}
        return _result(text, structured, {REPLAYED: replayed})

    def _doubt(self, doubt: InDoubt) -> CallToolResult:
        receipt = {"state": "in_doubt", **receipt_of(doubt)}
        if doubt.reason is DoubtReason.IN_FLIGHT:
            text = (
                f"{self.name} is still running under the key {doubt.key!r}, started by an "
                "earlier request; it was not started again. Call again later with the same "
                "key to get its result."
            )
        else:
            text = (
                f"{self.name} may or may not have run (key {doubt.key!r}, attempted at "
                f"{doubt.attempted_at.isoformat()}, {doubt.reason.value}). Do not call it "
                "again for this action, under any key: a person must check the downstream "
                "system and resolve the key (safeact resolve)."
            )
        return _error(f"{text} Receipt: {json.dumps(receipt)}", receipt)


def _sent_key(context: Any) -> object:
    """The key the client sent in the request's ``_meta``, or None."""
    meta = context.request_context.meta
    if meta is None:  # 1.x, no _meta sent
        return None
    entries: Mapping[str, object] = (
        meta if isinstance(meta, Mapping) else meta.model_dump(by_alias=True)  # 1.x: a model
    )
    return entries.get(KEY)


def _result(
    text: str, structured: Mapping[str, object] | None, meta: Mapping[str, object]
) -> CallToolResult:
    # model_validate by the wire names: 1.x keeps constructor kwargs it does not know
    # (is_error=, meta=) as extra fields, silently.
    return CallToolResult.model_validate(
        {
            "content": [{"type": "text", "text": text}],
            "structuredContent": structured,
            "_meta": meta,
        }
    )


def _error(
    text: str,
    structured: Mapping[str, object] | None = None,
    meta: Mapping[str, object] | None = None,
) -> CallToolResult:
    return CallToolResult.model_validate(
        {
            "content": [{"type": "text", "text": text}],
            "structuredContent": structured,
            "isError": True,
            "_meta": meta,
        }
    )


def key_for(name: str, arguments: Mapping[str, object] | None = None) -> str:
    """The key of a call of the tool ``name`` with ``arguments`` in the current ``run_scope``.

    A call of a tool with given arguments in the scope gets ``{run_key}:{name}:{digest[:16]}``
    (the digest of the arguments as sorted JSON): the same call in the same run is the same
    action, so a host that retries it (after a time-out, say), a model that asks for it
    again, and a host run started again with the same run key (after a crash) all send the
    same key and get the first call's result, or its doubt. Use a run key no other run of
    any host uses with the same servers.

    Raises:
        NoRunKeyError: no ``run_scope`` is active.
        TypeError: ``arguments`` is not JSON.

    """
    given = dict(arguments or {})
    text = json.dumps(given, sort_keys=True, separators=(",", ":"), allow_nan=False)
    digest = hashlib.sha256(text.encode()).hexdigest()
    try:
        return in_run(ToolCall(name, given, digest))
    except NoRunKeyError:
        raise NoRunKeyError(
            f"call_tool({name!r}) has no key: pass key=..., or call it inside "
            "`with safeact.run_scope(run_id):` to key each call by the run and its arguments"
        ) from None


async def call_tool(
    session: Session[R_co],
    name: str,
    arguments: Mapping[str, object] | None = None,
    *,
    key: str | None = None,
    meta: Mapping[str, object] | None = None,
) -> R_co:
    """Call the tool ``name`` through ``session``, sending ``key`` in ``_meta`` under ``KEY``.

    Without ``key``, the key is ``key_for(name, arguments)``: the current ``run_scope``'s
    key of this tool and these arguments, the same on every retry. ``meta`` is sent along.
    Returns what ``session.call_tool`` returns (a ``CallToolResult``); a server's replay
    says so in ``result.meta[REPLAYED]``.

    Raises:
        NoRunKeyError: no ``key`` is given and no ``run_scope`` is active.
        TypeError, ValueError: ``key`` is not a non-empty str.

    """
    chosen = check_key(key, "the key") if key is not None else key_for(name, arguments)
    return await session.call_tool(name, dict(arguments or {}), meta={**(meta or {}), KEY: chosen})
