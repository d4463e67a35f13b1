import glob
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from safeact import Store, get_store, memory_ledger
from safeact._owner import _no_such_process
from safeact._sqlite import SqliteStore
from tests.sqlite_trace import each_statement_once

if "MUTANT_UNDER_TEST" in os.environ:
    # mutmut calls every mutated function through two frames of its own (its trampoline), so
    # a value nested MAX_DEPTH levels deep needs about three times the stack it needs anywhere
    # else: without this, test_args_hash's depth tests fail before any mutant runs.
    sys.setrecursionlimit(3 * sys.getrecursionlimit())

settings.register_profile("ci", derandomize=True, deadline=None, database=None)
settings.register_profile("dev", deadline=None)
settings.register_profile("stress", deadline=None, max_examples=5000)
settings.load_profile(
    os.environ.get("SAFEACT_HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)


POSTGRES_FIXTURES = frozenset({"postgres_ledger", "empty_postgres", "empty_schema"})
"""The fixtures that give a test a database on the PostgreSQL server."""


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``located`` marker; give each xdist worker a process group of its own.

    An owner's end includes the processes of its group started after it (safeact._owner):
    the workers of one run would otherwise share a group, and one worker's live children
    would keep another worker's killed owner alive.
    """
    config.addinivalue_line(
        "markers",
        "located: a test of the store fixture that needs its ledger's location (it opens the "
        "ledger again, or hands it to another process): not run on the in-memory ledger",
    )
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.setpgid(0, 0)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test that asks for the server: ``-k "not postgres"`` is the SQLite half.

    Tests on both backends say which in their ids already; these may not say it in their names.
    """
    for item in items:
        if POSTGRES_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)


class CoverageFiles:
    """The data files of the processes coverage measures, and which of them were judged.

    A child process measured by coverage (``patch = ["subprocess"]`` in pyproject.toml)
    writes its data file as it exits, without a journal: one that exits under a small file
    size limit (``RLIMIT_FSIZE``), or is killed while it writes, leaves the file cut short,
    and the run ends with ``CoverageWarning: Couldn't use data file ...: database disk image
    is malformed`` instead of that child's lines.
    """

    def __init__(self, data_file: Path) -> None:
        """Watch the files named ``data_file`` (an absolute path) and a suffix."""
        self._directory = data_file.parent
        self._prefix = f"{data_file.name}."
        self._judged: set[str] = set()

    def unreadable(self) -> dict[str, str]:
        """The files not judged yet whose writer has ended, that coverage cannot read, and why.

        A file whose writer still runs may be half written: it is judged at a later look.
        """
        from coverage import CoverageData
        from coverage.exceptions import CoverageException

        found: dict[str, str] = {}
        for path in sorted(self._directory.glob(f"{glob.escape(self._prefix)}*")):
            writer = re.search(r"\.pid(\d+)\.", path.name)
            if (
                path.name in self._judged
                or path.name.endswith("-journal")
                or (writer is not None and not _no_such_process(int(writer[1])))
            ):
                continue
            self._judged.add(path.name)
            try:
                CoverageData(str(path), read_only=True).read()
            except CoverageException as exc:
                if path.exists():  # not renamed away by its writer as it finished
                    found[path.name] = str(exc)
        return found


MEASURED = pytest.StashKey[CoverageFiles]()
"""The data files of this run's measured children, kept by the process that runs pytest."""

UNREADABLE = (
    "a child process measured by coverage left a data file coverage cannot read: it exited "
    "under a small file size limit, or was killed while writing the file as it exited; give "
    "it that limit, or that kill, for the work under test only"
)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Note where coverage keeps its data, if this run measures child processes.

    In the process that runs pytest, not in xdist's workers: it alone sees every file once the
    workers are done. Read before any test changes the working directory.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") or "coverage" not in sys.modules:
        return
    from coverage import Coverage

    measuring = Coverage.current()
    patches = None if measuring is None else measuring.get_option("run:patch")
    if measuring is not None and isinstance(patches, list) and "subprocess" in patches:
        data_file = Path(str(measuring.get_option("run:data_file"))).absolute()
        session.config.stash[MEASURED] = CoverageFiles(data_file)


@pytest.fixture(autouse=True)
def children_leave_whole_coverage_data(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test whose child processes left coverage data that coverage cannot read.

    Only where tests run in the process that runs pytest; under xdist, whose workers would
    each see the other's files, ``pytest_sessionfinish`` reports such files instead.
    """
    yield
    measured = request.config.stash.get(MEASURED, None)
    unreadable = {} if measured is None else measured.unreadable()
    if unreadable:
        pytest.fail(f"{UNREADABLE}: {_listed(unreadable)}", pytrace=False)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Fail the run if a measured child left coverage data no test was blamed for (xdist)."""
    measured = session.config.stash.get(MEASURED, None)
    unreadable = {} if measured is None else measured.unreadable()
    if unreadable:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("=", "unreadable coverage data", red=True)
            reporter.write_line(
                f"{UNREADABLE} (run the tests without -n to see which): {_listed(unreadable)}"
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _listed(unreadable: dict[str, str]) -> str:
    return "; ".join(f"{name}: {why}" for name, why in sorted(unreadable.items()))


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of each file this process fsyncs from Python, in order, once synced.

    Tests append their own events to the list, to check what happened after which sync.
    """
    synced: list[str] = []
    fsync = os.fsync

    def recorded(fd: int) -> None:
        fsync(fd)
        synced.append(Path(f"/proc/self/fd/{fd}").readlink().name)

    monkeypatch.setattr(os, "fsync", recorded)
    return synced


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """Path of a ledger file that does not exist yet."""
    return tmp_path / "agent.db"


POSTGRES = os.environ.get("SAFEACT_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
"""The server the PostgreSQL half of the suite runs against (every machine here has it)."""


def postgres_or_skip() -> str:
    """The server's URL; skip (fail, under CI) when it cannot be reached."""
    try:
        import psycopg

        with psycopg.connect(POSTGRES, connect_timeout=3):
            pass
    except Exception as exc:  # noqa: BLE001 - any reason the server is not there
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL at {POSTGRES} is needed in CI: {exc}")
        pytest.skip(f"no PostgreSQL at {POSTGRES} ({type(exc).__name__}): SQLite half only")
    return POSTGRES


@pytest.fixture
def postgres_ledger() -> Iterator[str]:
    """The URL of a fresh, migrated safeact schema of its own on the test server."""
    dsn, drop = new_postgres_schema(postgres_or_skip())
    try:
        yield dsn
    finally:
        drop()


LOCATED = ("sqlite", "postgres")
"""The backends whose ledger a location names: another store or process can open it again."""

IN_PROCESS = (*LOCATED, "memory")
"""Every backend a test of one process can run on: the in-memory ledger too."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test of a ledger on each backend (``ledger_kind``) it can run on.

    A test that asks for ``store`` alone runs on every backend, the in-memory ledger
    included. One that asks for a location too (``any_ledger``), or is marked ``located``
    (it opens the store's ledger again by its location, or hands it to another process),
    runs on the backends a location names: the in-memory ledger has none.
    """
    if "ledger_kind" in metafunc.fixturenames:
        located = "any_ledger" in metafunc.fixturenames or bool(
            list(metafunc.definition.iter_markers("located"))
        )
        metafunc.parametrize("ledger_kind", LOCATED if located else IN_PROCESS, indirect=True)


@pytest.fixture
def traced(ledger: Path) -> Iterator[tuple[SqliteStore, list[str]]]:
    """A SQLite store whose connection of this thread reports every statement it runs."""
    with get_store(ledger) as store:
        assert isinstance(store, SqliteStore)
        statements: list[str] = []
        connection: sqlite3.Connection = store._connection()
        connection.set_trace_callback(each_statement_once(statements.append))
        yield store, statements


@pytest.fixture
def ledger_kind(request: pytest.FixtureRequest) -> str:
    """The backend of the test's ledger (``pytest_generate_tests`` gives each its run)."""
    kind: str = request.param
    return kind


@pytest.fixture
def any_ledger(ledger_kind: str, request: pytest.FixtureRequest, ledger: Path) -> str:
    """A fresh ledger on each backend a location names: a SQLite file, a PostgreSQL schema."""
    if ledger_kind == "sqlite":
        return str(ledger)
    dsn: str = request.getfixturevalue("postgres_ledger")
    return dsn


@pytest.fixture
def store(ledger_kind: str, request: pytest.FixtureRequest) -> Iterator[Store]:
    """An open store on a fresh ledger, on each backend: the in-memory one too, unless located.

    The location is asked for only here, not as a parameter: a parameter would put
    ``any_ledger`` in every test's fixtures, and no test would run on the in-memory ledger.
    """
    if ledger_kind == "memory":
        with memory_ledger() as opened:
            yield opened
        return
    location: str = request.getfixturevalue("any_ledger")
    with get_store(location) as opened:
        yield opened


def empty_postgres_schema(server: str = POSTGRES) -> tuple[str, Callable[[], None]]:
    """A schema of its own on ``server`` with nothing in it: its URL, and what drops it."""
    import psycopg  # the SQLite half runs without it

    schema = f"safeact_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    separator = "&" if "?" in server else "?"

    def drop() -> None:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")

    return f"{server}{separator}options=-csearch_path%3D{schema}", drop


@pytest.fixture
def empty_postgres() -> Iterator[str]:
    """The URL of a schema of its own on the test server with nothing in it."""
    dsn, drop = empty_postgres_schema(postgres_or_skip())
    try:
        yield dsn
    finally:
        drop()


def new_postgres_schema(server: str = POSTGRES) -> tuple[str, Callable[[], None]]:
    """A fresh, migrated safeact schema of its own on ``server``: its URL, and what drops it.

    For code that cannot use the ``postgres_ledger`` fixture (a Hypothesis state machine makes
    one ledger per example); call ``postgres_or_skip`` first.
    """
    from safeact._postgres import migrate_postgres

    dsn, drop = empty_postgres_schema(server)
    try:
        migrate_postgres(dsn)
    except BaseException:
        drop()
        raise
    return dsn, drop


def new_ledger(backend: str) -> tuple[str, Callable[[], None]]:
    """A fresh ledger on ``backend`` ("sqlite" or "postgres"): its location, and its removal.

    A SQLite file in a new temporary directory, or a PostgreSQL schema (``new_postgres_schema``).
    """
    if backend == "postgres":
        return new_postgres_schema()
    directory = Path(tempfile.mkdtemp())
    return str(directory / "agent.db"), lambda: shutil.rmtree(directory)


def require(backend: str) -> None:
    """Skip (fail, under CI) a test on ``backend`` when that backend's server is not there."""
    if backend == "postgres":
        postgres_or_skip()


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The address of a Temporal dev server, started once for the run that asks for it."""
    # Imported here: temporalio loads only in a run with a test that needs the server.
    from tests.temporal_server import dev_server

    with dev_server(tmp_path_factory.mktemp("temporal")) as address:
        yield address
