"""The ``safeact`` command line, driven as users drive it: in its own process."""

import argparse
import io
import json
import re
import shutil
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from safeact import Record, Saga, State, get_store, safe
from safeact._cli import main, parser
from safeact._cli_json import write_lists
from safeact._tables import SCHEMA_VERSION
from tests.actions import bury_owners
from tests.big_ledger import copy_key

V1 = Path(__file__).with_name("data") / "ledger-v1.db"
COMMANDS = sorted(
    next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
)
NEEDS = {
    "show": ["KEY"],
    "resolve": ["KEY", "--not-happened"],
    "amend": ["KEY", "--result", "1"],
    "approve": ["KEY", "--by", "grace"],
    "deny": ["KEY", "--by", "grace"],
    "purge": ["--older-than", "1d"],
    "reconcile": ["--probes", "probes.py:PROBES"],
    "archive": ["--before", "1d", "--to", "history.jsonl"],
    "export": ["--before", "1d"],
}
"""What each command needs besides the ledger."""


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m safeact ARGS`` to the end."""
    return subprocess.run(
        [sys.executable, "-m", "safeact", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def assert_refused(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit code 2, nothing on stdout, one line on stderr saying ``fragments``, no traceback."""
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("safeact: error: ")
    for fragment in fragments:
        assert fragment in line
    assert "Traceback" not in result.stderr


