"""Guarded tools for LangGraph and LangChain: ``safe_tool`` makes a ``@safe`` tool a LangChain tool.

The tool works in a ``ToolNode``, in ``langchain.agents.create_agent`` and wherever LangChain
tools go. Its action runs at most once per key; the key comes from a key policy, by default
``in_thread``: the thread, the tool and a digest of the arguments. The same call in the same
thread is the same action: when LangGraph runs a step again after a crash or a pause, when
the model asks again (in a later step, with a new ``tool_call_id``), and when a person
travels back in time to an earlier checkpoint of the thread, the call replays the first
one's result, or meets its doubt.

Importing this module imports LangChain and LangGraph (about a second); ``import safeact``
does not. Install them with the ``safeact[langgraph]`` extra.

Known limits of the thread key, all measured with LangGraph 1.2:

* A thread asks for an action once per tool and arguments. A conversation that means to do
  the same thing twice (a second identical message, on purpose) keys that tool with
  ``position`` (its step in the thread) or gives the tool an argument that tells the two
  apart.
* A thread id used again for another conversation (with a fresh checkpointer, say) replays
  the earlier conversation's actions: use a new thread id for each conversation.
* Under ``durability="async"`` (LangGraph's default) or ``"exit"``, a crash can lose the
  model's message with the call, and the model is asked again: a real model may then ask
  with other arguments, a new action with a new key. Run graphs with guarded tools under
  ``durability="sync"``; the tool warns once per process when it is not.

A tool made with ``safe(ledger, approval=True)`` pauses the graph for a person's approval
(``interrupt`` with the request, ``"kind": "approval"``), and the resume verdict is recorded
in the ledger, bound to the key and the argument digest: the decision lives with the
action, not only in the run's state, so a run resumed after a crash, or resumed twice,
never acts twice on one yes (see ``safe_tool``).

Never call ``interrupt()`` inside a guarded function: LangGraph pauses by raising an
``Exception`` subclass, which safeact records as the action's failure (the graph never
pauses, and the key replays that failure). Pause before the guarded call, in another node
or tool.
"""

from __future__ import annotations

import functools
import inspect
import json
import shlex
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias, cast
from urllib.parse import quote

import pydantic
from langchain.agents.middleware import AgentMiddleware
from langchain_core.runnables.config import var_child_runnable_config
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.types import interrupt

from safeact._codec import ResultNotStorableError, decode, encode
from safeact._history import Why
from safeact._keyed import (
    KeyPolicy,
    NoRunKeyError,
    Template,
    ToolCall,
    conflict_receipt,
    conflict_text,
    doubt_text,
    keyed,
    model_text,
    receipt_of,
    request_of,
    split_arguments,
)
from safeact._protocol import DENIED, JSON
from safeact._tool import AsyncSafeTool, SafeTool
from safeact.exceptions import (
    AwaitingApprovalError,
    FailedCallError,
    InDoubtError,
    KeyConflictError,
    NotProvenError,
    SafeError,
    StoreError,
)

__all__ = ["OnDoubt", "SafeMiddleware", "in_thread", "position", "safe_tool"]

OnDoubt: TypeAlias = Literal["interrupt", "message"]
"""What an ``InDoubt`` call does: pause the graph for a human, or tell the model."""

_Guarded: TypeAlias = SafeTool[Any, Any] | AsyncSafeTool[Any, Any]

_WARNED: set[str] = set()
"""The warnings already given in this process (each is given once)."""


def in_thread(call: ToolCall) -> str:
    """The key of ``call`` in the current LangGraph thread (the default policy).

    The key is ``langgraph:{thread_id}:{tool}:{digest[:16]}``: the thread id
    (percent-quoted), the guarded tool's name and the start of the arguments' hash. Which
    step, node or subgraph makes the call, and its ``tool_call_id``, are left out: they
    move when the model asks again, when a step is run again and when a person travels
    back in time, while the call is the same action. See the module's documentation for
    its limits.

    Raises:
        NoRunKeyError: the call is not made by a LangGraph run, or the run has no
            ``thread_id``: there is no thread to key it by; pass ``key=`` instead.

    """
    return f"langgraph:{_thread(call)}:{call.tool}:{call.digest[:16]}"


