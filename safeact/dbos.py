"""Guarded DBOS steps: ``guarded_step`` makes a ``@safe`` tool a step body that acts at most once.

DBOS records a step's result when it returns, and runs the step again when its process died
before that: a step is tried at least once. Stacked under ``@DBOS.step()``, a guarded step
keys its action by the workflow and the call (``in_workflow``: workflow id, tool, digest of
the arguments), which a re-run keeps, so the action runs at most once::

    @safe("agent.db")
    def send_refund(key: str, to: str, amount: int) -> Receipt: ...

    refund = DBOS.step(name="refund")(guarded_step(send_refund))
    settle = DBOS.step(name="settle_refund")(raise_on_doubt(send_refund))

    @DBOS.workflow()
    def refund_order(to: str, amount: int) -> Receipt:
        try:
            return refund(to, amount)
        except InDoubtError as doubt:  # cut off on an earlier run: a person checks
            DBOS.set_event("in_doubt", doubt.key)
            DBOS.recv("verdict", timeout_seconds=7 * 86400)  # sent after safeact resolve
            return settle(doubt.key, to, amount)

A step whose action was cut off (the process was killed after the action began and before
its outcome was recorded) raises ``InDoubtError`` when DBOS re-runs it: the action is not
run again. DBOS records that error as the step's outcome, so the workflow gets the same
error on every later replay; it catches it, waits durably for a person to check the
downstream system and resolve the key, then calls the tool again under ``doubt.key`` in a
new step (``raise_on_doubt``), which replays the result (resolved as happened) or runs the
action (released as not happened); still unresolved, it raises ``InDoubtError`` again.
Let the doubt end the workflow instead and it stays ended: DBOS replays a finished
workflow's error. A failed action raises ``FailedCallError``, the same on every later run:
the key is spent. Under replay-only (``safeact.replay_only()``, ``SAFEACT_REPLAY_ONLY=1``) a
step replays what its key recorded, and one with nothing to replay raises
``ReplayOnlyError``, which ``retryable`` does not retry: nothing ran.

A tool that needs a person's approval (``safe(..., approval=True)``) raises
``AwaitingApprovalError`` from its step while nobody has decided, which ``retryable`` does not
retry either: the workflow catches it, waits with ``DBOS.recv`` for the decision (sent by
whoever approves), and calls the step again. The new step has the same key, so an approval
runs the action once and a denial raises ``FailedCallError`` (``error_type``
``"safeact.Denied"``).

``DBOS.fork_workflow`` runs the steps from ``start_step`` on under a new workflow id, so
under ``in_workflow`` their actions run again: a fork means "do it again". To fork without
acting again, key those tools by business identity (``key=safeact.template(...)``).

DBOS's step retries cannot act twice: every attempt of a step has the same key, so a retry
replays the doubt or the failure. They only wrap it, after ``max_attempts``, in
``DBOSMaxStepRetriesExceeded``; pass ``should_retry=retryable`` to give the workflow the
``InDoubtError`` or ``FailedCallError`` at once.

Importing this module imports DBOS (about 0.7 s); ``import safeact`` does not. Install it
with the ``safeact[dbos]`` extra. Importing it also makes ``InDoubtError`` and
the other ``SafeError``s picklable, as DBOS's default serializer needs to replay them.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar, overload
from urllib.parse import quote

from dbos import DBOS

from safeact._keyed import KeyPolicy, NoRunKeyError, ToolCall, keyed
from safeact._protocol import DoubtReason
from safeact._tool import AsyncSafeTool, SafeTool
from safeact.exceptions import (
    AwaitingApprovalError,
    FailedCallError,
    InDoubtError,
    KeyConflictError,
    ReplayOnlyError,
)

__all__ = ["guarded_step", "in_workflow", "retryable"]

P = ParamSpec("P")
T = TypeVar("T")


def in_workflow(call: ToolCall) -> str:
    """The key of ``call`` in the DBOS workflow running it (``guarded_step``'s default policy).

    The key is ``dbos:{workflow_id}:{tool}:{digest[:16]}``: the workflow id (percent-quoted),
    the guarded tool's name and the start of the arguments' hash. The same call in the same
    workflow is the same action: DBOS runs a step again after a crash, on any executor and
    on every retry attempt with the same workflow id and arguments, so the re-run finds the
    first run's record; and the step's id is left out, so a deploy that inserts a step
    before this one (moving its id) does not move its key.

    A workflow is deterministic (DBOS's rule): an argument drawn from the clock or a random
    number outside a step would give the re-run another digest, another key, and a second
    action; draw such values in a step of their own. A workflow that means to act twice
    with the same arguments passes an argument that tells the two apart, or keys the tool
    by business identity (``safeact.template``).

    Raises:
        NoRunKeyError: the call is not made inside a DBOS step (outside any workflow, or in
            a workflow's own body): there is no workflow to key it by.

    """
    workflow_id, step_id = DBOS.workflow_id, DBOS.step_id
    if workflow_id is None or step_id is None:
        raise NoRunKeyError(
            f"{call.tool} was called outside a DBOS step, so it has no workflow to be keyed "
            "by: call it from a function decorated with @DBOS.step() run by a "
            "@DBOS.workflow(), or pass key=... a key policy, e.g. "
            "safeact.template('refund:{order_id}')"
        )
    return f"dbos:{quote(workflow_id, safe='')}:{call.tool}:{call.digest[:16]}"


@overload
def guarded_step(
    tool: AsyncSafeTool[P, T], *, key: KeyPolicy = ...
) -> Callable[P, Coroutine[Any, Any, T]]: ...
@overload
def guarded_step(tool: SafeTool[P, T], *, key: KeyPolicy = ...) -> Callable[P, T]: ...
def guarded_step(
    tool: SafeTool[P, T] | AsyncSafeTool[P, T], *, key: KeyPolicy = in_workflow
) -> Callable[P, T] | Callable[P, Coroutine[Any, Any, T]]:
    """Make the guarded ``tool`` the body of a DBOS step: decorate the result with ``@DBOS.step()``.

    ``DBOS.step(name="refund")(guarded_step(send_refund))`` is a step with the tool's
    parameters without the key, its name and docstring, async exactly when the tool is.
    Name the step (``name=``) so it stays the same when the code moves. Each call is keyed
    by ``key``: by default ``in_workflow``, the workflow, the tool and its arguments.

    The step returns the value (ran now, or replayed from the ledger when DBOS runs the
    step again) or raises ``InDoubtError`` (the action may have run: a crash cut it off;
    it is not run again) or ``FailedCallError`` (it raised, now or before, or a person
    denied it) or ``AwaitingApprovalError`` (it needs an approval nobody has given yet;
    nothing ran). See the module's documentation for what a workflow does with a doubt
    or a wait.

    Raises:
        TypeError: ``tool`` is not a guarded tool.
        ValueError: ``key`` is a template naming an argument the tool does not take.
        NoRunKeyError: (from the step) ``key`` is ``in_workflow`` and the function is called
            outside a DBOS step.

    """
    return keyed(tool, key)


def retryable(error: BaseException) -> bool:
    """Whether DBOS should retry a guarded step that raised ``error`` (its ``should_retry``).

    ``@DBOS.step(retries_allowed=True, should_retry=retryable)``. No for what a retry under
    the same key would only repeat: ``FailedCallError``, ``KeyConflictError``,
    ``ReplayOnlyError`` (a replay-only process refuses the call again), ``InDoubtError``,
    settled until a person resolves the key, and ``AwaitingApprovalError``, pending until
    a person decides, which the workflow waits for itself (DBOS would hide them in
    ``DBOSMaxStepRetriesExceeded``, the last after seconds of retries). Yes for a doubt
    whose action is still running under a live owner (``in_flight``), which a later attempt
    may find finished, and for any other error (a busy ledger, say), raised before the
    action ran.
    """
    if isinstance(error, InDoubtError):
        return error.reason is DoubtReason.IN_FLIGHT
    return not isinstance(
        error, FailedCallError | KeyConflictError | ReplayOnlyError | AwaitingApprovalError
    )
