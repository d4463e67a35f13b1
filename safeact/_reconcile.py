"""Reconciliation probes: ask the outside world whether an in-doubt action happened.

A probe is ``probe(key, receipt) -> Happened(result) | NotHappened() | Unknown()``. Payment
and mail APIs can usually be asked whether a request with a given idempotency key went
through; a probe does that asking. Only its answer changes the ledger, in one transaction
with the event that records it; a probe that raises, or answers anything else, changes
nothing but the history. "Did not happen" is true only of the past: an owner that is not
proven finished may still act, so then the key stays in doubt and the verdict is noted.

This module says what an answer means (``verdict_step``, pure); the store asks the probe
and carries that out (``Store._ask_probe``), for ``Store.reconcile`` and for a tool's call.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeAlias, TypeVar, final

import attrs

from safeact._codec import ResultNotStorableError
from safeact._history import Why
from safeact._outcome import InDoubt
from safeact._protocol import State

if TYPE_CHECKING:
    from safeact._protocol import JSON

__all__ = [
    "Happened",
    "NotHappened",
    "NoteOnly",
    "Probe",
    "Settle",
    "Unknown",
    "Verdict",
    "verdict_step",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


@final
@attrs.frozen
class Happened(Generic[T_co]):
    """The action did happen; ``result`` is what the tool would have returned."""

    result: T_co
    note: str = ""


@final
@attrs.frozen
class NotHappened:
    """The action did not happen: the key is released and the call runs it."""

    note: str = ""


@final
@attrs.frozen
class Unknown:
    """The probe cannot tell: the key stays in doubt for a person to decide."""

    note: str = ""


Verdict: TypeAlias = Happened[T] | NotHappened | Unknown
Probe: TypeAlias = Callable[[str, InDoubt], Verdict[T]]
"""``probe(key, receipt)``: find out whether the in-doubt action of ``key`` happened."""


@attrs.frozen
class Settle:
    """Settle the key in doubt as ``state`` (``result``: its JSON text), noting ``note``.

    The ledger may refuse a release (an owner not proven finished): then nothing but the
    history changes, ``note`` and the refusal noted there (``Why.RELEASE_WITHHELD``).
    """

    state: State
    result: str | None
    note: str


@attrs.frozen
class NoteOnly:
    """Change nothing but the key's history: add ``note`` to it, as ``why``."""

    why: Why
    note: str


def verdict_step(answer: object, encode: Callable[[object], JSON]) -> Settle | NoteOnly:
    """What a probe's ``answer`` does to the key in doubt it was asked about.

    ``encode`` turns a ``Happened`` result into the JSON a replay rebuilds; a result it
    refuses counts as a failed probe, as does an answer that is no verdict.
    """
    match answer:
        case Happened(result=result, note=note):
            try:
                stored = json.dumps(encode(result))
            except (ResultNotStorableError, ValueError) as exc:
                return NoteOnly(Why.PROBE_FAILED, f"the probe's result cannot be stored: {exc}")
            return Settle(State.SUCCEEDED, stored, _said("happened", note))
        case NotHappened(note=note):
            return Settle(State.RELEASED, None, _said("did not happen", note))
        case Unknown(note=note):
            return NoteOnly(Why.PROBE_UNKNOWN, _said("cannot tell", note))
        case _:
            return NoteOnly(
                Why.PROBE_FAILED,
                f"the probe answered {answer!r}, not Happened, NotHappened or Unknown",
            )


def _said(verdict: str, note: str) -> str:
    return f"probe: {verdict}" + (f" ({note})" if note else "")
