"""The crash harness of ``safeact.testing``: users' tools killed at each crash point.

The harness is run as users run it, in a pytest session of their own (``pytester``), on
guarded tools that keep the promise and on calls that act twice; the Hypothesis strategy
and the misuse errors are checked here directly.
"""

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis.strategies import SearchStrategy

from safeact import SafeTool, get_store, safe
from safeact.testing import (
    CRASH_POINTS,
    CrashPoint,
    calling,
    crash_report,
    crash_schedules,
    run_crash_schedule,
)

pytest_plugins = ["pytester"]

BANK = """
import os
from pathlib import Path

import attrs

from safeact.testing import effect_made

REFUNDS = Path(__file__).with_name("refunds.log")
REVERSALS = Path(__file__).with_name("reversals.log")


@attrs.frozen
class Refund:
    to: str
    cents: int


def _write(log: Path, line: str) -> None:
    with log.open("a") as file:
        file.write(line + "\\n")
        file.flush()
        os.fsync(file.fileno())


def refund(to: str, cents: int) -> Refund:
    _write(REFUNDS, f"{to} {cents}")  # not idempotent: every call moves money
    effect_made()
    return Refund(to, cents)


def reverse(to: str, cents: int) -> None:
    _write(REVERSALS, f"{to} {cents}")


def refunds() -> int:
    return len(REFUNDS.read_text().splitlines()) if REFUNDS.exists() else 0
"""

TOOLS = """
import asyncio

import bank
from safeact import Saga, safe
from safeact.testing import assert_crash_safe, calling

EVERY_POINT = ["before_claim", "after_claim", "effect", "after_call", "after_record"]


@safe("not-the-harness-ledger.db", name="refund")
def refund(key: str, to: str, cents: int) -> bank.Refund:
    return bank.refund(to, cents)


@safe("not-the-harness-ledger.db", name="refund_async")
async def refund_async(key: str, to: str, cents: int) -> bank.Refund:
    await asyncio.sleep(0)
    return bank.refund(to, cents)


def charge(key: str, to: str, cents: int) -> bank.Refund:
    return bank.refund(to, cents)


def undo(key: str, done: bank.Refund) -> None:
    bank.reverse(done.to, done.cents)


def two_refunds(ledger: str) -> object:
    with Saga("refunds-of-order-7", store=ledger) as saga:
        saga.step(charge, "ada@example.com", 50, compensate=undo)
        saga.step(charge, "bob@example.com", 70, compensate=undo)
    return "both refunded"
"""


def harness_session(pytester: pytest.Pytester, tests: str) -> pytest.RunResult:
    """Run ``tests`` (with the fake bank and the tools above) in a pytest session of its own."""
    pytester.makepyfile(bank=BANK, test_harness=TOOLS + tests)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider")


def test_a_guarded_tool_passes_at_every_crash_point(pytester: pytest.Pytester) -> None:
    """A sync guarded tool keeps the promise at each of the five crash points, each reached."""
    result = harness_session(
        pytester,
        """
def test_refund():
    report = assert_crash_safe(calling(refund, "refund-1", "ada@example.com", 50),
                               effects=bank.refunds)
    assert [str(point.crash) for point in report.points] == EVERY_POINT
    assert [point.runs[1].outcome for point in report.points] == [
        "Succeeded", "InDoubt (crashed, refund-1)", "InDoubt (crashed, refund-1)",
        "InDoubt (crashed, refund-1)", "Succeeded (replayed)",
    ]
    assert bank.refunds() == 1 + 5  # uncrashed once, and once per crash point
""",
    )
    result.assert_outcomes(passed=1)


def test_an_async_guarded_tool_passes(pytester: pytest.Pytester) -> None:
    """An async guarded tool keeps the promise at each crash point too."""
    result = harness_session(
        pytester,
        """
def test_refund_async():
    report = assert_crash_safe(calling(refund_async, "refund-2", "ada@example.com", 50),
                               effects=bank.refunds)
    assert [str(point.crash) for point in report.points] == EVERY_POINT
""",
    )
    result.assert_outcomes(passed=1)


