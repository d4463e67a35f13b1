"""The ledger file: creation, permissions, refusal of foreign or newer files, resolve."""

import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import attrs
import pytest

from safeact import (
    DoubtReason,
    Event,
    InDoubt,
    SafeError,
    SafeTool,
    State,
    StoreError,
    Succeeded,
    Why,
    _schema,
    get_store,
    safe,
)
from safeact._schema import APPLICATION_ID
from safeact._sqlite import SqliteStore
from safeact._tables import SCHEMA_VERSION
from tests.actions import bury_owners


@pytest.fixture
def store(ledger: Path) -> Iterator[SqliteStore]:
    """These tests are about the SQLite file itself: SQLite only."""
    with SqliteStore(ledger) as opened:
        yield opened


def test_new_ledger_and_its_wal_are_owner_only(ledger: Path) -> None:
    """The ledger file and its WAL side files are created readable by the owner only."""
    with SqliteStore(ledger) as store:

        @safe(store)
        def act(key: str) -> int:
            return 1

        act("k")
        files = [ledger, ledger.with_name(ledger.name + "-wal")]
        modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in files}
    assert modes == {path.name: 0o600 for path in files}


def test_ledger_is_in_wal_mode(ledger: Path) -> None:
    """The ledger uses write-ahead logging, so readers never block the writer."""
    get_store(ledger).close()
    with sqlite3.connect(ledger) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def write_bytes_and_expect_refusal(path: Path, content: bytes, message: str) -> None:
    path.write_bytes(content)
    with pytest.raises(StoreError, match=message) as caught:
        get_store(path)
    assert str(path) in str(caught.value)
    assert path.read_bytes() == content


def test_file_that_is_not_sqlite_is_refused_untouched(ledger: Path) -> None:
    """A text file raises StoreError naming it, and its bytes are unchanged."""
    write_bytes_and_expect_refusal(ledger, b"these are my notes\n" * 100, "not a database")


def test_corrupt_ledger_is_refused_untouched(ledger: Path) -> None:
    """A ledger whose pages were overwritten raises StoreError naming it; nothing is written."""
    with SqliteStore(ledger) as store:

        @safe(store)
        def act(key: str) -> int:
            return 1

        act("k")
    content = bytearray(ledger.read_bytes())
    content[100:4096] = b"\xff" * (4096 - 100)
    write_bytes_and_expect_refusal(ledger, bytes(content), "malformed|not a database")


def test_foreign_sqlite_database_is_refused_untouched(ledger: Path) -> None:
    """Another program's SQLite database raises StoreError and is not changed."""
    with sqlite3.connect(ledger) as connection:
        connection.execute("CREATE TABLE notes (body TEXT)")
        connection.execute("INSERT INTO notes VALUES ('keep me')")
    connection.close()
    write_bytes_and_expect_refusal(ledger, ledger.read_bytes(), "not a safeact ledger")


def test_ledger_from_a_newer_version_is_refused_untouched(ledger: Path) -> None:
    """A ledger with a newer schema version raises StoreError and is not migrated."""
    get_store(ledger).close()
    with sqlite3.connect(ledger) as connection:
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    connection.close()
    write_bytes_and_expect_refusal(ledger, ledger.read_bytes(), "newer than this safeact")


def test_empty_file_becomes_a_ledger(ledger: Path) -> None:
    """An empty file (say, made by touch) is initialised as a ledger."""
    ledger.touch()
    get_store(ledger).close()
    with sqlite3.connect(ledger) as connection:
        assert connection.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    connection.close()


def test_missing_directory_is_a_store_error(tmp_path: Path) -> None:
    """A path in a directory that does not exist raises StoreError naming it."""
    with pytest.raises(StoreError, match="no-such-dir"):
        get_store(tmp_path / "no-such-dir" / "agent.db")


@contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """Make ``directory`` unwritable, even for root (who ignores permission bits)."""
    if os.geteuid() != 0:
        directory.chmod(0o555)
        try:
            yield
        finally:
            directory.chmod(0o755)
        return
    subprocess.run(["chattr", "+i", str(directory)], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(directory)], check=True)


def test_read_only_directory_is_a_store_error(tmp_path: Path) -> None:
    """A ledger that cannot be created in a read-only directory raises StoreError naming it."""
    locked = tmp_path / "locked"
    locked.mkdir()
    target = locked / "agent.db"
    with read_only(locked), pytest.raises(StoreError, match=f"{target}: cannot create"):
        get_store(target)
    assert not target.exists()


def test_closed_store_refuses_use(ledger: Path) -> None:
    """Using a closed store raises StoreError rather than a sqlite3 error."""
    store = get_store(ledger)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get("k")


def in_doubt_tool(store: SqliteStore, runs: list[str]) -> SafeTool[[], int]:
    @safe(store, name="act")
    def act(key: str) -> int:
        runs.append(key)
        if len(runs) == 1:
            raise KeyboardInterrupt
        return len(runs)

    with pytest.raises(KeyboardInterrupt):
        act("k")
    return act


def test_list_in_doubt_shows_what_needs_a_decision_oldest_first(
    store: SqliteStore, ledger: Path
) -> None:
    """IN_DOUBT keys and dead owners' ATTEMPTING keys are listed; live and settled ones not."""
    runs: list[str] = []
    act = in_doubt_tool(store, runs)
    store._claim("j", "act", "h", attempt_id="a", previous=None)
    bury_owners(store)
    store._claim("live", "act", "h", attempt_id="b", previous=None)

    @safe(store, name="ok")
    def ok(key: str) -> None:
        pass

    ok("settled")
    listed = [(r.key, r.state, r.doubt_reason) for r in store.list_in_doubt()]
    assert listed == [
        ("k", State.IN_DOUBT, DoubtReason.INTERRUPTED),
        ("j", State.IN_DOUBT, DoubtReason.CRASHED),
    ]
    assert isinstance(act("k"), InDoubt)


def test_resolve_happened_replays_the_given_result(store: SqliteStore) -> None:
    """resolve(happened=True, result=v) makes later calls replay v without running."""
    runs: list[str] = []
    act = in_doubt_tool(store, runs)
    record = store.resolve("k", happened=True, result=41)
    assert record.state is State.SUCCEEDED
    assert act("k") == Succeeded("k", 41, replayed=True)
    assert runs == ["k"]
    assert store.list_in_doubt() == []


def test_resolve_not_happened_lets_the_next_call_run(store: SqliteStore) -> None:
    """resolve(happened=False) releases the key: the next call runs the action once."""
    runs: list[str] = []
    act = in_doubt_tool(store, runs)
    assert store.resolve("k", happened=False, force=True).state is State.RELEASED
    assert act("k") == Succeeded("k", 2)
    assert act("k") == Succeeded("k", 2, replayed=True)
    assert runs == ["k", "k"]


def test_resolve_attempting_key(store: SqliteStore) -> None:
    """A key left ATTEMPTING (its caller killed) can be resolved directly."""
    store._claim("k", "act", "h", attempt_id="a", previous=None)
    bury_owners(store)
    assert store.resolve("k", happened=True, result=[1]).result == [1]


@pytest.mark.parametrize("happened", [True, False])
def test_resolving_a_settled_or_unknown_key_is_refused(store: SqliteStore, happened: bool) -> None:
    """Only unsettled keys can be resolved; others raise SafeError and are unchanged."""

    @safe(store)
    def act(key: str) -> int:
        return 1

    act("k")

    def decide(key: str) -> None:
        if happened:
            store.resolve(key, happened=True, result=2)
        else:
            store.resolve(key, happened=False)

    with pytest.raises(SafeError, match="not in doubt"):
        decide("k")
    with pytest.raises(SafeError, match="no such key"):
        decide("unknown")
    assert act("k") == Succeeded("k", 1, replayed=True)