def position(call: ToolCall) -> str:
    """The key of ``call`` from its step in the current LangGraph thread: identical calls repeat.

    The key is ``langgraph:{thread_id}:{node path}:{step}:{tool}:{digest[:16]}``, the node
    path being the checkpoint namespace without task ids (``tools``, or ``agent/tools`` in
    a subgraph). For a tool whose identical calls in one thread are meant as separate
    actions, never for one that moves money: a model that asks again in a later step (after
    a doubt, or after a crash lost its message), and a person who travels back in time, get
    a new key and the action runs again. Two identical calls in one step share a key.

    Raises:
        NoRunKeyError: as ``in_thread``.

    """
    thread = _thread(call)
    config = var_child_runnable_config.get() or {}
    configurable: Mapping[str, object] = config.get("configurable") or {}
    metadata: Mapping[str, object] = config.get("metadata") or {}
    namespace = str(configurable.get("checkpoint_ns") or "")
    path = "/".join(part.split(":", 1)[0] for part in namespace.split("|")) if namespace else ""
    step = metadata["langgraph_step"]
    return f"langgraph:{thread}:{path}:{step}:{call.tool}:{call.digest[:16]}"


def _thread(call: ToolCall) -> str:
    """The current LangGraph run's thread id, percent-quoted.

    Raises:
        NoRunKeyError: as ``in_thread``.

    """
    config = var_child_runnable_config.get() or {}
    configurable: Mapping[str, object] = config.get("configurable") or {}
    metadata: Mapping[str, object] = config.get("metadata") or {}
    if metadata.get("langgraph_step") is None:
        raise NoRunKeyError(
            f"{call.tool} was called outside a LangGraph run, so it has no thread to be "
            "keyed by: call it from a graph (a ToolNode or create_agent), or give "
            "safe_tool(..., key=...) a key policy, e.g. safeact.template('refund:{order_id}')"
        )
    thread = configurable.get("thread_id")
    if thread is None:
        raise NoRunKeyError(
            f"{call.tool} runs in a graph invoked without a thread_id, so it names no run: "
            "invoke with a checkpointer and config={'configurable': {'thread_id': ...}}, or "
            "give safe_tool(..., key=...) a key policy"
        )
    return quote(str(thread), safe="")


