"""The README's demo runs, crashes itself, and still pays each customer exactly once."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from safeact import State, Why, get_store

DEMO = Path(__file__).resolve().parent.parent / "examples" / "agent_loop.py"


def test_demo_crashes_resolves_and_pays_each_refund_once() -> None:
    """The agent is killed mid-refund, resolves the doubt on restart, and nothing is paid twice."""
    result = subprocess.run(
        [sys.executable, str(DEMO)], capture_output=True, text=True, check=True, timeout=120
    )
    lines = result.stdout.splitlines()
    assert "orchestrator: the agent exited with -9 (killed by SIGKILL)" in lines
    assert any("refund-1002: IN DOUBT (crashed)" in line for line in lines)
    assert lines[-2:] == [
        (
            "bank: 4 payments for 4 keys: "
            "refund-1001 $50, refund-1002 $20, refund-1003 $75, refund-1004 $30"
        ),
        "left in doubt: refund-1004, in a ledger now removed (give DIR to keep it)",
    ]


def test_demo_keeps_its_ledger_for_the_operator(tmp_path: Path) -> None:
    """Given a folder, the demo leaves its ledger there, with the crash and the resolve in it."""
    subprocess.run(
        [sys.executable, str(DEMO), str(tmp_path)], capture_output=True, check=True, timeout=120
    )
    with get_store(tmp_path / "agent.db") as store:
        assert [record.state for record in store.records()] == [State.SUCCEEDED] * 3 + [
            State.IN_DOUBT
        ]
        assert [event.why for event in store.history("refund-1002")] == [
            Why.CLAIMED,
            Why.CRASHED,
            Why.RESOLVED,
        ]


def test_demo_leaves_its_last_refund_in_doubt_for_safeact_doubt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's last line is the command, as typed here, that shows the key it left in doubt.

    ``tasks.py demo`` gives the folder as an absolute path inside the working directory.
    """
    monkeypatch.chdir(tmp_path)
    result = subprocess.run(
        [sys.executable, str(DEMO), str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert result.stdout.splitlines()[-1] == "left in doubt for you: safeact doubt demo/agent.db"
    doubt = subprocess.run(
        [sys.executable, "-m", "safeact", "doubt", "demo/agent.db", "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (doubt.returncode, [json.loads(line)["key"] for line in doubt.stdout.splitlines()]) == (
        1,
        ["refund-1004"],
    )


def test_demo_help_prints_its_usage_and_runs_nothing(tmp_path: Path) -> None:
    """``--help`` says what the demo does and what DIR is, exits 0 and creates nothing."""
    result = subprocess.run(
        [sys.executable, str(DEMO), "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=tmp_path,
    )
    assert (result.returncode, result.stdout.splitlines()[0], list(tmp_path.iterdir())) == (
        0,
        "usage: agent_loop.py [-h] [--agent DIR] [--crash-on KEY] [DIR]",
        [],
    )
    assert "left in doubt for `safeact doubt DIR/agent.db`" in " ".join(result.stdout.split())


def test_demo_refuses_an_unknown_option_and_creates_nothing(tmp_path: Path) -> None:
    """An option the demo does not know is a usage error (exit 2); nothing runs or is made."""
    result = subprocess.run(
        [sys.executable, str(DEMO), "--verbose"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=tmp_path,
    )
    assert (result.returncode, result.stdout, list(tmp_path.iterdir())) == (2, "", [])
    assert "unrecognized arguments: --verbose" in result.stderr


REFUND = DEMO.with_name("refund_agent.py")


def test_refund_demo_help_prints_its_usage_and_runs_nothing(tmp_path: Path) -> None:
    """The saga demo's ``--help`` says what it does and exits 0 without running a saga."""
    result = subprocess.run(
        [sys.executable, str(REFUND), "--help"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=tmp_path,
    )
    assert (result.returncode, result.stdout.splitlines()[0]) == (
        0,
        "usage: refund_agent.py [-h] [--agent DIR] [--crash]",
    )
    assert "run 1:" not in result.stdout


def test_refund_demo_rolls_back_across_a_crash_once_per_key() -> None:
    """The saga demo dies mid-rollback, resumes, resolves, and every back end acts once."""
    result = subprocess.run(
        [sys.executable, str(REFUND)], capture_output=True, text=True, check=True, timeout=120
    )
    lines = result.stdout.splitlines()
    assert "  the agent was killed (SIGKILL)" in lines
    assert "  ledger: saga refund-8842 is compensating; stuck mid-rollback: 1" in lines
    assert lines[-2] == "  ledger: saga refund-8842 is compensated; stuck mid-rollback: 0"
    assert lines[-1] == (
        "back ends acted 4 times, once per key: payments refund 5000 cents; "
        "email receipt to a@b.com; email correction to a@b.com; payments reverse re_5000"
    )


LANGGRAPH = DEMO.with_name("langgraph_agent.py")


def test_langgraph_example_pauses_in_doubt_and_pays_once() -> None:
    """The documented LangGraph agent is killed after paying, pauses on resume, and pays once."""
    result = subprocess.run(
        [sys.executable, str(LANGGRAPH)], capture_output=True, text=True, check=True, timeout=180
    )
    lines = result.stdout.splitlines()
    assert "orchestrator: start exited with -9 (killed by SIGKILL)" in lines
    assert any(
        line.startswith("  agent: paused, in doubt (crashed): key langgraph:") for line in lines
    )
    assert "  agent: Refunded $50 to ada@example.com." in lines
    assert lines[-1] == "bank: 1 payment(s)"


MCP = DEMO.with_name("mcp_help_desk.py")


def test_mcp_example_opens_one_ticket_per_key() -> None:
    """The documented MCP host retries under one key, gets the replay, and one ticket is opened."""
    result = subprocess.run(
        [sys.executable, str(MCP)], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.splitlines() == [
        "1 {'id': 'T-1', 'order_id': 'A-17'} replayed: False",
        "2 {'id': 'T-1', 'order_id': 'A-17'} replayed: True",
        "keyed by run: {'id': 'T-2', 'order_id': 'B-3'}",
        "no key: True open_ticket needs an idempotency key, and this call has none",
        "tickets opened: ['A-17', 'B-3']",
    ]


AGENTS = DEMO.with_name("openai_agents_refund.py")


def test_openai_agents_example_stops_in_doubt_then_settles_paying_once() -> None:
    """Killed after paying, the run stops in doubt; resolved, a run with a new call id replays."""
    result = subprocess.run(
        [sys.executable, str(AGENTS)], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.splitlines() == [
        "run with tool call call-1: killed (-9)",
        "run with tool call call-2: stopped, in doubt",
        "person: the bank has 1 payment(s) under the key: it happened",
        "run with tool call call-3: done",
        "bank: 1 refund(s)",
    ]
    assert result.stderr == ""


DBOS_REFUND = DEMO.with_name("dbos_refund.py")


def test_dbos_example_recovers_in_doubt_and_pays_once(tmp_path: Path) -> None:
    """The DBOS workflow killed after paying is recovered in doubt, resolved, and pays once."""
    result = subprocess.run(
        [sys.executable, str(DBOS_REFUND), str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=180,
    )
    with get_store(tmp_path / "agent.db") as store:
        [record] = store.records()
    key = record.key
    assert key == f"dbos:order-8842:bank.send_refund:{record.args_hash[:16]}"
    assert result.stdout.splitlines() == [
        f"  bank: paying $50 to ada@example.com (key {key})",
        "orchestrator: start exited with -9 (killed by SIGKILL)",
        "  workflow: the refund is in doubt (crashed); waiting",
        f"  person: the bank has 1 payment(s) under {key}: it happened",
        "  workflow: done, refunded $50 to ada@example.com",
        "orchestrator: recover exited with 0",
        "bank: 1 payment(s)",
    ]
    assert result.stderr == ""
    assert len((tmp_path / "bank.jsonl").read_text().splitlines()) == 1
    with get_store(tmp_path / "agent.db") as store:
        assert [event.why for event in store.history(key)] == [
            Why.CLAIMED,
            Why.CRASHED,
            Why.RESOLVED,
        ]


TEMPORAL_REFUND = DEMO.with_name("temporal_refund.py")


def test_temporal_example_fails_in_doubt_then_a_rerun_pays_once() -> None:
    """The worker killed after paying leaves a doubt; resolved, the re-run of the id pays once."""
    result = subprocess.run(
        [sys.executable, str(TEMPORAL_REFUND)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    lines = result.stdout.splitlines()
    key = lines[0].rsplit("(key ", 1)[1].rstrip(")")
    assert key.startswith("temporal:order-8842:bank.send_refund:")
    assert lines == [
        f"  bank: paying $50 to ada (key {key})",
        "orchestrator: the first worker exited with -9 (killed by SIGKILL)",
        "  workflow: failed, the refund is in doubt (crashed)",
        f"  person: the bank has 1 payment(s) under {key}: it happened",
        "  workflow: run again under order-8842: refunded $50 to ada",
        "bank: 1 payment(s)",
    ]
    assert result.stderr == ""
