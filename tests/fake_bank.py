"""The fake bank of the integration tests, and the guarded refunds that pay through it.

The bank is a file of payments: each refund it really makes appends the line ``refund`` and
fsyncs it, inside the action, before the action returns, raises or dies
(``tests.actions.record_effect``). A SIGKILL right after a payment cannot lose it, so
``count_effects(payments, "refund")`` is how many times the bank paid, whatever crashed.

The tests and the child processes they start (tests/*_child.py, tests/temporal_worker.py)
make their refunds here, so a test and its child pay alike. Each call of a refund takes the
next ``Mode`` from the list it was made with ("ok" once the list is empty): a test scripts a
declined card, an interruption or a SIGKILL, and reads afterwards which modes were used.
"""

import asyncio
import os
import signal
from pathlib import Path
from typing import Literal

from safeact import AsyncSafeTool, SafeTool, Store, safe
from tests.actions import Receipt, record_effect

Mode = Literal["ok", "fail", "interrupt-before", "interrupt-after", "sigkill-after"]
"""How one refund goes: ``ok`` pays; ``fail`` raises ``RuntimeError("card declined")``
before paying; ``interrupt-before``/``-after`` raise KeyboardInterrupt before/after paying,
as a worker cut off there; ``sigkill-after`` kills the process right after paying."""

Ledger = Store | str | Path
"""Where a refund's ledger is: an open store, or its location (a child's argument)."""


def pay_refund(payments: Path, mode: Mode = "ok") -> None:
    """Make one refund as ``mode`` says, appending it to ``payments`` when it is paid."""
    if mode == "interrupt-before":
        raise KeyboardInterrupt
    if mode == "fail":
        raise RuntimeError("card declined")
    record_effect(payments, "refund")
    if mode == "interrupt-after":
        raise KeyboardInterrupt
    if mode == "sigkill-after":
        os.kill(os.getpid(), signal.SIGKILL)


def refunded(to: str, amount: int) -> str:
    """What a refund that answers in text says: ``refunded 50 to a@example.com``."""
    return f"refunded {amount} to {to}"


def next_mode(modes: list[Mode] | None) -> Mode:
    """The mode of the next call: popped from ``modes``, "ok" once none is left."""
    return modes.pop(0) if modes else "ok"


def refunds(
    ledger: Ledger, payments: Path, modes: list[Mode] | None = None, *, name: str = "refund"
) -> SafeTool[[str, int], Receipt]:
    """The guarded ``send_refund(key, to, amount) -> Receipt``, tool ``name``."""

    @safe(ledger, name=name)
    def send_refund(key: str, to: str, amount: int) -> Receipt:
        """Refund ``amount`` to ``to``."""
        pay_refund(payments, next_mode(modes))
        return Receipt(to, amount)

    return send_refund


def async_refunds(
    ledger: Ledger, payments: Path, modes: list[Mode] | None = None, *, name: str = "refund"
) -> AsyncSafeTool[[str, int], Receipt]:
    """``refunds`` as a coroutine function, which yields to the loop after paying."""

    @safe(ledger, name=name)
    async def send_refund(key: str, to: str, amount: int) -> Receipt:
        """Refund ``amount`` to ``to``."""
        pay_refund(payments, next_mode(modes))
        await asyncio.sleep(0)  # as a real bank's client would, between its I/O
        return Receipt(to, amount)

    return send_refund


def text_refunds(
    ledger: Ledger, payments: Path, modes: list[Mode] | None = None
) -> SafeTool[[str, int], str]:
    """``refunds``, answering with ``refunded(to, amount)`` instead of a Receipt."""

    @safe(ledger, name="refund")
    def send_refund(key: str, to: str, amount: int) -> str:
        """Refund ``amount`` to ``to``."""
        pay_refund(payments, next_mode(modes))
        return refunded(to, amount)

    return send_refund


def async_text_refunds(
    ledger: Ledger, payments: Path, modes: list[Mode] | None = None
) -> AsyncSafeTool[[str, int], str]:
    """``async_refunds``, answering with ``refunded(to, amount)`` instead of a Receipt."""

    @safe(ledger, name="refund")
    async def send_refund(key: str, to: str, amount: int) -> str:
        """Refund ``amount`` to ``to``."""
        pay_refund(payments, next_mode(modes))
        await asyncio.sleep(0)
        return refunded(to, amount)

    return send_refund
