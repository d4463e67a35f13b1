"""Guarded Temporal activities: ``guarded_activity`` makes a ``@safe`` tool an activity.

Temporal runs an activity at least once: when a worker dies in the middle of one, the
activity times out and Temporal starts it again, on the next attempt. Made with
``guarded_activity``, the tool's action runs at most once per key, and the key comes from
the activity itself (``activity_key``): the workflow, its run and the activity's id, the
same on every attempt. A retry after the action finished replays its result; a retry
after a crash in the middle of it finds the key in doubt and stops, so that a person can
check, instead of acting again.

Importing this module imports ``temporalio``; ``import safeact`` does not. Install it with
the ``safeact[temporal]`` extra. Tested with ``temporalio.testing.ActivityEnvironment``
only: a full worker needs a Temporal server, which these tests do not start.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar, overload
from urllib.parse import quote

from temporalio import activity
from temporalio.exceptions import ApplicationError

from safeact._keyed import KeyPolicy, NoRunKeyError, ToolCall, keyed
from safeact._protocol import DoubtReason
from safeact._tool import AsyncSafeTool, SafeTool
from safeact.exceptions import FailedCallError, InDoubtError, KeyConflictError

__all__ = [
    "FAILED",
    "IN_DOUBT",
    "IN_FLIGHT",
    "KEY_CONFLICT",
    "NO_KEY",
    "activity_key",
    "guarded_activity",
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

_TOLD = (InDoubtError, FailedCallError, KeyConflictError, NoRunKeyError)
"""What the activity tells Temporal as an ``ApplicationError`` (see ``guarded_activity``)."""


def activity_key(call: ToolCall) -> str:
    """The key of ``call`` from the Temporal activity running it (the default policy).

    The key is ``temporal:{workflow_id}:{workflow_run_id}:{activity_id}:{tool}``, the
    workflow id and activity id percent-quoted. Every attempt of one activity has the same
    key (the attempt number is left out), so a retry replays or finds the key in doubt.

    The run id is in it because a workflow id is not one run: a cron workflow, a
    continue-as-new and a workflow id used again each start a new run whose activity ids
    count from 1 again, and without the run id its first activity would replay the result
    of an earlier run's instead of acting. A new run (workflow retry, reset) does run its
    activities again; within a run, none runs twice. The arguments' digest is not in it:
    Temporal gives every attempt the same arguments, and if they ever differ under one
    key the ledger refuses with ``KeyConflictError`` rather than run a second action. Two
    calls of one tool in one activity share the key: call it once per activity.

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
    if info.workflow_id is None or info.workflow_run_id is None:
        raise NoRunKeyError(
            f"{call.tool} runs in activity {info.activity_id!r}, which no workflow started, "
            "so it has no workflow run to be keyed by: give it a key policy with key=..., "
            "e.g. safeact.template('refund:{order_id}')"
        )
    workflow = quote(info.workflow_id, safe="")
    activity_id = quote(info.activity_id, safe="")
    return f"temporal:{workflow}:{info.workflow_run_id}:{activity_id}:{call.tool}"


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
    key: KeyPolicy = activity_key,
    name: str | None = None,
) -> Callable[P, T] | Callable[P, Coroutine[object, None, T]]:
    """Make the guarded ``tool`` a Temporal activity whose action runs at most once per key.

    The activity is the tool's function without the key, decorated with ``@activity.defn``
    under ``name`` (default: the function's name); it is async exactly when the tool is
    (a sync one needs the worker's ``activity_executor``). Register it on a worker and call
    it from a workflow like any activity. ``key`` makes each call's key: by default
    ``activity_key``, the same on every attempt of the activity. Temporal encodes the
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
      happened (``safeact resolve``). With ``activity_key`` no other activity has this key
      (a new call from the workflow is a new activity id, a new key, and acts): what the
      workflow does next, such as waiting for a signal from whoever checked, is its own
      choice. With a business key (``key=safeact.template(...)``), a later activity with
      that key replays what was recorded, or acts if it did not happen.
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
    exc: InDoubtError | FailedCallError | KeyConflictError | NoRunKeyError,
) -> ApplicationError:
    """The ``ApplicationError`` that tells Temporal what happened, and whether to retry."""
    if isinstance(exc, InDoubtError):
        receipt = {
            "key": exc.key,
            "tool": exc.tool,
            "attempted_at": exc.attempted_at.isoformat(),
            "args_hash": exc.args_hash,
            "attempt_id": exc.attempt_id,
            "reason": exc.reason.value,
            "note": exc.note,
        }
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
