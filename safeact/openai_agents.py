"""Guarded tools for the OpenAI Agents SDK: ``function_tool`` makes a ``@safe`` tool a tool.

The tool goes in ``Agent(tools=[...])`` like any function tool. Its action runs at most once
per key; the key comes from a key policy, by default ``safeact.in_run``: the run key the
application sets around the run with ``safeact.run_scope(run_id)``, the tool's name and a
digest of the arguments (``{run_id}:{tool}:{digest[:16]}``). The same call in the same run
is the same action: a model that asks again (told of a doubt, or of an error) gets the
first call's outcome, and a run started again with the same run id (after a crash)
replays what already ran. The SDK has no run id of its own, and its ``tool_call_id``
changes when the model is asked again, so the key never uses it.

    with safeact.run_scope(order_id):
        result = await Runner.run(agent, "refund order 42")

Importing this module imports the SDK (about a second); ``import safeact`` does not.
Install it with the ``safeact[openai-agents]`` extra.

Known limits of the run key:

* A run acts once per tool and arguments. A tool meant to act again on an identical call
  (a second identical message, on purpose) is keyed with ``safeact.each_call``, or takes an
  argument that tells the calls apart.
* A run id used again for another run replays the earlier run's actions: use a new run id
  for each run, and the same one only to continue a run.

A tool made with ``safe(ledger, approval=True)`` asks through the SDK's own approval flow:
the run pauses with the call in ``result.interruptions``, and the request is in the ledger,
bound to the call's key and argument digest. Decide with ``approve(state, item, by=...)``
or ``reject(state, item, by=...)`` (inside the run's ``run_scope``), which record who
decided in the ledger and in the ``RunState``, then resume with ``Runner.run(agent,
state)``. The ledger, not the ``RunState``, authorizes the action: a resumed state run
again, or a new run with the same run id, replays it; a yes for other arguments authorizes
nothing.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, cast

import agents
import attrs
from agents import FunctionTool, RunContextWrapper, RunState, ToolApprovalItem
from agents.function_schema import FuncSchema, function_schema

from safeact._keyed import (
    KeyPolicy,
    NoRunKeyError,
    ToolCall,
    conflict_receipt,
    conflict_text,
    doubt_text,
    each_call,
    in_run,
    keyed,
    model_text,
    receipt_of,
    refusal_receipt,
    request_of,
)
from safeact._keys import check_key
from safeact._outcome import denied_from
from safeact._protocol import AskApproval, Await, Denial, Go, State, approval_step
from safeact._replay_only import in_force as replay_only_in_force
from safeact._tool import AsyncSafeTool, SafeTool
from safeact.exceptions import (
    AwaitingApprovalError,
    FailedCallError,
    InDoubtError,
    KeyConflictError,
    ReplayOnlyError,
    SafeError,
)

if TYPE_CHECKING:
    from safeact._json import JSON
    from safeact._protocol import Approval

__all__ = [
    "AwaitingApprovalStopError",
    "InDoubtStopError",
    "KeyConflictStopError",
    "OnDoubt",
    "ReplayOnlyStopError",
    "approve",
    "function_tool",
    "reject",
]

OnDoubt: TypeAlias = Literal["error", "stop"]
"""What an ``InDoubt`` call (or a key conflict) does: tell the model (a tool error), or stop."""

_Guarded: TypeAlias = SafeTool[Any, Any] | AsyncSafeTool[Any, Any]


class KeyConflictStopError(agents.AgentsException):
    """A run stopped because a guarded call's key names another action (``on_doubt="stop"``).

    ``conflict`` is the ``KeyConflictError`` (also the ``__cause__``); ``receipt`` its
    receipt: ``key``, ``tool``, ``args_hash``, ``recorded_tool``, ``recorded_args_hash``,
    ``conflict``. Nothing ran. An Agents SDK exception, so ``Runner.run`` raises it as it is.
    """

    def __init__(self, conflict: KeyConflictError, receipt: dict[str, str | None]) -> None:
        """Carry ``conflict`` and its ``receipt``."""
        super().__init__(f"{conflict} The run was stopped.")
        self.conflict = conflict
        self.receipt = receipt


class InDoubtStopError(agents.AgentsException):
    """A run stopped because a guarded call is in doubt (``on_doubt="stop"``).

    ``doubt`` is the ``InDoubtError`` (also the ``__cause__``); ``receipt`` its receipt:
    ``key``, ``tool``, ``attempted_at``, ``args_hash``, ``attempt_id``, ``reason``, ``note``.
    An Agents SDK exception, so ``Runner.run`` raises it as it is.
    """

    def __init__(self, doubt: InDoubtError, receipt: dict[str, str | None]) -> None:
        """Carry ``doubt`` and its ``receipt``."""
        super().__init__(f"{doubt} The run was stopped; resolve the key, then run it again.")
        self.doubt = doubt
        self.receipt = receipt


class ReplayOnlyStopError(agents.AgentsException):
    """A run stopped because a guarded call would have acted under replay-only.

    ``refused`` is the ``ReplayOnlyError`` (also the ``__cause__``); ``receipt`` its
    receipt: ``key``, ``tool``, ``refused``. Nothing ran and nothing was written. Always a
    stop, whatever ``on_doubt`` says: told as a tool error, the model would try another way
    to act, and a replay is meant to show what was done. An Agents SDK exception, so
    ``Runner.run`` raises it as it is.
    """

    def __init__(self, refused: ReplayOnlyError, receipt: dict[str, str | None]) -> None:
        """Carry ``refused`` and its ``receipt``."""
        super().__init__(f"{refused} The run was stopped.")
        self.refused = refused
        self.receipt = receipt


class AwaitingApprovalStopError(agents.AgentsException):
    """A run stopped because a guarded call reached its tool with no approval in the ledger.

    The SDK let the call through (``state.approve(item)`` alone, an ``always_approve``
    given for an earlier call), but the ledger holds no yes for this key and these
    arguments, so nothing ran. ``awaiting`` is the ``AwaitingApprovalError`` (also the
    ``__cause__``); ``receipt`` its receipt: ``key``, ``tool``, ``requested_at``,
    ``args_hash``, ``arguments`` (as the tool keeps them, else ``None``). Decide with
    ``approve`` / ``reject`` (or ``safeact approve``), then run again. Never a doubt: the
    action has not begun. An Agents SDK exception, so ``Runner.run`` raises it as it is.
    """

    def __init__(self, awaiting: AwaitingApprovalError, receipt: dict[str, JSON]) -> None:
        """Carry ``awaiting`` and its ``receipt``."""
        super().__init__(
            f"{awaiting} The SDK let the call through, but the ledger has no approval of it: "
            "decide with safeact.openai_agents.approve(state, item, by=...), which records "
            "who approved. The run was stopped."
        )
        self.awaiting = awaiting
        self.receipt = receipt


def function_tool(
    tool: _Guarded,
    *,
    key: KeyPolicy = in_run,
    on_doubt: OnDoubt = "error",
    name: str | None = None,
    description: str | None = None,
) -> FunctionTool:
    """Make the guarded ``tool`` an Agents SDK ``FunctionTool``: its action runs once per key.

    The model sees the function's parameters without the key, its name (``name``) and its
    docstring (``description``), as ``agents.function_tool`` describes them. ``key`` makes
    each call's key: by default ``safeact.in_run`` (run the agent inside
    ``safeact.run_scope(run_id)``: one action per tool and arguments in a run);
    ``safeact.template("refund:{order_id}")`` keys by
    business identity. Sync and async tools both work (the SDK runs a sync one in a thread).

    What the model gets: a ``str`` result as it is, any other result as JSON text of the
    value as safeact stores it. A call whose action raised (now, or on an earlier run)
    gives a tool error saying so; the action is not run again under that key.

    A call found in doubt (its action may or may not have run: a crash, an interruption)
    does as ``on_doubt`` says:

    * ``"error"``: the model gets a tool error with the receipt (``key``, ``tool``,
      ``attempted_at``, ``args_hash``, ``attempt_id``, ``reason``, ``note``), telling it not
      to call again; a person resolves the key (``safeact resolve``).
    * ``"stop"``: the run ends: ``Runner.run`` raises ``InDoubtStopError``, which carries
      the receipt (and the ``InDoubtError`` as its cause). Resolve the key, then run again
      with the same run id.

    Under replay-only (``safeact.replay_only()``, ``SAFEACT_REPLAY_ONLY=1``) a call with an
    outcome recorded replays it; one that would act ends the run: ``Runner.run`` raises
    ``ReplayOnlyStopError``, with the ``ReplayOnlyError`` as its cause. Nothing ran.

    A tool made with ``approval=True`` gets the SDK's ``needs_approval``: a call the ledger
    has no decision for records its request (key, tool, argument digest) and pauses the run
    with a ``ToolApprovalItem`` in ``result.interruptions``; decide it with ``approve`` or
    ``reject``. A call the ledger decides already runs without pausing: one approved (through
    ``safeact approve``, say) runs once, a denied one gets the denial as a tool error, a
    settled key replays. A call the SDK lets through that the ledger has not approved ends
    the run with ``AwaitingApprovalStopError``, whatever ``on_doubt`` says.

    Raises:
        TypeError: ``tool`` is not a guarded tool.
        ValueError: ``on_doubt`` is not one of the choices, the function has no docstring
            and no ``description`` is given, ``key`` is a template naming an argument
            the tool does not take, or ``key`` is ``each_call`` for a tool that needs
            approval.
        agents.UserError: the SDK cannot describe one of the parameters to the model.

    """
    if on_doubt not in ("error", "stop"):
        raise ValueError(f"on_doubt must be 'error' or 'stop', got {on_doubt!r}")
    plain: Callable[..., object] = keyed(tool, key)
    if tool.approval and key is each_call:
        raise ValueError(
            f"{tool.name} needs approval, and each_call gives a call a new key each time it "
            "is keyed: the key asked about would not be the key that runs. Key it by the run "
            "(the default) or by business identity (safeact.template(...))"
        )
    tool_name = name if name is not None else plain.__name__
    text = description if description is not None else inspect.getdoc(plain)
    if not text:
        raise ValueError(
            f"{tool.name} has no docstring, and the model needs to be told what the tool "
            "does: write one, or pass function_tool(..., description='...')"
        )
    guard = _Guard(tool, tool_name, plain, on_doubt)
    body: Callable[..., object]
    if isinstance(tool, AsyncSafeTool):

        async def run_async(*args: object, **kwargs: object) -> str:
            return await guard.run_async(*args, **kwargs)

        body = run_async
    else:

        def run(*args: object, **kwargs: object) -> str:
            return guard.run(*args, **kwargs)

        body = run
    _dress(body, plain)
    # The SDK's needs_approval: the ledger decides whether a person must (see _Gate).
    gate = _Gate(tool, key, function_schema(body)) if tool.approval else None
    return agents.function_tool(
        body,
        name_override=tool_name,
        description_override=text,
        failure_error_function=_failure,
        needs_approval=False if gate is None else gate,
    )


def _dress(body: Callable[..., object], plain: Callable[..., object]) -> None:
    """Show the SDK ``plain``'s name, docstring and signature (without the key)."""
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(body, attribute, getattr(plain, attribute))
    body.__annotations__ = dict(plain.__annotations__)
    body.__signature__ = inspect.signature(plain)  # type: ignore[attr-defined] # inspect reads it


