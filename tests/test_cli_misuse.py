"""Every misuse of the command line ends in one line and a non-zero exit, never a traceback.

Dates out of range, bytes that are not UTF-8, a --result too deep or too long, a key that
starts with '-', keys that would print alike, --help and --version that cannot be written,
and the SQLite errors of a full disk or a directory where the WAL cannot be created: each
run as users run it, in its own process.
"""

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safeact import get_store
from safeact._cli import moment, parser
from safeact._cli_text import escaped
from tests.actions import bury_owners
from tests.test_cli import assert_refused, columns, make_ledger, run
from tests.test_cli_output import sweep


def run_words(*args: str | bytes | Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m safeact ARGS``, words given as bytes passed as they are."""
    return subprocess.run(
        [sys.executable, "-m", "safeact", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def subcommands() -> dict[str, argparse.ArgumentParser]:
    """Each command's own parser, by name."""
    found = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(found.choices)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    path = tmp_path / "agent.db"
    make_ledger(path)
    return path


# Dates out of range.

DATE_OPTIONS = {
    ("ls", "--since"): [],
    ("purge", "--older-than"): [],
    ("archive", "--before"): ["--to", "history.jsonl"],
    ("export", "--before"): [],
}
"""Every option that takes a date, with what else its command needs."""


def test_every_date_option_is_swept() -> None:
    """The options below are all those of the command line that take a date."""
    found = {
        (name, action.option_strings[0])
        for name, sub in subcommands().items()
        for action in sub._actions
        if action.type is moment
    }
    assert found == set(DATE_OPTIONS)


@pytest.mark.parametrize("date", ["0001-01-01T00:00+01:00", "9999-12-31T23:00-05:00"])
@pytest.mark.parametrize(("command", "option"), DATE_OPTIONS, ids=map(" ".join, DATE_OPTIONS))
def test_a_date_out_of_range_in_utc_is_a_usage_error(
    ledger: Path, command: str, option: str, date: str
) -> None:
    """A date that falls before the year 1 or after 9999 in UTC: one line, exit 2."""
    result = run(command, ledger, option, date, *DATE_OPTIONS[command, option])
    assert_refused(result, f"argument {option}: '{date}' is out of range", "in UTC")


# Bytes that are not UTF-8.

NOT_UTF8 = {
    "show KEY": (["show", "{ledger}", b"pay-\xff"], "argument KEY", "no key can match it"),
    "resolve KEY": (
        ["resolve", "{ledger}", b"\xff", "--not-happened"],
        "argument KEY",
        "no key can match it",
    ),
    "amend KEY": (["amend", "{ledger}", b"\xff", "--result", "1"], "argument KEY", "no key"),
    "resolve --note": (
        ["resolve", "{ledger}", "pay-2", "--not-happened", "--note", b"\xff"],
        "argument --note",
        "so it cannot be stored",
    ),
    "amend --note": (
        ["amend", "{ledger}", "pay-1", "--result", "1", "--note", b"\xff"],
        "argument --note",
        "so it cannot be stored",
    ),
    "resolve --attempt": (
        ["resolve", "{ledger}", "pay-2", "--not-happened", "--attempt", b"\xff"],
        "argument --attempt",
        "no attempt id can match it",
    ),
    "ls --tool": (["ls", "{ledger}", "--tool", b"\xff"], "argument --tool", "no tool's name"),
    "resolve --result": (
        ["resolve", "{ledger}", "pay-2", "--happened", "--result", b'"\xff"'],
        "argument --result",
        "so it is not JSON text",
    ),
    "amend --result": (
        ["amend", "{ledger}", "pay-1", "--result", b'"\xff"'],
        "argument --result",
        "so it is not JSON text",
    ),
    "approvals --tool": (
        ["approvals", "{ledger}", "--tool", b"\xff"],
        "argument --tool",
        "no tool's name",
    ),
    "approve KEY": (["approve", "{ledger}", b"\xff"], "argument KEY", "no key can match it"),
    "approve --by": (
        ["approve", "{ledger}", "pay-1", "--by", b"\xff"],
        "argument --by",
        "so it cannot be stored",
    ),
    "approve --note": (
        ["approve", "{ledger}", "pay-1", "--by", "grace", "--note", b"\xff"],
        "argument --note",
        "so it cannot be stored",
    ),
    "deny KEY": (["deny", "{ledger}", b"\xff"], "argument KEY", "no key can match it"),
    "deny --by": (
        ["deny", "{ledger}", "pay-1", "--by", b"\xff"],
        "argument --by",
        "so it cannot be stored",
    ),
    "deny --note": (
        ["deny", "{ledger}", "pay-1", "--by", "grace", "--note", b"\xff"],
        "argument --note",
        "so it cannot be stored",
    ),
}
"""Each text argument that reaches the ledger, given a byte that is not UTF-8."""

TEXT_REACHING_THE_LEDGER = {"key", "note", "attempt", "tool", "result", "by"}


def test_every_text_argument_reaching_the_ledger_is_swept() -> None:
    """The cases above are every argument whose text the ledger stores or matches.

    A ledger's path, a probes module and a file to write are paths, not such text.
    """
    found = {
        f"{name} {action.metavar if not action.option_strings else action.option_strings[0]}"
        for name, sub in subcommands().items()
        for action in sub._actions
        if action.dest in TEXT_REACHING_THE_LEDGER
    }
    assert found == set(NOT_UTF8)


@pytest.mark.parametrize(("words", "argument", "says"), NOT_UTF8.values(), ids=NOT_UTF8)
def test_text_that_is_not_utf8_is_refused_naming_the_argument(
    ledger: Path, words: list[str | bytes], argument: str, says: str
) -> None:
    """Invalid UTF-8 is refused in one line naming the argument and why; nothing changes."""
    before = ledger.read_bytes()
    args = [str(ledger) if word == "{ledger}" else word for word in words]
    result = run_words(*args)
    assert_refused(result, f"{argument}: b", "is not valid UTF-8", says)
    assert "\\xff" in result.stderr
    assert ledger.read_bytes() == before


@pytest.mark.parametrize("command", ["ls", "migrate"])
def test_a_connection_string_that_is_not_utf8_is_refused_unshown(command: str) -> None:
    """A postgresql:// location with a byte that is not UTF-8: one line, its password unshown."""
    result = run_words(command, b"postgresql://agent:s3cret@localhost/agents-\xff")
    assert_refused(result, "the PostgreSQL connection string is not valid UTF-8")
    assert "s3cret" not in result.stderr


# A --result too deep or too long.


def test_a_result_nested_too_deep_is_refused_with_the_limit(ledger: Path) -> None:
    """--result nested 40,000 deep: one line saying how deep it is and the limit."""
    deep = "[" * 40_000 + "]" * 40_000
    result = run("resolve", ledger, "pay-2", "--happened", "--result", deep)
    assert_refused(result, "argument --result", "nested 40,000 levels deep", "at most 200 levels")
    assert len(result.stderr) < 400


def test_a_result_nested_as_deep_as_the_limit_is_stored_and_shown(tmp_path: Path) -> None:
    """--result nested 200 deep (the limit) is stored, and show prints it back."""
    ledger = tmp_path / "deep.db"
    with get_store(ledger) as store:  # a tool with no description: the result goes unchecked
        store._claim("deep-1", "untyped", "h", attempt_id="dead", previous=None)
        bury_owners(store)
    deep = "[" * 200 + "]" * 200
    resolved = run("resolve", ledger, "deep-1", "--happened", "--result", deep)
    assert resolved.returncode == 0, resolved.stderr
    shown = run("show", ledger, "deep-1", "--json")
    assert json.loads(shown.stdout)["record"]["result"] == json.loads(deep)


def test_a_result_holding_too_long_an_integer_is_refused_saying_why(ledger: Path) -> None:
    """A 5,000-digit number: one short line naming Python's digit limit, the value cut."""
    result = run("resolve", ledger, "pay-2", "--happened", "--result", "1" * 5000)
    assert_refused(
        result,
        "argument --result: '" + "1" * 60 + "'... (5,000 characters)",
        "holds an integer of more than 4,300 digits",
        "int max str digits limit",
    )
    assert len(result.stderr) < 400


@pytest.mark.parametrize("number", ["1e400", "-1e400", "NaN", "Infinity", "-Infinity"])
def test_a_result_holding_no_finite_number_is_refused_saying_why(ledger: Path, number: str) -> None:
    """Python's json reads 1e400 as infinity and NaN as NaN; no result can hold them."""
    result = run("resolve", ledger, "pay-2", "--happened", "--result", f'{{"amount": {number}}}')
    assert_refused(result, "argument --result", f"holds {number}, which is not a finite number")


def test_a_long_value_that_is_not_json_is_cut_in_the_error(ledger: Path) -> None:
    """Long text that is not JSON is quoted cut, with its length and JSON's reason."""
    result = run("resolve", ledger, "pay-2", "--happened", "--result", "{" + "x" * 5000)
    assert_refused(result, "'... (5,001 characters) is not JSON (Expecting property name")
    assert len(result.stderr) < 400


@pytest.mark.parametrize(
    "words",
    [["ls", "{ledger}", "--state"], ["archive", "{ledger}", "--before", "1d", "--batch"]],
    ids=" ".join,
)
def test_a_long_value_argparse_refuses_is_cut_in_the_error(ledger: Path, words: list[str]) -> None:
    """A 5,000-character value argparse itself refuses (a choice, a number) is quoted cut."""
    args = [str(ledger) if word == "{ledger}" else word for word in words]
    result = run(*args, "x" * 5000)
    assert_refused(result, f"argument {words[-1]}: invalid ", "... (5,002 characters)")
    assert len(result.stderr) < 400


# A key that starts with '-'.


@pytest.mark.parametrize(
    "words",
    [
        ["show", "{ledger}", "-dash"],
        ["show", "{ledger}", "--json", "-dash"],
        ["resolve", "{ledger}", "-dash", "--not-happened"],
        ["amend", "{ledger}", "-dash", "--result", "1"],
    ],
    ids=" ".join,
)
def test_a_key_starting_with_a_dash_gets_the_hint_to_put_it_after_dashes(
    ledger: Path, words: list[str]
) -> None:
    """A KEY like -dash, taken for an option, gets the hint to put it after --."""
    result = run(*(str(ledger) if word == "{ledger}" else word for word in words))
    required = "KEY, or --keys-from FILE" if words[0] == "resolve" else "KEY"
    assert_refused(
        result,
        f"the following arguments are required: {required}; a KEY that starts with '-' goes "
        f"last, after `--` (which ends the options): safeact {words[0]} LEDGER [OPTIONS] -- -dash",
    )


def test_resolve_without_a_key_names_both_ways_to_give_keys(ledger: Path) -> None:
    """`resolve LEDGER --not-happened` says a KEY or a reviewed set (--keys-from) is needed."""
    result = run("resolve", ledger, "--not-happened")
    assert_refused(result)
    assert result.stderr == (
        "safeact: error: the following arguments are required: KEY, or --keys-from FILE "
        "(see `safeact resolve --help`)\n"
    )


def test_the_hint_is_not_given_when_the_key_is_simply_missing(ledger: Path) -> None:
    """`show LEDGER` with no key at all gets argparse's error alone, no hint about '-'."""
    result = run("show", ledger)
    assert_refused(result)
    assert result.stderr == (
        "safeact: error: the following arguments are required: KEY (see `safeact show --help`)\n"
    )


def test_the_key_after_dashes_is_taken_as_a_key(ledger: Path) -> None:
    """The hint's remedy works: `show LEDGER -- -dash` looks the key up."""
    assert_refused(run("show", ledger, "--", "-dash"), "no key '-dash'")


def test_an_option_value_starting_with_a_dash_gets_the_hint_to_use_equals(
    ledger: Path,
) -> None:
    """`--note -x`: argparse says --note has no value; the error says to write --note=-x."""
    result = run("resolve", ledger, "pay-2", "--not-happened", "--note", "-x")
    assert_refused(
        result,
        "argument --note: expected one argument; a value that starts with '-' goes after "
        "'=': --note=-x",
    )


# Keys that would print alike.

ESC = "key-\x1b[31m"
LITERAL = "key-\\x1b[31m"
"""A key holding ESC, and one holding the four characters backslash, x, 1, b in its place."""


@pytest.fixture
def alike(tmp_path: Path) -> Path:
    """A ledger where both keys are in doubt, left by a dead owner."""
    path = tmp_path / "alike.db"
    with get_store(path) as store:
        for key in (ESC, LITERAL):
            store._claim(key, "pay", "h", attempt_id="dead", previous=None)
        bury_owners(store)
    return path


@pytest.mark.parametrize("command", ["ls", "doubt"])
def test_a_key_with_esc_and_one_with_its_escape_as_text_are_listed_apart(
    alike: Path, command: str
) -> None:
    r"""`ls` and `doubt` show ESC as \x1b and the literal text with its backslash doubled."""
    lines = run(command, alike).stdout.splitlines()
    keys = [row[0] for row in columns(lines[:3])[1:]]
    assert keys == ["key-\\x1b[31m", "key-\\\\x1b[31m"]


@pytest.mark.parametrize(
    ("key", "shown"), [(ESC, "key-\\x1b[31m"), (LITERAL, "key-\\\\x1b[31m")], ids=["esc", "text"]
)
def test_show_tells_a_key_with_esc_from_one_with_its_escape_as_text(
    alike: Path, key: str, shown: str
) -> None:
    """`show` prints the two keys differently: the literal backslash is doubled."""
    lines = run("show", alike, key).stdout.splitlines()
    assert lines[0] == f"key           {shown}"


TRICKY = st.lists(
    st.sampled_from(["\\", "x1b", "u202e", "U0001f600", "x", "q", "\x1b", "\n", "\u202e"])
).map("".join)
"""Text made of backslashes, what follows one in an escape, and control characters."""

_SHOWN_ESCAPE = re.compile(r"\\(\\|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})")


def read_back(shown: str) -> str:
    """The value a person reads in ``shown``: each escape (a doubled backslash too) undone."""
    return _SHOWN_ESCAPE.sub(
        lambda escape: "\\" if escape[1] == "\\" else chr(int(escape[1][1:], 16)), shown
    )


@given(TRICKY)
def test_a_value_is_read_back_from_how_it_is_shown(value: str) -> None:
    """`escaped` is printable, and undoing its escapes gives the value back: never ambiguous."""
    shown = escaped(value)
    assert (shown.isprintable(), read_back(shown)) == (True, value)


def test_a_backslash_that_reads_as_no_escape_is_shown_as_it_is(tmp_path: Path) -> None:
    r"""A key like C:\tmp\new, whose backslashes start no escape, is listed unchanged."""
    path = tmp_path / "plain.db"
    with get_store(path) as store:
        store._claim("C:\\tmp\\new", "pay", "h", attempt_id="dead", previous=None)
    assert columns(run("ls", path).stdout.splitlines())[1][0] == "C:\\tmp\\new"


# --help and --version that cannot be written.


@pytest.mark.parametrize("words", [["--help"], ["--version"], ["ls", "--help"]], ids=" ".join)
def test_help_and_version_on_a_full_disk_say_so_in_one_line(words: list[str]) -> None:
    """--help or --version on /dev/full: one line on stderr, exit 2, not exit 0 in silence."""
    with Path("/dev/full").open("w") as full:
        code, said = sweep(Path(), words, full.fileno())
    assert (code, said) == (
        2,
        "safeact: error: cannot write the output (No space left on device)\n",
    )


@pytest.mark.parametrize("words", [["--help"], ["--version"]], ids=" ".join)
def test_help_and_version_with_output_closed_say_so_in_one_line(words: list[str]) -> None:
    """--help or --version with standard output closed: one line, exit 2."""
    code, said = sweep(Path(), words, None)
    assert (code, said) == (
        2,
        "safeact: error: standard output is closed; run the command with it open\n",
    )


# SQLite's errors on a full disk, or a directory where the WAL cannot be created.


def in_mount_namespace(script: str, *args: str | Path | int) -> subprocess.CompletedProcess[str]:
    """Run the shell ``script`` (with ``args``) in a mount namespace of its own.

    As root, a plain one; otherwise in a user namespace too, where this user is root.
    """
    unshare = ["unshare", "--mount"] if os.geteuid() == 0 else ["unshare", "-rm"]
    return subprocess.run(
        [*unshare, "sh", "-c", script, "sh", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


WAL_ADVICE = (
    "the directory {directory} is not writable, and SQLite must create the ledger's "
    "agent.db-wal and agent.db-shm there, beside it (a writable ledger file is not enough); "
    "make the directory writable by this user, then try again"
)


def test_a_read_only_directory_by_its_permissions_names_the_wal(ledger: Path) -> None:
    """A writable ledger in a directory of mode 555: the error names the WAL to create.

    SQLite says "attempt to write a readonly database". As root, the command runs without
    the capability that overrides permissions, as an ordinary user would.
    """
    as_user = (
        ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
        if os.geteuid() == 0
        else []
    )
    directory = ledger.parent
    directory.chmod(0o555)
    try:
        result = subprocess.run(
            [*as_user, sys.executable, "-m", "safeact", "ls", str(ledger)],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    finally:
        directory.chmod(0o755)
    assert_refused(
        result,
        f"{ledger}: attempt to write a readonly database: "
        + WAL_ADVICE.format(directory=directory),
    )


READ_ONLY_MOUNT = """
set -e
mount --bind "$1" "$1"
mount --bind "$1/agent.db" "$1/agent.db"
mount -o remount,bind,ro "$1"
exec 3>>"$1/agent.db"
exec "$2" -m safeact ls "$1/agent.db"
"""
"""Make the ledger's directory a read-only mount, the ledger itself staying writable
(checked by opening it to append), and list the ledger."""


def test_a_read_only_mount_names_the_wal(ledger: Path) -> None:
    """A writable ledger on a read-only mount: the error names the WAL to create.

    SQLite says "unable to open database file".
    """
    result = in_mount_namespace(READ_ONLY_MOUNT, ledger.parent, sys.executable)
    assert_refused(
        result,
        f"{ledger}: unable to open database file: " + WAL_ADVICE.format(directory=ledger.parent),
    )


FULL_DISK = """
set -e
mount -t tmpfs -o size=256k tmpfs "$1"
cp "$2" "$1/agent.db"
cat /dev/zero > "$1/fill" 2>/dev/null || true
truncate -s "$(( $(stat -c %s "$1/fill") / 4096 * 4096 - $3 ))" "$1/fill"
shift 3
exec "$@"
"""
"""Mount a small tmpfs, copy the ledger in, fill the disk but for the bytes asked for,
then run the command."""


def test_a_full_disk_at_open_says_to_free_space_not_disk_io_error(
    ledger: Path, tmp_path: Path
) -> None:
    """No room for SQLite's shared-memory index: the error says the disk is full.

    SQLite says "disk I/O error".
    """
    disk = tmp_path / "disk"
    disk.mkdir()
    result = in_mount_namespace(
        FULL_DISK, disk, ledger, 0, sys.executable, "-m", "safeact", "ls", disk / "agent.db"
    )
    assert_refused(
        result,
        f"{disk}/agent.db: disk I/O error: the disk holding {disk} is full; free space on it, "
        "then try again",
    )


def test_a_full_disk_at_a_write_says_to_free_space(ledger: Path, tmp_path: Path) -> None:
    """Room for the index but not for the WAL: the error says to free space; no change.

    SQLite says "database or disk is full"; the ledger file is as it was.
    """
    disk = tmp_path / "disk"
    disk.mkdir()
    kept = tmp_path / "after.db"
    resolve = '"$0" -m safeact resolve "$1" pay-2 --not-happened; code=$?; cp "$1" "$2"; exit $code'
    result = in_mount_namespace(
        FULL_DISK,
        *(disk, ledger, 9 * 4096),  # the index's 32 KiB, and one page
        *("sh", "-c", resolve, sys.executable, disk / "agent.db", kept),
    )
    assert_refused(
        result,
        f"{disk}/agent.db: database or disk is full: the disk holding {disk} is full; free "
        "space on it, then try again",
    )
    assert kept.read_bytes() == ledger.read_bytes()
