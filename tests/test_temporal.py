"""safeact.temporal: guarded activities under temporalio's own ActivityEnvironment, offline.

These tests run the activity function as Temporal's testing environment does, with the
``info`` (workflow, run, activity id, attempt) a worker would give each attempt. The crash
test SIGKILLs a child process inside the action, right after its side effect, and retries
in this one. tests/test_temporal_server.py runs workers against a real dev server.
"""

import asyncio
import dataclasses
import inspect
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from safeact import (
    AsyncSafeTool,
    FailedCallError,
    NoRunKeyError,
    Store,
    ToolCall,
    get_store,
    safe,
    template,
)
from safeact._keys import ArgsHash
from safeact.temporal import (
    FAILED,
    IN_DOUBT,
    IN_FLIGHT,
    KEY_CONFLICT,
    guarded_activity,
    in_workflow,
)
from tests.actions import Receipt, count_effects, record_effect
from tests.fake_bank import Mode, async_refunds, refunds
from tests.processes import ended, run_python


def act_like(key: str, to: str, amount: int) -> Receipt:
    """The signature of the guarded refund, whose arguments' digest is in ``KEY``."""
    raise AssertionError


KEY = f"temporal:order%2F7:refund:{ArgsHash(inspect.signature(act_like))(('ada', 5), {})[:16]}"
"""The key of ``refund("ada", 5)`` in workflow ``order/7``, whichever run or activity makes it."""


@pytest.fixture
def store(ledger: Path) -> Iterator[Store]:
    with get_store(ledger) as opened:
        yield opened


def environment(attempt: int = 1, run: str = "run-1") -> ActivityEnvironment:
    """Temporal's test environment, reporting the given attempt of activity 3."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        ActivityEnvironment.default_info(),
        workflow_id="order/7",
        workflow_run_id=run,
        activity_id="3",
        activity_type="refund",
        attempt=attempt,
    )
    return env


def raised(env: ActivityEnvironment, fn: Any, *args: object) -> ApplicationError:
    """The ApplicationError the activity raises."""
    with pytest.raises(ApplicationError) as caught:
        env.run(fn, *args)
    return caught.value


def test_key_is_the_workflow_tool_and_arguments(store: Store, tmp_path: Path) -> None:
    """The default key names the workflow, the tool and the arguments' digest."""
    act = guarded_activity(refunds(store, tmp_path / "effects", []))
    assert environment().run(act, "ada", 5) == Receipt("ada", 5)
    assert [record.key for record in store.records()] == [KEY]


def test_retry_replays_and_acts_once(store: Store, tmp_path: Path) -> None:
    """Attempt 2 of the activity has the key of attempt 1: it replays, the action ran once."""
    effects = tmp_path / "effects"
    act = guarded_activity(refunds(store, effects, []))
    assert environment(attempt=1).run(act, "ada", 5) == Receipt("ada", 5)
    assert environment(attempt=2).run(act, "ada", 5) == Receipt("ada", 5)
    assert count_effects(effects, "refund") == 1


def test_a_new_run_of_the_workflow_id_replays(store: Store, tmp_path: Path) -> None:
    """A new run of the workflow id (a re-run, a reset), another activity id: it replays."""
    effects = tmp_path / "effects"
    act = guarded_activity(refunds(store, effects, []))
    environment(run="run-1").run(act, "ada", 5)
    again = environment(run="run-2")
    again.info = dataclasses.replace(again.info, activity_id="4")
    assert again.run(act, "ada", 5) == Receipt("ada", 5)
    assert count_effects(effects, "refund") == 1


def test_another_workflow_id_acts(store: Store, tmp_path: Path) -> None:
    """Another workflow id is another business run: the same call acts."""
    effects = tmp_path / "effects"
    act = guarded_activity(refunds(store, effects, []))
    environment().run(act, "ada", 5)
    other = environment()
    other.info = dataclasses.replace(other.info, workflow_id="order/8")
    other.run(act, "ada", 5)
    assert count_effects(effects, "refund") == 2


def test_retry_after_an_interrupted_action_is_in_doubt(store: Store, tmp_path: Path) -> None:
    """An attempt interrupted after its side effect leaves the key in doubt; no retry acts."""
    effects = tmp_path / "effects"
    act = guarded_activity(refunds(store, effects, ["interrupt-after"]))
    with pytest.raises(KeyboardInterrupt):
        environment(attempt=1).run(act, "ada", 5)
    error = raised(environment(attempt=2), act, "ada", 5)
    assert (error.type, error.non_retryable) == (IN_DOUBT, True)
    receipt = error.details[0]
    assert (receipt["key"], receipt["tool"], receipt["reason"]) == (KEY, "refund", "interrupted")
    assert set(receipt) == {
        "key",
        "tool",
        "attempted_at",
        "args_hash",
        "attempt_id",
        "reason",
        "note",
    }
    assert count_effects(effects, "refund") == 1