def safe_tool(
    tool: _Guarded,
    *,
    key: KeyPolicy = in_thread,
    on_doubt: OnDoubt = "interrupt",
    name: str | None = None,
    description: str | None = None,
) -> BaseTool:
    """Make the guarded ``tool`` a LangChain tool whose action runs at most once per key.

    The model sees the function's parameters without the key, its name (``name``) and its
    docstring (``description``). ``key`` makes each call's key: by default ``in_thread``;
    ``safeact.template("refund:{order_id}")`` keys by business identity. A sync tool works
    under ``invoke`` and ``ainvoke``; an async one only under ``ainvoke`` (LangChain's
    ``StructuredTool`` has no sync way to run a coroutine).

    What the model gets: a ``str`` result as it is, any other result as JSON text of the
    value as safeact stores it. A call whose action raised (now, or on an earlier run)
    gives an error tool message saying so; the action is not run again under that key.

    A call found in doubt (its action may or may not have run: a crash, an interruption)
    does as ``on_doubt`` says:

    * ``"interrupt"``: it pauses the graph with ``langgraph.types.interrupt`` (a
      checkpointer is needed), carrying the receipt: ``key``, ``tool``, ``attempted_at``,
      ``args_hash``, ``attempt_id``, ``reason``, ``note``. Check the downstream system,
      then resume with ``Command(resume={"happened": True, "result": <the result as
      JSON>})`` or ``Command(resume={"happened": False})``. The key is resolved through the
      ledger (its history records the decision) and the call replays the result, or runs
      the action. ``"happened": False`` needs proof that the attempt is over (its process
      is gone); without it the graph pauses again with the refusal in ``note``, and
      ``{"happened": False, "force": True}`` is your assertion, kept in the history. Add
      the receipt's ``"attempt_id"`` to the verdict to apply it only to that attempt. A
      verdict that cannot be used pauses again with ``error`` in the receipt. A verdict
      already applied is never applied again (after a crash the call pauses anew).
    * ``"message"``: the model gets an error tool message with the receipt, telling it not
      to call again; a person resolves the key (``safeact resolve``).

    A tool made with ``approval=True`` whose call waits for a person's approval does as
    ``on_doubt`` says too:

    * ``"interrupt"``: it pauses the graph with the request: ``"kind": "approval"``,
      ``key``, ``tool``, ``requested_at``, ``args_hash`` and ``arguments`` (as the tool
      keeps them, redacted; ``None`` unless ``keep_arguments=True``). Resume with
      ``Command(resume={"approved": True, "by": "ada", "note": "invoice 7"})`` or
      ``{"approved": False, "by": "ada", "note": "..."}``; add the request's
      ``"args_hash"`` to apply the decision only to the arguments it showed. The decision
      is recorded in the ledger (``Store.approve`` / ``Store.deny``, bound to the key and
      the digest, kept in its history) and the call is made again: approved, the action
      runs once, consuming the approval; denied, the model gets an error tool message with
      the denial, and the action never runs under that key. A verdict that cannot be used,
      or that the ledger refuses (other arguments; a request decided meanwhile), pauses
      again with ``error``. An approval verdict is applied once: a run resumed after a
      crash finds it spent (named in the history, as doubt verdicts are) and never hands
      it to a later request, which one approval never authorizes.
    * ``"message"``: the model gets an error tool message saying that nothing ran and a
      person must approve (``safeact approve``); the same call made again then runs once.

    With several calls that may pause in one step, prefer ``create_agent`` (one task per
    call) to a hand-built ``ToolNode`` (one task for all its calls, which LangGraph matches
    with resume values by the order they paused in).

    Under replay-only (``safeact.replay_only()``, ``SAFEACT_REPLAY_ONLY=1``) a call with an
    outcome recorded replays it, and one in doubt pauses (or tells the model) as above; one
    that would act raises ``ReplayOnlyError`` out of the tool node, which ends the run
    (``invoke`` raises it): neither the model nor a resume can make it act.

    Raises:
        TypeError: ``tool`` is not a guarded tool, or pydantic cannot describe one of its
            parameters to the model.
        ValueError: ``on_doubt`` is not one of the choices, the function has no docstring
            and no ``description`` is given, or ``key`` is a template naming an argument
            the tool does not take.

    """
    if on_doubt not in ("interrupt", "message"):
        raise ValueError(f"on_doubt must be 'interrupt' or 'message', got {on_doubt!r}")
    plain: Callable[..., object] = keyed(tool, key)
    signature = inspect.signature(plain)
    tool_name = name if name is not None else plain.__name__
    text = description if description is not None else inspect.getdoc(plain)
    if not text:
        raise ValueError(
            f"{tool.name} has no docstring, and the model needs to be told what the tool "
            "does: write one, or pass safe_tool(..., description='...')"
        )
    schema = _arguments_model(tool_name, signature, tool.name)
    guard = _Guard(tool, tool_name, plain, on_doubt, warn=not isinstance(key, Template))
    if isinstance(tool, AsyncSafeTool):
        return StructuredTool.from_function(
            coroutine=guard.run_async,
            name=tool_name,
            description=text,
            args_schema=schema,
            handle_tool_error=True,
        )
    return StructuredTool.from_function(
        func=guard.run,
        name=tool_name,
        description=text,
        args_schema=schema,
        handle_tool_error=True,
    )


class SafeMiddleware(AgentMiddleware[Any, Any, Any]):
    """A ``create_agent`` middleware that gives the agent guarded tools.

    ``create_agent(model, middleware=[SafeMiddleware(send_refund, ...)])``: each guarded
    tool becomes a tool of the agent through ``safe_tool`` with the given ``key`` and
    ``on_doubt``, listed in ``tools``.

    Raises:
        TypeError, ValueError: as ``safe_tool`` says.

    """

    def __init__(
        self, *tools: _Guarded, key: KeyPolicy = in_thread, on_doubt: OnDoubt = "interrupt"
    ) -> None:
        """Wrap each of ``tools`` with ``safe_tool``."""
        super().__init__()
        self.tools: Sequence[BaseTool] = [
            safe_tool(tool, key=key, on_doubt=on_doubt) for tool in tools
        ]