def _failure(_: RunContextWrapper[Any], error: Exception) -> str:
    """The SDK's error handler: safeact's errors end the run; others, the SDK's message.

    The guard turns a failed call and a doubt (``"error"``) into tool output itself, so a
    safeact error here is a doubt to stop on, or a misuse (no run key): neither is the
    model's to work around.
    """
    if isinstance(
        error,
        SafeError
        | InDoubtStopError
        | KeyConflictStopError
        | ReplayOnlyStopError
        | AwaitingApprovalStopError,
    ):
        raise error
    return agents.default_tool_error_function(_, error)


class _Guard:
    """The body of one guarded function tool: the call, and what its outcomes become."""

    def __init__(
        self, tool: _Guarded, name: str, plain: Callable[..., object], on_doubt: OnDoubt
    ) -> None:
        self.tool = tool
        self.name = name
        self.plain = plain
        self.on_doubt = on_doubt

    def run(self, *args: object, **kwargs: object) -> str:
        """Call the sync tool."""
        try:
            return model_text(self.plain(*args, **kwargs), self.tool.return_type)
        except AwaitingApprovalError as exc:
            raise AwaitingApprovalStopError(exc, request_of(exc)) from exc
        except FailedCallError as exc:
            return self._failed(exc)
        except KeyConflictError as exc:
            return self._conflict(exc)
        except ReplayOnlyError as exc:
            raise ReplayOnlyStopError(exc, refusal_receipt(exc)) from exc
        except InDoubtError as exc:
            return self._doubt(exc)

    async def run_async(self, *args: object, **kwargs: object) -> str:
        """Call the async tool."""
        try:
            value = await cast("Awaitable[object]", self.plain(*args, **kwargs))
            return model_text(value, self.tool.return_type)
        except AwaitingApprovalError as exc:
            raise AwaitingApprovalStopError(exc, request_of(exc)) from exc
        except FailedCallError as exc:
            return self._failed(exc)
        except KeyConflictError as exc:
            return self._conflict(exc)
        except ReplayOnlyError as exc:
            raise ReplayOnlyStopError(exc, refusal_receipt(exc)) from exc
        except InDoubtError as exc:
            return self._doubt(exc)

    def _conflict(self, conflict: KeyConflictError) -> str:
        """The model's tool error (``"error"``), or end the run (``"stop"``): nothing ran."""
        if self.on_doubt == "stop":
            raise KeyConflictStopError(conflict, conflict_receipt(conflict)) from conflict
        return f"Error: {conflict_text(conflict, self.name)}"

    def _failed(self, failed: FailedCallError) -> str:
        return f"Error: {failed}"

    def _doubt(self, doubt: InDoubtError) -> str:
        """The model's tool error (``"error"``), or re-raise ``doubt`` to end the run."""
        if self.on_doubt == "stop":
            raise InDoubtStopError(doubt, receipt_of(doubt)) from doubt
        return f"Error: {doubt_text(doubt, self.name)}"