def test_resolve_refuses_result_with_not_happened(store: SqliteStore) -> None:
    """A result with happened=False is a ValueError."""
    store._claim("k", "act", "h", attempt_id="a", previous=None)
    with pytest.raises(ValueError, match="only with happened=True"):
        store.resolve("k", happened=False, result=1)


def test_resolve_refuses_infinity(store: SqliteStore) -> None:
    """Infinity is refused as a resolved result: the ledger holds standard JSON only."""
    store._claim("k", "act", "h", attempt_id="a", previous=None)
    why = "ValueError: Out of range float values are not JSON compliant"
    with pytest.raises(ValueError, match=rf"^cannot store inf as a result \({why}\); pass"):
        store.resolve("k", happened=True, result=float("inf"))


def test_resolve_refuses_a_result_that_is_not_json(store: SqliteStore) -> None:
    """A result that cannot be stored is a ValueError and the key stays unsettled."""
    store._claim("k", "act", "h", attempt_id="a", previous=None)
    with pytest.raises(ValueError, match="cannot store"):
        store.resolve("k", happened=True, result=object())
    record = store.get("k")
    assert record is not None
    assert record.state is State.ATTEMPTING


def test_claim_is_synced_before_the_action_and_finish_is_not(
    ledger: Path, fsyncs: list[str]
) -> None:
    """The ATTEMPTING claim's WAL is fsynced before the action runs; the outcome is not."""
    with SqliteStore(ledger) as store:

        @safe(store)
        def act(key: str) -> int:
            fsyncs.append("act")
            return 1

        act("k")
    assert fsyncs == ["agent.db-wal", "act"]


def test_fsync_attempts_false_never_syncs_a_claim(ledger: Path, fsyncs: list[str]) -> None:
    """The documented relaxation: nothing is fsynced for a claim."""
    with SqliteStore(ledger, fsync_attempts=False) as store:
        store._claim("k", "act", "h", attempt_id="a", previous=None)
    assert fsyncs == []


def test_sqlite_itself_never_syncs_a_commit(store: SqliteStore) -> None:
    """Commits are synchronous=NORMAL: the syncs that make a claim durable are safeact's."""
    assert store._connection().execute("PRAGMA synchronous").fetchone() == (1,)


def test_version_is_the_project_version() -> None:
    """safeact.__version__ is the version in pyproject.toml."""
    import tomllib

    import safeact

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    assert safeact.__version__ == tomllib.loads(pyproject.read_text())["project"]["version"]
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = safeact.no_such_name  # type: ignore[attr-defined] # the misuse under test


def test_stale_resolve_does_not_touch_a_newer_attempt(store: SqliteStore) -> None:
    """resolve(attempt_id=old) fails once the key was released and claimed again."""
    store._claim("k", "act", "h", attempt_id="first", previous=None)
    bury_owners(store)
    released = store.resolve("k", happened=False, attempt_id="first")
    store._claim("k", "act", "h", attempt_id="second", previous=released)
    bury_owners(store)
    with pytest.raises(SafeError, match=r"attempt first is over.*now at attempt second"):
        store.resolve("k", happened=False, attempt_id="first")
    record = store._stored("k")  # the row as written: the stale resolve changed nothing
    assert record is not None
    assert (record.state, record.attempt_id) == (State.ATTEMPTING, "second")
    assert store.resolve("k", happened=True, result=1, attempt_id="second").result == 1


def test_resolve_happened_needs_a_result(store: SqliteStore) -> None:
    """happened=True without result= is a ValueError: a replay needs a value."""
    store._claim("k", "act", "h", attempt_id="a", previous=None)
    bury_owners(store)
    with pytest.raises(ValueError, match="needs result="):
        store.resolve("k", happened=True)
    assert store.resolve("k", happened=True, result=None).state is State.SUCCEEDED