def _arguments_model(
    tool_name: str, signature: inspect.Signature, guarded: str
) -> type[pydantic.BaseModel]:
    """A pydantic model of the parameters: what LangChain shows the model and validates."""
    fields: dict[str, Any] = {}
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise TypeError(
                f"{guarded} takes *{parameter.name}: a model calls tools with named "
                "arguments only; give it named parameters"
            )
        annotation = Any if parameter.annotation is parameter.empty else parameter.annotation
        default = ... if parameter.default is parameter.empty else parameter.default
        fields[parameter.name] = (annotation, default)
    try:
        return pydantic.create_model(tool_name, **fields)
    except (pydantic.PydanticSchemaGenerationError, TypeError, NameError) as exc:
        raise TypeError(
            f"{guarded}: pydantic cannot describe its parameters to the model ({exc}); use "
            "types pydantic knows (str, int, dataclasses, pydantic models, ...)"
        ) from exc


class _Verdict:
    """A person's answer to a pause: whether the action happened, and its result."""

    __slots__ = ("attempt_id", "force", "happened", "result")

    def __init__(
        self, *, happened: bool, result: JSON, force: bool, attempt_id: str | None
    ) -> None:
        self.happened = happened
        self.result = result
        self.force = force
        self.attempt_id = attempt_id


class _Decision:
    """A person's answer to an approval pause: yes or no, by whom, why, for which digest."""

    __slots__ = ("approved", "args_hash", "by", "note")

    def __init__(self, *, approved: bool, by: str, note: str | None, args_hash: str | None) -> None:
        self.approved = approved
        self.by = by
        self.note = note
        self.args_hash = args_hash


_DECISION_SHAPE = (
    'resume with {"approved": true, "by": "<who decides>"} or {"approved": false, "by": '
    '"<who decides>"} (optionally "note": "<why>", and "args_hash": "<from the request>")'
)


def _decision(answer: object) -> _Decision:
    """Read the resume value of an approval pause.

    Raises:
        ValueError: it is not a decision.

    """
    problem = _decision_problem(answer)
    if problem is not None:
        raise ValueError(
            f"the resume value {answer!r} is not an approval verdict ({problem}): {_DECISION_SHAPE}"
        )
    decision = cast("Mapping[str, Any]", answer)
    return _Decision(
        approved=decision["approved"],
        by=decision["by"],
        note=decision.get("note"),
        args_hash=decision.get("args_hash"),
    )


def _decision_problem(answer: object) -> str | None:  # noqa: PLR0911 - one return per rule
    """What is wrong with a resume value as an approval verdict, or None."""
    if not isinstance(answer, Mapping):
        return "it is not a mapping"
    unknown = set(answer) - {"approved", "by", "note", "args_hash"}
    by, note, args_hash = answer.get("by"), answer.get("note"), answer.get("args_hash")
    if unknown:
        return f"it has unknown fields {sorted(map(str, unknown))}"
    if not isinstance(answer.get("approved"), bool):
        return '"approved" must be true or false'
    if not isinstance(by, str) or not by.strip():
        return '"by" must name the person deciding, a non-empty string'
    if note is not None and not isinstance(note, str):
        return '"note" must be a string'
    if args_hash is not None and (not isinstance(args_hash, str) or not args_hash):
        return '"args_hash" must be the args_hash from the request, a non-empty string'
    return None


def _request(waiting: AwaitingApprovalError) -> dict[str, JSON]:
    """The approval pause's payload: the request as JSON, with the arguments when kept."""
    return {"kind": "approval", **request_of(waiting)}


_VERDICT_SHAPE = (
    'resume with {"happened": true, "result": <the result as JSON>} or {"happened": false} '
    '(optionally "force": true with false, and "attempt_id": "<from the receipt>")'
)


def _verdict(answer: object) -> _Verdict:
    """Read a resume value.

    Raises:
        ValueError: it is not a verdict.

    """
    problem = _problem(answer)
    if problem is not None:
        raise ValueError(
            f"the resume value {answer!r} is not a verdict ({problem}): {_VERDICT_SHAPE}"
        )
    verdict = cast("Mapping[str, Any]", answer)
    return _Verdict(
        happened=bool(verdict["happened"]),
        result=cast("JSON", verdict.get("result")),
        force=bool(verdict.get("force", False)),
        attempt_id=verdict.get("attempt_id"),
    )