@attrs.frozen
class _Call:
    """One call of a guarded tool as the ledger knows it: its key, digest and arguments."""

    key: str
    digest: str
    args: tuple[object, ...]
    kwargs: dict[str, object]


class _Gate:
    """The SDK's ``needs_approval`` of a tool that needs approval: it asks the ledger.

    The SDK asks it before each call it has no decision for (its ``RunState`` has none),
    with the call's arguments as the model gave them; it answers whether a person must
    decide, recording the request in the ledger when none is there. It is also how
    ``approve`` and ``reject`` find the key of an interruption, from the agent's tools.
    """

    def __init__(self, tool: _Guarded, policy: KeyPolicy, schema: FuncSchema) -> None:
        self.tool = tool
        self.policy = policy
        self.schema = schema
        parameters = list(inspect.signature(tool.__wrapped__).parameters.values())[1:]
        self.signature = inspect.Signature(parameters)

    async def __call__(self, _: RunContextWrapper[Any], params: dict[str, Any], __: str) -> bool:
        """Whether the call waits for a person: the ledger has no decision on it yet.

        Raises:
            agents.UserError: the call has no key (no ``run_scope``): the SDK ends the run
                (any other error here would pause it for an approval that cannot be given).

        """
        try:
            call = self.call(params)
        except NoRunKeyError as exc:
            raise agents.UserError(str(exc)) from exc
        # The ledger blocks (SQLite, PostgreSQL): off the event loop, as the SDK runs a sync
        # tool. to_thread copies the context, so a replay_only() block reaches it.
        return await asyncio.to_thread(self._waits, call)

    def call(self, params: dict[str, Any]) -> _Call:
        """The call of ``params`` (the model's arguments), as the SDK will invoke the tool.

        Raises:
            NoRunKeyError: the key policy has no key for it (no ``run_scope``).
            ValueError: the arguments are not valid for the tool (pydantic's
                ``ValidationError``); TypeError: they are not an object.

        """
        # Validated as the SDK validates them before the call: the digest is of the values
        # the function will get (a Decimal, a model), not of the JSON the model wrote.
        parsed = self.schema.params_pydantic_model(**params)
        args, kwargs = self.schema.to_call_args(parsed)
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        digest = self.tool._digest("-", tuple(args), kwargs)  # noqa: SLF001 - the ledger's own hash
        key = self.policy(ToolCall(self.tool.name, dict(bound.arguments), digest))
        return _Call(check_key(key, "the key"), digest, tuple(args), kwargs)

    def _waits(self, call: _Call) -> bool:
        """Whether ``call`` waits for a person (its request recorded); False if decided."""
        if replay_only_in_force():
            return False  # the call replays or is refused, asking nothing (a request writes)
        try:
            return self.ask(call) is not None
        except KeyConflictError:
            return False  # the call is told of the conflict, and runs nothing

    def ask(self, call: _Call) -> Approval | None:
        """The request ``call`` waits on, recorded now if there was none; None if decided.

        Decided without a person: a key settled or in doubt (it replays, or is in doubt,
        whatever its approval says), an approval given (the call runs once), a denial (the
        call gets it). Otherwise the request, recorded as the guarded call itself records it
        (bound to the key, the tool and the digest, with the arguments if the tool keeps
        them), without making the call: the SDK has not decided to run it.

        Raises:
            KeyConflictError: the key's request is for another tool or other arguments.

        """
        store = self.tool.store
        record = store.get(call.key)
        if record is not None and record.state is not State.RELEASED:
            return None
        match approval_step(store.approval(call.key), self.tool.name, call.digest):
            case AskApproval(previous):
                shown = self.tool._display if self.tool.keep_arguments else None  # noqa: SLF001
                store._request_approval(  # noqa: SLF001 - as the guarded call asks
                    call.key,
                    self.tool.name,
                    call.digest,
                    arguments=None if shown is None else shown(call.key, call.args, call.kwargs),
                    previous=previous,
                )
                return store.approval(call.key)
            case Await(pending):
                return pending
            case Go() | Denial():
                return None


