"""The operator's seat: every command in its own process, on both backends, agreeing.

A key whose attempt's owner was killed is in doubt, with its reason, wherever keys are read:
``get`` and the listings of the API, ``ls`` (its table, its ``--state`` filter, ``--json``),
``doubt``, ``show``, ``stats``; before anybody has marked it, and after.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from safeact import DoubtReason, Saga, SagaState, State, get_store, safe
from safeact._cli import parser
from safeact._cli_json import _RECORD, SCHEMAS
from tests.actions import bury_owners
from tests.processes import run_child

CRASHED = ["refund-3-crash", "refund-4-crash"]


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m safeact ARGS`` to the end."""
    return subprocess.run(
        [sys.executable, "-m", "safeact", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def refund(key: str, amount: int) -> int:
    return amount


@pytest.fixture
def crashed(any_ledger: str, tmp_path: Path) -> str:
    """A ledger with one settled key and two whose owners were SIGKILLed after the action."""
    with get_store(any_ledger) as store:
        refunding = safe(store, name="refund")(refund)
        refunding("refund-1", 5)
        with Saga("order-1", store) as saga:
            saga.step(refunding, 7)
    for key in CRASHED:
        killed = run_child(any_ledger, tmp_path / "effects", key, "--kill-at", "after_call")
        assert killed.returncode == -signal.SIGKILL, killed.stderr
    return any_ledger


def answers(ledger: str) -> dict[str, list[tuple[str, str | None]]]:
    """What each way of reading the ledger says of the two crashed keys: (state, reason)."""
    said: dict[str, list[tuple[str, str | None]]] = {}
    with get_store(ledger) as store:
        records = [store.get(key) for key in CRASHED]
        said["get"] = [
            (r.state.value, r.doubt_reason and r.doubt_reason.value) for r in records if r
        ]
        said["records(state=in_doubt)"] = [
            (r.state.value, r.doubt_reason and r.doubt_reason.value)
            for r in store.records(state=State.IN_DOUBT)
        ]
        said["list_in_doubt"] = [
            (r.state.value, r.doubt_reason and r.doubt_reason.value) for r in store.list_in_doubt()
        ]
        assert store.records(state=State.ATTEMPTING) == []
        counts = store.counts()
        said["counts"] = [("in_doubt", None)] * counts[("tests.charge", State.IN_DOUBT)]
        assert ("tests.charge", State.ATTEMPTING) not in counts
    table = run("ls", ledger).stdout.splitlines()
    said["ls"] = [
        (line.split()[2], line.split("in doubt: ")[1]) for line in table if "-crash" in line
    ]
    filtered = run("ls", ledger, "--state", "in_doubt").stdout.splitlines()[1:]
    said["ls --state in_doubt"] = [
        (line.split()[2], line.split("in doubt: ")[1]) for line in filtered
    ]
    assert run("ls", ledger, "--state", "attempting").stdout.splitlines()[1:] == []
    said["ls --json"] = [
        (o["state"], o["doubt_reason"])
        for o in map(json.loads, run("ls", ledger, "--json").stdout.splitlines())
        if o["key"] in CRASHED
    ]
    doubt = run("doubt", ledger)
    assert doubt.returncode == 1
    said["doubt"] = [(line.split()[2], line.split()[-1]) for line in doubt.stdout.splitlines()[1:3]]
    said["doubt --json"] = [
        (o["state"], o["doubt_reason"])
        for o in map(json.loads, run("doubt", ledger, "--json").stdout.splitlines())
    ]
    shown = [json.loads(run("show", ledger, key, "--json").stdout) for key in CRASHED]
    said["show --json"] = [(s["record"]["state"], s["record"]["doubt_reason"]) for s in shown]
    said["show"] = []
    for key in CRASHED:
        head = run("show", ledger, key).stdout.replace("doubt reason", "doubt_reason")
        fields = dict(line.partition(" ")[::2] for line in head.split("\n\n")[0].splitlines())
        said["show"].append((fields["state"].split()[0], fields["doubt_reason"].strip()))
    stats = run("stats", ledger).stdout.splitlines()
    header, every = stats[0].split(), stats[stats.index("") - 1].split()[1:]
    per_state = dict(zip(header[1:], every[1:], strict=True))
    assert per_state["ATTEMPTING"] == "0"
    said["stats"] = [("in_doubt", None)] * int(per_state["IN_DOUBT"])
    assert f"oldest in doubt: {CRASHED[0]}, attempted " in "\n".join(stats)
    stats_json = json.loads(run("stats", ledger, "--json").stdout)
    assert stats_json["all"]["attempting"] == 0
    assert stats_json["oldest_in_doubt"]["key"] == CRASHED[0]
    said["stats --json"] = [("in_doubt", None)] * stats_json["all"]["in_doubt"]
    return said


def test_every_command_and_the_api_agree_that_a_crashed_key_is_in_doubt(crashed: str) -> None:
    """Killed owners' keys read as in_doubt/crashed everywhere, before and after marking."""
    expected = [("in_doubt", "crashed")] * 2
    counted = [("in_doubt", None)] * 2
    for moment in ("before marking", "after reconcile marked them"):
        said = answers(crashed)
        assert {
            name: answer
            for name, answer in said.items()
            if answer != (counted if name in ("counts", "stats", "stats --json") else expected)
        } == {}, moment
        shown = json.loads(run("show", crashed, CRASHED[0], "--json").stdout)
        recorded = "attempting" if moment == "before marking" else "in_doubt"
        assert shown["recorded_state"] == recorded
        assert run("reconcile", crashed).returncode == 1


def test_show_says_when_the_row_is_not_marked_yet(crashed: str) -> None:
    """`show` of an unmarked crashed key gives the state as read and the state recorded."""
    (state,) = [
        line
        for line in run("show", crashed, CRASHED[0]).stdout.splitlines()
        if line.startswith("state")
    ]
    assert state.split(maxsplit=1)[1].startswith("in_doubt (recorded attempting: ")
    with get_store(crashed) as store:
        record = store.get(CRASHED[0])
    assert record is not None
    assert (record.state, record.doubt_reason) == (State.IN_DOUBT, DoubtReason.CRASHED)


def subcommands() -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


PRINT_NO_DATA = {"serve", "hash-password"}
"""Commands with nothing to print as JSON: a server (where it listens), a password's hash."""


def test_every_command_has_json_and_every_option_has_help() -> None:
    """Each command takes --json and names its shape; no option or argument lacks help."""
    top = parser()
    unhelped = [a.dest for a in top._actions if not a.help]
    for name, sub in subcommands().items():
        if name not in PRINT_NO_DATA:
            assert "--json" in sub._option_string_actions, name
            assert "--json prints " in (sub.epilog or ""), name
        unhelped += [f"{name} {a.dest}" for a in sub._actions if not a.help]
    assert unhelped == []


def test_version_names_the_installed_safeact() -> None:
    """`safeact --version` prints the version of the installed distribution and exits 0."""
    result = run("--version")
    assert (result.returncode, result.stdout) == (
        0,
        f"safeact {importlib.metadata.version('safeact')}\n",
    )


RECEIPT_7 = '{"to": "bob", "amount": 7}'
RECEIPT_8 = '{"to": "bob", "amount": 8}'
"""Results of the crashed keys' tool (tests.charge, which returns a Receipt), as JSON."""


def test_every_command_prints_json_of_its_documented_shape(crashed: str) -> None:
    """--json of every command is JSON (one object, or one per line for the listings)."""
    key = CRASHED[0]
    objects = {
        name: [json.loads(line) for line in run(*args, "--json").stdout.splitlines()]
        for name, args in {
            "ls": ("ls", crashed),
            "show": ("show", crashed, key),
            "doubt": ("doubt", crashed),
            "sagas": ("sagas", crashed),
            "stats": ("stats", crashed),
            "purge": ("purge", crashed, "--older-than", "0s", "--dry-run"),
            "reconcile": ("reconcile", crashed),
            "resolve": ("resolve", crashed, key, "--happened", "--result", RECEIPT_7),
            "amend": ("amend", crashed, key, "--result", RECEIPT_8),
            "migrate": ("migrate", crashed),
        }.items()
    }
    # archive and export: the test below; the approvals' commands, whose ledger needs a
    # gated tool: tests/test_cli_approvals.py; check: tests/test_check.py.
    others = {"archive", "export", "approvals", "approve", "deny", "check", *PRINT_NO_DATA}
    assert set(objects) | others == set(subcommands())
    assert [o["key"] for o in objects["ls"]] == ["refund-1", "order-1:0:refund", *CRASHED]
    assert objects["show"][0]["key"] == key
    assert [e["why"] for e in objects["show"][0]["history"]] == ["claimed"]
    assert [o["key"] for o in objects["doubt"]] == CRASHED
    assert all(o["age_seconds"] >= 0 for o in objects["doubt"])
    assert [(s["saga_id"], s["state"], s["steps"]) for s in objects["sagas"]] == [
        ("order-1", "completed", ["order-1:0:refund"])
    ]
    assert objects["stats"][0]["tools"]["refund"]["succeeded"] == 2
    assert objects["purge"] == [
        {
            "dry_run": True,
            "older_than": objects["purge"][0]["older_than"],
            "states": ["succeeded", "failed"],
            "keys": ["order-1:0:refund", "refund-1"],
            "sagas": ["order-1"],
        }
    ]
    assert [o["key"] for o in objects["reconcile"][0]["in_doubt"]] == CRASHED
    assert {e["why"] for e in objects["reconcile"][0]["events"]} <= {"crashed"}
    (resolved,) = objects["resolve"]
    assert (resolved["from_state"], resolved["to_state"], resolved["record"]["result"]) == (
        "in_doubt",
        "succeeded",
        json.loads(RECEIPT_7),
    )
    assert (objects["amend"][0]["result"], objects["amend"][0]["record"]["result"]) == (
        json.loads(RECEIPT_8),
        json.loads(RECEIPT_8),
    )
    (migrated,) = objects["migrate"]
    assert migrated["from_schema"] == migrated["to_schema"]
    assert migrated["backup"] is None
    for name, found in objects.items():
        assert undocumented(name, found) == set(), name


def undocumented(command: str, found: object) -> set[str]:
    """The fields in ``found`` (nested too) that the command's documented shape never names."""
    named = set(re.findall(r"[a-z_]+", SCHEMAS[command])) | set(re.findall(r"[a-z_]+", _RECORD))
    named |= {s.value for s in State} | {s.value for s in SagaState}  # STATE: N in stats
    if isinstance(found, list):
        return set().union(*(undocumented(command, item) for item in found))
    if isinstance(found, dict):
        return {field for field in found if field not in named and not field[0].isupper()}.union(
            *(
                undocumented(command, value)
                for field, value in found.items()
                if field not in ("tools", "result")  # a tool's names, a tool's value
            )
        )
    return set()


UNSAFE = ["\x1b[2J\x1b[Hgone", "tab\there", "new\nline", "\u202eevil", "bell\x07"]


def test_control_characters_in_keys_are_escaped_and_json_keeps_them(any_ledger: str) -> None:
    """No command prints a key's control characters raw; --json gives the exact key."""
    with get_store(any_ledger) as store:
        paying = safe(store, name="pay\x1b[31m")(refund)
        for key in UNSAFE:
            paying(key, 1)
        store._claim(UNSAFE[0] + "-lost", "pay\x1b[31m", "h", attempt_id="dead", previous=None)
        bury_owners(store)
    results = [
        run(*args)
        for args in (
            ("ls", any_ledger),
            ("doubt", any_ledger),
            ("stats", any_ledger),
            # A misfit: the error names the tool, whose name holds an escape sequence.
            ("resolve", any_ledger, UNSAFE[0] + "-lost", "--happened", "--result", '"one"'),
            ("resolve", any_ledger, UNSAFE[0] + "-lost", "--happened", "--result", "1"),
            ("amend", any_ledger, UNSAFE[0] + "-lost", "--result", "2"),
            ("resolve", any_ledger, UNSAFE[0], "--not-happened"),
            *(("show", any_ledger, key) for key in UNSAFE),
        )
    ]
    printed = "".join(result.stdout + result.stderr for result in results)
    assert "pay\\x1b[31m" in "".join(result.stderr for result in results)
    assert [c for c in printed if not c.isprintable() and c != "\n"] == []
    for escaped in ("\\x1b[2J\\x1b[Hgone", "tab\\x09here", "new\\x0aline", "\\u202eevil"):
        assert escaped in printed
    listed = run("ls", any_ledger)
    assert len(listed.stdout.splitlines()) == 2 + len(UNSAFE)
    keys = [json.loads(line)["key"] for line in run("ls", any_ledger, "--json").stdout.splitlines()]
    assert sorted(keys) == sorted([*UNSAFE, UNSAFE[0] + "-lost"])


def test_archive_moves_settled_history_to_a_file_and_keeps_the_crashed_keys(
    crashed: str, tmp_path: Path
) -> None:
    """`archive` writes old events as JSON lines, drops them, keeps unsettled keys' history."""
    exported = run("export", crashed, "--before", "0s")
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert {line["subject"] for line in lines} == {"refund-1", "order-1", "order-1:0:refund"}
    with get_store(crashed) as store:
        assert [e.why.value for e in store.history("refund-1")] == ["claimed", "ran"]
    archive = tmp_path / "history.jsonl"
    result = run("archive", crashed, "--before", "0s", "--to", archive, "--json")
    (summary,) = map(json.loads, result.stdout.splitlines())
    assert (summary["kept_keys"], summary["file"]) == (CRASHED, str(archive))
    archived = [json.loads(line) for line in archive.read_text().splitlines()]
    assert summary["events"] == len(archived) == len(lines)
    assert archived == lines
    with get_store(crashed) as store:
        assert store.history("refund-1") == []
        for key in CRASHED:
            assert [e.why.value for e in store.history(key)] == ["claimed"]


def seeded(ledger: str) -> None:
    """refund-1 succeeded, mail-1 failed, order-1 a completed saga, lost-1 under a dead owner.

    wire-1 waits for approval; wire-2 is approved, and no call has used it yet.
    """

    def mail(key: str) -> None:
        raise RuntimeError("smtp down")

    with get_store(ledger) as store:
        refunding = safe(store, name="refund")(refund)
        refunding("refund-1", 5)
        safe(store, name="mail")(mail)("mail-1")
        with Saga("order-1", store) as saga:
            saga.step(refunding, 7)
        store._claim("lost-1", "refund", "h", attempt_id="dead", previous=None)
        bury_owners(store)
        wiring = safe(store, name="wire", approval=True)(refund)
        wiring("wire-1", 5)
        wiring("wire-2", 6)
        store.approve("wire-2", by="grace")


def keys_listed(out: str) -> list[str]:
    return [line.split()[0] for line in out.splitlines()[1:]]


PROBES = """
from safeact import Happened
PROBES = {"refund": lambda *_: Happened(5)}
"""

# Each option of each command, run in its own process on a seeded ledger of each backend:
# (command line after the program, exit code, what its output must show). LEDGER and DIR
# stand for the ledger and a scratch directory.
CASES: dict[tuple[str, str], tuple[list[str], int, Callable[[str], bool]]] = {
    ("ls", "ledger"): (["ls", "LEDGER"], 0, lambda out: len(keys_listed(out)) == 4),
    ("ls", "--state"): (
        ["ls", "LEDGER", "--state", "failed"],
        0,
        lambda out: keys_listed(out) == ["mail-1"],
    ),
    ("ls", "--tool"): (
        ["ls", "LEDGER", "--tool", "mail"],
        0,
        lambda out: keys_listed(out) == ["mail-1"],
    ),
    ("ls", "--since"): (
        ["ls", "LEDGER", "--since", "2999-01-01"],
        0,
        lambda out: keys_listed(out) == [],
    ),
    ("ls", "--json"): (
        ["ls", "LEDGER", "--json"],
        0,
        lambda out: (
            {json.loads(line)["state"] for line in out.splitlines()}
            == {"succeeded", "failed", "in_doubt"}
        ),
    ),
    ("show", "ledger"): (["show", "LEDGER", "mail-1"], 0, lambda out: "smtp down" in out),
    ("show", "key"): (["show", "LEDGER", "lost-1"], 0, lambda out: "doubt reason  crashed" in out),
    ("show", "--json"): (
        ["show", "LEDGER", "lost-1", "--json"],
        0,
        lambda out: json.loads(out)["recorded_state"] == "attempting",
    ),
    ("doubt", "ledger"): (
        ["doubt", "LEDGER"],
        1,
        lambda out: out.splitlines()[1].split()[:3] == ["lost-1", "refund", "in_doubt"],
    ),
    ("doubt", "--json"): (
        ["doubt", "LEDGER", "--json"],
        1,
        lambda out: [json.loads(line)["key"] for line in out.splitlines()] == ["lost-1"],
    ),
    ("resolve", "ledger"): (
        ["resolve", "LEDGER", "lost-1", "--not-happened"],
        0,
        lambda out: out == "lost-1: in_doubt → released\n",
    ),
    ("resolve", "key"): (
        ["resolve", "LEDGER", "refund-1", "--not-happened"],
        2,
        lambda out: out == "",
    ),
    ("resolve", "--happened"): (
        ["resolve", "LEDGER", "lost-1", "--happened", "--result", "5"],
        0,
        lambda out: out == "lost-1: in_doubt → succeeded\n",
    ),
    ("resolve", "--not-happened"): (
        ["resolve", "LEDGER", "lost-1", "--not-happened", "--json"],
        0,
        lambda out: json.loads(out)["to_state"] == "released",
    ),
    ("resolve", "--result"): (
        ["resolve", "LEDGER", "lost-1", "--happened", "--result", "6", "--json"],
        0,
        lambda out: json.loads(out)["record"]["result"] == 6,
    ),
    ("resolve", "--note"): (
        ["resolve", "LEDGER", "lost-1", "--not-happened", "--note", "no such payment"],
        0,
        lambda out: out.startswith("lost-1: "),
    ),
    ("resolve", "--attempt"): (
        ["resolve", "LEDGER", "lost-1", "--not-happened", "--attempt", "other"],
        2,
        lambda out: out == "",
    ),
    ("resolve", "--force"): (
        ["resolve", "LEDGER", "lost-1", "--not-happened", "--force"],
        0,
        lambda out: out == "lost-1: in_doubt → released\n",
    ),
    ("resolve", "--json"): (
        ["resolve", "LEDGER", "lost-1", "--not-happened", "--json"],
        0,
        lambda out: json.loads(out)["from_state"] == "in_doubt",
    ),
    ("resolve", "--keys-from"): (
        ["resolve", "LEDGER", "--keys-from", "DIR/keys.jsonl", "--not-happened"],
        0,
        lambda out: out == "lost-1: in_doubt → released\nresolved 1 key as not happened\n",
    ),
    ("resolve", "--dry-run"): (
        ["resolve", "LEDGER", "--keys-from", "DIR/keys.jsonl", "--not-happened", "--dry-run"],
        0,
        lambda out: out.startswith("lost-1: in_doubt → released (dry run)\n"),
    ),
    ("amend", "ledger"): (
        ["amend", "LEDGER", "refund-1", "--result", "9"],
        2,
        lambda out: out == "",
    ),
    ("amend", "key"): (["amend", "LEDGER", "nope", "--result", "9"], 2, lambda out: out == ""),
    ("amend", "--result"): (
        ["amend", "LEDGER", "refund-1", "--result", "not json"],
        2,
        lambda out: out == "",
    ),
    ("amend", "--note"): (
        ["amend", "LEDGER", "mail-1", "--result", "1", "--note", "why"],
        2,
        lambda out: out == "",
    ),
    ("amend", "--json"): (
        ["amend", "LEDGER", "refund-1", "--result", "9", "--json"],
        2,
        lambda out: out == "",
    ),
    ("approvals", "ledger"): (
        ["approvals", "LEDGER"],
        0,
        lambda out: keys_listed(out.split("\n\n")[0]) == ["wire-1"],
    ),
    ("approvals", "--tool"): (
        ["approvals", "LEDGER", "--tool", "refund"],
        0,
        lambda out: out == "nothing waits for approval\n",
    ),
    ("approvals", "--all"): (
        ["approvals", "LEDGER", "--all"],
        0,
        lambda out: keys_listed(out.split("\n\n")[0]) == ["wire-1", "wire-2"],
    ),
    ("approvals", "--json"): (
        ["approvals", "LEDGER", "--json"],
        0,
        lambda out: [json.loads(line)["key"] for line in out.splitlines()] == ["wire-1"],
    ),
    ("approve", "ledger"): (
        ["approve", "LEDGER", "wire-1", "--by", "grace"],
        0,
        lambda out: out == "wire-1: pending → approved by grace\n",
    ),
    ("approve", "key"): (
        ["approve", "LEDGER", "wire-2", "--by", "grace"],
        2,
        lambda out: out == "",
    ),
    ("approve", "--by"): (
        ["approve", "LEDGER", "wire-1", "--by", "ada"],
        0,
        lambda out: out == "wire-1: pending → approved by ada\n",
    ),
    ("approve", "--note"): (
        ["approve", "LEDGER", "wire-1", "--by", "ada", "--note", "invoice 7", "--json"],
        0,
        lambda out: json.loads(out)["approval"]["note"] == "invoice 7",
    ),
    ("approve", "--args-hash"): (
        ["approve", "LEDGER", "wire-1", "--by", "ada", "--args-hash", "0" * 12],
        2,
        lambda out: out == "",
    ),
    ("approve", "--json"): (
        ["approve", "LEDGER", "wire-1", "--by", "ada", "--json"],
        0,
        lambda out: json.loads(out)["to_state"] == "approved",
    ),
    ("deny", "ledger"): (
        ["deny", "LEDGER", "wire-1", "--by", "grace"],
        0,
        lambda out: out == "wire-1: pending → denied by grace\n",
    ),
    ("deny", "key"): (
        ["deny", "LEDGER", "wire-2", "--by", "grace"],
        0,
        lambda out: out == "wire-2: approved → denied by grace\n",
    ),
    ("deny", "--by"): (
        ["deny", "LEDGER", "wire-1", "--by", "ada"],
        0,
        lambda out: out == "wire-1: pending → denied by ada\n",
    ),
    ("deny", "--note"): (
        ["deny", "LEDGER", "wire-1", "--by", "ada", "--note", "wrong amount", "--json"],
        0,
        lambda out: json.loads(out)["approval"]["note"] == "wrong amount",
    ),
    ("deny", "--args-hash"): (
        ["deny", "LEDGER", "wire-1", "--by", "ada", "--args-hash", "0" * 12],
        2,
        lambda out: out == "",
    ),
    ("deny", "--json"): (
        ["deny", "LEDGER", "wire-1", "--by", "ada", "--json"],
        0,
        lambda out: json.loads(out)["to_state"] == "denied",
    ),
    ("sagas", "ledger"): (["sagas", "LEDGER"], 0, lambda out: keys_listed(out) == ["order-1"]),
    ("sagas", "--state"): (
        ["sagas", "LEDGER", "--state", "compensating"],
        0,
        lambda out: keys_listed(out) == [],
    ),
    ("sagas", "--json"): (
        ["sagas", "LEDGER", "--json"],
        0,
        lambda out: json.loads(out)["state"] == "completed",
    ),
    ("purge", "ledger"): (
        ["purge", "LEDGER", "--older-than", "0s"],
        0,
        lambda out: out.splitlines()[-1].startswith("removed 3 keys and 1 saga "),
    ),
    ("purge", "--older-than"): (
        ["purge", "LEDGER", "--older-than", "2000-01-01"],
        0,
        lambda out: out.splitlines()[-1].startswith("removed 0 keys and 0 sagas "),
    ),
    ("purge", "--state"): (
        ["purge", "LEDGER", "--older-than", "0s", "--state", "failed", "--dry-run"],
        0,
        lambda out: out.splitlines()[:-1] == ["  saga  order-1", "  key   mail-1"],
    ),
    ("purge", "--dry-run"): (
        ["purge", "LEDGER", "--older-than", "0s", "--dry-run"],
        0,
        lambda out: out.splitlines()[-1].startswith("would remove 3 keys and 1 saga "),
    ),
    ("purge", "--batch"): (
        ["purge", "LEDGER", "--older-than", "0s", "--batch", "1", "--json"],
        0,
        lambda out: json.loads(out)["sagas"] == ["order-1"] and len(json.loads(out)["keys"]) > 1,
    ),
    ("purge", "--json"): (
        ["purge", "LEDGER", "--older-than", "0s", "--json"],
        0,
        lambda out: json.loads(out)["sagas"] == ["order-1"],
    ),
    ("stats", "ledger"): (["stats", "LEDGER"], 0, lambda out: "(all tools)" in out),
    ("stats", "--json"): (
        ["stats", "LEDGER", "--json"],
        0,
        lambda out: json.loads(out)["all"]["in_doubt"] == 1,
    ),
    ("reconcile", "ledger"): (["reconcile", "LEDGER"], 1, lambda out: "still in doubt: 1" in out),
    ("reconcile", "--probes"): (
        ["reconcile", "LEDGER", "--probes", "DIR/probes.py:PROBES"],
        0,
        lambda out: "nothing left in doubt" in out,
    ),
    ("reconcile", "--json"): (
        ["reconcile", "LEDGER", "--probes", "DIR/probes.py:PROBES", "--json"],
        0,
        lambda out: [e["why"] for e in json.loads(out)["events"]] == ["reconciled"],
    ),
    ("archive", "ledger"): (
        ["archive", "LEDGER", "--before", "0s", "--to", "DIR/h.jsonl"],
        0,
        lambda out: "kept the history of" in out and "  key   lost-1" in out,
    ),
    ("archive", "--before"): (
        ["archive", "LEDGER", "--before", "2000-01-01", "--to", "DIR/h.jsonl"],
        0,
        lambda out: out.startswith("archived 0 events "),
    ),
    ("archive", "--to"): (
        ["archive", "LEDGER", "--before", "0s", "--to", "DIR"],
        2,
        lambda out: out == "",
    ),
    ("archive", "--batch"): (
        ["archive", "LEDGER", "--before", "0s", "--to", "DIR/h.jsonl", "--batch", "1", "--json"],
        0,
        lambda out: json.loads(out)["events"] > 1,
    ),
    ("archive", "--json"): (
        ["archive", "LEDGER", "--before", "0s", "--to", "DIR/h.jsonl", "--json"],
        0,
        lambda out: json.loads(out)["kept_keys"] == ["lost-1"],
    ),
    ("export", "ledger"): (
        ["export", "LEDGER", "--before", "0s"],
        0,
        lambda out: {json.loads(line)["subject"] for line in out.splitlines()} >= {"mail-1"},
    ),
    ("export", "--before"): (
        ["export", "LEDGER", "--before", "2000-01-01"],
        0,
        lambda out: out == "",
    ),
    ("export", "--json"): (
        ["export", "LEDGER", "--before", "0s", "--json"],
        0,
        lambda out: all(json.loads(line)["seq"] for line in out.splitlines()),
    ),
    ("check", "ledger"): (["check", "LEDGER"], 0, lambda out: out.endswith(": none corrupt\n")),
    ("check", "--batch"): (
        ["check", "LEDGER", "--batch", "1", "--json"],
        0,
        lambda out: json.loads(out)["checked"]["calls"] > 1,
    ),
    ("check", "--json"): (
        ["check", "LEDGER", "--json"],
        0,
        lambda out: json.loads(out)["corrupt"] == 0,
    ),
    # serve runs until stopped (tests/test_inbox.py serves through it): each case here is a
    # refusal its option leads to, and nothing listens.
    ("serve", "ledger"): (["serve", "LEDGER"], 2, lambda out: out == ""),
    ("serve", "--token-file"): (
        ["serve", "LEDGER", "--token-file", "DIR/none"],
        2,
        lambda out: out == "",
    ),
    ("serve", "--passwords"): (
        ["serve", "LEDGER", "--passwords", "DIR/keys.jsonl"],
        2,
        lambda out: out == "",
    ),
    ("serve", "--no-auth"): (
        ["serve", "LEDGER", "--no-auth", "--host", "192.0.2.1"],
        2,
        lambda out: out == "",
    ),
    ("serve", "--host"): (
        ["serve", "LEDGER", "--no-auth", "--host", "0.0.0.0"],  # noqa: S104 - refused
        2,
        lambda out: out == "",
    ),
    ("serve", "--port"): (
        ["serve", "LEDGER", "--no-auth", "--port", "65536"],
        2,
        lambda out: out == "",
    ),
    ("serve", "--allowed-host"): (
        ["serve", "LEDGER", "--no-auth", "--host", "0.0.0.0", "--allowed-host", "inbox.example"],  # noqa: S104 - refused
        2,
        lambda out: out == "",
    ),
    ("serve", "--session-minutes"): (
        ["serve", "LEDGER", "--no-auth", "--session-minutes", "0"],
        2,
        lambda out: out == "",
    ),
    ("serve", "--secure-cookies"): (
        ["serve", "LEDGER", "--secure-cookies"],
        2,
        lambda out: out == "",
    ),
    ("hash-password", "name"): (["hash-password", "al:ice"], 2, lambda out: out == ""),
    ("migrate", "ledger"): (["migrate", "LEDGER"], 0, lambda out: "already at schema" in out),
    ("migrate", "--json"): (
        ["migrate", "LEDGER", "--json"],
        0,
        lambda out: json.loads(out)["from_schema"] == json.loads(out)["to_schema"],
    ),
}


def test_every_option_of_every_command_has_a_case() -> None:
    """CASES names each option and positional argument of every command, and no other."""
    options = {
        (name, action.option_strings[0] if action.option_strings else action.dest)
        for name, sub in subcommands().items()
        for action in sub._actions
        if not isinstance(action, argparse._HelpAction)
    }
    assert options == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES), ids="-".join)
def test_each_option_does_what_its_help_says(
    case: tuple[str, str], any_ledger: str, tmp_path: Path
) -> None:
    """Each option, in a process of its own, on both backends: its exit code and output."""
    seeded(any_ledger)
    (tmp_path / "probes.py").write_text(PROBES)
    (tmp_path / "keys.jsonl").write_text('{"key": "lost-1", "attempt_id": "dead"}\n')
    args, code, shows = CASES[case]
    filled = [a.replace("LEDGER", any_ledger).replace("DIR", str(tmp_path)) for a in args]
    result = run(*filled)
    assert result.returncode == code, result.stderr
    assert shows(result.stdout), result.stdout
    if code == 2:
        assert len(result.stderr.splitlines()) == 1
        assert result.stderr.startswith("safeact: error: ")
