"""safeact.dbos: guarded steps in real DBOS workflows, offline on SQLite.

Each test launches DBOS on a system database of its own and destroys it (and its registry)
after. Crash tests SIGKILL a child process (tests/dbos_child.py) right after the refund's
side effect, and relaunch DBOS in new processes, which recover the workflow.
"""

import asyncio
import pickle
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from dbos import DBOS, SetWorkflowID
from dbos import error as dbos_error

from safeact import (
    DoubtReason,
    FailedCallError,
    InDoubtError,
    KeyConflictError,
    NoRunKeyError,
    SafeTool,
    Store,
    ToolCall,
    get_store,
    safe,
)
from safeact.dbos import guarded_step, in_workflow, retryable
from tests.actions import Receipt, count_effects
from tests.fake_bank import async_refunds, refunds
from tests.processes import ended, report, run_python

CHILD = Path(__file__).with_name("dbos_child.py")
RECEIPT = Receipt("a@example.com", 50)

Launch = Callable[[str], None]


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Launch]:
    """Launch DBOS on the system database ``name`` in tmp_path (again: a new instance)."""

    def start(name: str) -> None:
        DBOS.destroy()  # keeps the registry: the same functions on another database
        DBOS(config={"name": "safeact-test", "system_database_url": f"sqlite:///{tmp_path / name}"})
        DBOS.launch()

    yield start
    DBOS.destroy(destroy_registry=True)


@pytest.fixture
def store(ledger: Path) -> Iterator[Store]:
    with get_store(ledger) as opened:
        yield opened


def workflow_key(workflow_id: str, tool: SafeTool[Any, Any], *args: object) -> str:
    """The key ``in_workflow`` gives a call of ``tool`` with ``args`` in ``workflow_id``."""
    return f"dbos:{workflow_id}:{tool.name}:{tool._digest('-', args, {})[:16]}"


def test_the_key_is_the_workflow_tool_and_arguments(
    launch: Launch, store: Store, tmp_path: Path
) -> None:
    """Each guarded step is keyed by workflow id (quoted), tool and arguments, not by step id."""

    @safe(store, name="notify")
    def notify(key: str, to: str) -> str:
        return to

    guarded = refunds(store, tmp_path / "effects")
    refund = DBOS.step(name="refund")(guarded_step(guarded))
    tell = DBOS.step(name="notify")(guarded_step(notify))

    @DBOS.workflow(name="refund_order")
    def refund_order() -> str:
        refund("a@example.com", 50)
        return tell("a@example.com")

    launch("system.db")
    with SetWorkflowID("order:7"):
        refund_order()
    keys = sorted(record.key for record in store.records())
    assert keys == [
        workflow_key("order%3A7", notify, "a@example.com"),
        workflow_key("order%3A7", guarded, "a@example.com", 50),
    ]


def test_a_step_inserted_by_a_deploy_keeps_the_key(
    launch: Launch, store: Store, tmp_path: Path
) -> None:
    """A deploy that adds a step before the refund (moving its step id) replays it: one refund."""
    effects = tmp_path / "effects"
    refund = DBOS.step(name="refund")(guarded_step(refunds(store, effects)))

    @DBOS.step(name="look_up")
    def look_up() -> str:
        return "a@example.com"

    @DBOS.workflow(name="refund_order")
    def refund_order() -> Receipt:
        return refund("a@example.com", 50)

    @DBOS.workflow(name="refund_order_after_the_deploy")
    def refund_order_after_the_deploy() -> Receipt:
        return refund(look_up(), 50)

    launch("first.db")
    with SetWorkflowID("wf-1"):
        refund_order()
    launch("second.db")  # the re-run after the deploy: the step is DBOS's number 2 now
    with SetWorkflowID("wf-1"):
        assert refund_order_after_the_deploy() == RECEIPT
    assert count_effects(effects, "refund") == 1


def test_a_step_run_again_replays(launch: Launch, store: Store, tmp_path: Path) -> None:
    """A workflow run again on a system database that forgot it replays: one refund."""
    effects = tmp_path / "effects"
    refund = DBOS.step(name="refund")(guarded_step(refunds(store, effects)))

    @DBOS.workflow(name="refund_order")
    def refund_order() -> Receipt:
        return refund("a@example.com", 50)

    results = []
    for system_db in ("first.db", "second.db"):
        launch(system_db)
        with SetWorkflowID("wf-1"):
            results.append(refund_order())
    assert results == [RECEIPT, RECEIPT]
    assert count_effects(effects, "refund") == 1


def test_other_arguments_on_a_rerun_are_another_action(
    launch: Launch, store: Store, tmp_path: Path
) -> None:
    """The documented limit: a re-run with other arguments (a non-deterministic workflow) acts."""
    effects = tmp_path / "effects"
    refund = DBOS.step(name="refund")(guarded_step(refunds(store, effects)))

    @DBOS.workflow(name="refund_order")
    def refund_order(amount: int) -> Receipt:
        return refund("a@example.com", amount)

    launch("first.db")
    with SetWorkflowID("wf-1"):
        refund_order(50)
    launch("second.db")
    with SetWorkflowID("wf-1"):
        refund_order(60)
    assert count_effects(effects, "refund") == 2