def approve(
    state: RunState[Any], item: ToolApprovalItem, *, by: str, note: str | None = None
) -> Approval:
    """Approve ``item``, a paused call of a safeact tool: in the ledger, then in ``state``.

    The ledger's approval is the one that authorizes: bound to the call's key and the digest
    of the arguments in ``item`` (those the person saw), with ``by`` (who approved, required)
    and ``note`` in the key's history; it is consumed when the action starts, so a resumed
    ``state`` run again, or a new run with the same run id, replays instead of acting again.
    ``state.approve(item)`` then lets the SDK resume the call. Decide inside the run's
    ``run_scope`` (the key needs the run key, as the run and its resume do). Returns the
    approval as recorded.

    Raises:
        ValueError: ``item`` is not a call of a safeact tool that needs approval among its
            agent's tools, or its arguments are not valid for the tool.
        NoRunKeyError: the tool is keyed by the run, and no ``run_scope`` is open.
        KeyConflictError: the key's request is for another tool or other arguments.
        SafeError: the ledger's request is not pending (decided already, or consumed).
        TypeError, ValueError: ``by`` is not a non-empty ``str``, or ``note`` not text.

    """
    gate, call = _call_of(item)
    gate.ask(call)
    approved = gate.tool.approve(call.key, by=by, note=note, args_hash=call.digest)
    state.approve(item)
    return approved


