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
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Literal, NoReturn, TypeAlias, cast

from pydantic_ai import RunContext
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
    in_run,
    keyed,
)
from safeact._tool import AsyncSafeTool, SafeTool
from safeact.exceptions import FailedCallError, InDoubtError, KeyConflictError, ReplayOnlyError

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

    Raises:
        TypeError: a tool is not a guarded tool.
        ValueError: no tool is given, two have one name, ``on_doubt`` is not one of the
            choices, a function has no docstring, or ``key`` is a template naming an
            argument a tool does not take.

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
        for tool in tools:
            body = _body(tool, key, on_doubt)
            if body.__name__ in self._toolset.tools:
                raise ValueError(
                    f"two tools are named {body.__name__}: the model could not tell them "
                    "apart; rename one of the functions"
                )
            self._toolset.add_function(body, takes_ctx=True, name=body.__name__)

    @classmethod
    def get_serialization_name(cls) -> str | None:
        """None: built from functions, so not from a spec."""
        return None

    def get_toolset(self) -> FunctionToolset[Any]:
        """The guarded tools, as pydantic-ai function tools."""
        return self._toolset


def _body(tool: _Guarded, key: KeyPolicy, on_doubt: OnDoubt) -> Callable[..., object]:
    """The function pydantic-ai calls for ``tool``: the run context, then the arguments."""
    plain: Callable[..., object] = keyed(tool, key)
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
                except (FailedCallError, KeyConflictError, InDoubtError) as exc:
                    return _told(exc, on_doubt, plain.__name__)
                except ReplayOnlyError as exc:
                    _stop(exc, ctx)

        body = run_async
    else:

        def run(ctx: RunContext[Any], /, *args: object, **kwargs: object) -> object:
            with _running(ctx):
                try:
                    return _for_model(plain(*args, **kwargs), tool.return_type)
                except (FailedCallError, KeyConflictError, InDoubtError) as exc:
                    return _told(exc, on_doubt, plain.__name__)
                except ReplayOnlyError as exc:
                    _stop(exc, ctx)

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


def _stop(refused: ReplayOnlyError, ctx: RunContext[Any]) -> NoReturn:
    """End the run with ``refused``: a call that would have acted under replay-only.

    In a Temporal activity (``TemporalDurability``) as the non-retryable ``ApplicationError``
    that ``safeact.temporal`` raises for it (``REPLAY_ONLY``): Temporal retries an
    activity's other errors, by default without end, and each retry would be refused again.
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
