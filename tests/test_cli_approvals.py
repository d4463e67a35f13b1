"""The operator's side of approvals: `safeact approvals`, `approve`, `deny`, and kept arguments.

Every command runs in its own process, as users run it, on a SQLite ledger (one test on
PostgreSQL). What a person decides is checked in the ledger afterwards; what a refusal
changes, by comparing the request and its history before and after.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from safeact import (
    Approval,
    ApprovalState,
    AwaitingApproval,
    Event,
    Failed,
    SafeTool,
    Store,
    Succeeded,
    get_store,
    safe,
)
from safeact._cli_json import _APPROVAL, _RECORD
from safeact._protocol import Checkpoint, checkpoint_hook
from tests.actions import bury_owners
from tests.test_cli import assert_refused, columns, run
from tests.test_corrupt_rows import corrupt

PENDING_HEADER = ["KEY", "TOOL", "REQUESTED", "ARGS HASH", "ARGUMENTS"]
EVERY_HEADER = [
    "KEY",
    "TOOL",
    "STATE",
    "REQUESTED",
    "ARGS HASH",
    "DECIDED",
    "BY",
    "NOTE",
    "ARGUMENTS",
]
UNSAFE = "\x1b[2J\x1b[Hgone <script>alert(1)</script>\u202eevil\nnext\tcell\x07"
"""Text that would clear the screen, reverse or break a line if it reached a terminal raw."""
CARD = "4111 1111 1111 1111"
"""A card number: the refund's ``card``, which it redacts."""
NO_USER = ["setpriv", "--reuid=54321", "--regid=54321", "--clear-groups"]
"""Run as a user id the password database does not know."""
RAW = ("\x1b", "\u202e", "\x07", "\t")
"""Characters that must never reach the terminal from the ledger (a newline ends lines)."""


def refund(key: str, to: str, amount: int, card: str) -> int:
    return amount


def refunds(store: Store, *, keep: bool = True, name: str = "pay.refund") -> SafeTool[..., int]:
    """A refund that needs approval; ``keep``: its arguments are kept, the card redacted."""
    redact = ("card",) if keep else ()
    return safe(store, name=name, approval=True, keep_arguments=keep, redact=redact)(refund)


def requested(path: Path | str, *calls: tuple[str, str, int]) -> dict[str, AwaitingApproval]:
    """Call the refund with each (key, to, amount): each records a pending request."""
    waiting: dict[str, AwaitingApproval] = {}
    with get_store(path) as store:
        paying = refunds(store)
        for key, to, amount in calls:
            outcome = paying(key, to, amount, CARD)
            assert isinstance(outcome, AwaitingApproval)
            waiting[key] = outcome
    return waiting


def snapshot(path: Path | str, key: str) -> tuple[Approval | None, list[Event]]:
    """The key's request and its history, to see that a refusal changed neither."""
    with get_store(path) as store:
        return store.approval(key), store.history(key)


def table_of(stdout: str) -> list[list[str]]:
    """The first table of a command's output (up to its first blank line), cut into cells."""
    header, *rows = stdout.split("\n\n", maxsplit=1)[0].splitlines()
    # ``columns`` starts a cell at each word of the header: make ARGS HASH one word.
    cells = columns([header.replace("ARGS HASH", "ARGS_HASH"), *rows])
    return [[cell.replace("ARGS_HASH", "ARGS HASH") for cell in cells[0]], *cells[1:]]


# safeact approvals


def test_approvals_lists_the_pending_requests_oldest_first_with_their_arguments(
    ledger: Path,
) -> None:
    """Pending requests only, oldest first: key, tool, short args hash, redacted arguments."""
    waiting = requested(ledger, ("refund-1", "ada@example.com", 50), ("refund-2", "bob", 20))
    with get_store(ledger) as store:
        refunds(store, keep=False, name="pay.plain")("plain-1", "cy", 5, CARD)
        refunds(store)("refund-3", "dee", 30, CARD)
        store.deny("refund-3", by="grace")
    result = run("approvals", ledger)
    assert result.returncode == 0, result.stderr
    rows = table_of(result.stdout)
    assert rows[0] == PENDING_HEADER
    assert [(row[0], row[1], row[3], row[4]) for row in rows[1:]] == [
        (
            "refund-1",
            "pay.refund",
            waiting["refund-1"].args_hash[:12],
            '{"amount": 50, "card": "[redacted]", "to": "ada@example.com"}',
        ),
        (
            "refund-2",
            "pay.refund",
            waiting["refund-2"].args_hash[:12],
            '{"amount": 20, "card": "[redacted]", "to": "bob"}',
        ),
        ("plain-1", "pay.plain", rows[3][3], "-"),
    ]
    assert "4111" not in result.stdout


