"""safeact's pytest plugin: the ``ledger`` fixture, run by pytest's own ``pytester``."""

import importlib.metadata

import pytest

from tests.conftest import POSTGRES, postgres_or_skip

pytest_plugins = ["pytester"]

FRESH = """
from safeact import Succeeded, safe

def same(key: str, n: int) -> int:
    return n

def test_first(ledger):
    assert safe(ledger, name="t")(same)("k", 1) == Succeeded("k", 1)

def test_second_starts_empty(ledger):
    assert ledger.records() == []
    assert safe(ledger, name="t")(same)("k", 2) == Succeeded("k", 2)
"""


def test_the_plugin_is_registered_for_pytest() -> None:
    """Installing safeact registers safeact.testing under pytest's pytest11 entry points."""
    found = [e.value for e in importlib.metadata.entry_points(group="pytest11")]
    assert "safeact.testing" in found


def test_each_test_gets_a_fresh_ledger(pytester: pytest.Pytester) -> None:
    """A key one test recorded is not in the next test's ledger: both run their action."""
    pytester.makepyfile(FRESH)
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_an_action_left_running_fails_the_test(pytester: pytest.Pytester) -> None:
    """A test that ends while a guarded action still runs in its thread fails, naming the key."""
    pytester.makepyfile(
        """
        import threading
        from safeact import safe

        def test_leaves_a_thread(ledger):
            started, finish = threading.Event(), threading.Event()

            def slow(key: str) -> int:
                started.set()
                finish.wait(30)
                return 1

            tool = safe(ledger, name="slow")(slow)
            worker = threading.Thread(target=tool, args=("left-running",), daemon=True)
            worker.start()
            started.wait(30)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*the test ended while the actions of *left-running* still ran*"])


@pytest.mark.postgres
def test_with_a_server_each_test_gets_a_schema_of_its_own(pytester: pytest.Pytester) -> None:
    """With --safeact-postgres, the ledger is a fresh PostgreSQL schema per test."""
    postgres_or_skip()
    pytester.makepyfile(
        FRESH
        + """
def test_on_postgres(ledger):
    assert ledger.location.startswith("postgresql://")
"""
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--safeact-postgres={POSTGRES}"
    )
    result.assert_outcomes(passed=3)