@pytest.mark.parametrize("settled", [True, False])
def test_retries_of_a_step_in_doubt_never_act(
    launch: Launch, store: Store, tmp_path: Path, settled: bool
) -> None:
    """A step in doubt with retries raises InDoubtError (with retryable) and never acts again."""
    effects = tmp_path / "effects"
    cut_off = refunds(store, effects, ["interrupt-after"])
    with pytest.raises(KeyboardInterrupt):  # an earlier run, cut off after the refund
        cut_off(workflow_key("wf-1", cut_off, "a@example.com", 50), "a@example.com", 50)
    options: dict[str, Any] = {"should_retry": retryable} if settled else {}
    refund = DBOS.step(name="refund", retries_allowed=True, interval_seconds=0, **options)(
        guarded_step(refunds(store, effects))
    )

    @DBOS.workflow(name="refund_order")
    def refund_order() -> str:
        try:
            refund("a@example.com", 50)
        except InDoubtError as doubt:
            return doubt.reason.value
        except dbos_error.DBOSMaxStepRetriesExceeded as exceeded:
            return type(exceeded.errors[-1]).__name__
        return "ran"

    launch("system.db")
    with SetWorkflowID("wf-1"):
        ended = refund_order()
    assert ended == ("interrupted" if settled else "InDoubtError")
    assert count_effects(effects, "refund") == 1


def test_an_async_tool_is_an_async_step(launch: Launch, store: Store, tmp_path: Path) -> None:
    """An async guarded tool makes an async step, keyed by the workflow: it runs once."""
    refund = DBOS.step(name="refund")(guarded_step(async_refunds(store, tmp_path / "effects")))

    @DBOS.workflow(name="refund_order")
    async def refund_order() -> Receipt:
        return await refund("a@example.com", 50)

    launch("system.db")
    with SetWorkflowID("wf-1"):
        assert asyncio.run(refund_order()) == RECEIPT
    [record] = store.records()
    assert record.key == f"dbos:wf-1:refund:{record.args_hash[:16]}"


def test_outside_a_step_the_key_refuses(launch: Launch, store: Store, tmp_path: Path) -> None:
    """Called outside a step (no workflow, or a workflow's own body), nothing runs."""
    plain = guarded_step(refunds(store, tmp_path / "effects"))

    @DBOS.workflow(name="refund_order")
    def refund_order() -> Receipt:
        return plain("a@example.com", 50)

    launch("system.db")
    with pytest.raises(NoRunKeyError, match="DBOS step"):
        plain("a@example.com", 50)
    with SetWorkflowID("wf-1"), pytest.raises(NoRunKeyError, match="key="):
        refund_order()
    assert store.records() == []


def test_retryable_retries_only_what_ran_nothing() -> None:
    """retryable: no for what a retry would repeat, yes for in flight and other errors."""
    now = datetime.now(UTC)

    def doubt(reason: DoubtReason) -> InDoubtError:
        return InDoubtError("k", "refund", now, "hash", reason)

    errors: list[BaseException] = [
        doubt(DoubtReason.CRASHED),
        doubt(DoubtReason.IN_FLIGHT),
        FailedCallError("k", "refund", "RuntimeError", "declined"),
        KeyConflictError("k", "is recorded for other arguments"),
        RuntimeError("ledger busy"),
    ]
    assert [retryable(error) for error in errors] == [False, True, False, False, True]


def test_errors_survive_dbos_serialization() -> None:
    """InDoubtError and KeyConflictError pickle with their fields, as DBOS stores them."""
    now = datetime.now(UTC)
    doubt = InDoubtError("k", "refund", now, "hash", DoubtReason.CRASHED, attempt_id="a1")
    conflict = KeyConflictError("k", "is recorded for other arguments")
    doubt_back, conflict_back = pickle.loads(pickle.dumps((doubt, conflict)))  # noqa: S301 - our own bytes
    fields = ("key", "tool", "attempted_at", "args_hash", "reason", "attempt_id", "note")
    assert [getattr(doubt_back, name) for name in fields] == [
        getattr(doubt, name) for name in fields
    ]
    assert (str(conflict_back), conflict_back.key) == (str(conflict), "k")


def test_in_workflow_outside_dbos_refuses() -> None:
    """in_workflow names the tool and says to pass key= when no step runs."""
    with pytest.raises(NoRunKeyError, match="refund was called outside a DBOS step"):
        in_workflow(ToolCall("refund", {}, "0" * 64))


def test_import_safeact_does_not_import_dbos() -> None:
    """`import safeact` loads no DBOS."""
    code = "import sys, safeact; print(sorted(m for m in sys.modules if m.startswith('dbos')))"
    out = run_python("-c", code)
    assert out.stdout.strip() == "[]", out.stderr


def child(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    """Run tests/dbos_child.py in ``mode`` on its system database, ledger and bank."""
    files = [tmp_path / name for name in ("system.db", "ledger.db", "effects")]
    return run_python(CHILD, *files, mode)


def test_sigkill_in_the_step_then_recovery_is_in_doubt(tmp_path: Path) -> None:
    """Killed right after its side effect, the step re-run by recovery is in doubt: one refund."""
    killed = child(tmp_path, "run")
    assert ended(killed) == "SIGKILL", killed.stderr
    first = report(child(tmp_path, "recover"))
    assert first["key"].startswith("dbos:wf-1:refund:")
    assert first["reason"] == "crashed"
    assert count_effects(tmp_path / "effects", "refund") == 1


def test_resolved_as_happened_recovery_replays(tmp_path: Path) -> None:
    """Once the key is resolved as happened, the recovered workflow settles by replay."""
    killed = child(tmp_path, "run")
    assert ended(killed) == "SIGKILL", killed.stderr
    key = report(child(tmp_path, "recover"))["key"]
    with get_store(tmp_path / "ledger.db") as ledger:
        ledger.resolve(key, happened=True, result=RECEIPT)
    assert report(child(tmp_path, "settle")) == ["a@example.com", 50]
    assert count_effects(tmp_path / "effects", "refund") == 1
