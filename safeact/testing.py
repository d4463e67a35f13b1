"""Testing your tools with safeact: a pytest plugin.

Installed with safeact and registered through pytest's ``pytest11`` entry point, so pytest
loads it in any project that has safeact; nothing else imports it (it imports pytest).

Fixtures:
    ledger: a fresh ledger of the test's own, open (a ``Store``): a SQLite file under the
        test's ``tmp_path``, or, with ``--safeact-postgres URL`` (or the ini option
        ``safeact_postgres``), a new schema on that PostgreSQL server, dropped afterwards.
        After the test it is checked, then closed: a key whose action still runs under a
        live owner (a thread, task or process the test left behind) fails the test.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from safeact._open import get_store
from safeact._protocol import State

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from safeact._store import Store

__all__ = ["ledger"]

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