def test_stale_claim_of_a_released_key_loses(store: SqliteStore) -> None:
    """Only one caller takes a RELEASED row over; a claim based on an older row gets None."""
    store._claim("k", "act", "h", attempt_id="a", previous=None)
    bury_owners(store)
    released = store.resolve("k", happened=False)
    assert store._claim("k", "act", "h", attempt_id="b", previous=released) is not None
    bury_owners(store)
    assert store._claim("k", "act", "h", attempt_id="c", previous=released) is None
    released_again = store.resolve("k", happened=False)
    assert store._claim("k", "act", "h", attempt_id="d", previous=released) is None
    assert store._claim("k", "act", "h", attempt_id="e", previous=released_again) is not None


def test_claim_of_a_finished_key_loses(store: SqliteStore) -> None:
    """A RELEASED row that its owner finished meanwhile cannot be claimed from the old view."""
    store._claim("k", "act", "h", attempt_id="a", previous=None)
    bury_owners(store)
    released = store.resolve("k", happened=False)
    store._finish("k", "a", state=State.SUCCEEDED, result=1)
    assert store._claim("k", "act", "h", attempt_id="b", previous=released) is None


def test_in_doubt_mark_never_overwrites_a_finished_attempt(store: SqliteStore) -> None:
    """A caller that saw ATTEMPTING but marks after the owner finished changes nothing."""
    store._claim("k", "act", "h", attempt_id="a", previous=None)
    store._finish("k", "a", state=State.SUCCEEDED, result=1)
    store._mark_in_doubt("k", "a", DoubtReason.CRASHED)
    record = store.get("k")
    assert record is not None
    assert record.state is State.SUCCEEDED


def test_claim_of_a_released_key_is_synced(ledger: Path, fsyncs: list[str]) -> None:
    """Taking over a RELEASED row is an ATTEMPTING commit too: fsynced before it returns."""
    with SqliteStore(ledger) as store:
        store._claim("k", "act", "h", attempt_id="a", previous=None)
        bury_owners(store)
        released = store.resolve("k", happened=False)
        fsyncs.clear()
        assert store._claim("k", "act", "h", attempt_id="b", previous=released) is not None
    assert fsyncs == ["agent.db-wal"]


def test_an_operators_resolve_and_amend_are_synced(ledger: Path, fsyncs: list[str]) -> None:
    """A decision an operator made is on disk when the command returns: never made twice."""
    with SqliteStore(ledger) as store:
        store._claim("k", "act", "h", attempt_id="a", previous=None)
        bury_owners(store)
        fsyncs.clear()
        store.resolve("k", happened=True, result=1)
        assert fsyncs == ["agent.db-wal"]
        fsyncs.clear()
        store.amend("k", result=2)
        assert fsyncs == ["agent.db-wal"]


def test_mark_in_doubt_says_whether_the_row_is_marked_and_writes_only_a_change(
    ledger: Path,
) -> None:
    """True when the attempt is IN_DOUBT for the reason now; False when it moved on.

    Each change is one event; a repeated mark adds none.
    """
    with SqliteStore(ledger) as store:
        assert store._mark_in_doubt("k", "a", DoubtReason.LEASE_EXPIRED) is False
        store._claim("k", "act", "h", attempt_id="a", previous=None)
        assert store._mark_in_doubt("k", "other", DoubtReason.LEASE_EXPIRED) is False
        assert len(store.history("k")) == 1
        assert store._mark_in_doubt("k", "a", DoubtReason.LEASE_EXPIRED) is True
        marked = store.history("k")[-1]
        assert (marked.from_state, marked.to_state, marked.why, marked.attempt_id) == (
            State.ATTEMPTING,
            State.IN_DOUBT,
            Why.LEASE_EXPIRED,
            "a",
        )
        assert store._mark_in_doubt("k", "a", DoubtReason.LEASE_EXPIRED) is True
        assert store.history("k")[-1] == marked
        store._finish("k", "a", state=State.SUCCEEDED, result=1)
        assert store._mark_in_doubt("k", "a", DoubtReason.LEASE_EXPIRED) is False