def reject(
    state: RunState[Any], item: ToolApprovalItem, *, by: str, note: str | None = None
) -> Approval:
    """Deny ``item``, a paused call of a safeact tool: in the ledger, then in ``state``.

    The denial is final for the call's key: recorded with ``by`` and ``note``, and replayed
    to every later call under the key as a tool error (``safeact.Denied``), run again or not.
    ``state.reject(item)`` gives the model the same text now. Decide inside the run's
    ``run_scope``, as for ``approve``. Returns the denial as recorded.

    Raises:
        ValueError, NoRunKeyError, KeyConflictError, TypeError: as for ``approve``.
        SafeError: the ledger's request is denied already, or consumed (its action began).

    """
    gate, call = _call_of(item)
    gate.ask(call)
    denied = gate.tool.deny(call.key, by=by, note=note, args_hash=call.digest)
    state.reject(item, rejection_message=_denial_text(denied))
    return denied


def _denial_text(denied: Approval) -> str:
    """What the model is told of a denied call: the tool error a later call replays."""
    failed = denied_from(denied)
    return f"Error: {FailedCallError(failed.key, failed.tool, failed.error_type, failed.message)}"


def _call_of(item: ToolApprovalItem) -> tuple[_Gate, _Call]:
    """The gate of ``item``'s tool, and its call as the ledger keys it.

    Raises:
        ValueError: ``item`` is no call of a safeact tool that needs approval, or its
            arguments are not valid for the tool.
        NoRunKeyError: the tool is keyed by the run, and no ``run_scope`` is open.

    """
    gate = _gate_of(item)
    raw = item.raw_item
    arguments = raw.get("arguments") if isinstance(raw, dict) else getattr(raw, "arguments", None)
    try:
        params = json.loads(arguments) if isinstance(arguments, str) and arguments.strip() else {}
        return gate, gate.call(params)
    except NoRunKeyError:
        raise NoRunKeyError(
            f"{item.tool_name} is keyed by its run: decide its approval inside the run's "
            "`with safeact.run_scope(run_id):`, as the run and its resume are"
        ) from None
    except (ValueError, TypeError) as exc:
        raise ValueError(
            f"the arguments of {item.tool_name} in this approval item are not valid for the "
            f"tool ({exc}); nothing can run with them: reject it with state.reject(item)"
        ) from exc


def _gate_of(item: ToolApprovalItem) -> _Gate:
    """The gate of the safeact tool ``item`` pauses, found among its agent's tools.

    Raises:
        ValueError: no tool of that name among them is a safeact tool that needs approval.

    """
    agent = item.agent
    for tool in agent.tools:
        if (
            isinstance(tool, FunctionTool)
            and tool.name == item.tool_name
            and isinstance(tool.needs_approval, _Gate)
        ):
            return tool.needs_approval
    raise ValueError(
        f"{item.tool_name!r} is not a safeact tool that needs approval among the tools of "
        f"agent {agent.name!r}: decide it with state.approve(item) or "
        "state.reject(item)"
    )