def iso(moment: datetime | None) -> str:
    """A time as the command shows it to people: UTC, whole seconds."""
    return "-" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def columns(lines: list[str]) -> list[list[str]]:
    """Cut an aligned table into cells at the positions of its header's words."""
    starts = [m.start() for m in re.finditer(r"(?<!\S)\S", lines[0])]
    return [
        [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        for line in lines
    ]


def pay(key: str, amount: int) -> int:
    return amount


def mail(key: str, to: str) -> str:
    raise RuntimeError("smtp down")


def make_ledger(path: Path) -> list[Record]:
    """pay-1 succeeded, mail-1 failed, pay-2 left ATTEMPTING by a dead owner, saga order-1."""
    with get_store(path) as store:
        paying = safe(store, name="pay")(pay)
        paying("pay-1", 5)
        safe(store, name="mail")(mail)("mail-1", "a@example.com")
        store._claim("pay-2", "pay", "h", attempt_id="dead", previous=None)
        with Saga("order-1", store) as saga:
            saga.step(paying, 7)
        bury_owners(store)
    with get_store(path) as store:
        return store.records()


@pytest.fixture
def full(ledger: Path) -> Path:
    make_ledger(ledger)
    return ledger


def test_ls_shows_every_key_in_an_aligned_table(ledger: Path) -> None:
    """`ls` prints a header and one aligned row per key, oldest first, with what to know."""
    records = make_ledger(ledger)
    result = run("ls", ledger)
    assert result.returncode == 0
    notes = {"mail-1": "RuntimeError: smtp down", "pay-2": "in doubt: crashed"}
    assert columns(result.stdout.splitlines()) == [
        ["KEY", "TOOL", "STATE", "ATTEMPTED", "FINISHED", "NOTE"],
        *(
            [
                r.key,
                r.tool,
                r.state.value,
                iso(r.attempted_at),
                iso(r.finished_at),
                notes.get(r.key, ""),
            ]
            for r in records
        ),
    ]
    assert [r.key for r in records] == ["pay-1", "mail-1", "pay-2", "order-1:0:pay"]


def test_ls_lists_a_ledger_larger_than_its_batch_once_in_order(full: Path) -> None:
    """`ls` takes 1,000 rows at a time, and lists every key once, in order, under one header.

    2,500 keys more, of one attempt time, each listed once in `Store.scan_records`' order,
    in text and in JSON.
    """
    copy_key(full, "pay-1", 2_500, "copy")
    with get_store(full) as store:
        expected = [getattr(r, "key", None) for r in store.scan_records()]
    assert len(expected) == 2_504
    text = run("ls", full).stdout.splitlines()
    assert [row[0] for row in columns(text)] == ["KEY", *expected]
    listed = [json.loads(line)["key"] for line in run("ls", full, "--json").stdout.splitlines()]
    assert listed == expected


def test_ls_filters_by_state(full: Path) -> None:
    """`ls` --state lists only the keys in that state."""
    result = run("ls", full, "--state", "failed")
    assert [row[0] for row in columns(result.stdout.splitlines())] == ["KEY", "mail-1"]


def test_ls_filters_by_tool_and_relative_age(full: Path) -> None:
    """`ls` --tool --since 1h lists that tool's keys attempted within the hour."""
    result = run("ls", full, "--tool", "pay", "--since", "1h")
    keys = [row[0] for row in columns(result.stdout.splitlines())]
    assert keys == ["KEY", "pay-1", "pay-2", "order-1:0:pay"]


def test_ls_since_an_age_before_the_year_1_is_a_usage_error(full: Path) -> None:
    """`ls --since 99999999999d` says the age is too long, in one line, without a traceback."""
    result = run("ls", full, "--since", "99999999999d")
    assert result.returncode == 2
    assert "before the year 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_ls_since_a_future_date_lists_nothing(full: Path) -> None:
    """`ls` --since with an ISO date after every attempt prints the header alone."""
    result = run("ls", full, "--since", "2999-01-01")
    assert (result.returncode, result.stdout.split()) == (
        0,
        ["KEY", "TOOL", "STATE", "ATTEMPTED", "FINISHED", "NOTE"],
    )


def test_ls_json_gives_every_record_field(ledger: Path) -> None:
    """`ls` --json prints one object per key with every Record field, times in ISO 8601."""
    records = make_ledger(ledger)
    lines = run("ls", ledger, "--json").stdout.splitlines()
    decoded = [json.loads(line) for line in lines]
    assert [d.keys() for d in decoded] == [{f.name for f in attrs.fields(Record)}] * len(records)
    for got, record in zip(decoded, records, strict=True):
        assert got["key"] == record.key
        assert got["state"] == record.state.value
        assert datetime.fromisoformat(got["attempted_at"]) == record.attempted_at
        assert got["owner"] == attrs.asdict(record.owner)
    assert decoded[0]["result"] == 5
    assert decoded[1]["error_message"] == "smtp down"


def test_show_prints_receipt_result_and_history(full: Path) -> None:
    """`show` prints the key's receipt and result, then its history, one line per event."""
    with get_store(full) as store:
        record = store.get("pay-1")
        events = store.history("pay-1")
    assert record is not None
    result = run("show", full, "pay-1")
    lines = result.stdout.splitlines()
    fields = dict(line.split(None, 1) for line in lines[: lines.index("")] if " " in line)
    assert result.returncode == 0
    assert "key           pay-1" in lines
    assert "args hash     " + record.args_hash in lines
    assert "result        5" in lines
    assert fields["tool"] == "pay"
    history = lines[lines.index("history:") + 1 :]
    assert len(history) == len(events) == 2
    assert history[0].split()[:5] == [iso(events[0].at), "(new)", "→", "attempting", "claimed"]
    assert history[1].split()[:5] == [iso(events[1].at), "attempting", "→", "succeeded", "ran"]
    assert f"by process {record.owner.pid} on {record.owner.host}" in history[0]


def test_show_prints_a_failed_keys_error(full: Path) -> None:
    """`show` of a failed key prints its error type and message."""
    assert (
        "error         RuntimeError: smtp down" in run("show", full, "mail-1").stdout.splitlines()
    )


def test_doubt_lists_what_needs_a_decision_and_exits_1(full: Path) -> None:
    """`doubt` lists the key left by a dead owner, with its reason and age, and exits 1."""
    result = run("doubt", full)
    lines = result.stdout.splitlines()
    assert result.returncode == 1
    assert columns(lines[:2])[0] == ["KEY", "TOOL", "STATE", "ATTEMPTED", "AGE", "REASON"]
    key, tool, state, _, age, reason = columns(lines[:2])[1]
    assert (key, tool, state, reason) == ("pay-2", "pay", "in_doubt", "crashed")
    assert re.fullmatch(r"\d+s", age)


def test_doubt_exits_0_when_nothing_is_in_doubt(ledger: Path) -> None:
    """`doubt` on a ledger with nothing in doubt says so and exits 0."""
    with get_store(ledger) as store:
        safe(store, name="pay")(pay)("pay-1", 5)
    result = run("doubt", ledger)
    assert (result.returncode, result.stdout) == (0, "nothing in doubt\n")


def test_doubt_json_gives_reason_and_age(full: Path) -> None:
    """`doubt` --json prints one object per key, with the record's fields, reason and age."""
    result = run("doubt", full, "--json")
    (line,) = result.stdout.splitlines()
    decoded = json.loads(line)
    assert result.returncode == 1
    assert (decoded["key"], decoded["state"], decoded["doubt_reason"]) == (
        "pay-2",
        "in_doubt",
        "crashed",
    )
    assert decoded["age_seconds"] >= 0


def test_resolve_happened_stores_the_result_and_the_note_shows_in_history(full: Path) -> None:
    """`resolve` --happened records the result; show's last history line has the operator's note."""
    result = run("resolve", full, "pay-2", "--happened", "--result", "12", "--note", "bank ref 77")
    assert (result.returncode, result.stdout) == (0, "pay-2: in_doubt → succeeded\n")
    with get_store(full) as store:
        record = store.get("pay-2")
    assert record is not None
    assert (record.state, record.result) == (State.SUCCEEDED, 12)
    last = run("show", full, "pay-2").stdout.splitlines()[-1]
    assert last.split()[1:5] == ["attempting", "→", "succeeded", "resolved"]
    assert last.endswith("bank ref 77")
    assert "by operator on " in last


def test_resolve_not_happened_releases_the_key(full: Path) -> None:
    """`resolve` --not-happened releases the key, so its next call runs the action."""
    result = run("resolve", full, "pay-2", "--not-happened")
    assert (result.returncode, result.stdout) == (0, "pay-2: in_doubt → released\n")
    with get_store(full) as store:
        record = store.get("pay-2")
    assert record is not None
    assert record.state is State.RELEASED


def test_resolve_of_a_settled_key_is_refused_and_changes_nothing(full: Path) -> None:
    """`resolve` of a succeeded key exits 2 with the library's reason; the ledger is unchanged."""
    with get_store(full) as store:
        before = (store.get("pay-1"), store.history("pay-1"))
    result = run("resolve", full, "pay-1", "--not-happened")
    assert_refused(result, "cannot resolve key 'pay-1': it is succeeded, not in doubt")
    with get_store(full) as store:
        assert (store.get("pay-1"), store.history("pay-1")) == before


def test_resolve_with_bad_json_is_refused(full: Path) -> None:
    """`resolve` --result with text that is not JSON exits 2 and changes nothing."""
    assert_refused(run("resolve", full, "pay-2", "--happened", "--result", "{oops"), "not JSON")
    with get_store(full) as store:
        record = store._stored("pay-2")  # the row as written: the refused resolve changed nothing
    assert record is not None
    assert record.state is State.ATTEMPTING


def test_sagas_lists_each_saga_with_its_steps(full: Path) -> None:
    """`sagas` prints each saga's id, state and number of steps."""
    lines = run("sagas", full).stdout.splitlines()
    assert [row[:3] for row in columns(lines)] == [
        ["SAGA", "STATE", "STEPS"],
        ["order-1", "completed", "1"],
    ]


def test_purge_dry_run_reports_and_removes_nothing(full: Path) -> None:
    """`purge` --dry-run names what would go as it reads it, then how much; nothing goes."""
    result = run("purge", full, "--older-than", "0s", "--dry-run")
    lines = result.stdout.splitlines()
    assert result.returncode == 0
    assert lines[:-1] == [
        "  saga  order-1",
        "  key   mail-1",
        "  key   order-1:0:pay",
        "  key   pay-1",
    ]
    assert lines[-1].startswith("would remove 3 keys and 1 saga finished before ")
    with get_store(full) as store:
        assert len(store.records()) == 4


def test_purge_removes_settled_keys_from_ls(full: Path) -> None:
    """`purge` removes the settled keys and sagas; ls then lists only the unsettled key."""
    result = run("purge", full, "--older-than", "0s")
    assert result.stdout.splitlines()[-1].startswith("removed 3 keys and 1 saga finished before ")
    assert [row[0] for row in columns(run("ls", full).stdout.splitlines())] == ["KEY", "pay-2"]


def test_purge_of_in_doubt_keys_is_refused(full: Path) -> None:
    """`purge` --state in_doubt exits 2 with the library's reason; nothing is removed."""
    assert_refused(run("purge", full, "--older-than", "0s", "--state", "in_doubt"), "never purged")
    with get_store(full) as store:
        assert len(store.records()) == 4


def test_purge_with_a_bad_age_is_refused(full: Path) -> None:
    """`purge` --older-than with neither an age nor a date exits 2, naming the option."""
    assert_refused(run("purge", full, "--older-than", "30 days"), "--older-than", "'30 days'")


def test_stats_counts_keys_by_tool_and_state(full: Path) -> None:
    """`stats` counts keys per tool and state, names the oldest doubt and the size on disk."""
    lines = run("stats", full).stdout.splitlines()
    assert [line.split() for line in lines[:4]] == [
        ["TOOL", "ATTEMPTING", "SUCCEEDED", "FAILED", "IN_DOUBT", "RELEASED", "TOTAL"],
        ["mail", "0", "0", "1", "0", "0", "1"],
        ["pay", "0", "2", "0", "1", "0", "3"],
        ["(all", "tools)", "0", "2", "1", "1", "0", "4"],
    ]
    assert lines[5] == "sagas: 1 completed"
    assert re.fullmatch(r"oldest in doubt: pay-2, attempted \d+s ago", lines[6])
    assert re.fullmatch(rf"size on disk: [\d,]+ bytes \({full.name} [\d,]+.*\)", lines[7])


def test_reconcile_applies_a_probe_from_a_file(full: Path, tmp_path: Path) -> None:
    """`reconcile` with a probes file settles the key as the probe says and exits 0."""
    (tmp_path / "probes.py").write_text(
        "from safeact import Happened\n"
        "PROBES = {'pay': lambda key, receipt: Happened(9, note='bank ref 3')}\n"
    )
    result = run("reconcile", full, "--probes", f"{tmp_path / 'probes.py'}:PROBES")
    assert result.returncode == 0, result.stderr
    key, change, why, note = columns(result.stdout.splitlines()[:2])[1]
    assert (key, why, note) == ("pay-2", "reconciled", "probe: happened (bank ref 3)")
    assert change.endswith("→ succeeded")
    assert result.stdout.splitlines()[-1] == "nothing left in doubt"
    with get_store(full) as store:
        record = store.get("pay-2")
    assert record is not None
    assert (record.state, record.result) == (State.SUCCEEDED, 9)


def test_reconcile_exits_1_while_doubt_is_left(full: Path, tmp_path: Path) -> None:
    """A probe that cannot tell leaves the key in doubt; reconcile lists it and exits 1."""
    (tmp_path / "probes.py").write_text(
        "from safeact import Unknown\nPROBES = {'pay': lambda key, receipt: Unknown('no answer')}\n"
    )
    result = run("reconcile", full, "--probes", f"{tmp_path / 'probes.py'}:PROBES")
    lines = result.stdout.splitlines()
    assert result.returncode == 1
    assert "still in doubt: 1 (0 with no probe for their tool)" in lines
    assert lines[-1].split()[:3] == ["pay-2", "pay", "in_doubt"]


def test_reconcile_with_a_broken_probes_module_is_refused(full: Path, tmp_path: Path) -> None:
    """A probes module that raises on import exits 2 with its error in one line."""
    (tmp_path / "probes.py").write_text("raise RuntimeError('no config')\n")
    result = run("reconcile", full, "--probes", f"{tmp_path / 'probes.py'}:PROBES")
    assert_refused(result, "cannot import", "RuntimeError: no config")


def test_a_missing_ledger_is_refused_and_not_created(tmp_path: Path) -> None:
    """A command on a path with no file exits 2 saying so, and creates no ledger."""
    missing = tmp_path / "missing.db"
    assert_refused(run("ls", missing), f"{missing}: no such file")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [c for c in COMMANDS if c != "hash-password"])