def test_approvals_says_how_to_decide_what_waits(ledger: Path) -> None:
    """Below the table: how many wait, and the approve and deny commands for this ledger."""
    requested(ledger, ("refund-1", "ada", 50))
    result = run("approvals", ledger)
    assert result.stdout.split("\n\n")[1].splitlines() == [
        "1 waiting for approval; after checking each one, decide with",
        f"  safeact approve {ledger} KEY --args-hash HASH [--note TEXT]",
        f"  safeact deny {ledger} KEY --note WHY",
    ]


def test_approvals_with_nothing_waiting_says_so(ledger: Path) -> None:
    """No pending request: one line, exit 0 (waiting is the normal course, not an alarm)."""
    requested(ledger, ("refund-1", "ada", 50))
    with get_store(ledger) as store:
        store.approve("refund-1", by="grace")
    result = run("approvals", ledger)
    assert (result.returncode, result.stdout) == (0, "nothing waits for approval\n")


def test_approvals_all_shows_every_state_with_who_decided_and_why(ledger: Path) -> None:
    """--all: pending, approved, denied and consumed requests, each with its decision."""
    requested(
        ledger,
        ("r-pending", "a", 1),
        ("r-approved", "b", 2),
        ("r-denied", "c", 3),
        ("r-used", "d", 4),
    )
    with get_store(ledger) as store:
        store.approve("r-approved", by="grace", note="invoice 7")
        store.deny("r-denied", by="ada", note="not our customer")
        store.approve("r-used", by="grace")
        assert isinstance(refunds(store)("r-used", "d", 4, CARD), Succeeded)
    rows = table_of(run("approvals", ledger, "--all").stdout)
    assert rows[0] == EVERY_HEADER
    assert [(r[0], r[2], r[6], r[7]) for r in rows[1:]] == [
        ("r-pending", "pending", "-", ""),
        ("r-approved", "approved", "grace", "invoice 7"),
        ("r-denied", "denied", "ada", "not our customer"),
        ("r-used", "consumed", "grace", ""),
    ]


def test_approvals_tool_keeps_only_that_tools_requests(ledger: Path) -> None:
    """--tool lists the requests of the tool named, and no other's."""
    requested(ledger, ("refund-1", "ada", 50))
    with get_store(ledger) as store:
        refunds(store, name="pay.other")("other-1", "bob", 5, CARD)
    rows = table_of(run("approvals", ledger, "--tool", "pay.other").stdout)
    assert [row[:2] for row in rows[1:]] == [["other-1", "pay.other"]]


def test_approvals_json_prints_every_field_of_each_request_with_the_whole_hash(
    ledger: Path,
) -> None:
    """--json: one object per line, every field of the Approval as documented, hash whole."""
    waiting = requested(ledger, ("refund-1", "ada", 50), ("refund-2", "bob", 20))
    result = run("approvals", ledger, "--json")
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert [set(o) for o in objects] == [
        set(re.findall(r"[a-z_]+", _APPROVAL))
        - {"pending", "approved", "denied", "consumed", "null"}
    ] * 2
    assert [(o["key"], o["args_hash"], o["state"], o["arguments"]) for o in objects] == [
        ("refund-1", waiting["refund-1"].args_hash, "pending", waiting["refund-1"].arguments),
        ("refund-2", waiting["refund-2"].args_hash, "pending", waiting["refund-2"].arguments),
    ]


def test_a_corrupt_request_is_listed_as_corrupt_and_the_others_still_are(ledger: Path) -> None:
    """A request row changed outside safeact is shown as corrupt, in its place; exit 0."""
    requested(ledger, ("refund-1", "ada", 50), ("refund-2", "bob", 20))
    corrupt(str(ledger), "UPDATE approvals SET requested_at = ? WHERE key = ?", "soon", "refund-2")
    result = run("approvals", ledger, "--all")
    assert result.returncode == 0
    rows = table_of(result.stdout)
    assert [(row[0], row[2]) for row in rows[1:]] == [
        ("refund-1", "pending"),
        ("refund-2", "corrupt"),
    ]
    assert "1 corrupt row" in result.stderr
    listed = [json.loads(line) for line in run("approvals", ledger, "--json").stdout.splitlines()]
    assert [o["key"] for o in listed] == ["refund-1", "refund-2"]
    assert listed[1]["column"] == "requested_at"


