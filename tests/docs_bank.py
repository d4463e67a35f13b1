"""The fake bank and mail that the documentation's examples call, as the module ``bank``.

tests/test_docs.py puts this file beside each example as ``bank.py``. Each payment is a line
of ``bank.txt`` in the current folder, so an example can count what really happened.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

import attrs


@attrs.frozen
class Refund:
    """What the bank confirms."""

    to: str
    amount: int


@attrs.frozen
class Receipt:
    """What the mail service confirms."""

    to: str
    amount: int


@attrs.frozen
class Transfer:
    """A payment as the bank reports it when asked by its idempotency key."""

    id: str
    to: str
    amount: int
    status: str


class Bank:
    """Pays by appending a line to bank.txt; answers questions by reading it."""

    def refund(self, to: str, amount: int, idempotency_key: str = "") -> Refund:
        """Pay ``amount`` to ``to``."""
        with Path("bank.txt").open("a") as payments:
            payments.write(f"{idempotency_key} {to} {amount}\n")
        return Refund(to, amount)

    def payments(self) -> int:
        """How many payments were made."""
        path = Path("bank.txt")
        return len(path.read_text().splitlines()) if path.exists() else 0

    def find_transfer(self, idempotency_key: str) -> Transfer | None:
        """The settled payment made under ``idempotency_key``, if any."""
        path = Path("bank.txt")
        for number, line in enumerate(path.read_text().splitlines() if path.exists() else []):
            key, to, amount = line.split()
            if key == idempotency_key:
                return Transfer(f"tr_{number}", to, int(amount), "settled")
        return None


class Email:
    """Sends nothing; counts what it was asked to send."""

    sent: int = 0

    async def send(self, to: str, body: str, idempotency_key: str) -> None:
        """Send ``body`` to ``to``."""
        del to, body, idempotency_key
        self.sent += 1


bank = Bank()
email = Email()

CRASHING_REFUND = """
import os, signal, sys
from bank import Refund, bank
from safeact import safe

@safe(sys.argv[1], name=sys.argv[2])
def send_refund(key: str, to: str, amount: int) -> Refund:
    refund = bank.refund(to, amount, idempotency_key=key)
    os.kill(os.getpid(), signal.SIGKILL)  # paid, and dead before safeact records it
    return refund

send_refund(sys.argv[3], sys.argv[4], int(sys.argv[5]))
"""


def crash_mid_refund(
    ledger: str, key: str, to: str, amount: int, tool: str = "refunds.send_refund"
) -> None:
    """Pay a refund in a new process that is killed before the payment is recorded."""
    child = subprocess.run(
        [sys.executable, "-c", CRASHING_REFUND, ledger, tool, key, to, str(amount)],
        env={**os.environ, "PYTHONPATH": str(Path.cwd())},
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child