def test_no_command_creates_a_missing_ledger(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command, migrate included, refuses a missing ledger and leaves no file behind."""
    assert main([command, str(tmp_path / "missing.db"), *NEEDS.get(command, [])]) == 2
    assert capsys.readouterr().err.startswith("safeact: error: ")
    assert list(tmp_path.iterdir()) == []


def test_a_text_file_is_refused(tmp_path: Path) -> None:
    """A plain text file is not a ledger: exit 2, one line."""
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    assert_refused(run("doubt", text), str(text), "not a database")


def test_another_programs_database_is_refused_untouched(tmp_path: Path) -> None:
    """A foreign SQLite database is refused in one line, and its bytes do not change."""
    other = tmp_path / "other.db"
    connection = sqlite3.connect(other)
    with connection:
        connection.execute("CREATE TABLE t (x)")
    connection.close()
    before = other.read_bytes()
    assert_refused(run("ls", other), str(other))
    assert other.read_bytes() == before


def test_an_older_schema_is_refused_naming_migrate(tmp_path: Path) -> None:
    """A schema-1 ledger is refused with a message that says to run safeact migrate."""
    old = tmp_path / "old.db"
    shutil.copyfile(V1, old)
    assert_refused(run("ls", old), "schema version 1", f"`safeact migrate {old}`")


def test_an_unknown_key_is_refused(full: Path) -> None:
    """`show` of a key the ledger never had exits 2, naming the key."""
    assert_refused(run("show", full, "nope"), "no key 'nope'")


def test_migrate_upgrades_an_old_ledger_that_ls_then_reads(tmp_path: Path) -> None:
    """`migrate` reports the upgrade and its backup; ls then lists every old key."""
    old = tmp_path / "old.db"
    shutil.copyfile(V1, old)
    connection = sqlite3.connect(old)
    keys = [
        key for (key,) in connection.execute("SELECT key FROM calls ORDER BY attempted_at, key")
    ]
    connection.close()
    result = run("migrate", old)
    assert result.stdout == (
        f"migrated {old} from schema 1 to {SCHEMA_VERSION} (old file kept as {old}.v1.bak)\n"
    )
    assert (tmp_path / "old.db.v1.bak").is_file()
    assert [row[0] for row in columns(run("ls", old).stdout.splitlines())] == ["KEY", *keys]


def test_migrate_of_a_current_ledger_changes_nothing(full: Path) -> None:
    """`migrate` of a ledger already at this schema says so and makes no backup."""
    result = run("migrate", full)
    assert (result.returncode, result.stdout) == (
        0,
        f"{full} is already at schema {SCHEMA_VERSION}\n",
    )
    assert not list(full.parent.glob("*.bak*"))


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_help_has_an_example(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--help of each command ends with an example of it."""
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert exited.value.code == 0
    assert f"example:\n  safeact {command} " in out


def test_the_installed_console_script_runs(full: Path) -> None:
    """The `safeact` script installed beside the interpreter runs the same command line."""
    script = Path(sys.executable).with_name("safeact")
    result = subprocess.run(
        [script, "doubt", full], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 1
    assert result.stdout.splitlines()[1].split()[0] == "pay-2"


def test_show_of_a_purged_key_prints_the_history_it_kept(full: Path) -> None:
    """`show` of a purged key says it is gone and still prints its history, purge included."""
    with get_store(full) as store:
        store.purge(datetime.now(UTC) + timedelta(days=1))
    result = run("show", full, "pay-1")
    lines = result.stdout.splitlines()
    assert (result.returncode, lines[0]) == (0, "key 'pay-1' is not in the ledger any more")
    assert lines[-1].split()[1:5] == ["succeeded", "→", "(purged)", "purged"]


def test_reconcile_imports_probes_by_module_name(full: Path, tmp_path: Path) -> None:
    """`reconcile --probes MODULE:NAME` imports MODULE from the working directory."""
    (tmp_path / "myprobes.py").write_text(
        "from safeact import NotHappened\nPROBES = {'pay': lambda key, receipt: NotHappened()}\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "safeact", "reconcile", str(full), "--probes", "myprobes:PROBES"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].split()[:4] == ["pay-2", "in_doubt", "→", "released"]


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("probes.py", "expected MODULE:NAME"),
        ("nowhere.py:PROBES", "no Python file at nowhere.py"),
        ("probes.py:NOPE", "probes.py has no NOPE"),
        ("probes.py:LISTED", "must be a mapping of tool names to probes, got list"),
    ],
)
def test_reconcile_refuses_probes_it_cannot_use(
    spec: str,
    says: str,
    full: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A probes spec that names no usable mapping exits 2 with one line saying why."""
    (full.parent / "probes.py").write_text("LISTED = ['pay']\n")
    monkeypatch.chdir(full.parent)
    assert main(["reconcile", str(full), "--probes", spec]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("safeact: error: --probes ")
    assert says in line


def test_resolve_refuses_a_result_for_a_key_that_did_not_happen(
    full: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`resolve --not-happened --result` exits 2: a key that did not happen has no result."""
    assert main(["resolve", str(full), "pay-2", "--not-happened", "--result", "1"]) == 2
    assert "--result goes with --happened" in capsys.readouterr().err


def test_an_empty_file_is_refused_not_made_a_ledger(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty file is not a ledger: the command exits 2 and leaves it empty."""
    empty = tmp_path / "empty.db"
    empty.touch()
    assert main(["stats", str(empty)]) == 2
    assert capsys.readouterr().err == f"safeact: error: {empty}: not a safeact ledger\n"
    assert empty.stat().st_size == 0


def test_ls_says_which_process_runs_a_live_key(
    ledger: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key claimed by a live process is listed as running, under that process."""
    with get_store(ledger) as store:
        store._claim("live", "pay", "h", attempt_id="a", previous=None)
        owner = store.owner
    assert main(["ls", str(ledger)]) == 0
    row = columns(capsys.readouterr().out.splitlines())[1]
    assert row[-1] == f"running: process {owner.pid} on {owner.host}"


@given(
    head=st.dictionaries(st.text(), st.integers() | st.text(), max_size=3),
    sagas=st.lists(st.text()),
    keys=st.lists(st.text()),
)
def test_write_lists_writes_the_whole_objects_json(
    head: dict[str, object], sagas: list[str], keys: list[str]
) -> None:
    """Written an item at a time, the object is ``json.dumps`` of it whole, on one line."""
    out = io.StringIO()
    items = [*(("sagas", s) for s in sagas), *(("keys", k) for k in keys)]
    write_lists(out, head, ("sagas", "keys"), items)
    assert out.getvalue() == json.dumps({**head, "sagas": sagas, "keys": keys}) + "\n"