# safeact approve and deny


def test_approve_records_the_decision_and_the_next_call_runs(ledger: Path) -> None:
    """`approve --by --note` prints the change; the request is approved; the call then runs."""
    waiting = requested(ledger, ("refund-1", "ada", 50))
    result = run(
        "approve",
        ledger,
        "refund-1",
        "--by",
        "grace",
        "--note",
        "invoice 7",
        "--args-hash",
        waiting["refund-1"].args_hash,
    )
    assert (result.returncode, result.stdout) == (
        0,
        "refund-1: pending → approved by grace: invoice 7\n",
    )
    with get_store(ledger) as store:
        approval = store.approval("refund-1")
        assert approval is not None
        assert (approval.state, approval.decided_by, approval.note) == (
            ApprovalState.APPROVED,
            "grace",
            "invoice 7",
        )
        assert refunds(store)("refund-1", "ada", 50, CARD) == Succeeded("refund-1", 50)


def test_approve_by_defaults_to_the_operating_system_user(ledger: Path) -> None:
    """Without --by, the decision is recorded in the name getpass.getuser() finds (LOGNAME)."""
    requested(ledger, ("refund-1", "ada", 50))
    env = {**os.environ, "LOGNAME": "ops-on-call"}
    result = subprocess.run(
        [sys.executable, "-m", "safeact", "approve", str(ledger), "refund-1"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env=env,
    )
    assert result.stdout == "refund-1: pending → approved by ops-on-call\n", result.stderr
    approval, _ = snapshot(ledger, "refund-1")
    assert approval is not None
    assert approval.decided_by == "ops-on-call"


@pytest.mark.parametrize("command", ["approve", "deny"])
def test_the_help_of_a_decision_says_where_by_comes_from(command: str) -> None:
    """--help of approve and deny says that --by defaults to the OS user (getpass.getuser)."""
    said = " ".join(run(command, "--help").stdout.split())
    assert "default: your user name on this machine, as Python's getpass.getuser() finds it" in said


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv"
)
def test_approve_without_a_user_name_asks_for_by(postgres_ledger: str) -> None:
    """A process with no user name (no LOGNAME/USER, a uid with no passwd entry): one line.

    On PostgreSQL, so that a user id of its own can reach the ledger.
    """
    requested(postgres_ledger, ("refund-1", "ada", 50))
    # Nor coverage's hook, whose data file this user id could not write (a second line).
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"LOGNAME", "USER", "LNAME", "USERNAME"}
        and not k.startswith(("COV_CORE_", "COVERAGE_"))
    }
    result = subprocess.run(
        [*NO_USER, sys.executable, "-m", "safeact", "approve", postgres_ledger, "refund-1"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env=env,
        cwd="/",
    )
    assert_refused(result, "cannot tell who you are", "give --by NAME")
    approval, _ = snapshot(postgres_ledger, "refund-1")
    assert approval is not None
    assert approval.state is ApprovalState.PENDING


def test_deny_records_the_no_and_every_call_returns_it(ledger: Path) -> None:
    """`deny` prints the change; the call then returns Failed(safeact.Denied) with the note."""
    requested(ledger, ("refund-1", "ada", 50))
    result = run("deny", ledger, "refund-1", "--by", "ada", "--note", "not our customer")
    assert (result.returncode, result.stdout) == (
        0,
        "refund-1: pending → denied by ada: not our customer\n",
    )
    with get_store(ledger) as store:
        outcome = refunds(store)("refund-1", "ada", 50, CARD)
    assert isinstance(outcome, Failed)
    assert (outcome.error_type, outcome.message) == (
        "safeact.Denied",
        "denied by ada: not our customer",
    )


def test_deny_withdraws_an_approval_no_call_has_used(ledger: Path) -> None:
    """An approved request not yet consumed can still be denied: approved → denied."""
    requested(ledger, ("refund-1", "ada", 50))
    run("approve", ledger, "refund-1", "--by", "grace")
    result = run("deny", ledger, "refund-1", "--by", "ada")
    assert (result.returncode, result.stdout) == (0, "refund-1: approved → denied by ada\n")


@pytest.mark.parametrize("command", ["approve", "deny"])
def test_a_decision_prints_json_of_its_documented_shape(ledger: Path, command: str) -> None:
    """--json: {key, from_state, to_state, approval} with every field of the approval."""
    waiting = requested(ledger, ("refund-1", "ada", 50))
    result = run(command, ledger, "refund-1", "--by", "grace", "--json")
    (decided,) = [json.loads(line) for line in result.stdout.splitlines()]
    to = "approved" if command == "approve" else "denied"
    assert (decided["key"], decided["from_state"], decided["to_state"]) == (
        "refund-1",
        "pending",
        to,
    )
    assert (
        decided["approval"]["state"],
        decided["approval"]["decided_by"],
        decided["approval"]["args_hash"],
        decided["approval"]["arguments"],
    ) == (to, "grace", waiting["refund-1"].args_hash, waiting["refund-1"].arguments)


REFUSED = {
    "approve twice": (
        ["approve", "refund-1"],
        "cannot approve key 'refund-1': its approval is approved",
    ),
    "deny a denial": (["deny", "refund-2"], "cannot deny key 'refund-2': its approval is denied"),
    "another args hash": (
        ["approve", "refund-3", "--args-hash", "0" * 64],
        "cannot approve key 'refund-3': its request is for args hash",
    ),
    "an unknown key": (["deny", "nobody-asked"], "no approval was requested for it"),
    "a blank name": (["approve", "refund-3", "--by", " "], "by must name the person deciding"),
}
"""Decisions the ledger refuses, with what the one line says."""


@pytest.mark.parametrize(("words", "says"), REFUSED.values(), ids=REFUSED)
def test_a_refused_decision_is_one_line_and_changes_nothing(
    ledger: Path, words: list[str], says: str
) -> None:
    """Not pending, another args hash, no request, no name: exit 2, one line; nothing changed."""
    requested(ledger, ("refund-1", "ada", 50), ("refund-2", "bob", 20), ("refund-3", "cy", 5))
    with get_store(ledger) as store:
        store.approve("refund-1", by="grace")
        store.deny("refund-2", by="grace")
    command, key, *options = words
    before = snapshot(ledger, key)
    result = run(command, ledger, key, "--by", "ops", *options)
    assert_refused(result, says)
    assert snapshot(ledger, key) == before


def test_the_short_args_hash_approvals_shows_binds_the_decision(ledger: Path) -> None:
    """--args-hash takes the 12 characters the table shows, for the request they start."""
    waiting = requested(ledger, ("refund-1", "ada", 50))
    shown = table_of(run("approvals", ledger).stdout)[1][3]
    assert shown == waiting["refund-1"].args_hash[:12]
    result = run("approve", ledger, "refund-1", "--by", "grace", "--args-hash", shown)
    assert result.returncode == 0, result.stderr
    approval, _ = snapshot(ledger, "refund-1")
    assert approval is not None
    assert approval.state is ApprovalState.APPROVED


def test_an_args_hash_shorter_than_the_table_shows_is_refused(ledger: Path) -> None:
    """A few characters of a hash would bind a decision to almost nothing: one line, exit 2."""
    waiting = requested(ledger, ("refund-1", "ada", 50))
    before = snapshot(ledger, "refund-1")
    result = run(
        "approve",
        ledger,
        "refund-1",
        "--by",
        "grace",
        "--args-hash",
        waiting["refund-1"].args_hash[:6],
    )
    assert_refused(result, "argument --args-hash", "is too short: give the 12 characters")
    assert snapshot(ledger, "refund-1") == before


def test_an_args_hash_that_is_not_utf8_is_refused(ledger: Path) -> None:
    """A hash with a byte that is not UTF-8: one line naming it; no change.

    --by and --note are in tests/test_cli_misuse.py's sweep of what reaches the ledger.
    """
    option = "--args-hash"
    requested(ledger, ("refund-1", "ada", 50))
    before = snapshot(ledger, "refund-1")
    result = subprocess.run(
        [sys.executable, "-m", "safeact", "approve", str(ledger), "refund-1", option, b"x\xff" * 7],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert_refused(result, f"argument {option}: b", "is not valid UTF-8")
    assert snapshot(ledger, "refund-1") == before


# Kept arguments in show and doubt


class Crash(BaseException):
    """The process dies here (in-process: its owner is then made to look dead)."""


def crash_at(where: Checkpoint) -> Callable[[Checkpoint], None]:
    def hook(point: Checkpoint) -> None:
        if point == where:
            raise Crash

    return hook


def in_doubt(path: Path, key: str, *, keep: bool) -> None:
    """Leave ``key`` in doubt: approved, claimed, the action run, the owner gone."""
    with get_store(path) as store:
        paying = refunds(store, keep=keep)
        paying(key, "ada", 50, CARD)
        store.approve(key, by="grace", note="ok")
        with checkpoint_hook(crash_at("after_call")), pytest.raises(Crash):
            paying(key, "ada", 50, CARD)
        bury_owners(store)


KEPT = {"amount": 50, "card": "[redacted]", "to": "ada"}


def test_show_prints_the_kept_arguments_and_the_approval(ledger: Path) -> None:
    """`show` of a key whose tool keeps arguments: its arguments, and who approved it."""
    in_doubt(ledger, "refund-1", keep=True)
    head = run("show", ledger, "refund-1").stdout.split("\n\n", maxsplit=1)[0]
    fields = dict(field_of(line) for line in head.splitlines())
    assert fields["arguments"] == json.dumps(KEPT)
    assert re.fullmatch(
        r"consumed by attempt \w+ \(approved by grace at \S+: ok\); requested \S+",
        fields["approval"],
    )


def field_of(line: str) -> tuple[str, str]:
    """A line of ``show``'s fields as (name, value): two spaces or more part them."""
    name, value = re.split(r"  +", line, maxsplit=1)
    return name, value


def test_show_json_has_the_arguments_in_the_record_and_the_approval(ledger: Path) -> None:
    """`show --json`: record.arguments and approval (null for a tool that keeps none)."""
    in_doubt(ledger, "kept", keep=True)
    requested_plain = ledger.with_name("plain.db")
    in_doubt(requested_plain, "plain", keep=False)
    shown = json.loads(run("show", ledger, "kept", "--json").stdout)
    plain = json.loads(run("show", requested_plain, "plain", "--json").stdout)
    assert (shown["record"]["arguments"], shown["approval"]["arguments"]) == (KEPT, KEPT)
    assert (plain["record"]["arguments"], plain["approval"]["arguments"]) == (None, None)
    assert shown["approval"]["state"] == "consumed"


def test_show_of_a_key_waiting_for_approval_shows_the_request(ledger: Path) -> None:
    """A key requested but never attempted: its request and arguments, not "not in the ledger"."""
    waiting = requested(ledger, ("refund-1", "ada", 50))
    result = run("show", ledger, "refund-1")
    assert result.returncode == 0
    head = result.stdout.split("\n\n", maxsplit=1)[0].splitlines()
    assert [field_of(line)[0] for line in head] == [
        "key",
        "state",
        "tool",
        "args hash",
        "arguments",
        "approval",
    ]
    assert "not attempted (approval pending)" in head[1]
    assert waiting["refund-1"].args_hash in head[3]
    assert '"to": "ada"' in head[4]
    assert "approval → pending" in result.stdout


def test_doubt_shows_the_kept_arguments(ledger: Path) -> None:
    """`doubt` adds an ARGUMENTS column when a key in doubt has them; --json carries them."""
    in_doubt(ledger, "refund-1", keep=True)
    result = run("doubt", ledger)
    assert result.returncode == 1
    rows = table_of(result.stdout)
    assert rows[0][-1] == "ARGUMENTS"
    assert rows[1][0] == "refund-1"
    assert rows[1][-1] == json.dumps(KEPT)
    (line,) = run("doubt", ledger, "--json").stdout.splitlines()
    assert json.loads(line)["arguments"] == KEPT


def test_doubt_without_kept_arguments_keeps_its_columns_and_json_says_null(ledger: Path) -> None:
    """A tool that keeps no arguments: doubt's table is as before, --json has arguments null."""
    in_doubt(ledger, "refund-1", keep=False)
    rows = table_of(run("doubt", ledger).stdout)
    assert rows[0] == ["KEY", "TOOL", "STATE", "ATTEMPTED", "AGE", "REASON"]
    (line,) = run("doubt", ledger, "--json").stdout.splitlines()
    decoded = json.loads(line)
    assert decoded["arguments"] is None
    assert set(decoded) - {"owner", "age_seconds"} <= set(re.findall(r"[a-z_]+", _RECORD))


# What reaches a terminal


def test_unsafe_keys_notes_and_arguments_are_shown_escaped_and_json_keeps_them(
    ledger: Path,
) -> None:
    """Control characters and markup in a key, a note and arguments never reach stdout raw."""
    key = "refund-" + UNSAFE
    with get_store(ledger) as store:
        refunds(store)(key, UNSAFE, 50, CARD)
        refunds(store)("other", "bob", 5, CARD)
    decided = run("approve", ledger, key, "--by", "grace" + UNSAFE, "--note", UNSAFE)
    shown = [
        decided,
        run("deny", ledger, "other", "--by", "ada", "--note", UNSAFE),
        run("approvals", ledger, "--all"),
        run("show", ledger, key),
        run("deny", ledger, key, "--by", "ada", "--note", UNSAFE),  # withdraws the approval
    ]
    printed = "".join(r.stdout + r.stderr for r in shown)
    assert not any(char in printed for char in RAW)
    assert all(line.count("\n") == 0 for line in printed.splitlines())
    assert "\\x1b[2J" in shown[0].stdout  # the key and the note, escaped
    assert "\\u001b[2J" in shown[2].stdout  # inside the arguments: JSON's own escape
    table = [line for line in shown[2].stdout.splitlines() if line]
    assert len(table) == 3  # a header and two rows: no newline broke a row
    (listed,) = [
        json.loads(line)
        for line in run("approvals", ledger, "--all", "--json").stdout.splitlines()
        if json.loads(line)["key"] == key
    ]
    assert (listed["key"], listed["note"], listed["arguments"]["to"]) == (key, UNSAFE, UNSAFE)


# PostgreSQL


def test_approvals_approve_and_deny_work_on_a_url(postgres_ledger: str) -> None:
    """On a PostgreSQL URL: the request is listed, approved by the command, and runs."""
    with get_store(postgres_ledger) as store:
        paying = refunds(store)
        paying("refund-1", "ada", 50, CARD)
        paying("refund-2", "bob", 20, CARD)
    listed = table_of(run("approvals", postgres_ledger).stdout)
    assert [row[0] for row in listed[1:]] == ["refund-1", "refund-2"]
    approved = run(
        "approve", postgres_ledger, "refund-1", "--by", "grace", "--args-hash", listed[1][3]
    )
    denied = run("deny", postgres_ledger, "refund-2", "--by", "grace", "--note", "no")
    assert (approved.stdout, denied.stdout) == (
        "refund-1: pending → approved by grace\n",
        "refund-2: pending → denied by grace: no\n",
    )
    with get_store(postgres_ledger) as store:
        assert refunds(store)("refund-1", "ada", 50, CARD) == Succeeded("refund-1", 50)
        assert isinstance(refunds(store)("refund-2", "bob", 20, CARD), Failed)
    assert run("approvals", postgres_ledger).stdout == "nothing waits for approval\n"


def test_approval_batches_read_every_request_once_in_order(ledger: Path) -> None:
    """Requests taken 2 rows at a time are ``scan_approvals``: each once, in its order.

    Requests made at one same time included; and `approvals` prints each under one header.
    """
    requested(ledger, *((f"r{n}", "ann", n) for n in range(7)))
    corrupt(
        str(ledger),
        "UPDATE approvals SET requested_at = (SELECT min(requested_at) FROM "
        "approvals) WHERE key IN ('r5', 'r1', 'r3')",
    )
    with get_store(ledger) as store:
        batches = list(store._approval_batches(batch=2))
        expected = store.scan_approvals()
    assert [len(found) for found in batches] == [2, 2, 2, 1]
    assert [found for batch in batches for found in batch] == expected
    rows = table_of(run("approvals", ledger).stdout)
    assert [row[0] for row in rows] == [
        "KEY",
        *(a.key for a in expected if isinstance(a, Approval)),
    ]
