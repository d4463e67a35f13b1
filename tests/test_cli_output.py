"""Every command ends in one line and a non-zero exit when its output cannot be written.

A sweep of the commands with standard output on ``/dev/full`` (a full disk), past the file
size limit (``ulimit -f``), closed, and in an ASCII-only encoding: never a traceback. What
cannot be encoded is written escaped; what cannot be written is one line on stderr and exit
2; a closed standard output is refused before the ledger is touched.
"""

import os
import resource
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.test_cli import make_ledger

COMMANDS = [
    ["ls", "{ledger}"],
    ["ls", "--json", "{ledger}"],
    ["show", "{ledger}", "pay-1"],
    ["show", "--json", "{ledger}", "pay-1"],
    ["doubt", "{ledger}"],
    ["approvals", "{ledger}"],
    ["sagas", "{ledger}"],
    ["stats", "{ledger}"],
    ["reconcile", "{ledger}"],
    ["export", "{ledger}", "--before", "{now}"],
    ["purge", "{ledger}", "--older-than", "2000-01-01T00:00Z"],
    ["resolve", "{ledger}", "pay-2", "--not-happened"],
    ["resolve", "--keys-from", "{ledger}.keys", "{ledger}", "--not-happened"],
    ["migrate", "{ledger}"],
]
"""Each command with arguments that make it print, on a ledger of tests/test_cli.py ({now}:
the moment it runs, after every event of the ledger; ``{ledger}.keys``: its key in doubt,
as ``doubt --json`` names it)."""


def sweep(
    ledger: Path,
    command: list[str],
    stdout: int | None,
    *,
    file_size_limit: int | None = None,
    **env: str,
) -> tuple[int, str]:
    """Run ``command`` with ``stdout`` as its standard output (None: closed, by the shell).

    ``file_size_limit``: the bytes any file the command writes may grow to (``ulimit -f``).
    """

    def limit_file_size() -> None:
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    now = datetime.now(UTC).isoformat()
    args = [part.format(ledger=ledger, now=now) for part in command]
    safeact = [sys.executable, "-m", "safeact", *args]
    result = subprocess.run(
        safeact if stdout is not None else ["sh", "-c", 'exec "$@" >&-', "sh", *safeact],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, **env},
        preexec_fn=limit_file_size,
    )
    return result.returncode, result.stderr


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "agent.db"
    make_ledger(path)
    Path(f"{path}.keys").write_text('{"key": "pay-2", "attempt_id": "dead"}\n')
    return path


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: " ".join(command[:2]))
def test_a_command_on_a_full_disk_says_so_in_one_line(ledger: Path, command: list[str]) -> None:
    """Standard output on /dev/full: one line on stderr, exit 2, no traceback."""
    with Path("/dev/full").open("w") as full:
        code, said = sweep(ledger, command, full.fileno())
    assert (code, said.count("\n")) == (2, 1), said
    assert said.startswith("safeact: error: cannot write the output (No space left on device)")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: " ".join(command[:2]))
def test_a_command_past_its_file_size_limit_says_so_in_one_line(
    ledger: Path, command: list[str], tmp_path: Path
) -> None:
    """``ulimit -f``: standard output, a file already at the limit, takes no more; one line."""
    limit = 1 << 20  # above the ledger's own files, which the command may write
    printed = tmp_path / "out.txt"
    printed.write_bytes(b"\n" * limit)
    with printed.open("a") as out:
        code, said = sweep(ledger, command, out.fileno(), file_size_limit=limit)
    assert (code, said.count("\n")) == (2, 1), said
    assert said.startswith("safeact: error: cannot write the output (File too large)")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: " ".join(command[:2]))
def test_a_command_with_its_output_closed_is_refused_untouched(
    ledger: Path, command: list[str]
) -> None:
    """Standard output closed: refused in one line before the ledger is opened; unchanged."""
    before = ledger.read_bytes()
    code, said = sweep(ledger, command, None)
    assert (code, said) == (
        2,
        "safeact: error: standard output is closed; run the command with it open\n",
    )
    assert ledger.read_bytes() == before


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: " ".join(command[:2]))
def test_a_command_in_an_ascii_terminal_escapes_what_it_cannot_encode(
    ledger: Path, command: list[str], tmp_path: Path
) -> None:
    """PYTHONIOENCODING=ascii: the output is written, escaped where it must be; no traceback."""
    printed = tmp_path / "out.txt"
    with printed.open("w") as out:
        code, said = sweep(ledger, command, out.fileno(), PYTHONIOENCODING="ascii")
    assert "Traceback" not in said
    assert code in {0, 1}, said  # 1: something needs a decision (doubt, reconcile)
    assert printed.read_bytes().isascii()


def test_show_of_a_resolved_key_writes_its_arrow_escaped_in_ascii(
    ledger: Path, tmp_path: Path
) -> None:
    """The history's arrow is written escaped where the encoding has none."""
    printed = tmp_path / "out.txt"
    with printed.open("w") as out:
        code, _ = sweep(
            ledger, ["show", "{ledger}", "pay-1"], out.fileno(), PYTHONIOENCODING="ascii"
        )
    assert code == 0
    assert "\\u2192" in printed.read_text()
