"""Testing your tools with safeact: a pytest plugin.

Installed with safeact and registered through pytest's ``pytest11`` entry point, so pytest
loads it in any project that has safeact; nothing else imports it (it imports pytest).

Fixtures:
    ledger: a fresh ledger of the test's own, open (a ``Store``): a SQLite file under the
        test's ``tmp_path``, or, with ``--safeact-postgres URL`` (or the ini option
        ``safeact_postgres``), a new schema on that PostgreSQL server, dropped afterwards.
        After the test it is checked, then closed: a key whose action still runs under a
        live owner (a thread, task or process the test left behind) fails the test.

The crash harness (usable under any test runner):
    assert_crash_safe(subject, effects=count): runs ``subject`` in fresh processes, killed
        (SIGKILL) at each point where a crash matters, and fails with a report per point
        unless the effect happens at most as often as uncrashed, the doubt is visible, and
        the call replays once resolved. ``subject`` is ``calling(tool, key, *args)`` or a
        module-level function of a ledger location (a graph, an MCP session, a saga).
    crash_report: the same report, without failing.
    effect_made(): a fake provider's mark, after its effect: runs are killed there too.
    crash_schedules(): a Hypothesis strategy of crash points for properties of one's own,
        run by ``run_crash_schedule``.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from safeact._crash import (
    CRASH_POINTS,
    Calling,
    CrashPoint,
    CrashReport,
    Ended,
    Point,
    PointReport,
    assert_crash_safe,
    calling,
    crash_report,
    effect_made,
    run_crash_schedule,
)
from safeact._open import get_store
from safeact._protocol import State

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from hypothesis.strategies import SearchStrategy

    from safeact._store import Store

__all__ = [
    "CRASH_POINTS",
    "Calling",
    "CrashPoint",
    "CrashReport",
    "Ended",
    "Point",
    "PointReport",
    "assert_crash_safe",
    "calling",
    "crash_report",
    "crash_schedules",
    "effect_made",
    "ledger",
    "run_crash_schedule",
]

_OPTION = "safeact_postgres"
_HELP = "a PostgreSQL server URL: safeact's ledger fixture makes a new schema there per test"


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--safeact-postgres URL`` and the ini option ``safeact_postgres``."""
    parser.addoption("--safeact-postgres", dest=_OPTION, metavar="URL", help=_HELP)
    parser.addini(_OPTION, _HELP)


@pytest.fixture
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A fresh ledger of this test's own, open; checked and closed after the test.

    Raises:
        pytest.fail.Exception: after the test, an action still runs under a live owner.

    """
    server = request.config.getoption(_OPTION) or request.config.getini(_OPTION)
    location, remove = (
        _new_schema(str(server)) if server else (str(tmp_path / "ledger.db"), _nothing)
    )
    try:
        with get_store(location) as store:
            yield store
            running = [record.key for record in store.records(state=State.ATTEMPTING)]
            if running:
                pytest.fail(
                    f"the test ended while the actions of {running!r} still ran, under a live "
                    "owner (a thread, task or process the test left behind): wait for every "
                    "call before the test ends",
                    pytrace=False,
                )
    finally:
        remove()


def _nothing() -> None:
    """A SQLite ledger goes with its ``tmp_path``."""


def _new_schema(server: str) -> tuple[str, Callable[[], None]]:
    """A new, migrated schema of its own on ``server``: its URL, and what drops it."""
    import psycopg  # noqa: PLC0415 - the postgres extra, needed only with a server

    from safeact._postgres import migrate_postgres  # noqa: PLC0415 - the same

    schema = f"safeact_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")  # a name made here, not the user's text

    def drop() -> None:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")

    separator = "&" if "?" in server else "?"
    location = f"{server}{separator}options=-csearch_path%3D{schema}"
    try:
        migrate_postgres(location)
    except BaseException:
        drop()
        raise
    return location, drop


def crash_schedules(
    *, max_crashes: int = 3, max_occurrence: int = 3
) -> SearchStrategy[tuple[CrashPoint, ...]]:
    """A Hypothesis strategy of crash schedules, for ``run_crash_schedule``.

    A schedule is up to ``max_crashes`` crash points, one per run: each run is killed at
    its point (the ``occurrence``-th time it reaches it, up to ``max_occurrence``), or ends
    without reaching it; Hypothesis shrinks towards fewer crashes, earlier points.
    """
    from hypothesis import strategies  # noqa: PLC0415 - only those who draw need Hypothesis

    point = strategies.builds(
        CrashPoint,
        strategies.sampled_from(CRASH_POINTS),
        strategies.integers(min_value=1, max_value=max_occurrence),
    )
    return strategies.lists(point, max_size=max_crashes).map(tuple)