def test_the_steps_of_a_saga_pass(pytester: pytest.Pytester) -> None:
    """A saga of two steps is crashed at every point of each step and keeps the promise."""
    result = harness_session(
        pytester,
        """
def test_saga():
    report = assert_crash_safe(two_refunds, effects=bank.refunds)
    assert [str(point.crash) for point in report.points] == [
        "before_claim", "before_claim #2", "after_claim", "after_claim #2", "effect",
        "effect #2", "after_call", "after_call #2", "after_record", "after_record #2",
    ]
    assert report.effects == 2
""",
    )
    result.assert_outcomes(passed=1)


def test_the_function_called_directly_fails_naming_the_crash_point(
    pytester: pytest.Pytester,
) -> None:
    """Without safeact, a crash after the effect makes the next run refund again: it fails."""
    result = harness_session(
        pytester,
        """
def refund_directly(ledger: str) -> object:
    return bank.refund("ada@example.com", 50)

def test_unguarded():
    assert_crash_safe(refund_directly, effects=bank.refunds)
""",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*refund_directly: NOT SAFE*",
            "*effect: FAILED*",
            "*problem: the effect happened * time(s), 1 in an uncrashed run: it ran again*",
        ]
    )


def test_an_effect_outside_the_guard_fails_naming_the_crash_point(
    pytester: pytest.Pytester,
) -> None:
    """A run whose effect comes before its guarded call refunds again after a crash in it."""
    result = harness_session(
        pytester,
        """
def noted(key: str, cents: int) -> int:
    return cents

def refund_then_note(ledger: str) -> object:
    bank.refund("ada@example.com", 50)  # outside the guard
    return safe(ledger, name="note")(noted)("note-1", 50)

def test_outside():
    assert_crash_safe(refund_then_note, effects=bank.refunds)
""",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*before_claim: FAILED*", "*it ran again after the crash*"])


def test_a_run_that_reaches_no_crash_point_is_reported(pytester: pytest.Pytester) -> None:
    """A run whose effect is neither guarded nor marked cannot be crashed: the report says so."""
    result = harness_session(
        pytester,
        """
def unmarked(ledger: str) -> object:
    bank._write(bank.REFUNDS, "ada 50")
    return None

def test_unmarked():
    assert_crash_safe(unmarked, effects=bank.refunds)
""",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*reached no crash point: nothing guards them*"])


EFFECTS = "SAFEACT_TEST_HARNESS_EFFECTS"
"""The file the tools below append their effect to: set per test, read by the children."""


@attrs.frozen
class Paid:
    """A payment made."""

    cents: int


def _pay_once(key: str, cents: int) -> Paid:
    with Path(os.environ[EFFECTS]).open("a") as file:
        file.write(f"{key}\n")
    return Paid(cents)


pay = safe("not-the-harness-ledger.db", name="tests.harness.pay")(_pay_once)


def _paid() -> int:
    path = Path(os.environ[EFFECTS])
    return len(path.read_text().splitlines()) if path.exists() else 0


@contextlib.contextmanager
def effects_in(path: Path) -> Iterator[None]:
    """Point the tools' effects (in this process and its children) at ``path``."""
    previous = os.environ.get(EFFECTS)
    os.environ[EFFECTS] = str(path)
    try:
        yield
    finally:
        if previous is None:
            del os.environ[EFFECTS]
        else:
            os.environ[EFFECTS] = previous


def nothing_made(ledger: str) -> object:
    """A run that makes no effect at all."""
    return ledger


def test_a_run_that_makes_no_counted_effect_is_reported(tmp_path: Path) -> None:
    """An effects() that never moves cannot measure anything: the report says what to fix."""
    with effects_in(tmp_path / "paid"):
        report = crash_report(nothing_made, effects=_paid)
    assert not report.safe
    assert report.problems == (
        "the uncrashed run made no effect that effects() counts: count the real one",
    )


@settings(max_examples=8, deadline=None)
@given(schedule=crash_schedules(max_crashes=2, max_occurrence=2))
def test_no_crash_schedule_pays_twice(
    tmp_path_factory: pytest.TempPathFactory, schedule: tuple[CrashPoint, ...]
) -> None:
    """Whatever runs are killed where, a guarded payment is made at most once.

    The run after the last crash replays it, makes it, or says it is in doubt.
    """
    where = tmp_path_factory.mktemp("schedule")
    with effects_in(where / "paid"):
        ends = run_crash_schedule(
            calling(pay, "order-1", 500), schedule, ledger=str(where / "l.db")
        )
        assert _paid() <= 1
    assert not ends[-1].killed
    assert ends[-1].outcome in {"Succeeded", "Succeeded (replayed)", "InDoubt (crashed, order-1)"}
    with get_store(where / "l.db") as store:
        in_doubt = [record.key for record in store.list_in_doubt()]
    assert in_doubt == (["order-1"] if ends[-1].in_doubt else [])


def test_schedules_draw_every_crash_point() -> None:
    """The strategy draws from every crash point, so a new one extends every search."""
    drawn = {
        crash.point for schedule in _examples(crash_schedules(max_crashes=3)) for crash in schedule
    }
    assert drawn == set(CRASH_POINTS)


def _examples(strategy: SearchStrategy[tuple[CrashPoint, ...]]) -> list[tuple[CrashPoint, ...]]:
    found: list[tuple[CrashPoint, ...]] = []

    @settings(max_examples=200, database=None, deadline=None)
    @given(strategy)
    def collect(schedule: tuple[CrashPoint, ...]) -> None:
        found.append(schedule)

    collect()
    return found


def _local_tool() -> SafeTool[[], int]:
    def inner(key: str) -> int:
        return 1

    return safe("x.db")(inner)


def test_a_tool_a_fresh_process_cannot_import_is_refused() -> None:
    """A tool made inside a function cannot be imported by a run: refused before any run."""
    tool = _local_tool()
    with pytest.raises(ValueError, match="not a module-level name of an importable module"):
        calling(tool, "k")


def test_arguments_that_do_not_pickle_are_refused() -> None:
    """Arguments that cannot reach a fresh process are refused, naming the tool."""
    with pytest.raises(TypeError, match=r"tests\.harness\.pay must pickle"):
        calling(pay, "k", lambda: 1)  # type: ignore[arg-type] # the wrong type, on purpose


def test_what_is_not_a_tool_is_refused() -> None:
    """calling() takes a guarded tool, not the plain function."""
    with pytest.raises(TypeError, match="takes a guarded tool"):
        calling(_pay_once, "k", 1)  # type: ignore[arg-type] # the wrong type, on purpose


def test_a_run_that_hides_the_doubt_fails(pytester: pytest.Pytester) -> None:
    """A run that answers "refunded" while its key is in doubt hides the doubt: it fails."""
    result = harness_session(
        pytester,
        """
from safeact import Succeeded

def refund_and_boast(ledger: str) -> object:
    tool = safe(ledger, name="charge")(charge)
    outcome = tool("refund-9", "ada@example.com", 50)
    return "refunded" if not isinstance(outcome, Succeeded) else outcome.value

def test_boasting():
    assert_crash_safe(refund_and_boast, effects=bank.refunds)
""",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*after_claim: FAILED*",
            (
                "*refund-9 is in doubt in the ledger, but the run after the crash said "
                "returned 'refunded', naming no such key: it hides the doubt from its caller*"
            ),
        ]
    )


def test_a_run_that_raises_naming_the_key_in_doubt_passes(pytester: pytest.Pytester) -> None:
    """A host that raises on an in-doubt answer, naming its key, tells its caller: it passes."""
    result = harness_session(
        pytester,
        """
from safeact import InDoubt

def refund_or_raise(ledger: str) -> object:
    outcome = safe(ledger, name="charge")(charge)("refund-10", "ada@example.com", 50)
    if isinstance(outcome, InDoubt):
        raise RuntimeError(f"the refund {outcome.key} may have happened: check the bank")
    return outcome

def test_raising():
    report = assert_crash_safe(refund_or_raise, effects=bank.refunds)
    assert report.points[1].runs[1].outcome.startswith("RuntimeError: the refund refund-10")
""",
    )
    result.assert_outcomes(passed=1)


def test_tools_on_a_ledger_of_their_own_are_reported(pytester: pytest.Pytester) -> None:
    """A run whose tools ignore the ledger it is given cannot be crashed usefully: it says so."""
    result = harness_session(
        pytester,
        """
def refund_elsewhere(ledger: str) -> object:
    return refund("refund-11", "ada@example.com", 50)  # on its own ledger file

def test_elsewhere():
    assert_crash_safe(refund_elsewhere, effects=bank.refunds)
""",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*recorded nothing in the ledger the harness gave it*"])