CRASH_CHILD = """
import sys
from pathlib import Path
from safeact import get_store
from safeact.temporal import guarded_activity
from tests.fake_bank import refunds
from tests.test_temporal import environment

with get_store(sys.argv[1]) as store:
    act = guarded_activity(refunds(store, Path(sys.argv[2]), ["sigkill-after"]))
    environment(attempt=1).run(act, "ada", 5)
"""


def test_retry_after_a_killed_worker_is_in_doubt(ledger: Path, tmp_path: Path) -> None:
    """A worker SIGKILLed after the side effect: attempt 2 gets the non-retryable doubt."""
    effects = tmp_path / "effects"
    child = run_python("-c", CRASH_CHILD, ledger, effects)
    assert ended(child) == "SIGKILL", child.stderr
    with get_store(ledger) as store:
        act = guarded_activity(refunds(store, effects, []))
        error = raised(environment(attempt=2), act, "ada", 5)
    assert (error.type, error.non_retryable) == (IN_DOUBT, True)
    assert (error.details[0]["key"], error.details[0]["reason"]) == (KEY, "crashed")
    assert count_effects(effects, "refund") == 1


def test_retry_while_the_first_attempt_still_runs_is_retryable(
    store: Store, tmp_path: Path
) -> None:
    """Attempt 2 while attempt 1 still acts (timed out, alive): a retryable InFlight error."""
    effects = tmp_path / "effects"
    started, release = threading.Event(), threading.Event()

    @safe(store, name="refund", wait=0)
    def send_refund(key: str, to: str, amount: int) -> Receipt:
        """Refund ``amount`` to ``to``, slowly."""
        if not started.is_set():  # only the first call is slow
            started.set()
            release.wait(30)
        record_effect(effects, "refund")
        return Receipt(to, amount)

    act = guarded_activity(send_refund)
    first = threading.Thread(target=environment(attempt=1).run, args=(act, "ada", 5))
    first.start()
    try:
        assert started.wait(30)
        error = raised(environment(attempt=2), act, "ada", 5)
    finally:
        release.set()
        first.join(30)
    assert (error.type, error.non_retryable) == (IN_FLIGHT, False)
    assert environment(attempt=3).run(act, "ada", 5) == Receipt("ada", 5)
    assert count_effects(effects, "refund") == 1


def test_cancelling_a_sync_activity_lets_its_action_finish(store: Store, tmp_path: Path) -> None:
    """Temporal's cancel is not raised inside a sync action: it finishes, and is recorded."""
    effects = tmp_path / "effects"
    started = threading.Event()

    @safe(store, name="refund")
    def send_refund(key: str, to: str, amount: int) -> Receipt:
        """Refund ``amount`` to ``to``, until told the activity is cancelled."""
        started.set()
        deadline = time.monotonic() + 30
        while not activity.is_cancelled() and time.monotonic() < deadline:
            time.sleep(0.01)
        record_effect(effects, "refund")
        return Receipt(to, amount)

    act = guarded_activity(send_refund)
    env = environment(attempt=1)
    first = threading.Thread(target=env.run, args=(act, "ada", 5))
    first.start()
    assert started.wait(30)
    env.cancel()
    first.join(30)
    assert environment(attempt=2).run(act, "ada", 5) == Receipt("ada", 5)
    assert count_effects(effects, "refund") == 1


def test_failed_action_is_not_retried(store: Store, tmp_path: Path) -> None:
    """An action that raised gives a non-retryable Failed error, now and on every retry."""
    effects = tmp_path / "effects"
    modes: list[Mode] = ["fail", "ok"]
    act = guarded_activity(refunds(store, effects, modes))
    first = raised(environment(attempt=1), act, "ada", 5)
    second = raised(environment(attempt=2), act, "ada", 5)
    assert (first.type, first.non_retryable) == (FAILED, True)
    assert (second.type, second.non_retryable) == (FAILED, True)
    assert second.details[0] == {
        "key": KEY,
        "tool": "refund",
        "error_type": "RuntimeError",
        "message": "card declined",
    }
    assert isinstance(first.__cause__, FailedCallError)
    assert isinstance(first.__cause__.__cause__, RuntimeError)
    assert modes == ["ok"]  # the action ran once


def test_other_arguments_are_another_action(store: Store, tmp_path: Path) -> None:
    """The digest is in the key: the workflow's call with other arguments is its own action."""
    effects = tmp_path / "effects"
    act = guarded_activity(refunds(store, effects, []))
    environment(attempt=1).run(act, "ada", 5)
    environment(attempt=1).run(act, "ada", 6)
    assert count_effects(effects, "refund") == 2
    assert len(store.records()) == 2


