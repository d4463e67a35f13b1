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
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeAlias, cast

import agents
from agents import FunctionTool, RunContextWrapper

from safeact._keyed import (
    KeyPolicy,
    conflict_receipt,
    conflict_text,
    doubt_text,
    in_run,
    keyed,
    model_text,
    receipt_of,
    refusal_receipt,
)
from safeact._tool import AsyncSafeTool, SafeTool
from safeact.exceptions import (
    FailedCallError,
    InDoubtError,
    KeyConflictError,
    ReplayOnlyError,
    SafeError,
)

__all__ = [
    "InDoubtStopError",
    "KeyConflictStopError",
    "OnDoubt",
    "ReplayOnlyStopError",
    "function_tool",
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

    Raises:
        TypeError: ``tool`` is not a guarded tool.
        ValueError: ``on_doubt`` is not one of the choices, the function has no docstring
            and no ``description`` is given, or ``key`` is a template naming an argument
            the tool does not take.
        agents.UserError: the SDK cannot describe one of the parameters to the model.

    """
    if on_doubt not in ("error", "stop"):
        raise ValueError(f"on_doubt must be 'error' or 'stop', got {on_doubt!r}")
    plain: Callable[..., object] = keyed(tool, key)
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
    return agents.function_tool(
        body,
        name_override=tool_name,
        description_override=text,
        failure_error_function=_failure,
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
    if isinstance(error, SafeError | InDoubtStopError | KeyConflictStopError | ReplayOnlyStopError):
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