def test_a_probes_note_is_an_event_of_the_attempt_that_changes_no_state(ledger: Path) -> None:
    """A note keeps an unsettled attempt's state and names the attempt.

    IN_DOUBT, or ATTEMPTING under a dead owner; another attempt, or a settled key, gets none.
    """
    with SqliteStore(ledger) as store:
        store._claim("doubted", "act", "h", attempt_id="a", previous=None)
        store._mark_in_doubt("doubted", "a", DoubtReason.LEASE_EXPIRED)
        store._claim("crashed", "act", "h", attempt_id="b", previous=None)
        bury_owners(store)
        for key, state in (("doubted", State.IN_DOUBT), ("crashed", State.ATTEMPTING)):
            record, row = store.get(key), store._stored(key)
            assert record is not None
            noted = store._note(record, Why.PROBE_UNKNOWN, "cannot tell")
            assert noted is not None
            assert store.history(key)[-1] == noted
            assert (noted.from_state, noted.to_state, noted.attempt_id, noted.note) == (
                state,
                state,
                record.attempt_id,
                "cannot tell",
            )
            assert store._stored(key) == row
        crashed = store.get("crashed")
        assert crashed is not None
        before = store.history("crashed")
        other = attrs.evolve(crashed, attempt_id="an-older-one")
        assert store._note(other, Why.PROBE_UNKNOWN, "not this attempt") is None
        unknown = attrs.evolve(crashed, key="nope")
        assert store._note(unknown, Why.PROBE_UNKNOWN, "no such key") is None
        assert store.history("crashed") == before
        doubted = store.get("doubted")
        assert doubted is not None
        store.resolve("doubted", happened=True, result=1)
        settled = store.history("doubted")
        assert store._note(doubted, Why.PROBE_UNKNOWN, "too late") is None
        assert store.history("doubted") == settled


def test_settling_an_attempt_that_moved_on_changes_nothing(ledger: Path) -> None:
    """A verdict about an unknown key, another attempt or a settled key is not applied."""
    with SqliteStore(ledger) as store:
        store._claim("k", "act", "h", attempt_id="a", previous=None)
        bury_owners(store)
        record, row = store.get("k"), store._stored("k")
        assert record is not None
        for stale in (attrs.evolve(record, key="nope"), attrs.evolve(record, attempt_id="b")):
            assert store._settle(stale, State.SUCCEEDED, "1", why=Why.RECONCILED, note=None) is None
        assert store._stored("k") == row
        assert store._settle(record, State.SUCCEEDED, "1", why=Why.RECONCILED, note=None)
        settled = store.history("k")
        assert store._settle(record, State.RELEASED, None, why=Why.RECONCILED, note=None) is None
        assert store.history("k") == settled


def test_who_settled_and_what_a_forced_release_overrode_are_recorded(ledger: Path) -> None:
    """A probe's verdict is the process's; a forced release says what the operator overrode."""
    with SqliteStore(ledger) as store:
        store._claim("probed", "act", "h", attempt_id="a", previous=None)
        store._claim("forced", "act", "h", attempt_id="b", previous=None)
        store._mark_in_doubt("forced", "b", DoubtReason.LEASE_EXPIRED)
        bury_owners(store)
        probed = store.get("probed")
        assert probed is not None
        event = store._settle(probed, State.SUCCEEDED, "1", why=Why.RECONCILED, note="found it")
        assert isinstance(event, Event)
        assert (event.by, event.note) == ("process", "found it")
        store._claim("lease", "act", "h", attempt_id="c", previous=None)
        store._mark_in_doubt("lease", "c", DoubtReason.LEASE_EXPIRED)
        store.resolve("lease", happened=False, force=True)
        forced = store.history("lease")[-1]
        assert forced.why is Why.FORCED_RELEASE
        assert forced.by == "operator"
        assert forced.note is not None
        assert forced.note.startswith("forced: the operator asserts it is over, though ")
        assert ";" not in forced.note


