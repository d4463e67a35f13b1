"""The README's demo runs, crashes itself, and still pays each customer exactly once."""

import subprocess
import sys
from pathlib import Path

DEMO = Path(__file__).resolve().parent.parent / "examples" / "agent_loop.py"


def test_demo_crashes_resolves_and_pays_each_refund_once() -> None:
    """The agent is killed mid-refund, resolves the doubt on restart, and nothing is paid twice."""
    result = subprocess.run(
        [sys.executable, str(DEMO)], capture_output=True, text=True, check=True, timeout=120
    )
    lines = result.stdout.splitlines()
    assert "orchestrator: the agent exited with -9 (killed by SIGKILL)" in lines
    assert any("refund-1002: IN DOUBT" in line for line in lines)
    assert lines[-1] == (
        "bank: 3 payments for 3 keys: refund-1001 $50, refund-1002 $20, refund-1003 $75"
    )