def test_a_business_key_with_other_arguments_conflicts(store: Store, tmp_path: Path) -> None:
    """Under a template key, other arguments are refused, not retried: KEY_CONFLICT."""
    effects = tmp_path / "effects"
    act = guarded_activity(refunds(store, effects, []), key=template("r:{to}"))
    environment(attempt=1).run(act, "ada", 5)
    error = raised(environment(attempt=2), act, "ada", 6)
    assert (error.type, error.non_retryable) == (KEY_CONFLICT, True)
    assert count_effects(effects, "refund") == 1


def test_async_tool_is_an_async_activity(store: Store, tmp_path: Path) -> None:
    """An async tool makes an async activity; its retry replays too."""
    effects = tmp_path / "effects"
    send_refund = async_refunds(store, effects)
    assert isinstance(send_refund, AsyncSafeTool)
    act = guarded_activity(send_refund)
    assert inspect.iscoroutinefunction(act)
    first = asyncio.run(environment(attempt=1).run(act, "ada", 5))
    second = asyncio.run(environment(attempt=2).run(act, "ada", 5))
    assert first == second == Receipt("ada", 5)
    assert count_effects(effects, "refund") == 1


def test_async_failed_action_is_not_retried(store: Store) -> None:
    """An async activity whose action raised gives the non-retryable Failed error too."""

    @safe(store, name="refund")
    async def send_refund(key: str, to: str, amount: int) -> Receipt:
        """Refund ``amount`` to ``to``."""
        raise RuntimeError("card declined")

    act = guarded_activity(send_refund)
    with pytest.raises(ApplicationError) as caught:
        asyncio.run(environment().run(act, "ada", 5))
    assert (caught.value.type, caught.value.non_retryable) == (FAILED, True)


def test_activity_definition_has_the_name_and_signature(store: Store, tmp_path: Path) -> None:
    """Temporal registers it under the tool's function name (or ``name``), key not shown."""
    tool = refunds(store, tmp_path / "effects", [])
    default = activity._Definition.must_from_callable(guarded_activity(tool))
    named = activity._Definition.must_from_callable(guarded_activity(tool, name="pay"))
    assert (default.name, named.name) == ("send_refund", "pay")
    assert (default.arg_types, default.ret_type) == ([str, int], Receipt)


def test_keyword_only_arguments_are_refused(store: Store) -> None:
    """Temporal passes arguments by position: a keyword-only parameter is a TypeError."""

    @safe(store)
    def pay(key: str, *, amount: int) -> int:
        return amount

    with pytest.raises(TypeError, match="keyword-only argument amount"):
        guarded_activity(pay)


def test_key_policy_can_be_replaced(store: Store, tmp_path: Path) -> None:
    """With ``key=``, the activity keys by that policy: a business key across workflows."""
    act = guarded_activity(refunds(store, tmp_path / "effects", []), key=template("r:{to}"))
    environment().run(act, "ada", 5)
    assert [record.key for record in store.records()] == ["r:ada"]


def test_in_workflow_outside_an_activity_raises() -> None:
    """Outside an activity there is no key: NoRunKeyError says to pass key= instead."""
    with pytest.raises(NoRunKeyError, match=r"outside a Temporal activity.*key="):
        in_workflow(ToolCall("refund", {}, "0" * 64))


def test_guarded_activity_outside_an_activity_raises(store: Store, tmp_path: Path) -> None:
    """Called directly, the activity raises NoRunKeyError, not an ApplicationError."""
    act = guarded_activity(refunds(store, tmp_path / "effects", []))
    with pytest.raises(NoRunKeyError):
        act("ada", 5)


def test_activity_without_a_workflow_raises(store: Store, tmp_path: Path) -> None:
    """A standalone activity (no workflow run) has no default key: a non-retryable error."""
    env = environment()
    env.info = dataclasses.replace(env.info, workflow_id=None, workflow_run_id=None)
    act = guarded_activity(refunds(store, tmp_path / "effects", []))
    error = raised(env, act, "ada", 5)
    assert (error.type, error.non_retryable) == ("safeact.NoRunKey", True)
    assert "no workflow to be keyed by" in str(error)


def test_import_safeact_does_not_import_temporalio() -> None:
    """``import safeact`` leaves temporalio unimported: only safeact.temporal needs it."""
    code = "import sys, safeact; print(sorted(m for m in sys.modules if m.startswith('temporal')))"
    result = run_python("-c", code)
    assert result.stdout.strip() == "[]", result.stderr
