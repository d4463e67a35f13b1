"""Guarded tools for pydantic-ai: ``SafeTools`` gives an agent ``@safe`` tools.

``Agent(model, capabilities=[SafeTools(send_refund)])``: the agent gets the tool, and its
action runs at most once per key. The key comes from a key policy, by default
``in_agent_run``: the run, the tool and a digest of the arguments. In a durable run (the
agent has a durability capability, such as ``DBOSDurability``, and runs inside its
workflow) the run is the run's ``run_id``, which the engine derives from the workflow and
keeps when it runs the workflow again; under ``TemporalDurability``, whose tools run in
activities, it is the Temporal workflow id, as ``safeact.temporal.in_workflow`` keys an
activity; outside any, the run key the application sets around the run with
``safeact.run_scope(run_id)``, as ``safeact.in_run`` makes it. The same call in the same
run is the same action: a model that asks again, with a new ``tool_call_id`` (told of a
doubt, say), gets the first call's outcome.

pydantic-ai's durable integrations name each toolset's activities or steps by its id:
give ``SafeTools`` one (``SafeTools(send_refund, id="refunds")``).

Importing this module imports pydantic-ai (about a second), not temporalio;
``import safeact`` imports neither. Install it with the ``safeact[pydantic-ai]`` extra.

Known limits of ``in_agent_run``, measured with pydantic-ai 2.68:

* Durable runs are recognised by a durability capability of the run that says it is in its
  durable context, or, under ``TemporalDurability``, by the ``TemporalRunContext`` the tool
  gets in its activity. A Temporal workflow id is one business run: the workflow acts once
  per tool and arguments in all its runs (see ``in_workflow``).
* A run acts once per tool and arguments. A tool meant to act again on an identical call
  is keyed with ``safeact.each_call`` (outside durable runs), or takes an argument that
  tells the calls apart.

A tool made with ``safe(ledger, approval=True)`` asks through pydantic-ai's deferred tool
approval: the run ends with ``DeferredToolRequests`` whose metadata carries the ledger's
request (``metadata[tool_call_id]["safeact"]``: key, tool, args_hash, requested_at,
arguments when the tool keeps them). ``SafeTools.approve`` / ``SafeTools.deny`` record who
decided in the ledger and give the ``ToolApproved`` / ``ToolDenied`` for
``DeferredToolResults``. The ledger, not the boolean, authorizes the action: a run resumed
again (a durable retry) replays it, and a ``ToolApproved(override_args=...)`` with other
arguments runs nothing under the old approval. Resume under the same key: the same
``run_scope`` (or ``run_id=``, in a durable run), or a ``template`` key.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Literal, NoReturn, TypeAlias, cast

from pydantic_ai import (
    ApprovalRequired,
    DeferredToolRequests,
    RunContext,
    ToolApproved,
    ToolDenied,
)
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.durable_exec import BaseDurabilityCapability
from pydantic_ai.toolsets import FunctionToolset

from safeact._codec import ResultNotStorableError, encode, shown
from safeact._keyed import (
    KeyPolicy,
    NoRunKeyError,
    ToolCall,
    conflict_text,
    doubt_text,
    each_call,
    in_run,
    keyed,
    request_of,
)
from safeact._outcome import denied_from
from safeact._tool import AsyncSafeTool, SafeTool
from safeact.exceptions import (
    AwaitingApprovalError,
    FailedCallError,
    InDoubtError,
    KeyConflictError,
    ReplayOnlyError,
)

__all__ = ["OnDoubt", "SafeTools", "in_agent_run"]

OnDoubt: TypeAlias = Literal["error", "stop"]
"""What an ``InDoubt`` call (or a key conflict) does: tell the model (a tool error), or stop."""

_Guarded: TypeAlias = SafeTool[Any, Any] | AsyncSafeTool[Any, Any]

_context: contextvars.ContextVar[RunContext[Any]] = contextvars.ContextVar("safeact_pydantic_ai")
"""The run context of the guarded call being made, for the key policy to read."""


def in_agent_run(call: ToolCall) -> str:
    """The key of ``call`` in the pydantic-ai run making it (``SafeTools``' default policy).

    In a Temporal activity (``TemporalDurability`` runs tools there, with a
    ``TemporalRunContext``): ``temporal:{workflow_id}:{tool}:{digest[:16]}``, as
    ``safeact.temporal.in_workflow`` keys an activity, the same on every attempt and every
    run of the workflow id; pydantic-ai's ``run_id`` there holds the Temporal run id, new
    when the workflow id runs again. In another durable run:
    ``pydantic-ai:{run_id}:{tool}:{digest[:16]}``; the engine derives ``run_id`` from the
    workflow, the same when it runs the workflow again after a crash. Otherwise, inside
    ``safeact.run_scope(run_key)``: ``{run_key}:{tool}:{digest[:16]}`` (``safeact.in_run``).
    The call's ``tool_call_id`` is never used: it is new when the model asks again. A
    non-durable run's own ``run_id`` is never used either: unless the application passes
    it, it is new on every run.

    Raises:
        NoRunKeyError: the call is neither in a durable run nor in a ``run_scope``; or its
            run context is a ``TemporalRunContext`` but it runs outside an activity of a
            Temporal workflow.

    """
    ctx = _context.get(None)
    if ctx is not None and _temporal(ctx):
        return _in_temporal_activity(call)
    if ctx is not None and _durable(ctx):
        if ctx.run_id is None:
            raise NoRunKeyError(
                f"{call.tool} runs in a durable run that gives no run_id to key it by: give "
                "SafeTools(..., key=...) a key policy"
            )
        return f"pydantic-ai:{ctx.run_id}:{call.tool}:{call.digest[:16]}"
    try:
        return in_run(call)
    except NoRunKeyError:
        raise NoRunKeyError(
            f"{call.tool} was called without a key: run the agent inside a durable workflow "
            "(a durability capability such as DBOSDurability), or inside `with "
            "safeact.run_scope(run_id):`, or give SafeTools(..., key=...) a key policy "
            "(e.g. safeact.template('refund:{order_id}'))"
        ) from None


def _temporal(ctx: RunContext[Any]) -> bool:
    """Whether ``ctx`` is the run context pydantic-ai rebuilds in a Temporal activity.

    Looked up in ``sys.modules``, never imported: a ``TemporalRunContext`` exists only once
    pydantic-ai has imported its Temporal integration, and temporalio with it.
    """
    integration = sys.modules.get("pydantic_ai.durable_exec.temporal")
    context_type = getattr(integration, "TemporalRunContext", None)
    return isinstance(context_type, type) and isinstance(ctx, context_type)


def _in_temporal_activity(call: ToolCall) -> str:
    """The key of ``call`` in the Temporal workflow whose activity runs it (``in_workflow``).

    Raises:
        NoRunKeyError: the call runs outside an activity, or in one no workflow started.

    """
    # Imported here: temporalio is loaded already (a TemporalRunContext came from it), and
    # only here; the key is safeact.temporal's, so both adapters key an activity alike.
    from safeact.temporal import in_workflow  # noqa: PLC0415

    try:
        return in_workflow(call)
    except NoRunKeyError:
        raise NoRunKeyError(
            f"{call.tool} was called with a TemporalRunContext outside a Temporal activity "
            "started by a workflow, so it has no workflow id to be keyed by: run the agent "
            "in a Temporal workflow (TemporalDurability runs its tools in activities), or "
            "give SafeTools(..., key=...) a key policy (e.g. "
            "safeact.template('refund:{order_id}'))"
        ) from None


def _durable(ctx: RunContext[Any]) -> bool:
    """Whether a durability capability of the run says the call is inside its workflow."""
    return any(
        isinstance(capability, BaseDurabilityCapability) and capability.in_durable_context
        for capability in ctx.capabilities.values()
    )


class SafeTools(AbstractCapability[Any]):
    """A capability that gives an agent guarded tools: each action runs at most once per key.

    The model sees each function's parameters without the key, its name and its docstring.
    ``key`` makes each call's key: by default ``in_agent_run``;
    ``safeact.template("refund:{order_id}")`` keys by business identity. Sync and async
    tools both work. ``id`` is the toolset's id, which pydantic-ai's durable integrations
    need to name its activities or steps (``TemporalDurability`` refuses a toolset without
    one): ``SafeTools(send_refund, id="refunds")``, unique among the agent's toolsets and
    capabilities, without a colon. It is the capability's ``id`` too, as for pydantic-ai's
    own ``Capability``.

    What the model gets: the value (ran now or replayed) as JSON, as safeact stores it. A
    call whose action raised (now, or on an earlier run) gives a tool error saying so; the
    action is not run again under that key.

    A call found in doubt (its action may or may not have run: a crash, an interruption)
    does as ``on_doubt`` says:

    * ``"error"``: the model gets a tool error with the receipt (``key``, ``tool``,
      ``attempted_at``, ``args_hash``, ``attempt_id``, ``reason``, ``note``), telling it not
      to call again; a person resolves the key (``safeact resolve``).
    * ``"stop"``: the run ends: ``agent.run`` raises the ``InDoubtError``, which carries the
      receipt. Resolve the key, then run again (a durable workflow: start it again under
      its id).

    A call whose key names an action recorded with other arguments (a ``template`` key, say)
    runs nothing: the model gets a tool error with both argument digests (``"error"``), or
    the run ends with the ``KeyConflictError`` (``"stop"``).

    Under replay-only (``safeact.replay_only()``, ``SAFEACT_REPLAY_ONLY=1``) a call with an
    outcome recorded replays it; one that would act ends the run, whatever ``on_doubt``
    says: ``agent.run`` raises the ``ReplayOnlyError`` (under ``TemporalDurability``, the
    activity fails with ``safeact.temporal.REPLAY_ONLY``, not retried). Nothing ran. Not a
    tool error: the model would try another way to act.

    A tool made with ``approval=True`` whose call the ledger has no decision for raises
    pydantic-ai's ``ApprovalRequired``, with the ledger's request as its metadata
    (``{"safeact": {"key", "tool", "args_hash", "requested_at", "arguments"}}``): give the
    agent ``DeferredToolRequests`` as an output type, decide each request with ``approve``
    or ``deny``, and run again with ``deferred_tool_results``. A call the ledger decides
    already runs without asking: one approved runs once, a denied one gets the denial as
    a tool error, a settled key replays. A call pydantic-ai approved but the ledger has not
    (a plain ``True``, or ``ToolApproved(override_args=...)`` with other arguments) ends
    the run with the ``AwaitingApprovalError``, whatever ``on_doubt`` says: nothing ran.

    Raises:
        TypeError: a tool is not a guarded tool.
        ValueError: no tool is given, two have one name, ``on_doubt`` is not one of the
            choices, a function has no docstring, ``key`` is a template naming an
            argument a tool does not take, or ``key`` is ``each_call`` and a tool needs
            approval.

    """

    def __init__(
        self,
        *tools: _Guarded,
        key: KeyPolicy = in_agent_run,
        on_doubt: OnDoubt = "error",
        id: str | None = None,  # noqa: A002 - pydantic-ai's own name for a toolset's id
    ) -> None:
        """Describe ``tools`` to pydantic-ai, each keyed by ``key``, in the toolset ``id``."""
        if on_doubt not in ("error", "stop"):
            raise ValueError(f"on_doubt must be 'error' or 'stop', got {on_doubt!r}")
        if not tools:
            raise ValueError("SafeTools() needs at least one tool made with @safe(ledger)")
        # The capability's id names its toolset, as pydantic-ai's Capability does: its error
        # for a toolset without one says to set the capability's id.
        self.id = id
        self._toolset: FunctionToolset[Any] = FunctionToolset(id=id)
        self._guarded: dict[str, _Guarded] = {}
        for tool in tools:
            body = _body(tool, key, on_doubt)
            if body.__name__ in self._toolset.tools:
                raise ValueError(
                    f"two tools are named {body.__name__}: the model could not tell them "
                    "apart; rename one of the functions"
                )
            self._toolset.add_function(body, takes_ctx=True, name=body.__name__)
            self._guarded[body.__name__] = tool

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """None: built from functions, so not from a spec."""
        return None

    def get_toolset(self) -> FunctionToolset[Any]:
        """The guarded tools, as pydantic-ai function tools."""
        return self._toolset

    def approve(
        self,
        requests: DeferredToolRequests,
        tool_call_id: str,
        *,
        by: str,
        note: str | None = None,
    ) -> ToolApproved:
        """Approve the call ``tool_call_id`` of ``requests`` in the ledger; its ``ToolApproved``.

        The approval that authorizes is the ledger's: bound to the request's key and
        argument digest (those of the call the person saw), with ``by`` (who approved,
        required) and ``note`` in the key's history, and consumed when the action starts,
        so a run resumed with these results again replays instead of acting again. Put the
        ``ToolApproved`` returned in ``DeferredToolResults.approvals[tool_call_id]``.

        Raises:
            ValueError: no call ``tool_call_id`` waits for approval in ``requests``, or it
                is not a call of these tools that safeact asked about.
            SafeError: the ledger's request is not pending (decided already, or consumed).
            TypeError, ValueError: ``by`` is not a non-empty ``str``, or ``note`` not text.

        """
        tool, key, args_hash = self._asked(requests, tool_call_id)
        tool.approve(key, by=by, note=note, args_hash=args_hash)
        return ToolApproved()

    def deny(
        self,
        requests: DeferredToolRequests,
        tool_call_id: str,
        *,
        by: str,
        note: str | None = None,
    ) -> ToolDenied:
        """Deny the call ``tool_call_id`` of ``requests`` in the ledger; its ``ToolDenied``.

        The denial is final for the call's key: recorded with ``by`` and ``note``, and
        replayed to every later call under the key as a tool error (``safeact.Denied``).
        The ``ToolDenied`` returned tells the model the same now.

        Raises:
            ValueError, TypeError: as for ``approve``.
            SafeError: the ledger's request is denied already, or consumed (its action began).

        """
        tool, key, args_hash = self._asked(requests, tool_call_id)
        failed = denied_from(tool.deny(key, by=by, note=note, args_hash=args_hash))
        error = FailedCallError(failed.key, failed.tool, failed.error_type, failed.message)
        return ToolDenied(f"Error: {error}")  # as a later call replays it (_told)

    def _asked(
        self, requests: DeferredToolRequests, tool_call_id: str
    ) -> tuple[_Guarded, str, str]:
        """The tool, key and argument digest of the request safeact made for ``tool_call_id``.

        Raises:
            ValueError: no such call waits for approval in ``requests``, or safeact did not
                ask about it (another tool's, or no request in its metadata).

        """
        calls = {call.tool_call_id: call.tool_name for call in requests.approvals}
        if tool_call_id not in calls:
            raise ValueError(f"no call {tool_call_id!r} waits for approval in these requests")
        tool = self._guarded.get(calls[tool_call_id])
        request = requests.metadata.get(tool_call_id, {}).get("safeact")
        key = request.get("key") if isinstance(request, dict) else None
        args_hash = request.get("args_hash") if isinstance(request, dict) else None
        if tool is None or not isinstance(key, str) or not isinstance(args_hash, str):
            raise ValueError(
                f"{calls[tool_call_id]} ({tool_call_id}) was not asked about by these "
                "SafeTools: decide it with ToolApproved() or ToolDenied()"
            )
        return tool, key, args_hash


def _body(tool: _Guarded, key: KeyPolicy, on_doubt: OnDoubt) -> Callable[..., object]:
    """The function pydantic-ai calls for ``tool``: the run context, then the arguments."""
    plain: Callable[..., object] = keyed(tool, key)
    if tool.approval and key is each_call:
        raise ValueError(
            f"{tool.name} needs approval, and each_call gives a call a new key each time it "
            "is keyed: the call resumed after the approval would not find it. Key it by "
            "the run (the default) or by business identity (safeact.template(...))"
        )
    if not inspect.getdoc(plain):
        raise ValueError(
            f"{tool.name} has no docstring, and the model needs to be told what the tool "
            "does: write one"
        )
    body: Callable[..., object]
    if isinstance(tool, AsyncSafeTool):

        async def run_async(ctx: RunContext[Any], /, *args: object, **kwargs: object) -> object:
            with _running(ctx):
                call = cast("Awaitable[object]", plain(*args, **kwargs))
                try:
                    return _for_model(await call, tool.return_type)
                except _NO_VALUE as exc:
                    return _answer(exc, ctx, tool, on_doubt, plain.__name__)

        body = run_async
    else:

        def run(ctx: RunContext[Any], /, *args: object, **kwargs: object) -> object:
            with _running(ctx):
                try:
                    return _for_model(plain(*args, **kwargs), tool.return_type)
                except _NO_VALUE as exc:
                    return _answer(exc, ctx, tool, on_doubt, plain.__name__)

        body = run
    _dress(body, plain)
    return body


def _for_model(value: object, return_type: object) -> object:
    """The value as the ledger stores it (JSON), or as text if the ledger cannot store it.

    The action ran: its value reaches the model either way, and the key of one it cannot
    store is left in doubt, saying why; nothing raises out of the run.
    """
    try:
        return encode(value, return_type)
    except ResultNotStorableError:
        return shown(value)


@contextlib.contextmanager
def _running(ctx: RunContext[Any]) -> Iterator[None]:
    """Make ``ctx`` the run context the key policy reads, for the call inside."""
    token = _context.set(ctx)
    try:
        yield
    finally:
        _context.reset(token)


_NO_VALUE = (
    FailedCallError,
    KeyConflictError,
    InDoubtError,
    AwaitingApprovalError,
    ReplayOnlyError,
)
"""What a guarded call raises when it gives no value: each is told, deferred or stops."""


def _answer(
    error: FailedCallError
    | KeyConflictError
    | InDoubtError
    | AwaitingApprovalError
    | ReplayOnlyError,
    ctx: RunContext[Any],
    tool: _Guarded,
    on_doubt: OnDoubt,
    name: str,
) -> str:
    """What the body does with a call that gave no value: tell the model, defer, or stop.

    Waiting for approval defers the call (``ApprovalRequired``), never a doubt; replay-only
    stops the run whatever ``on_doubt`` says; the rest as ``_told``.
    """
    if isinstance(error, AwaitingApprovalError):
        _ask(error, ctx, tool)
    if isinstance(error, ReplayOnlyError):
        _stop(error, ctx)
    return _told(error, on_doubt, name)


def _told(
    error: FailedCallError | KeyConflictError | InDoubtError, on_doubt: OnDoubt, name: str
) -> str:
    """The model's tool error for a call that gave no value, or raise ``error`` to end the run.

    A failure is always told; a key conflict or a doubt ends the run with ``"stop"``.
    """
    if isinstance(error, FailedCallError):
        return f"Error: {error}"
    if on_doubt == "stop":
        raise error
    if isinstance(error, KeyConflictError):
        return f"Error: {conflict_text(error, name)}"
    return f"Error: {doubt_text(error, name)}"


def _ask(awaiting: AwaitingApprovalError, ctx: RunContext[Any], tool: _Guarded) -> NoReturn:
    """Defer the call for a person's approval, with the ledger's request as its metadata.

    A call pydantic-ai says is approved, but whose key and arguments the ledger has no
    approval of, ends the run instead: its yes was given without ``SafeTools.approve`` (a
    plain ``True``), or for other arguments (``override_args``), and asking again would
    show the person the model's arguments, not these.
    """
    if ctx.tool_call_approved:
        awaiting.add_note(
            f"pydantic-ai approved this call of {tool.name}, but the ledger has no approval "
            "of its key and arguments: approve with SafeTools.approve(requests, "
            "tool_call_id, by=...), which records who approved; arguments changed with "
            "ToolApproved(override_args=...) need an approval of their own"
        )
        _stop(awaiting, ctx)
    raise ApprovalRequired(metadata={"safeact": request_of(awaiting)})


def _stop(refused: ReplayOnlyError | AwaitingApprovalError, ctx: RunContext[Any]) -> NoReturn:
    """End the run with ``refused``: a call that would act under replay-only, or unapproved.

    Unapproved: pydantic-ai approved it, the ledger did not. In a Temporal activity
    (``TemporalDurability``) as the non-retryable ``ApplicationError`` that
    ``safeact.temporal`` raises for it (``REPLAY_ONLY``, ``AWAITING_APPROVAL``): Temporal
    retries an activity's other errors, by default without end, and each retry would be
    refused again.
    """
    if _temporal(ctx):
        # Imported here: temporalio is loaded already (a TemporalRunContext came from it).
        from safeact.temporal import _application_error  # noqa: PLC0415

        raise _application_error(refused) from refused
    raise refused


def _dress(body: Callable[..., object], plain: Callable[..., object]) -> None:
    """Show pydantic-ai ``plain``'s name, docstring and signature, after the run context."""
    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(body, attribute, getattr(plain, attribute))
    signature = inspect.signature(plain)
    ctx = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_ONLY, annotation=RunContext[Any])
    # The body returns the result as safeact stores it (JSON), not as the tool annotates it:
    # pydantic-ai cannot describe or serialise every type safeact can (attrs classes).
    arguments = {name: hint for name, hint in plain.__annotations__.items() if name != "return"}
    body.__annotations__ = {"ctx": RunContext[Any], **arguments}
    body.__signature__ = signature.replace(  # type: ignore[attr-defined] # inspect reads it
        parameters=[ctx, *signature.parameters.values()],
        return_annotation=inspect.Signature.empty,
    )
