"""A SQLite ledger is its file, not a path: a second name is refused, a symlink is the same.

SQLite names the WAL after the path it opened: under two hard-linked names one file has
two WALs, and neither process sees the other's claims. SQLite only here.
"""

import os
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from safeact import StoreError, Succeeded, get_store, safe
from safeact._cli import main
from tests.actions import count_effects
from tests.processes import child_command, report, run_child

KEY = "refund-8842"
RECEIPT = {"to": "a@example.com", "amount": 50}


def start_owner(ledger: Path, effects: Path) -> subprocess.Popen[str]:
    """Start a child that claims KEY, acts, prints "acting" and holds until told to go on."""
    owner = subprocess.Popen(
        child_command(ledger, effects, KEY, "--hold"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert owner.stdout is not None
    assert owner.stdout.readline() == "acting\n", owner.stderr
    return owner


def side_files(ledger: Path) -> list[Path]:
    """The WAL and index files beside ``ledger`` that exist."""
    return [p for p in (Path(f"{ledger}-wal"), Path(f"{ledger}-shm")) if p.exists()]


def test_a_process_on_a_hard_link_is_refused_while_another_acts_so_the_action_runs_once(
    tmp_path: Path,
) -> None:
    """An owner acts under one name; a process under a hard link made meanwhile is refused."""
    ledger, link, effects = tmp_path / "agent.db", tmp_path / "other.db", tmp_path / "effects"
    owner = start_owner(ledger, effects)
    os.link(ledger, link)
    second = run_child(link, effects, KEY, "--wait", "1")
    owner.communicate("\n", timeout=60)
    assert second.returncode != 0
    assert "2 names (hard links)" in second.stderr
    assert count_effects(effects, KEY) == 1
    assert side_files(link) == []


@pytest.mark.parametrize("name", ["agent.db", "other.db"])
def test_a_hard_linked_ledger_is_refused_under_either_name_untouched(
    tmp_path: Path, name: str
) -> None:
    """Opening a ledger file that has two names is refused under each, and writes nothing."""
    ledger = tmp_path / "agent.db"
    get_store(ledger).close()
    os.link(ledger, tmp_path / "other.db")
    before = ledger.read_bytes()
    with pytest.raises(StoreError, match=r"2 names \(hard links\).*symbolic link"):
        get_store(tmp_path / name)
    assert ledger.read_bytes() == before
    assert side_files(tmp_path / name) == []


def test_a_claim_is_refused_while_the_open_ledger_has_a_second_name(ledger: Path) -> None:
    """A hard link made after the store opened: claims are refused until it is removed."""
    link = ledger.with_name("other.db")
    ran: list[str] = []
    with get_store(ledger) as store:

        @safe(store)
        def act(key: str) -> int:
            ran.append(key)
            return 1

        os.link(ledger, link)
        with pytest.raises(StoreError, match="2 names"):
            act("k")
        refused = store.get("k")
        link.unlink()
        assert act("k") == Succeeded("k", 1)
    assert (refused, ran) == (None, ["k"])


def test_a_claim_is_refused_once_the_open_ledger_was_moved(ledger: Path) -> None:
    """A ledger renamed while open: claims under the old name are refused, nothing runs."""
    ran: list[str] = []
    with get_store(ledger) as store:

        @safe(store)
        def act(key: str) -> int:
            ran.append(key)
            return 1

        act("before")  # the connection has the WAL open: SQLite itself goes on using it
        ledger.rename(ledger.with_name("moved.db"))
        with pytest.raises(StoreError, match="no longer at this path"):
            act("k")
    assert ran == ["before"]


def test_a_ledger_open_here_is_refused_under_its_new_name_in_the_same_process(
    ledger: Path,
) -> None:
    """Renamed while a store has it open, the file is refused under its new name here."""
    moved = ledger.with_name("moved.db")
    with get_store(ledger):
        ledger.rename(moved)
        with pytest.raises(StoreError, match=f"open already as {ledger}"):
            get_store(moved)
    assert side_files(moved) == []


def test_a_new_connection_never_makes_a_ledger_where_the_open_one_was(ledger: Path) -> None:
    """A thread's first statement after the ledger moved is refused; no new file appears."""
    with get_store(ledger) as store:
        ledger.rename(ledger.with_name("moved.db"))
        raised: list[BaseException] = []

        def read() -> None:
            try:
                store.get("k")
            except StoreError as exc:
                raised.append(exc)

        reader = threading.Thread(target=read)
        reader.start()
        reader.join()
    assert [type(exc) for exc in raised] == [StoreError]
    assert not ledger.exists()


@pytest.mark.parametrize(
    ("suffix", "make"),
    [("-wal", os.link), ("-shm", os.link), ("-wal", os.symlink)],
    ids=["hard-linked-wal", "hard-linked-shm", "symlinked-wal"],
)
def test_a_wal_or_index_that_is_not_the_ledgers_own_file_is_refused(
    ledger: Path, suffix: str, make: Callable[[Path, Path], None]
) -> None:
    """A WAL or index that is another file's name too is refused; that file is untouched."""
    get_store(ledger).close()
    foreign = ledger.with_name("foreign")
    foreign.write_bytes(b"someone else's")
    make(foreign, Path(f"{ledger}{suffix}"))
    with pytest.raises(StoreError, match=f"{suffix}: the ledger's"):
        get_store(ledger)
    assert foreign.read_bytes() == b"someone else's"


def test_a_symlink_is_the_same_ledger_as_its_file_across_processes(tmp_path: Path) -> None:
    """An owner acts under a symlink; a process under the real path sees its claim, waits."""
    ledger, link, effects = tmp_path / "agent.db", tmp_path / "link.db", tmp_path / "effects"
    get_store(ledger).close()
    link.symlink_to(ledger)
    owner = start_owner(link, effects)
    waited = report(run_child(ledger, effects, KEY, "--wait", "0.2"))
    owner.communicate("\n", timeout=60)
    replayed = report(run_child(ledger, effects, KEY))
    assert (waited["kind"], waited["reason"]) == ("InDoubt", "in_flight")
    assert replayed == {"kind": "Succeeded", "replayed": True, "value": RECEIPT}
    assert count_effects(effects, KEY) == 1


@pytest.mark.parametrize("command", ["ls", "migrate"])
def test_the_command_line_refuses_a_hard_linked_ledger(
    ledger: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command goes through the same check: exit 2, saying why."""
    get_store(ledger).close()
    link = ledger.with_name("other.db")
    os.link(ledger, link)
    assert main([command, str(link)]) == 2
    assert "2 names (hard links)" in capsys.readouterr().err
    assert side_files(link) == []