def test_a_mark_with_what_went_wrong_keeps_it_as_the_rows_error(ledger: Path) -> None:
    """A result that could not be stored says why in the row; a plain mark adds no error."""
    with SqliteStore(ledger) as store:
        for key in ("detailed", "plain"):
            store._claim(key, "act", "h", attempt_id=key, previous=None)
        store._mark_in_doubt("detailed", "detailed", DoubtReason.RESULT_NOT_STORED, detail="full")
        store._mark_in_doubt("plain", "plain", DoubtReason.RESULT_NOT_STORED)
        detailed, plain = store._stored("detailed"), store._stored("plain")
        assert detailed is not None
        assert plain is not None
        assert (detailed.error_type, detailed.error_message) == ("safeact.OutcomeNotStored", "full")
        assert (plain.error_type, plain.error_message) == (None, None)


CRASHED_WRITER = """
import os, signal, sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("PRAGMA journal_mode = WAL")
for pragma in sys.argv[2:]:
    connection.execute(f"PRAGMA {pragma}")
connection.execute("CREATE TABLE notes (body TEXT)")
connection.execute("INSERT INTO notes VALUES ('keep me')")
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize(
    ("pragmas", "message"),
    [
        (["application_id = 7"], "not a safeact ledger"),
        ([f"application_id = {APPLICATION_ID}", "user_version = 99"], "newer than"),
    ],
)
def test_refused_database_with_a_hot_wal_is_untouched(
    tmp_path: Path, pragmas: list[str], message: str
) -> None:
    """A WAL database whose writer was killed keeps its file and its WAL byte for byte."""
    path = tmp_path / "other.db"
    writer = subprocess.run(
        [sys.executable, "-c", CRASHED_WRITER, str(path), *pragmas], check=False
    )
    assert writer.returncode == -signal.SIGKILL
    wal = path.with_name(path.name + "-wal")
    before = (path.read_bytes(), wal.read_bytes())
    with pytest.raises(StoreError, match=message):
        get_store(path)
    assert (path.read_bytes(), wal.read_bytes()) == before


def test_empty_database_of_another_program_is_refused(ledger: Path) -> None:
    """A database with no tables but its own user_version belongs to someone else."""
    with sqlite3.connect(ledger) as connection:
        connection.execute("PRAGMA user_version = 7")
    connection.close()
    write_bytes_and_expect_refusal(ledger, ledger.read_bytes(), "not a safeact ledger")


def test_nul_in_the_path_is_a_store_error(tmp_path: Path) -> None:
    """A path with a NUL byte raises StoreError, not a bare ValueError."""
    with pytest.raises(StoreError, match="cannot create"):
        get_store(f"{tmp_path}/a\0b.db")


def test_connections_of_finished_threads_are_closed(store: SqliteStore) -> None:
    """A thread's connection closes when the thread ends: 50 threads do not hold 50 files."""

    def open_files() -> int:
        return len(list(Path("/proc/self/fd").iterdir()))

    before = open_files()
    for _ in range(50):
        worker = threading.Thread(target=store.get, args=("k",))
        worker.start()
        worker.join()
    assert open_files() <= before + 3


