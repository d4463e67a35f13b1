"""The store: one ledger of keys, joined from its jobs, each in a module of its own.

| job | module |
|---|---|
| a key's transitions: claim, outcome, doubt, resolve, amend | ``_transitions`` |
| approvals: requests, a person's approve and deny | ``_approvals`` |
| the audit trail and late completions | ``_audit`` |
| sagas' rows | ``_saga_rows`` |
| listings and counts for the CLI | ``_listing`` |
| pages of what waits on a person, for ``safeact serve`` | ``_inbox`` |
| every row read and judged, for ``safeact check`` | ``_integrity`` |
| retention (purge) | ``_retention`` |
| archiving the history | ``_archive`` |
| the heartbeat of held attempts | ``_liveness`` |
| settings, the owner, row locks, a backend's hooks | ``_ledger`` |
| asking a probe and carrying out its verdict (``_reconcile`` says what it means) | here |

A backend (``SqliteStore``, ``PostgresStore``) subclasses ``Store`` and supplies connections,
transactions and its schema.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Self

import attrs

import safeact._telemetry as telemetry
from safeact._approvals import Approvals
from safeact._archive import Archiving
from safeact._audit import Audit
from safeact._codec import encode_untyped
from safeact._history import Why
from safeact._inbox import Inbox
from safeact._integrity import Integrity
from safeact._listing import Listing
from safeact._liveness import Liveness
from safeact._outcome import in_doubt_from
from safeact._protocol import Refusal, State, checkpoint, may_mark, utc_now
from safeact._reconcile import NoteOnly, Probe, verdict_step
from safeact._retention import Retention
from safeact._saga_rows import SagaRows
from safeact._transitions import KeyTransitions

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import TracebackType

    from safeact._history import Event
    from safeact._json import JSON
    from safeact._outcome import InDoubt
    from safeact._protocol import Record

__all__ = ["Store"]


class Store(
    KeyTransitions,
    Approvals,
    Audit,
    SagaRows,
    Listing,
    Inbox,
    Integrity,
    Retention,
    Archiving,
    Liveness,
):
    """A ledger of keys, shared safely by threads, processes and (on PostgreSQL) hosts.

    The database, never a lock in this process, decides which caller wins a key. Use as a
    context manager, or call ``close``. Open one with ``get_store``.

    ``lease`` is how many seconds an attempt's claim stays alive without news from its
    owner; a heartbeat renews it every ``heartbeat`` seconds (a third of the lease by
    default) while the action runs. ``host`` names this machine in owner records (the
    hostname by default); processes on one machine must agree on it, machines must not.

    Raises:
        ValueError: the lease is not positive, or the heartbeat not shorter than the lease.

    """

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the store; later use raises ``StoreError``."""
        self._stop_heartbeat(wait=self.heartbeat + 1.0)
        with self._lock:
            self._closed = True
        self._close_connections()

    def reconcile(self, probes: Mapping[str, Probe[object]]) -> list[Event]:
        """Ask each in-doubt key's probe (``probes`` maps tool names to probes) what happened.

        First every abandoned key is marked IN_DOUBT, and every key whose owner on this host
        is provably gone gets that proof recorded, for processes on other hosts (run this on
        each host, e.g. from cron, so crashes close without a human). Then, for keys whose
        tool has a probe: happened closes the key as SUCCEEDED with the probe's result; not
        happened releases it if its owner is proven finished, and otherwise leaves it in
        doubt with the verdict in its history; unknown, or a probe that raises, leaves it
        in doubt. Returns the events appended to the keys' histories.
        """
        events = []
        for found in self._unsettled():
            reason = self._abandonment(found, utc_now())
            if reason is None:
                continue
            if may_mark(found, reason) and not self._mark_in_doubt(
                found.key, found.attempt_id, reason
            ):
                continue  # its owner finished meanwhile
            probe = probes.get(found.tool)
            if probe is None:
                continue
            record = attrs.evolve(found, state=State.IN_DOUBT, doubt_reason=reason)
            event = self._ask_probe(record, in_doubt_from(record, reason), probe, encode_untyped)
            if event is not None:
                events.append(event)
        return events

    def _ask_probe(
        self,
        record: Record,
        receipt: InDoubt,
        probe: Callable[[str, InDoubt], object],
        encode: Callable[[object], JSON],
    ) -> Event | None:
        """Ask ``probe`` about the in-doubt ``record`` and apply its answer (``verdict_step``).

        ``encode`` turns a ``Happened`` result into the JSON a replay rebuilds. Returns the
        event appended to the key's history, or ``None`` if the key had moved on meanwhile
        (then nothing was changed).
        """
        with telemetry.probe(record, receipt.reason) as watch:
            return watch.came_to(self._apply_probe(record, receipt, probe, encode))

    def _apply_probe(
        self,
        record: Record,
        receipt: InDoubt,
        probe: Callable[[str, InDoubt], object],
        encode: Callable[[object], JSON],
    ) -> Event | None:
        """Ask the probe and apply its answer, as ``_ask_probe`` says."""
        try:
            answer = probe(record.key, receipt)
        except Exception as exc:  # noqa: BLE001 - a probe's failure is an answer: "cannot tell"
            telemetry.raised(exc)
            return self._note(
                record, Why.PROBE_FAILED, f"the probe raised {telemetry.describe(exc)}"
            )
        checkpoint("probed")
        step = verdict_step(answer, encode)
        if isinstance(step, NoteOnly):
            return self._note(record, step.why, step.note)
        done = self._settle(record, step.state, step.result, why=Why.RECONCILED, note=step.note)
        if isinstance(done, Refusal):
            return self._note(
                record, Why.RELEASE_WITHHELD, f"{step.note}; not applied: {done.reason}"
            )
        return done