def _problem(answer: object) -> str | None:  # noqa: PLR0911 - one return per rule
    """What is wrong with a resume value as a verdict, or None."""
    if not isinstance(answer, Mapping):
        return "it is not a mapping"
    unknown = set(answer) - {"happened", "result", "force", "attempt_id"}
    happened, force = answer.get("happened"), answer.get("force", False)
    attempt_id = answer.get("attempt_id")
    if unknown:
        return f"it has unknown fields {sorted(map(str, unknown))}"
    if not isinstance(happened, bool):
        return '"happened" must be true or false'
    if happened and "result" not in answer:
        return '"happened": true needs "result"'
    if not happened and "result" in answer:
        return '"result" goes only with "happened": true'
    if not isinstance(force, bool) or (force and happened):
        return '"force" is true or false, and only with "happened": false'
    if attempt_id is not None and (not isinstance(attempt_id, str) or not attempt_id):
        return '"attempt_id" must be the attempt id from the receipt, a non-empty string'
    return None


def _fitting(tool: _Guarded, key: str, result: object) -> JSON:
    """Check a verdict's ``result`` for ``key``: it must replay as itself as the return type.

    Returns it as the ledger stores it.

    Raises:
        TypeError: it does not rebuild as the tool's return type, or not as itself; the
            message names the key and the return type (nothing was changed).

    """
    try:
        rebuilt = decode(
            cast("JSON", result), tool.return_type, key=key, tool=tool.name, fix=_REFIT
        )
        return encode(rebuilt, tool.return_type)
    except (StoreError, ResultNotStorableError) as exc:
        if result is None:
            # The codec's own reason for null is a bare AttributeError or the like.
            returns = inspect.formatannotation(tool.return_type)
            raise TypeError(
                f'the verdict\'s "result" for key {key!r} is null, which does not fit '
                f"{tool.name}'s return type {returns} (only a tool that may return None "
                f"takes null). {_REFIT}"
            ) from exc
        raise TypeError(f'the verdict\'s "result" does not fit {tool.name}: {exc}') from exc


_REFIT = (
    'Resume with "result" as the value the action returned, in JSON that rebuilds as the '
    "tool's return type"
)


