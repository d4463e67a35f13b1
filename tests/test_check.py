"""``safeact check``: every row read as safeact reads it, a batch at a time; corrupt ones listed."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from safeact._cli import main
from tests.test_corrupt_rows import LATE, add_event, corrupt, paid, spoil, two_sagas

pytestmark = pytest.mark.located


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().out


def test_a_sound_ledger_is_checked_whole_and_passes(
    any_ledger: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every row of every table is read and counted; nothing corrupt: exit 0."""
    two_sagas(any_ledger)
    paid(any_ledger, "a", "k")
    code, out = cli(capsys, "check", any_ledger, "--json")
    (summary,) = map(json.loads, out.splitlines())
    assert code == 0
    assert summary["corrupt"] == 0
    assert summary["checked"]["calls"] == 4  # two keys and the two sagas' steps
    assert summary["checked"]["sagas"] == 2
    assert summary["checked"]["history"] >= 8
    assert cli(capsys, "check", any_ledger)[1].endswith(": none corrupt\n")


def test_each_table_s_corrupt_row_is_listed_and_exit_is_1(
    any_ledger: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key, an event, a saga and a late completion changed outside safeact: each is named."""
    two_sagas(any_ledger)
    paid(any_ledger, "a", "k")
    spoil(any_ledger, "a", "owner_pid", 0)
    add_event(any_ledger, why="sulked")
    corrupt(any_ledger, "UPDATE sagas SET started_at = 'dawn' WHERE saga_id = 'order-1'")
    corrupt(any_ledger, LATE, "old", "succeeded", "whenever")
    code, out = cli(capsys, "check", any_ledger, "--json")
    *found, summary = map(json.loads, out.splitlines())
    assert code == 1
    assert {(f["table"], f["key"], f["column"]) for f in found} == {
        ("calls", "a", "owner_pid"),
        ("history", "k", "why"),
        ("sagas", "order-1", "started_at"),
        ("late_completions", "k", "finished_at"),
    }
    assert summary["corrupt"] == 4
    code, out = cli(capsys, "check", any_ledger)
    assert "calls  a  owner_pid is 0, not a process id (a positive integer)" in out
    assert out.endswith(": 4 corrupt\n")


def test_rows_are_read_in_batches_no_larger_than_asked(any_ledger: str) -> None:
    """``--batch 2``: each read holds at most two rows, and together they hold every row once."""
    paid(any_ledger, *(f"k{n}" for n in range(7)))
    from safeact import get_store

    with get_store(any_ledger) as store:
        batches = list(store._check_rows(2))
        ((keys,),) = store._read("SELECT count(*) FROM calls", ())
        ((events,),) = store._read("SELECT count(*) FROM history", ())
    assert max(b.rows for b in batches) == 2
    assert sum(b.rows for b in batches if b.table == "calls") == keys == 7
    assert sum(b.rows for b in batches if b.table == "history") == events


def test_a_batch_out_of_range_is_refused(
    any_ledger: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--batch 0`` or over 10,000: one line, exit 2."""
    paid(any_ledger, "k")
    for batch in ("0", "10001", "²"):
        with pytest.raises(SystemExit) as exited:
            main(["check", any_ledger, "--batch", batch])
        assert exited.value.code == 2
        assert "is not a batch: give a number of rows from 1 to 10,000" in capsys.readouterr().err


def test_on_a_terminal_it_says_how_far_it_got(ledger: Path) -> None:
    """Progress goes to a terminal's stderr, rewritten in place; never into a pipe."""
    paid(ledger, "k")
    terminal, seat = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "safeact", "check", str(ledger)],
            stdout=subprocess.PIPE,
            stderr=seat,
            check=False,
            timeout=60,
        )
        os.close(seat)
        said = b""
        while True:
            try:
                chunk = os.read(terminal, 4096)
            except OSError:  # the terminal's other end is closed: all was read
                break
            if not chunk:
                break
            said += chunk
    finally:
        os.close(terminal)
    assert done.returncode == 0
    assert b"\rchecked 1 rows (calls)" in said
    piped = subprocess.run(
        [sys.executable, "-m", "safeact", "check", str(ledger)],
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert piped.stderr == b""
