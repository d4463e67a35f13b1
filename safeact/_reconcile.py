"""Reconciliation probes: ask the outside world whether an in-doubt action happened.

A probe is ``probe(key, receipt) -> Happened(result) | NotHappened() | Unknown()``. Payment
and mail APIs can usually be asked whether a request with a given idempotency key went
through; a probe does that asking. Only its answer changes the ledger, in one transaction
with the event that records it; a probe that raises, or answers anything else, changes
nothing but the history. "Did not happen" is true only of the past: an owner that is not
proven finished may still act, so then the key stays in doubt and the verdict is noted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Generic, TypeAlias, TypeVar, final

import attrs

import safeact._telemetry as telemetry
from safeact._codec import ResultNotStorableError
from safeact._history import Event, Why
from safeact._outcome import InDoubt
from safeact._protocol import JSON, Record, Refusal, State, checkpoint

if TYPE_CHECKING:
    from safeact._store import Store

__all__ = ["Happened", "NotHappened", "Probe", "Unknown", "Verdict", "reconcile_key"]

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


def reconcile_key(
    store: Store,
    record: Record,
    receipt: InDoubt,
    probe: Callable[[str, InDoubt], object],
    encode: Callable[[object], JSON],
) -> Event | None:
    """Ask ``probe`` about the in-doubt ``record`` and apply its answer.

    ``encode`` turns a ``Happened`` result into the JSON a replay rebuilds (a result it
    refuses counts as a failed probe). Returns the event appended to the key's history, or
    ``None`` if the key had moved on meanwhile (then nothing was changed).
    """
    with telemetry.probe(record, receipt.reason) as watch:
        return watch.came_to(_ask(store, record, receipt, probe, encode))


def _ask(
    store: Store,
    record: Record,
    receipt: InDoubt,
    probe: Callable[[str, InDoubt], object],
    encode: Callable[[object], JSON],
) -> Event | None:
    """Ask the probe and apply its answer, as ``reconcile_key`` says."""
    try:
        answer = probe(record.key, receipt)
    except Exception as exc:  # noqa: BLE001 - a probe's failure is an answer: "cannot tell"
        telemetry.raised(exc)
        return store._note(record, Why.PROBE_FAILED, f"the probe raised {telemetry.describe(exc)}")
    checkpoint("probed")
    match answer:
        case Happened(result=result, note=note):
            try:
                stored = json.dumps(encode(result))
            except (ResultNotStorableError, ValueError) as exc:
                return store._note(
                    record, Why.PROBE_FAILED, f"the probe's result cannot be stored: {exc}"
                )
            said = _said("happened", note)
            done = store._settle(record, State.SUCCEEDED, stored, why=Why.RECONCILED, note=said)
        case NotHappened(note=note):
            said = _said("did not happen", note)
            done = store._settle(record, State.RELEASED, None, why=Why.RECONCILED, note=said)
        case Unknown(note=note):
            return store._note(record, Why.PROBE_UNKNOWN, _said("cannot tell", note))
        case _:
            return store._note(
                record,
                Why.PROBE_FAILED,
                f"the probe answered {answer!r}, not Happened, NotHappened or Unknown",
            )
    if isinstance(done, Refusal):
        return store._note(record, Why.RELEASE_WITHHELD, f"{said}; not applied: {done.reason}")
    return done


def _said(verdict: str, note: str) -> str:
    return f"probe: {verdict}" + (f" ({note})" if note else "")