class _Guard:
    """The body of one guarded LangChain tool: the call, and what its outcomes become."""

    def __init__(
        self,
        tool: _Guarded,
        name: str,
        plain: Callable[..., object],
        on_doubt: OnDoubt,
        *,
        warn: bool,
    ) -> None:
        self.tool = tool
        self.name = name
        self.plain = plain
        self.signature = inspect.signature(plain)
        self.on_doubt = on_doubt
        self.warn = warn

    def run(self, **arguments: object) -> str:
        """Call the tool; pause or report a doubt (LangChain's ``func``)."""
        args, kwargs = split_arguments(self.signature, arguments)
        pauses, refused = 0, None
        while True:
            self._check_durability()
            try:
                return model_text(self.plain(*args, **kwargs), self.tool.return_type)
            except FailedCallError as exc:
                raise self._failed(exc) from exc
            except KeyConflictError as exc:
                raise self._conflict(exc) from exc
            except (InDoubtError, AwaitingApprovalError) as exc:
                stop = exc
            pauses, refused = self._pause(stop, pauses, refused)

    async def run_async(self, **arguments: object) -> str:
        """Call the async tool; pause or report a doubt (LangChain's ``coroutine``)."""
        args, kwargs = split_arguments(self.signature, arguments)
        pauses, refused = 0, None
        while True:
            self._check_durability()
            try:
                value = await cast("Awaitable[object]", self.plain(*args, **kwargs))
                return model_text(value, self.tool.return_type)
            except FailedCallError as exc:
                raise self._failed(exc) from exc
            except KeyConflictError as exc:
                raise self._conflict(exc) from exc
            except (InDoubtError, AwaitingApprovalError) as exc:
                stop = exc
            # On the loop, not in a thread: interrupt() writes to the running task. The
            # ledger reads and writes it makes here are few, and only on a pause.
            pauses, refused = self._pause(stop, pauses, refused)

    def _pause(
        self, stop: InDoubtError | AwaitingApprovalError, pauses: int, refused: str | None
    ) -> tuple[int, str | None]:
        """Settle a doubt, or get a person's decision on a request, as the call needs."""
        if isinstance(stop, AwaitingApprovalError):
            return self._ask(stop, pauses, refused)
        return self._settle(stop, pauses, refused)

    def _failed(self, failure: FailedCallError) -> ToolException:
        """The model's error for a failed action, or for a person's denial of it."""
        if failure.error_type != DENIED:
            return ToolException(str(failure))
        return ToolException(
            f"{self.name} did not run: {failure.message} (a person's decision). It will not "
            f"run under the key {failure.key!r}; do not call it again for this."
        )

    def _conflict(self, conflict: KeyConflictError) -> ToolException:
        """The model's error for a key that names another action, after a person saw it.

        With ``on_doubt="interrupt"`` the graph pauses first, with the conflict's receipt
        (both tools and argument digests); whatever it is resumed with, nothing runs.
        """
        if self.on_doubt == "interrupt":
            interrupt(conflict_receipt(conflict))
        return ToolException(conflict_text(conflict, self.name))

    def _settle(
        self, doubt: InDoubtError, pauses: int, refused: str | None
    ) -> tuple[int, str | None]:
        """Get a verdict on ``doubt`` and apply it; return the pauses asked for, and a refusal.

        Raises ``ToolException`` (``on_doubt="message"``), or pauses the graph (LangGraph's
        ``GraphInterrupt``) until a person resumes it with a verdict. On a resumed run, the
        verdicts given so far come back, in order, from ``interrupt()``. ``refused`` is why
        the ledger refused the last verdict (an attempt that ended, say): the pause says so.
        """
        receipt = receipt_of(doubt)
        if refused is not None:
            receipt = {**receipt, "error": refused}
        if self.on_doubt == "message":
            raise ToolException(doubt_text(doubt, self.name))
        while True:
            index, pauses = pauses, pauses + 1
            answer = interrupt(receipt)  # a stored verdict, or pauses the graph here
            marker = self._marker(index)
            if self._applied(doubt.key, marker, answer):
                # Applied on an earlier run (a verdict on an attempt since ended, or an
                # approval the claim has consumed): spent, ask anew.
                continue
            try:
                verdict = _verdict(answer)
            except ValueError as exc:
                receipt = {**receipt, "error": str(exc)}
                continue
            try:
                self._apply(doubt.key, verdict, marker)
            except NotProvenError as exc:
                receipt = {**receipt, "note": str(exc)}
                continue
            except TypeError as exc:  # the result does not fit the return type
                receipt = {**receipt, "error": str(exc)}
                continue
            except SafeError as exc:
                # The key moved on meanwhile (resolved, or a new attempt): the call reads it
                # again, and if it pauses again, the pause says why this verdict was refused.
                return pauses, f"the verdict was not applied: {exc}"
            return pauses, None

    def _ask(
        self, waiting: AwaitingApprovalError, pauses: int, refused: str | None
    ) -> tuple[int, str | None]:
        """Get a person's decision on ``waiting`` and record it; return the pauses and a refusal.

        As ``_settle``, for a request: raises ``ToolException`` (``on_doubt="message"``), or
        pauses the graph until it is resumed with a decision, which the ledger records
        bound to the key and the digest. The call is then made again, and reads it there.
        """
        request = _request(waiting)
        if refused is not None:
            request = {**request, "error": refused}
        if self.on_doubt == "message":
            raise ToolException(self._waiting_text(request))
        while True:
            index, pauses = pauses, pauses + 1
            answer = interrupt(request)  # a stored decision, or pauses the graph here
            marker = self._marker(index)
            if self._applied(waiting.key, marker, answer):
                # Applied on an earlier run, and consumed by that run's claim (or spent on
                # a doubt since): a yes authorizes one attempt, never this later request.
                continue
            try:
                decision = _decision(answer)
                self._decide(waiting, decision, marker)
            except (TypeError, ValueError) as exc:  # not a decision, or text the ledger refuses
                request = {**request, "error": str(exc)}
                continue
            except SafeError as exc:
                # Decided meanwhile, or for other arguments: the call reads the request
                # again, and if it pauses again, the pause says why this one was refused.
                return pauses, f"the verdict was not applied: {exc}"
            return pauses, None

    def _decide(self, waiting: AwaitingApprovalError, decision: _Decision, marker: str) -> None:
        """Record ``decision`` in the ledger, bound to the request's key and digest.

        An approval's note names the pause (as a doubt verdict's does), so that a later run
        finds it spent; a denial's is the person's own, since the model is shown it, and a
        denial is final: no later pause of the call can take it.
        """
        args_hash = decision.args_hash if decision.args_hash is not None else waiting.args_hash
        store = self.tool.store
        if not decision.approved:
            store.deny(waiting.key, by=decision.by, note=decision.note, args_hash=args_hash)
            return
        said = f"in LangGraph by a resume ({marker})"
        note = said if decision.note is None else f"{decision.note}; {said}"
        store.approve(waiting.key, by=decision.by, note=note, args_hash=args_hash)

    def _waiting_text(self, request: Mapping[str, JSON]) -> str:
        """What a model is told of a call that waits for a person's approval."""
        location = shlex.quote(self.tool.store.location)
        key = shlex.quote(str(request["key"]))
        return (
            f"{self.name} waits for a person's approval; nothing ran. A person approves or "
            f"denies it (safeact approve {location} {key} --by NAME); then the same call, "
            "made again, runs once or is told the denial. Do not call it with other "
            f"arguments for this. Request: {json.dumps(request)}"
        )

    def _apply(self, key: str, verdict: _Verdict, marker: str) -> None:
        tool = self.tool
        note = f"resolved in LangGraph by a resume ({marker})"
        if verdict.happened:
            tool.store._decide(  # noqa: SLF001 - a JSON result, checked by the tool's type
                key,
                happened=True,
                result=verdict.result,
                encode=functools.partial(_fitting, tool, key),
                tool=tool.name,
                attempt_id=verdict.attempt_id,
                note=note,
                force=False,
            )
        else:
            tool.resolve(
                key, happened=False, attempt_id=verdict.attempt_id, note=note, force=verdict.force
            )

    def _applied(self, key: str, marker: str, answer: object) -> bool:
        """Whether ``answer``, the resume value of this pause, was applied on an earlier run.

        The event that applied a pause's verdict names the pause in its note. Only a verdict
        of the same kind counts (an approval, or a verdict on a doubt): a run killed while
        applying one may have lost LangGraph's record of its resume value, and the next
        value given, of the other kind, then comes back at that pause; it was never applied.
        """
        approval = isinstance(answer, Mapping) and "approved" in answer
        return any(
            event.note is not None
            and event.note.endswith(f"({marker})")
            and (event.why is Why.APPROVED) == approval
            for event in self.tool.store.history(key)
        )

    def _marker(self, index: int) -> str:
        """Name the pause: thread, task (with its id, which a resumed task keeps), index."""
        config = var_child_runnable_config.get() or {}
        configurable: Mapping[str, object] = config.get("configurable") or {}
        thread = configurable.get("thread_id")
        namespace = configurable.get("checkpoint_ns")
        return f"thread {thread}, task {namespace}, pause {index}"

    def _check_durability(self) -> None:
        """Warn once when the run has a checkpointer but does not save each step before the next."""
        if not self.warn or "durability" in _WARNED:
            return
        config = var_child_runnable_config.get() or {}
        configurable: Mapping[str, object] = config.get("configurable") or {}
        if configurable.get("__pregel_checkpointer") is None:
            return
        durability = configurable.get("__pregel_durability", "async")
        if durability == "sync":
            return
        _WARNED.add("durability")
        warnings.warn(
            f"safeact.langgraph: {self.tool.name} runs in a graph with durability="
            f"{durability!r}: a crash can lose the model's tool call, and the model asked "
            "again may call with other arguments, which the thread key takes for another "
            "action. Invoke the graph with durability='sync', or key the tool by business "
            "identity (key=safeact.template(...)).",
            RuntimeWarning,
            stacklevel=2,  # the tool's body here: filter it with module="safeact.langgraph"
        )