def test_switch_to_wal_waits_for_a_reader_of_a_new_ledger(
    ledger: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ledger not yet in WAL mode, read by another process, is switched once the reader goes.

    SQLite refuses such a switch with BUSY rather than waiting; the store retries. The retry's
    pause is where the reader is let go.
    """
    get_store(ledger).close()
    with sqlite3.connect(ledger) as connection:
        connection.execute("PRAGMA journal_mode = DELETE")
    connection.close()
    reader = sqlite3.connect(ledger, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM calls").fetchone()
    pauses: list[float] = []

    class Clock:
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def sleep(seconds: float) -> None:
            pauses.append(seconds)
            reader.execute("COMMIT")

    monkeypatch.setattr(_schema, "BUSY_TIMEOUT", 0.05)
    monkeypatch.setattr(_schema, "time", Clock)
    try:
        get_store(ledger).close()
    finally:
        reader.close()
    assert len(pauses) == 1
    with sqlite3.connect(ledger) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    connection.close()


@pytest.mark.parametrize(
    ("lease", "heartbeat", "said"),
    [
        (0, None, "lease must be more than 0 seconds"),
        (1.0, 1.0, "heartbeat < lease"),
        (1.0, 0, "heartbeat must be more than 0 seconds"),
    ],
)
def test_lease_and_heartbeat_must_make_sense(
    ledger: Path, lease: float, heartbeat: float | None, said: str
) -> None:
    """A heartbeat must be positive and shorter than a positive lease."""
    with pytest.raises(ValueError, match=said):
        get_store(ledger, lease=lease, heartbeat=heartbeat)


def test_store_and_tool_say_what_they_are(store: SqliteStore) -> None:
    """Repr names the ledger file and the tool."""

    @safe(store, name="refunds.send")
    def send(key: str) -> None:
        pass

    assert repr(store) == f"SqliteStore({str(store.path)!r})"
    assert repr(send) == f"<SafeTool refunds.send on {store!r}>"
    with pytest.raises(ValueError, match="wait must be 0 or more"):
        safe(store, wait=-1)


def test_resolve_refuses_a_key_whose_owner_is_running(store: SqliteStore) -> None:
    """A live owner's ATTEMPTING key is not in doubt: resolve refuses it and changes nothing."""
    store._claim("k", "act", "h", attempt_id="a", previous=None)
    with pytest.raises(SafeError, match=r"running right now \(process \d+ on "):
        store.resolve("k", happened=False)
    record = store.get("k")
    assert record is not None
    assert record.state is State.ATTEMPTING
    assert store.list_in_doubt() == []


@pytest.fixture
def far_from_utc() -> Iterator[None]:
    """The process's local zone, for the test: five and a half hours ahead of UTC."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "IST-5:30"  # POSIX: the zone's name, then its offset west of UTC
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_times_are_stored_in_utc_whatever_the_local_zone(ledger: Path, far_from_utc: None) -> None:
    """The ledger's times are text compared as text (leases, cutoffs): all in UTC, always."""

    @safe(ledger, name="zoned")
    def act(key: str) -> int:
        return 1

    act("k")
    with closing(sqlite3.connect(ledger)) as db:
        times = db.execute(
            "SELECT attempted_at, finished_at, lease_until FROM calls WHERE key = 'k'"
        ).fetchone()
    assert time.localtime().tm_gmtoff == 5.5 * 3600
    assert [when[-6:] for when in times] == ["+00:00"] * 3


@pytest.mark.parametrize(
    ("column", "field"), [("owner_boot", "boot_id"), ("owner_pidns", "pid_namespace")]
)
def test_an_owner_of_another_kernel_or_pid_namespace_is_never_proven_gone_here(
    store: SqliteStore, column: str, field: str
) -> None:
    """Its process id names another process, or none, here: only its lease may decide."""

    @safe(store, name="elsewhere")
    def act(key: str) -> int:
        return 1

    store._claim("k", "elsewhere", act._digest("k", (), {}), attempt_id="a", previous=None)
    with store._transaction(sync=False) as db:
        # Same host name, but recorded apart from this process; its pid names nothing here.
        db.execute(f"UPDATE calls SET {column} = 'elsewhere', owner_pid = ?", (2**22 + 1,))  # noqa: S608 - a parameter of the test
    seen = store.get("k")
    assert seen is not None
    assert (seen.state, getattr(seen.owner, field)) == (
        State.ATTEMPTING,
        "elsewhere",
    )
