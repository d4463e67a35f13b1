"""The command line against a PostgreSQL ledger: the same commands, a URL in place of a file."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from safeact import get_store, safe
from safeact._tables import SCHEMA_VERSION
from tests.actions import Receipt, bury_owners


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "safeact", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def pay(key: str) -> int:
    return 1


def test_migrate_creates_the_schema_once(empty_postgres: str) -> None:
    """`safeact migrate URL` creates the schema; a second run finds it current."""
    first, second = run("migrate", empty_postgres), run("migrate", empty_postgres)
    assert (first.returncode, first.stdout) == (
        0,
        f"created schema {SCHEMA_VERSION} in {empty_postgres}\n",
    )
    assert (second.returncode, second.stdout) == (
        0,
        f"{empty_postgres} is already at schema {SCHEMA_VERSION}\n",
    )


def test_a_database_without_the_schema_is_refused_with_the_fix(empty_postgres: str) -> None:
    """Any other command on an unmigrated database: one line naming `safeact migrate`, exit 2."""
    result = run("ls", empty_postgres)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("safeact: error: ")
    assert "no safeact schema" in line
    assert "safeact migrate" in line


def test_doubt_and_resolve_work_on_a_url(postgres_ledger: str) -> None:
    """A crashed owner's key is listed by `doubt` (exit 1), resolved, then gone from it."""
    with get_store(postgres_ledger) as store:
        safe(store, name="pay")(pay)("paid")
        store._claim("lost", "pay", "h", attempt_id="dead", previous=None)
        bury_owners(store)
    doubt = run("doubt", postgres_ledger)
    assert doubt.returncode == 1
    assert [line.split()[:3] for line in doubt.stdout.splitlines()[1:2]] == [
        ["lost", "pay", "in_doubt"]
    ]
    resolved = run("resolve", postgres_ledger, "lost", "--not-happened", "--note", "no charge")
    assert (resolved.returncode, resolved.stdout) == (0, "lost: in_doubt → released\n")
    assert run("doubt", postgres_ledger).returncode == 0
    listed = run("ls", postgres_ledger)
    assert [line.split()[:3] for line in listed.stdout.splitlines()[1:]] == [
        ["paid", "pay", "succeeded"],
        ["lost", "pay", "released"],
    ]
    stats = run("stats", postgres_ledger)
    assert stats.returncode == 0
    assert stats.stdout.splitlines()[-1] == f"size: on the server ({postgres_ledger})"


def test_a_keyword_dsn_reaches_postgresql(postgres_ledger: str, tmp_path: Path) -> None:
    """A libpq keyword string names the database on the command line too, never a file."""
    with get_store(postgres_ledger) as store:
        safe(store, name="pay")(pay)("paid")
    keywords = make_conninfo("", **conninfo_to_dict(postgres_ledger))
    assert keywords.split("=", 1)[0] in {"user", "host", "dbname", "port", "options"}
    listed = subprocess.run(
        [sys.executable, "-m", "safeact", "ls", keywords],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=tmp_path,
    )
    assert listed.returncode == 0, listed.stderr
    assert [line.split()[:3] for line in listed.stdout.splitlines()[1:]] == [
        ["paid", "pay", "succeeded"]
    ]
    assert list(tmp_path.iterdir()) == []


def test_resolve_checks_a_result_against_the_tools_recorded_type_on_a_url(
    postgres_ledger: str,
) -> None:
    """On PostgreSQL too: a misfit is refused (exit 2, nothing changes); a fit is stored."""
    with get_store(postgres_ledger) as store:

        @safe(store, name="refunds")
        def refund(key: str, to: str) -> Receipt:
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            refund("r-1", "bob")
        before = (store._stored("r-1"), len(store.history("r-1")))
    refused = run("resolve", postgres_ledger, "r-1", "--happened", "--result", '{"to": "bob"}')
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr == (
        "safeact: error: the result does not fit the return type of refunds: $.amount: missing "
        "(Receipt always has it); nothing was changed\n"
    )
    with get_store(postgres_ledger) as store:
        assert (store._stored("r-1"), len(store.history("r-1"))) == before
    result = json.dumps({"to": "bob", "amount": 20})
    done = run("resolve", postgres_ledger, "r-1", "--happened", "--result", result, "--json")
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)["record"]["result"] == {"to": "bob", "amount": 20}


def test_resolve_warns_for_a_key_whose_tool_never_described_its_results_on_a_url(
    postgres_ledger: str,
) -> None:
    """A key whose tool never described its results (before schema 5) goes in unchecked, said so."""
    with get_store(postgres_ledger) as store:
        store._claim("lost", "pay", "h", attempt_id="dead", previous=None)
        bury_owners(store)
    done = run("resolve", postgres_ledger, "lost", "--happened", "--result", '"one"')
    assert (done.returncode, done.stdout) == (0, "lost: in_doubt → succeeded\n")
    assert done.stderr.startswith(
        "safeact: warning: the result is not checked: the ledger has no description of pay's "
        "results"
    )
    with get_store(postgres_ledger) as store:
        safe(store, name="pay")(pay)("paid")  # the tool's first claim describes its results
    refused = run("amend", postgres_ledger, "lost", "--result", '"one"')
    assert refused.returncode == 2
    assert '$: expected an integer, got "one"' in refused.stderr
